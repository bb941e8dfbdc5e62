# -*- test-case-name: tests.test_sources_imap -*-
"""
Where each folder of an IMAP source stands (L{FolderStatus}), the keys its
messages get (L{messageKey}), and the EXAMINE both listing
(L{imapmig.sources.imaplisting}) and reading
(L{imapmig.sources.imapreading}) open a folder with.

Split out of L{imapmig.sources.imap} (the facade) as what its listing and
its reading share: the folders' status, their names on the wire, and which
refusals mean "not now".
"""

from __future__ import annotations

from typing import Callable

from attrs import frozen
from twisted.internet.defer import Deferred

from imapmig.errors import CommandFailed, ImapmigError, SourceError, TransientError
from imapmig.imap.fetch import FetchLimits, FetchResponseParser
from imapmig.imap.fetcheditem import FetchedItem
from imapmig.imap.mailboxes import ExaminedMailbox
from imapmig.imap.session import IMAPSession
from imapmig.imap.signals import SignalAction, classifyRefusal
from imapmig.mail.message import SourceFolder
from imapmig.sources.imappool import PooledSession

__all__ = [
    "LISTING_LIMITS",
    "FolderMarks",
    "FolderStatus",
    "fetchInto",
    "fetchParser",
    "messageKey",
    "parseMessageKey",
]

LISTING_LIMITS = FetchLimits(maxLiteral=1024 * 1024)
"""
What a listing (C{UID FETCH ... (UID FLAGS INTERNALDATE RFC822.SIZE)})
may carry in literals: none is expected.
"""

# Refusals that say the server failed on what it was asked to read (a
# corrupt mail file gives "NO [SERVERBUG] Internal error occurred" on every
# FETCH of it): about those messages or that folder, not "try later", as
# the signals module would have it for a server storing messages.
_ABOUT_WHAT_WAS_ASKED = frozenset(["SERVERBUG", "CORRUPTION"])


@frozen
class FolderStatus:
    """
    Where a folder stood when it was last listed: what a later delta pass
    (L{IMAPSource.listMessagesSince}) starts from.

    @ivar uidValidity: C{UIDVALIDITY} (0 if the server gave none).
    @ivar uidNext: the UID the next message will get: C{UIDNEXT}, or one
        more than the highest UID listed when the server gave none.
    @ivar highestModSeq: C{HIGHESTMODSEQ} where the server has CONDSTORE,
        else L{None}.
    @ivar exists: how many messages the folder held.
    @ivar deferred: UIDs below C{uidNext}, ascending, that the pass left
        undecided (a label view's deferred messages,
        L{LabelViewFilter.deferred}): the next delta pass lists them again.
    """

    uidValidity: int
    uidNext: int
    highestModSeq: int | None
    exists: int
    deferred: tuple[int, ...] = ()


_NEVER_OPENED = FolderStatus(uidValidity=-1, uidNext=1, highestModSeq=None, exists=0)
"""
The status of a folder not opened yet, as a folder opened before would
have it: no UIDVALIDITY matches it, and the UIDs seen so far start at 1.
"""


def messageKey(uidValidity: int, uid: int) -> str:
    """
    The key of a message of an IMAP folder: C{"<UIDVALIDITY>:<UID>"}.
    """
    return f"{uidValidity}:{uid}"


def parseMessageKey(key: str) -> tuple[int, int] | None:
    """
    The UIDVALIDITY and UID of a key made by L{messageKey}, or L{None} if
    C{key} is not one.
    """
    validity, _, uid = key.partition(":")
    if validity.isdigit() and uid.isdigit() and validity.isascii() and uid.isascii():
        return int(validity), int(uid)
    return None


def fetchParser(session: IMAPSession) -> FetchResponseParser:
    """
    The FETCH reader of C{session}'s connection, whose limits each call
    sets.  The client offers no accessor yet: this is the one place that
    reaches into it (to be replaced by C{MigrationIMAP4Client.fetchLimits}).
    """
    parser: FetchResponseParser = session.client._fetchParser
    return parser


