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
    folder listed before it in the same pass (recognised by their
    C{X-GM-MSGID}, which names a message whatever label it is seen
    under): the archived messages, in no label, are copied once, into
    All Mail's destination, and labelled messages are not copied again.
    Without X-GM-EXT-1 nothing tells which messages of All Mail are in
    other folders: All Mail is left out too.
  - An C{include} folder rule that names one of them explicitly (its name,
    C{"[Gmail]/Starred"}, or a pattern whose first level has no wildcard:
    L{namesExplicitly}) keeps
    it: Important or Starred is then copied whole, All Mail still
    de-duplicated where it can be, copied whole where it cannot.

The de-duplication depends only on what the source holds when it is
listed, not on what was copied before, so it gives the same answer after a
restart (each attempt lists every folder again), and a message the state
store recorded as copied from a label folder is never listed in All Mail.

The C{copy} behaviour copies every folder whole, as on any server.
Pure functions and one small class: no I/O.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from imapmig.imap.fetch import FetchedItem
from imapmig.message import SourceFolder
from imapmig.plan import folderName
from imapmig.sources.imapfolders import namesExplicitly

__all__ = [
    "ALL",
    "DEDUP",
    "COPY",
    "GMAIL_EXTENSION",
    "LabelViewFilter",
    "gmailMessageId",
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
    folders: Sequence[SourceFolder], include: Sequence[str], messageIds: bool
) -> tuple[list[SourceFolder], set[str], list[tuple[SourceFolder, str]]]:
    """
    Apply the C{dedup} behaviour to a source's folders.

    @param folders: the folders, in listing order.
    @param include: the job's C{include} patterns.
    @param messageIds: whether the server offers X-GM-MSGID.
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
        explicit = namesExplicitly(include, folder.path) or folderName(folder.path) in include
        if use is None:
            kept.append(folder)
        elif use == ALL and messageIds:
            deduplicated.add(folder.key)
            last.append(folder)
        elif explicit:
            kept.append(folder)
        elif use == ALL:
            leftOut.append(
                (
                    folder,
                    "a view of every message (\\All); without X-GM-EXT-1 the messages"
                    " it shares with other folders cannot be told apart",
                )
            )
        elif use == FLAGGED:
            leftOut.append(
                (folder, "a view of the flagged messages, whose \\Flagged flag is copied")
            )
        else:
            leftOut.append((folder, "a view of the messages marked important"))
    return kept + last, deduplicated, leftOut


def gmailMessageId(item: FetchedItem) -> bytes | None:
    """
    The C{X-GM-MSGID} of a FETCH response, or L{None} if it has none.
    """
    for name, value in item.extra.items():
        if name.upper() == MESSAGE_ID_ITEM and isinstance(value, bytes):
            return value
    return None


class LabelViewFilter:
    """
    One listing pass's de-duplication: the C{X-GM-MSGID}s of the messages
    listed in ordinary folders, and the folders that could not be listed,
    against which a de-duplicated view's listing is filtered.
    """

    def __init__(self, deduplicated: set[str]) -> None:
        """
        @param deduplicated: the keys of the folders to de-duplicate (All
            Mail).
        """
        self.deduplicated = frozenset(deduplicated)
        self._seen: set[bytes] = set()
        self.unlisted: list[str] = []

    def listed(
        self, folder: SourceFolder, items: Sequence[FetchedItem]
    ) -> tuple[list[FetchedItem], int]:
        """
        Take note of a folder's listing, and filter it if it is a view.

        @return: the items to keep (all of them for an ordinary folder;
            for a view, those whose message was in no folder listed
            before), and how many were left out.
        """
        if folder.key not in self.deduplicated:
            for item in items:
                messageId = gmailMessageId(item)
                if messageId is not None:
                    self._seen.add(messageId)
            return list(items), 0
        seen = self._seen
        kept = [item for item in items if gmailMessageId(item) not in seen]
        return kept, len(items) - len(kept)

    def failed(self, folder: SourceFolder) -> None:
        """
        Take note that an ordinary folder could not be listed: its
        messages are unknown, so a view listed after it cannot be
        de-duplicated.
        """
        if folder.key not in self.deduplicated:
            self.unlisted.append("/".join(folder.path))
