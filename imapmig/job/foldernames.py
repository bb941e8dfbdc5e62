# -*- test-case-name: tests.test_job_foldernames -*-
"""
Folder names a destination refuses: recognising the refusal, and the safe
spelling a folder is created under instead.

Servers differ in the names they take: Cyrus refuses C{\\} and C{"},
Courier some emoji, every server its own delimiter inside a level.  When
CREATE is refused as an invalid name, the folder is created under a safe
spelling of its path (L{safePath}): deterministic, so a later run lands in
the same mailbox, and recorded in the state store so C{imapmig report}
shows it.
"""

from __future__ import annotations

import re
from typing import Collection, Mapping, Sequence

from attrs import evolve
from twisted.logger import Logger

from imapmig.errors import CommandFailed
from imapmig.imap.mailboxes import MailboxState
from imapmig.imap.outgoing import SendDeadline
from imapmig.imap.session import IMAPSession
from imapmig.mail.message import SourceMessage
from imapmig.imap.signals import TEXT_LIMIT
from imapmig.mail.folders import FolderMapping, PersonalNamespace, mailboxesToCreate
from imapmig.state import FolderFallback, IStateStore

log = Logger()

SAFE_PUNCTUATION = frozenset(" -_.,+@()'")
"""
The characters besides letters and digits a safe spelling keeps (but the
destination's delimiter).
"""

_INVALID_NAME = re.compile(
    r"(invalid|illegal|bad|not valid|not allowed|unsupported)[^.;]{0,30}\b(mailbox|folder)?"
    r"\s*name|name[^.;]{0,40}\b(invalid|illegal|not valid|not allowed|must not)",
    re.IGNORECASE,
)

# Response codes that say the refusal is about something else than the name.
_OTHER_CODES = frozenset(
    {"ALREADYEXISTS", "NOPERM", "OVERQUOTA", "LIMIT", "UNAVAILABLE", "INUSE", "SERVERBUG"}
)


def safeComponent(component: str, delimiter: str | None) -> str:
    """
    The safe spelling of one level of a folder path: letters and digits
    (of any script, but outside the Basic Multilingual Plane, where
    emoji are), and L{SAFE_PUNCTUATION} but the delimiter, are kept; every
    other character becomes C{"_"}.  Spaces and dots at the start (so a
    level made only of dots, C{"."} or C{".."}, and a hidden-looking
    C{".name"}), and spaces at the end, become C{"_"} too, one for one;
    an empty level is C{"_"}.
    """
    kept = "".join(
        c
        if (c.isalnum() and ord(c) <= 0xFFFF or c in SAFE_PUNCTUATION) and c != delimiter
        else "_"
        for c in component
    )
    size = len(kept)
    lead = size - len(kept.lstrip(" ."))
    if lead == size:
        return "_" * size or "_"
    trail = size - len(kept.rstrip(" "))
    return "_" * lead + kept[lead : size - trail] + "_" * trail


def safePath(path: tuple[str, ...], delimiter: str | None) -> tuple[str, ...]:
    """
    The safe spelling of a folder path, level by level (L{safeComponent});
    a top-level C{INBOX} stays.
    """
    return tuple(
        "INBOX" if depth == 0 and part.upper() == "INBOX" else safeComponent(part, delimiter)
        for depth, part in enumerate(path)
    )


def fallbackMailbox(path: tuple[str, ...], namespace: PersonalNamespace) -> str | None:
    """
    The mailbox a folder refused under its own name is created as, or
    L{None} when its safe spelling is the name already (nothing to fall
    back to).
    """
    fallback = namespace.mailbox(safePath(path, namespace.delimiter))
    return None if fallback == namespace.mailbox(path) else fallback


def _responseCode(text: str) -> str:
    """
    The response code atom a reply text starts with (upper case), or
    C{""} when it has none.
    """
    if not text.startswith("[") or "]" not in text:
        return ""
    return text[1 : text.find("]")].split(" ", 1)[0].upper()


def refusedAsInvalidName(text: str) -> bool:
    """
    Whether the server's reply to CREATE refuses the name itself: the
    C{[CANNOT]} response code (RFC 5530: Dovecot's "Invalid mailbox name"),
    or no code and a text that says the name is invalid (Courier's and
    Cyrus's "Invalid mailbox name", Dovecot's "Name must not have ...").
    A code that says something else (C{[NOPERM]}, C{[OVERQUOTA]},
    C{[ALREADYEXISTS]}, ...) never is.

    @param text: the reply text after C{NO} or C{BAD}.
    """
    text = text[:TEXT_LIMIT]
    code = _responseCode(text)
    if code == "CANNOT":
        return True
    if code in _OTHER_CODES:
        return False
    return _INVALID_NAME.search(text) is not None