def fetchInto(
    session: IMAPSession, command: bytes, sink: Callable[[FetchedItem], object]
) -> Deferred[bytes]:
    """
    Send a fetch command now (pipelined), its responses to C{sink}, its
    errors mapped by the session (L{CommandFailed}, L{ConnectionLost}).
    The session offers this privately only: this is the one place that
    calls it (to be replaced by a public C{IMAPSession.fetchInto}).
    """
    return session._fetch(command, sink)


class FolderMarks:
    """
    The status of each folder of a source, as it was last opened, and the
    names of its folders on the wire.

    @ivar description: names the account in errors.
    @ivar status: by folder key, the folder's L{FolderStatus}.
    @ivar wireNames: by folder key, the mailbox name as the server spelled
        it, set by each listing of the folders.
    """

    def __init__(self, description: str) -> None:
        self.description = description
        self.status: dict[str, FolderStatus] = {}
        self.wireNames: dict[str, bytes] = {}

    def refused(self, what: str, error: CommandFailed) -> TransientError | None:
        """
        The error to raise for a refusal that says "not now" or "not this
        session" (L{classifyRefusal}: L{ServerBusy}, L{QuotaExceeded},
        L{ConnectionLost}), else L{None}: the refusal is about what was
        asked (a folder, messages).
        """
        signal = classifyRefusal(error.status, error.text)
        if signal.code in _ABOUT_WHAT_WAS_ASKED:
            return None
        if signal.action in (SignalAction.RETRY, SignalAction.PAUSE, SignalAction.RECONNECT):
            return signal.error(f"{self.description}: {what}")
        return None

    def failure(self, command: str, cannot: str, error: CommandFailed) -> ImapmigError:
        """
        The error to raise for C{command}'s refusal C{error}: what
        L{refused} says, else a L{SourceError} saying what C{cannot} be
        done.
        """
        return self.refused(command, error) or SourceError(
            f"{self.description}: cannot {cannot}: {error.status} {error.text}"
        )

    async def ensureOpen(
        self, reader: PooledSession, session: IMAPSession, folder: SourceFolder
    ) -> FolderStatus:
        """
        C{folder}'s status, EXAMINEd first on C{reader} unless it has it
        open already (its bodies are read: see L{examine}'s C{listing}).

        @raise CommandFailed: the server refused.
        """
        if reader.examined != folder.key or folder.key not in self.status:
            await self.examine(reader, session, folder, listing=False)
        return self.status[folder.key]

    async def examine(
        self,
        reader: PooledSession,
        session: IMAPSession,
        folder: SourceFolder,
        listing: bool = True,
    ) -> ExaminedMailbox:
        """
        EXAMINE C{folder} and remember its status.

        @param listing: whether the folder's listing follows.  If not (its
            bodies are read), the UIDNEXT and HIGHESTMODSEQ its listing
            saw are kept: the mark of the pass must not move past
            messages and changes that came after the listing.
        @raise CommandFailed: the server refused.
        """
        reader.examined = None
        examined = await session.examine(folder.key, self.wireNames.get(folder.key))
        reader.examined = folder.key
        self.status[folder.key] = self._statusAfter(folder.key, examined, listing)
        return examined

    def _statusAfter(self, key: str, examined: ExaminedMailbox, listing: bool) -> FolderStatus:
        """
        The status of the folder C{key} as C{examined} shows it (see
        L{examine}).
        """
        previous = self.status.get(key, _NEVER_OPENED)
        uidValidity = examined.uidValidity or 0
        if not listing and previous.uidValidity == uidValidity:
            return FolderStatus(
                uidValidity, previous.uidNext, previous.highestModSeq, examined.exists
            )
        # Without UIDNEXT, until the listing says better: the UIDs seen so far.
        uidNext = previous.uidNext if examined.uidNext is None else examined.uidNext
        return FolderStatus(uidValidity, uidNext, examined.highestModSeq, examined.exists)

