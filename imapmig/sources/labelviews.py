# -*- test-case-name: tests.test_sources_labelviews -*-
"""
Label views of an IMAP source: Gmail's C{[Gmail]/All Mail},
C{[Gmail]/Important} and C{[Gmail]/Starred}, and the like on any server
(RFC 6154 C{\\All} and C{\\Flagged}, RFC 8457 C{\\Important}).

On Gmail a folder is a label: a message with two labels is in two
folders, and every message but those in Trash and Spam is also in All
Mail, the message with the C{\\Flagged} flag in Starred, the message
Gmail finds important in Important.  Copying every folder copies a
labelled message once per label plus once more for All Mail, and again
for Starred and Important.

The C{dedup} behaviour (the C{label_views} server setting; the default of
the C{gmail} preset, and of a server offering Google's X-GM-EXT-1):

  - Important and Starred are left out: Starred is the C{\\Flagged} flag,
    carried with each message wherever it is copied.
  - All Mail is listed last, and holds only the messages in no other
    folder listed before it in the same pass: the archived messages, in
    no label, are copied once, into All Mail's destination, and labelled
    messages are not copied again.  A message of All Mail is left out
    when its C{X-GM-MSGID} (which names a message whatever label it is
    seen under) was listed in a folder of the pass, or when its
    C{X-GM-LABELS} name a folder listed in the pass: it arrived there (or
    was labelled) after that folder's listing, and that folder's next
    listing is what copies it.  Such a message is I{deferred}: its UID is
    kept with All Mail's mark (L{LabelViewFilter.deferred},
    L{imapmig.state.FolderMark.deferred}), so that the next pass lists it
    again, and of the UIDs below the mark's UIDNEXT only those, and decides
    anew: by then it is in its folder's listing (left out of All Mail
    again), or it lost its labels (archived meanwhile: copied into All
    Mail).  A message the pass decided (left out as seen in another
    folder, or kept) is not listed again, even if it lies between deferred
    ones: archived later, it is in its folder's copy, not copied again
    into All Mail.  Only a message that
    arrived in All Mail during the pass (at or above the UIDNEXT All Mail
    had when the pass began, L{LabelViewFilter.began}) is deferred; one
    there before is left out as its folder's (a label added during the
    pass), so that the deferred UIDs are decided at the next pass.  No message is copied
    into All Mail and its label folder both, and none is lost between
    them.
  - Without X-GM-EXT-1 a message is recognised by its header instead
    (L{headerIdentity}): its Message-ID, with its RFC822.SIZE and
    INTERNALDATE (which Gmail shows alike under every label), fetched with
    each listing (C{BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)]}, never a
    body; for the messages without one, their C{Date}, C{From}, C{To} and
    C{Subject} lines, L{FALLBACK_ITEM}, right after).  A message of All
    Mail is left out when a message of the same identity was listed in a
    folder of the pass; without labels to say where else it is, every
    other message of All Mail that arrived during the pass is deferred.
    A message with none of those header lines is never taken for another:
    it is kept.  What All Mail keeps (the archived mail) goes
    to the server's C{archive_folder} (C{Archive}; L{SourceFolder.destination}),
    not to All Mail's mailbox; with C{archive_folder: off} it is listed
    all the same, marked L{SourceFolder.notMigrated}, and recorded as not
    migrated rather than copied.
  - An C{include} folder rule that names one of them explicitly (its name,
    C{"[Gmail]/Starred"}, or a pattern whose first level has no wildcard:
    L{namesExplicitly}) keeps
    it: Important or Starred is then copied whole, All Mail still
    de-duplicated.

The de-duplication depends only on what the source holds when it is
listed, not on what was copied before, so it gives the same answer after a
restart (each attempt lists every folder again), and a message the state
store recorded as copied from a label folder is never listed in All Mail.

The C{copy} behaviour copies every folder whole, as on any server.
Pure functions and one small class: no I/O.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from hashlib import blake2b
from typing import Iterable, Sequence, TypeVar

from attrs import evolve

from imapmig.mail.fidelity import messageIdOf
from imapmig.imap.fetcheditem import FetchedItem
from imapmig.mail.message import SourceFolder
from imapmig.mail.messagenames import recordedMessageId
from imapmig.mail.folders import folderName
from imapmig.sources.imapfolders import namesExplicitly

__all__ = [
    "ALL",
    "DEDUP",
    "COPY",
    "FALLBACK_ITEM",
    "GMAIL_EXTENSION",
    "LABELS_ITEM",
    "LabelViewFilter",
    "folderLabels",
    "gmailLabels",
    "gmailMessageId",
    "hasMessageId",
    "headerIdentity",
    "headerMessageIds",
    "labelViewUse",
    "planLabelViews",
    "resolveLabelViews",
]

ALL = "\\All"
IMPORTANT = "\\Important"
FLAGGED = "\\Flagged"

DEDUP = "dedup"
COPY = "copy"
AUTO = "auto"

GMAIL_EXTENSION = b"X-GM-EXT-1"
"""
The capability of Google's IMAP extensions (C{X-GM-MSGID},
C{X-GM-LABELS}, C{X-GM-THRID}).
"""

MESSAGE_ID_ITEM = b"X-GM-MSGID"
LABELS_ITEM = b"X-GM-LABELS"
HEADER_ITEM = b"BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)]"
"""
What a listing fetches to recognise a message without X-GM-EXT-1
(L{headerIdentity}).
"""

FALLBACK_ITEM = b"BODY.PEEK[HEADER.FIELDS (DATE FROM TO SUBJECT)]"
"""
What is fetched, after a listing, of its messages without a Message-ID
(L{headerIdentity}).
"""

_MESSAGE_ID_SECTION = b"BODY[HEADER.FIELDS (MESSAGE-ID)]"
_FALLBACK_SECTION = b"BODY[HEADER.FIELDS (DATE FROM TO SUBJECT)]"

# The X-GM-LABELS name of the folder of each SPECIAL-USE attribute
# (Gmail's system labels), compared upper-cased.
_SYSTEM_LABELS = {
    "\\Sent": b"\\SENT",
    "\\Drafts": b"\\DRAFT",
    "\\Important": b"\\IMPORTANT",
    "\\Flagged": b"\\STARRED",
    "\\Junk": b"\\SPAM",
    "\\Trash": b"\\TRASH",
}
_INBOX_LABEL = b"\\INBOX"
_LARGEST_ID = 2**64 - 1

_T = TypeVar("_T")

# Gmail's English names of its views, for a server that sends no
# SPECIAL-USE attributes; "[Google Mail]" is the root in some countries
# (Germany, the United Kingdom, for accounts opened there long ago).
_GMAIL_ROOTS = ("[Gmail]", "[Google Mail]")
_VIEW_NAMES = {"All Mail": ALL, "Important": IMPORTANT, "Starred": FLAGGED}


def resolveLabelViews(setting: str, capabilities: Iterable[bytes]) -> str:
    """
    The behaviour a C{label_views} setting means on a server: C{auto} is
    C{dedup} where the server offers X-GM-EXT-1, else C{copy}.
    """
    if setting == AUTO:
        return DEDUP if GMAIL_EXTENSION in capabilities else COPY
    return setting


def labelViewUse(folder: SourceFolder) -> str | None:
    """
    Which view C{folder} is: C{\\All}, C{\\Important} or C{\\Flagged} by
    its SPECIAL-USE attribute, else by Gmail's name for it
    (C{[Gmail]/All Mail}, C{[Gmail]/Important}, C{[Gmail]/Starred}, or
    under C{[Google Mail]}); L{None} for any other folder.
    """
    if folder.specialUse in (ALL, IMPORTANT, FLAGGED):
        return folder.specialUse
    if len(folder.path) == 2 and folder.path[0] in _GMAIL_ROOTS:
        return _VIEW_NAMES.get(folder.path[1])
    return None


def planLabelViews(
    folders: Sequence[SourceFolder],
    include: Sequence[str],
    messageIds: bool,
    archiveFolder: str | None = "Archive",
) -> tuple[list[SourceFolder], set[str], list[tuple[SourceFolder, str]]]:
    """
    Apply the C{dedup} behaviour to a source's folders.

    @param folders: the folders, in listing order.
    @param include: the job's C{include} patterns.
    @param messageIds: whether the server offers X-GM-MSGID.  Without it
        All Mail is de-duplicated by L{headerIdentity}, and asks to go to
        C{archiveFolder} (L{SourceFolder.destination}), or when that is
        L{None} is marked L{SourceFolder.notMigrated}.
    @param archiveFolder: the server's C{archive_folder}, levels joined
        with C{/}, or L{None} for C{off}.
    @return: the folders to list, in order, the All Mail views last; the
        keys of those to de-duplicate; and the folders left out, each with
        why.
    """
    kept: list[SourceFolder] = []
    last: list[SourceFolder] = []
    deduplicated: set[str] = set()
    leftOut: list[tuple[SourceFolder, str]] = []
    for folder in folders:
        use = labelViewUse(folder)
        if use is None or (use != ALL and _namedExplicitly(include, folder)):
            kept.append(folder)
        elif use == ALL:
            deduplicated.add(folder.key)
            last.append(folder if messageIds else archived(folder, archiveFolder))
        else:
            leftOut.append((folder, _LEFT_OUT[use]))
    return kept + last, deduplicated, leftOut


# Why the views other than All Mail are left out.
_LEFT_OUT = {
    FLAGGED: "a view of the flagged messages, whose \\Flagged flag is copied",
    IMPORTANT: "a view of the messages marked important",
}


def _namedExplicitly(include: Sequence[str], folder: SourceFolder) -> bool:
    """
    Whether the job's C{include} patterns name C{folder} itself.
    """
    return namesExplicitly(include, folder.path) or folderName(folder.path) in include


def archived(folder: SourceFolder, archiveFolder: str | None) -> SourceFolder:
    """
    An All Mail view de-duplicated without X-GM-EXT-1: bound for
    C{archiveFolder}, or (L{None}) not migrated.
    """
    if archiveFolder is None:
        name = folderName(folder.path)
        return evolve(
            folder,
            notMigrated=f"found only in {name} (archived mail, in no other folder copied)"
            " and archive_folder is off",
        )
    return evolve(folder, destination=tuple(archiveFolder.split("/")))


def gmailMessageId(item: FetchedItem) -> bytes | None:
    """
    The C{X-GM-MSGID} of a FETCH response, or L{None} if it has none.
    """
    return _extraItem(item, MESSAGE_ID_ITEM, bytes)


def _extraItem(item: FetchedItem, name: bytes, kind: type[_T]) -> _T | None:
    """
    The first item of a FETCH response called C{name} (whatever case the
    server gave it in) that is a C{kind}; L{None} if it has none.
    """
    for key, value in item.extra.items():
        if key.upper() == name and isinstance(value, kind):
            return value
    return None


def _numericId(item: FetchedItem) -> int | None:
    """
    The C{X-GM-MSGID} of a FETCH response as the unsigned 64-bit number
    Gmail gives, or L{None} if it has none or another.
    """
    value = gmailMessageId(item)
    if value is None or not value.isdigit():
        return None
    number = int(value)
    return number if number <= _LARGEST_ID else None


def _section(item: FetchedItem, name: bytes) -> bytes | None:
    """
    The section C{name} of a FETCH response, whatever case the server gave
    its name in; L{None} if it has none.
    """
    for key, value in item.sections.items():
        if key.upper() == name:
            return value
    return None


def hasMessageId(item: FetchedItem) -> bool:
    """
    Whether a listing response shows a Message-ID (L{headerIdentity}).
    """
    return bool(messageIdOf(_section(item, _MESSAGE_ID_SECTION) or b""))


def headerMessageIds(items: Sequence[FetchedItem]) -> dict[int, str | None]:
    """
    By UID, the Message-ID of each listing response that carries
    C{BODY[HEADER.FIELDS (MESSAGE-ID)]}, as the state store records it
    (L{imapmig.mail.messagenames.recordedMessageId}; L{None} for none).
    """
    return {
        item.uid: recordedMessageId(messageIdOf(_section(item, _MESSAGE_ID_SECTION) or b""))
        for item in items
        if item.uid is not None
    }


def headerIdentity(item: FetchedItem) -> int | None:
    """
    What recognises a message without X-GM-EXT-1, with its RFC822.SIZE and
    its INTERNALDATE (the instant, to the second), as a 64-bit BLAKE2b
    digest: its Message-ID (as L{imapmig.mail.fidelity.messageIdOf} reads it
    from C{BODY[HEADER.FIELDS (MESSAGE-ID)]}: unfolded, outer white space
    stripped, case kept); for a message without one, its C{Date}, C{From},
    C{To} and C{Subject} lines, octet for octet as the server returns them
    (C{BODY[HEADER.FIELDS (DATE FROM TO SUBJECT)]}, L{FALLBACK_ITEM}); or
    L{None} when it has none of these either (nothing tells it apart from
    another message of its size and date).

    Two messages are taken for one only when all of these are equal (or,
    by chance, their digests: about 1 in 2**64 per pair; below 1 in 10**7
    for a million messages against a million).
    """
    what = _identifying(item)
    if what is None:
        return None
    when = item.internalDate
    instant = b"-" if when is None else b"%d" % int(when.timestamp())
    digest = blake2b(b"\0".join((what, b"%d" % (item.size or 0), instant)), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _identifying(item: FetchedItem) -> bytes | None:
    """
    What identifies a message in L{headerIdentity}, marked with what it
    is: its Message-ID, else its C{Date}, C{From}, C{To} and C{Subject}
    lines; L{None} without either.
    """
    messageId = messageIdOf(_section(item, _MESSAGE_ID_SECTION) or b"")
    if messageId:
        return b"M" + messageId
    fields = (_section(item, _FALLBACK_SECTION) or b"").strip()
    return b"H" + fields if fields else None


def _labelKey(label: bytes) -> bytes:
    """
    A label as compared: a system label (C{\\Inbox}) and INBOX whatever
    their case, any other as spelled.
    """
    upper = label.upper()
    if label.startswith(b"\\") or upper == b"INBOX":
        return upper
    return label


def gmailLabels(item: FetchedItem) -> frozenset[bytes]:
    """
    The C{X-GM-LABELS} of a FETCH response, as compared (system labels
    upper-cased); empty if it has none.
    """
    labels = _extraItem(item, LABELS_ITEM, list)
    if labels is None:
        return frozenset()
    return frozenset(_labelKey(label) for label in labels if isinstance(label, bytes))


def folderLabels(folder: SourceFolder, wireName: bytes) -> frozenset[bytes]:
    """
    The X-GM-LABELS names under which Gmail shows the messages of
    C{folder}: its name (as LIST sent it, and in UTF-8), and the system
    label of INBOX or of its SPECIAL-USE attribute (C{\\Inbox},
    C{\\Sent}, ...).

    @param wireName: the folder's name as LIST sent it.
    """
    labels = {_labelKey(wireName), _labelKey(folder.key.encode("utf-8"))}
    if len(folder.path) == 1 and folder.path[0].upper() == "INBOX":
        labels.add(_INBOX_LABEL)
    system = _SYSTEM_LABELS.get(folder.specialUse or "")
    if system is not None:
        labels.add(system)
    return frozenset(labels)


_KEEP = object()
_DEFER = object()
_DROP = object()


def _arrivedSince(uid: int | None, start: int | None) -> bool:
    """
    Whether a view's message of UID C{uid} arrived since the pass began
    (C{start} being the view's UIDNEXT then, if known).
    """
    return start is not None and uid is not None and uid >= start


class LabelViewFilter:
    """
    One listing pass's de-duplication: the C{X-GM-MSGID}s of the messages
    listed in ordinary folders, those folders' labels, and the folders that
    could not be listed, against which a de-duplicated view's listing is
    filtered.

    The message ids are kept as unsigned 64-bit numbers in an array,
    sorted once when the first view is filtered (the sort briefly makes
    a list of them, less than the listing it follows holds): 8 octets per
    message listed in the pass, where a set of the ids as bytes took
    about 94 (tracemalloc); a pass over an account of a million messages
    holds 8 MB, dropped with the pass.
    """

    def __init__(self, deduplicated: set[str], byHeader: bool = False) -> None:
        """
        @param deduplicated: the keys of the folders to de-duplicate (All
            Mail).
        @param byHeader: recognise messages by L{headerIdentity} (a server
            without X-GM-EXT-1), not by X-GM-MSGID and X-GM-LABELS.
        """
        self.deduplicated = frozenset(deduplicated)
        self.byHeader = byHeader
        self._identity = headerIdentity if byHeader else _numericId
        self._seen = array("Q")
        self._sorted = True
        self._labels: set[bytes] = set()
        self._deferred: dict[str, tuple[int, ...]] = {}
        self._passStart: dict[str, int] = {}
        self.unlisted: list[str] = []

    def began(self, folder: SourceFolder, uidNext: int) -> None:
        """
        Take note of a view's UIDNEXT before any folder of the pass was
        listed: a message of the view below it was there when the pass
        began, so if it carries the label of a folder listed in the pass
        without being in its listing, it is not deferred (an earlier pass
        decided it: it is in its folder's copy, or in this pass's listing
        there).  Deferring only the messages that arrived during the pass
        keeps a held-back UIDNEXT from staying behind for ever.
        """
        self._passStart[folder.key] = uidNext

    def listed(
        self,
        folder: SourceFolder,
        items: Sequence[FetchedItem],
        labels: frozenset[bytes] = frozenset(),
    ) -> tuple[list[FetchedItem], int]:
        """
        Take note of a folder's listing, and filter it if it is a view.

        @param labels: for an ordinary folder, the labels its messages
            carry (L{folderLabels}).
        @return: the items to keep (all of them for an ordinary folder;
            for a view, those whose message was in no folder listed
            before and carries no label of one), and how many were left
            out.
        """
        if folder.key not in self.deduplicated:
            self._note(items, labels)
            return list(items), 0
        if not self._sorted:
            self._seen = array("Q", sorted(self._seen))
            self._sorted = True
        kept, deferred = self._filter(items, self._passStart.get(folder.key))
        if deferred:
            self._deferred[folder.key] = tuple(sorted(deferred))
        return kept, len(items) - len(kept)

    def _filter(
        self, items: Sequence[FetchedItem], start: int | None
    ) -> tuple[list[FetchedItem], list[int]]:
        """
        Filter a view's listing (L{_decide}).

        @return: the items to keep, and the UIDs of those deferred.
        """
        kept = []
        deferred = []
        for item in items:
            decision = self._decide(item, start)
            if decision is _KEEP:
                kept.append(item)
            elif decision is _DEFER:
                assert item.uid is not None
                deferred.append(item.uid)
        return kept, deferred

    def _note(self, items: Sequence[FetchedItem], labels: frozenset[bytes]) -> None:
        """
        Take note of an ordinary folder's messages and labels.
        """
        self._labels |= labels
        seen = self._seen
        identity = self._identity
        for item in items:
            messageId = identity(item)
            if messageId is not None:
                seen.append(messageId)
                self._sorted = False

    def _decide(self, item: FetchedItem, start: int | None) -> object:
        """
        What becomes of a view's message: L{_KEEP}, L{_DEFER} (decided at
        the next pass) or L{_DROP} (copied from another folder).

        @param start: the view's UIDNEXT when the pass began, if known.
        """
        messageId = self._identity(item)
        if messageId is None:
            # Nothing tells where else it is.
            return _KEEP
        if self._wasSeen(messageId):
            return _DROP
        return self._decideUnseen(item, _arrivedSince(item.uid, start))

    def _decideUnseen(self, item: FetchedItem, arrived: bool) -> object:
        """
        What becomes of a view's message that no folder listed before it
        held (see L{_decide}).

        @param arrived: whether it arrived in the view during the pass.
        """
        if self.byHeader:
            # Without labels, nothing tells whether one that arrived during
            # the pass reached a folder after that folder's listing.
            return _DEFER if arrived else _KEEP
        if gmailLabels(item) & self._labels:
            # In a folder listed before it arrived there: that folder's
            # next listing copies it.
            return _DEFER if arrived else _DROP
        return _KEEP

    def _wasSeen(self, messageId: int) -> bool:
        seen = self._seen
        index = bisect_left(seen, messageId)
        return index < len(seen) and seen[index] == messageId

    def deferred(self, folder: SourceFolder) -> tuple[int, ...]:
        """
        The UIDs, ascending, of a view's deferred messages (labelled with
        a folder listed before they arrived, not in that listing): the
        next pass lists these again, and only these of the UIDs below the
        view's UIDNEXT (the others were decided: copied from another
        folder, or from the view).
        """
        return self._deferred.get(folder.key, ())

    def heldBack(self, folder: SourceFolder) -> int | None:
        """
        The lowest of the view's deferred UIDs (L{deferred}), or L{None}.
        """
        deferred = self._deferred.get(folder.key)
        return deferred[0] if deferred else None

    def failed(self, folder: SourceFolder) -> None:
        """
        Take note that an ordinary folder could not be listed: its
        messages are unknown, so a view listed after it cannot be
        de-duplicated.
        """
        if folder.key not in self.deduplicated:
            self.unlisted.append("/".join(folder.path))