def outsideBasicPlane(name: str) -> bool:
    """
    Whether C{name} has a character outside the Basic Multilingual Plane
    (above U+FFFF: emoji, say), which Courier refuses in a folder name.
    """
    return any(ord(c) > 0xFFFF for c in name)


def mayBeRefusedForItsName(text: str, name: str) -> bool:
    """
    Whether a refusal of CREATE may be about the name, so that a safe
    spelling is worth one try: a refusal that says so
    (L{refusedAsInvalidName}), or one with no response code at all for a
    name with a character outside the Basic Multilingual Plane
    (L{outsideBasicPlane}): Courier refuses such a name with a bare C{NO
    Error in IMAP command received by server.}.  Any other code-less
    refusal (C{NO Server busy, try again later}) is not: a fallback is
    recorded and kept by every later run, so it is not taken on a reply
    that may be transient.  Only a name the safe spelling changes is
    tried again, once; a second refusal is recorded with both replies.

    @param text: the reply text after C{NO} or C{BAD}.
    @param name: the mailbox name refused.
    """
    if refusedAsInvalidName(text):
        return True
    return not text.startswith("[") and outsideBasicPlane(name)


def alreadyExists(text: str) -> bool:
    """
    Whether a refusal of CREATE says the mailbox exists already (the
    C{[ALREADYEXISTS]} response code, RFC 5530): it is there to use.

    @param text: the reply text after C{NO} or C{BAD}.
    """
    return _responseCode(text[:TEXT_LIMIT]) == "ALREADYEXISTS"


def withRecordedFallbacks(
    mappings: Sequence[FolderMapping],
    recorded: Mapping[str, str],
    existing: Collection[str],
    namespace: PersonalNamespace,
) -> list[FolderMapping]:
    """
    The mappings with each mailbox an earlier run fell back from (and
    the destination still does not have) replaced by its recorded
    fallback, so a rerun does not ask the server for the refused name
    again.

    @param recorded: fallback mailbox by refused mailbox (the state
        store's L{FolderFallback}s).
    """
    result = []
    for mapping in mappings:
        fallback = recorded.get(mapping.mailbox)
        if fallback is not None and mapping.mailbox not in existing:
            mapping = evolve(
                mapping,
                path=safePath(mapping.path, namespace.delimiter),
                mailbox=fallback,
                how="fallback",
            )
        result.append(mapping)
    return result


class FolderNameFallback:
    """
    Creates, under their safe spelling, the folders whose CREATE the
    destination refused as an invalid name, and records each fallback.
    """

    def __init__(
        self,
        jobName: str,
        session: IMAPSession,
        namespace: PersonalNamespace,
        store: IStateStore | None,
        deadline: SendDeadline | None = None,
    ) -> None:
        """
        @param namespace: the destination's personal namespace.
        @param store: where fallbacks are recorded, or L{None} (not
            recorded).
        @param deadline: past it no CREATE is written (a fleet's daemon's
            send deadline); L{None}: none.
        """
        self._deadline = deadline
        self._job = jobName
        self._session = session
        self._namespace = namespace
        self._store = store

    async def recorded(self) -> dict[str, str]:
        """
        The fallbacks earlier runs recorded: fallback by refused mailbox.
        """
        if self._store is None:
            return {}
        return {f.mailbox: f.fallback for f in await self._store.folderFallbacks(self._job)}

    async def fallBack(
        self,
        mappings: Sequence[FolderMapping],
        uncreatable: Mapping[str, str],
        existing: Collection[str],
    ) -> tuple[list[FolderMapping], dict[str, str]]:
        """
        Create the safe spelling of each mailbox in C{uncreatable} that
        was refused as an invalid name, parents first, and send its
        folders there.

        @param uncreatable: the server's refusal by mailbox.
        @param existing: the destination's mailboxes, with those this run
            created (or found existing) already: a fallback among them is
            used as it is, not created again.
        @return: the mappings, those that fell back pointing at their
            fallback (C{how} C{"fallback"}); and the mailboxes still not
            created, each refusal naming both replies where a fallback was
            refused too.
        """
        namespace = self._namespace
        targets, subscribe = _fallbackTargets(mappings, uncreatable, namespace)
        remaining = dict(uncreatable)
        if not targets:
            return list(mappings), remaining
        missing = mailboxesToCreate([path for _, path in targets.values()], existing, namespace)
        if self._deadline is not None:
            self._deadline.check("a CREATE")
        refused = await self._session.createMailboxes(missing, None, subscribe=subscribe)
        # Made meanwhile (by another client, or a race): there to use.
        refused = {name: why for name, why in refused.items() if not alreadyExists(why)}
        for mailbox, (fallback, _) in targets.items():
            why = remaining[mailbox]
            if fallback in refused:
                remaining[mailbox] = self._bothRefused(mailbox, why, fallback, refused[fallback])
            else:
                del remaining[mailbox]
                await self._fellBack(mailbox, why, fallback)
        result = []
        for mapping in mappings:
            target = targets.get(mapping.mailbox)
            if target is not None and mapping.mailbox not in remaining:
                mapping = evolve(mapping, path=target[1], mailbox=target[0], how="fallback")
            result.append(mapping)
        return result, remaining

    def _bothRefused(self, mailbox: str, why: str, fallback: str, fallbackWhy: str) -> str:
        """
        Log that the destination refused both C{mailbox} and its
        C{fallback}.

        @return: the refusal naming both replies.
        """
        log.warn(
            "Job {job}: the destination refused the folder name {mailbox!r} ({why})"
            " and its fallback {fallback!r} ({fallbackWhy})",
            job=self._job,
            mailbox=mailbox,
            why=why,
            fallback=fallback,
            fallbackWhy=fallbackWhy,
        )
        return f"{why}; the fallback name {fallback!r} was refused too: {fallbackWhy}"

    async def _fellBack(self, mailbox: str, why: str, fallback: str) -> None:
        """
        Log that C{mailbox}'s messages go to C{fallback}, and record it
        for later runs.
        """
        log.warn(
            "Job {job}: the destination refused the folder name {mailbox!r} ({why});"
            " its messages go to {fallback!r}",
            job=self._job,
            mailbox=mailbox,
            why=why,
            fallback=fallback,
        )
        if self._store is not None:
            await self._store.recordFolderFallback(
                self._job, FolderFallback(mailbox, fallback, why)
            )

    async def fallBackPlans(
        self,
        plans: list[tuple[FolderMapping, list[SourceMessage]]],
        uncreatable: dict[str, str],
        states: dict[str, MailboxState | CommandFailed],
        existing: Collection[str],
    ) -> tuple[
        list[tuple[FolderMapping, list[SourceMessage]]],
        dict[str, str],
        dict[str, MailboxState | CommandFailed],
    ]:
        """
        L{fallBack} for a job's plans (each folder's mapping and pending
        messages), and SELECT the fallback mailboxes, in one flight.

        @param states: the SELECT results of the plans' mailboxes so far.
        @return: the plans, the mailboxes still not created, and the
            SELECT results with those of the fallbacks.
        """
        mappings, uncreatable = await self.fallBack(
            [m for m, _ in plans], uncreatable, existing
        )
        plans = [(mapping, pending) for mapping, (_, pending) in zip(mappings, plans)]
        moved = sorted({m.mailbox for m in mappings if m.how == "fallback"} - set(states))
        if moved:
            states = {**states, **await self._session.selectEach(moved)}
        return plans, uncreatable, states


def _fallbackTargets(
    mappings: Sequence[FolderMapping],
    uncreatable: Mapping[str, str],
    namespace: PersonalNamespace,
) -> tuple[dict[str, tuple[str, tuple[str, ...]]], set[str]]:
    """
    Where each mailbox of C{mappings} refused for its name falls back:
    by refused mailbox, the fallback mailbox and its path; and the
    fallbacks to subscribe (their source folder is).
    """
    targets: dict[str, tuple[str, tuple[str, ...]]] = {}
    subscribe: set[str] = set()
    for mapping in mappings:
        why = uncreatable.get(mapping.mailbox)
        if why is None or not mayBeRefusedForItsName(why, mapping.mailbox):
            continue
        fallback = fallbackMailbox(mapping.path, namespace)
        if fallback is None:
            continue
        targets[mapping.mailbox] = (fallback, safePath(mapping.path, namespace.delimiter))
        if mapping.folder.subscribed:
            subscribe.add(fallback)
    return targets, subscribe
