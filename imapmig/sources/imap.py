# -*- test-case-name: tests.test_sources_imap -*-
"""
An IMAP account as an L{imapmig.sources.IMessageSource}: migrating from
one server to another.

The source is strictly read-only: it opens folders with EXAMINE, reads
bodies with C{BODY.PEEK[]} (so C{\\Seen} is not set), and never sends
SELECT, STORE, EXPUNGE or anything else that changes the account.

Folders are what LIST shows (with LIST-EXTENDED, one C{LIST ... RETURN
(SUBSCRIBED SPECIAL-USE)}; else LIST and LSUB), less those that cannot hold
messages.  Messages are listed with one C{UID FETCH 1:* (UID FLAGS
INTERNALDATE RFC822.SIZE)} per folder and keyed C{"<UIDVALIDITY>:<UID>"}:
as long as the folder keeps its UIDVALIDITY a key names the same message
for ever.  When the server renumbers a folder (a new UIDVALIDITY, after a
restore or a mailbox rebuild) every message gets a new key, so the state
store no longer recognises the copies already made; recognising them again
by content (Message-ID, digest) is the caller's job, not the source's.

Bodies are read in the caller's batches with pipelined C{UID FETCH <set>
(UID BODY.PEEK[])} commands, each covering about L{COMMAND_BYTES} octets of
messages, through the incremental FETCH reader of L{imapmig.imap.fetch}: a
body arrives as one buffer, never re-parsed.  At most one batch of bodies
is held at a time, and none larger than L{SPOOL_ABOVE} octets: a larger one
is written to an unlinked temporary file as it arrives and handed on as a
L{imapmig.mail.message.StreamedBody}, read a slice at a time as it is sent.

What the server may send is bounded by what it listed: a body literal
larger than twice the largest RFC822.SIZE of the batch (plus
L{imapmig.sources.imapbodies.SIZE_SLACK}), or bodies adding up to more than
twice the batch's listed total, fail the connection before they are read
(the server is broken or hostile; the call fails with a
L{imapmig.errors.ConnectionLost}).  A message listed larger than
C{maxMessageBytes} is not fetched at all: it is unreadable, with the
reason.  A body holding 0x80 is fetched again as C{BINARY[]} where the
server has BINARY, to put back NUL octets C{BODY[]} cannot carry (see
L{imapmig.sources.imapnuls}).

Calls are served by a small pool of connections, as many as the job has
workers and one more for reading ahead (L{READ_AHEAD_CONNECTIONS}), one
call at a time on each: a call goes to an idle
connection that has its folder open already, else to an idle one with no
folder open, else to a new one while the pool may grow, else to any idle
one, else it waits its turn on the connection with its folder open (or the
least busy).  So two workers reading two folders each keep their own
folder open instead of re-EXAMINEing it on every read.  The read-ahead
connection is opened only for a call that finds every other connection
busy: each worker reads two steps ahead of what it sends
(L{imapmig.job.readahead.IMAP_READ_AHEAD}), and with it two of those reads
run at once.  A connection is opened when first needed; if the server
refuses an extra one (many limit connections per account), or the
servers' connection limits (C{max_connections}, C{per_account}) have no
grant free for it at that moment, the pool stays at the size it has.  A connection
is dropped when a call on it fails with a L{imapmig.errors.TransientError}
(the next call opens a new one) and every one is logged out by
L{IMAPSource.close}.

L{IMAPSource} is the facade over the modules that do this:
L{imapmig.sources.imappool} (the connections),
L{imapmig.sources.imaplisting} with L{imapmig.sources.imapviews} (folders,
messages, delta passes, label views), L{imapmig.sources.imapreading} with
L{imapmig.sources.imapbodies} and L{imapmig.sources.imapnuls} (bodies and
header fields), L{imapmig.sources.imapstatus} (the folders' status, shared
by listing and reading) and L{imapmig.sources.imapthrottle} (the throttle
it is given).
"""

from __future__ import annotations

from typing import Awaitable, Callable, Sequence

from twisted.internet.defer import Deferred
from zope.interface import implementer

from imapmig.imap.session import IMAPSession
from imapmig.mail.message import MessageBody, SourceFolder, SourceMessage
from imapmig.sources import IMessageSource
from imapmig.sources.imapbodies import (
    COMMAND_BYTES,
    MAX_MESSAGE_BYTES,
    SPOOL_ABOVE,
    BodyFetcher,
)
from imapmig.sources.imaplisting import FolderChanges, FolderListing
from imapmig.sources.imappool import SessionPool
from imapmig.sources.imapreading import BodyReader
from imapmig.sources.imapstatus import FolderMarks, FolderStatus
from imapmig.sources.imapthrottle import IThrottle
from imapmig.sources.labelviews import COPY

__all__ = ["READ_AHEAD_CONNECTIONS", "IMAPSource"]

READ_AHEAD_CONNECTIONS = 1
"""
How many connections a source may open beyond the job's workers, for the
steps read ahead (issue 31: the copy waited on the source, each connection
reading a step more slowly than the destination appended it).  Opened only
for a call that finds every other connection busy, and only if granted at
once within the servers' connection limits.
"""


@implementer(IMessageSource)
class IMAPSource:
    """
    The folders and messages of one IMAP account, read-only.

    @ivar description: names the account in errors and logs.
    """

    def __init__(
        self,
        openSession: Callable[[], Awaitable[IMAPSession]],
        description: str = "IMAP source",
        commandBytes: int = COMMAND_BYTES,
        connections: int = 1,
        spoolAbove: int | None = SPOOL_ABOVE,
        spoolDirectory: str | None = None,
        maxMessageBytes: int = MAX_MESSAGE_BYTES,
        include: Sequence[str] = (),
        labelViews: str = COPY,
        archiveFolder: str | None = "Archive",
        job: str | None = None,
        throttle: IThrottle | None = None,
        readAheadConnections: int = READ_AHEAD_CONNECTIONS,
    ) -> None:
        """
        @param openSession: opens a new logged-in session to the account
            (as L{imapmig.daemon.service.sessionOpener} makes); called on the
            first call, and again after a call lost the connection.
        @param description: names the account in errors and logs.
        @param commandBytes: see L{COMMAND_BYTES}.
        @param connections: the most connections to open at once (the
            job's workers, so that each can keep its own folder open).
        @param spoolAbove: see L{SPOOL_ABOVE}; L{None} holds every body in
            memory.
        @param spoolDirectory: where spooled bodies go, as unlinked files;
            L{None}: the default temporary directory (L{tempfile.gettempdir}:
            C{$TMPDIR}, else C{/tmp}).
        @param maxMessageBytes: see L{MAX_MESSAGE_BYTES}.
        @param include: the job's C{include} folder patterns: a mailbox
            outside the personal namespace is listed only if one of them
            names it explicitly (L{imapmig.sources.imapfolders.namesExplicitly}); a label view named
            so is kept (L{imapmig.sources.labelviews}).
        @param labelViews: what becomes of label views (Gmail's All Mail,
            Important, Starred): C{"dedup"}, C{"copy"} or C{"auto"} (see
            L{imapmig.sources.labelviews}).
        @param archiveFolder: where the messages found only in All Mail go
            when label views are de-duplicated without X-GM-EXT-1, or
            L{None}: they are recorded as not migrated.
        @param job: the name of the job reading, carried by every log
            event as C{job}.
        @param throttle: the rates of the source server and account
            (L{IThrottle}), waited for before each body
            FETCH, and told of a server's "wait"; or L{None}.  (The daily
            download budget is counted by the job, per unit.)
        @param readAheadConnections: how many connections beyond
            C{connections} the pool may open for calls that find every
            other connection busy (L{READ_AHEAD_CONNECTIONS}).
        """
        self.description = description
        marks = FolderMarks(description)
        self._connections = max(1, connections)
        self._pool = SessionPool(
            openSession, description, connections, job, throttle, readAheadConnections
        )
        self._listing = FolderListing(marks, description, include, labelViews, archiveFolder, job)
        fetcher = BodyFetcher(commandBytes, maxMessageBytes, spoolAbove, spoolDirectory)
        self._reading = BodyReader(marks, description, fetcher, throttle)

    @property
    def listingWindow(self) -> int:
        """
        How many folders of the last L{listFolders} may be listed at once:
        one per connection, or one at a time where label views are
        de-duplicated (a view is listed after the folders it is set
        against).
        """
        return 1 if self._listing.inOrder else self._connections

    @property
    def leftOut(self) -> list[tuple[SourceFolder, str]]:
        """
        The folders the last L{listFolders} left out, each with why.
        """
        return self._listing.leftOut

    # IMessageSource

    def listFolders(self) -> Deferred[Sequence[SourceFolder]]:
        """
        Every folder that can hold messages, C{INBOX} first, then sorted
        by path (parents before children).  A folder that cannot
        (C{\\Noselect}, C{\\NonExistent}) is left out, its children not.

        Each folder's C{path} is its decoded name split at the account's
        hierarchy delimiter, its C{key} the decoded name as listed, its
        C{specialUse} its RFC 6154 attribute, C{subscribed} from the
        server.

        @return: a Deferred that fails with L{imapmig.errors.SourceError} when the server
            refuses to list, or with a L{imapmig.errors.TransientError}.
        """
        return self._pool.call(self._listing.listFolders, None)

    def listMessages(self, folder: SourceFolder) -> Deferred[Sequence[SourceMessage]]:
        """
        The messages of C{folder}, by ascending UID, without bodies; the
        folder's L{FolderStatus} is remembered (L{folderStatus}).

        @return: a Deferred that fails with L{imapmig.errors.SourceError} when the folder
            cannot be opened, or with a L{imapmig.errors.TransientError}.
        """
        return self._pool.call(self._listing.listMessages, folder, folder)

    def readBodies(
        self, folder: SourceFolder, messages: Sequence[SourceMessage]
    ) -> Deferred[Sequence[MessageBody]]:
        """
        The bodies of C{messages}, in the same order, as the server sent
        them (IMAP bodies are CRLF already; L{imapmig.sources.imapreading.asCRLF} fixes the rare one
        that is not); one larger than the spool threshold as a
        L{imapmig.mail.message.StreamedBody} on its temporary file.  A message that is gone (no
        longer in the folder, or the folder renumbered or gone), or listed
        larger than C{maxMessageBytes}, is an L{imapmig.mail.message.UnreadableMessage} saying
        so.

        @return: a Deferred that fails with a L{imapmig.errors.TransientError} when the
            connection is lost, a response is beyond what was listed, or
            the server will not serve now (L{imapmig.errors.ServerBusy}, or
            L{imapmig.errors.QuotaExceeded}: pause).
        """
        return self._pool.call(self._reading.readBodies, folder, folder, messages)

    def readHeaders(
        self, folder: SourceFolder, messages: Sequence[SourceMessage]
    ) -> Deferred[Sequence[bytes | None]]:
        """
        The header fields that name C{messages} to their owner
        (L{imapmig.mail.messagenames.HEADER_FIELDS}), in the same order, with
        one C{UID FETCH} of C{BODY.PEEK[HEADER.FIELDS (...)]}: a few
        hundred octets per message, never a body.  For the messages that
        failed (L{imapmig.job.naming}); L{None} for one the server does
        not send (gone, refused).

        @return: a Deferred that fails with a
            L{imapmig.errors.TransientError} when the connection is lost.
        """
        return self._pool.call(self._reading.readHeaders, folder, folder, messages)

    # Delta passes

    def folderStatus(self, folder: SourceFolder) -> FolderStatus | None:
        """
        The status of C{folder} when it was last listed or opened, or
        L{None} if it has not been.  A label view's status carries the
        UIDs of the messages it deferred
        (L{imapmig.sources.labelviews.LabelViewFilter.deferred}), for the
        next pass to list again.
        """
        return self._listing.folderStatus(folder)

    def listMessagesSince(
        self,
        folder: SourceFolder,
        uidValidity: int,
        uidNext: int,
        modSeq: int | None,
        deferred: Sequence[int] = (),
    ) -> Deferred[FolderChanges]:
        """
        What changed in C{folder} since a pass that left it at
        C{uidValidity}, C{uidNext}, C{modSeq} and C{deferred} (a
        L{FolderStatus} kept from then): the messages that arrived (C{UID
        FETCH <uidNext>:*}) and those of C{deferred} still there (listed
        again as new, from the lowest of them), and, where the server has
        CONDSTORE and C{modSeq} is given, the flags changed on the older
        others (C{UID FETCH 1:<uidNext - 1> (UID FLAGS) (CHANGEDSINCE
        <modSeq>)}).  Messages expunged since are not reported.  If the
        folder's UIDVALIDITY changed, every message is new.
        """
        return self._pool.call(
            self._listing.listMessagesSince, folder, folder, uidValidity, uidNext, modSeq, deferred
        )

    def countMessages(self, folder: SourceFolder) -> Deferred[int]:
        """
        How many messages C{folder} holds (EXAMINE), for one that was left
        out (L{leftOut}): nothing is listed.

        @return: a Deferred that fails with L{imapmig.errors.SourceError} when the folder
            cannot be opened, or with a L{imapmig.errors.TransientError}.
        """
        return self._pool.call(self._listing.countMessages, folder, folder)

    def messageIdOf(self, folder: SourceFolder, message: SourceMessage) -> str | None:
        """
        The Message-ID, as the state store records it, of a message listed
        in a folder whose messages are not migrated
        (L{imapmig.mail.message.SourceFolder.notMigrated}: its listing read each one's); else
        L{None}.
        """
        return self._listing.messageIdOf(folder, message)

    def raised(self, error: BaseException) -> bool:
        """
        Whether C{error} came from this source (a call of it failed so):
        a throttling signal in it is the source server's, never the
        destination's, whether or not the source has a throttle.
        """
        return self._pool.raised(error)

    def close(self) -> Deferred[None]:
        """
        Log out (after the call in progress, if any; a read still waiting
        for the throttle fails at once with
        L{twisted.internet.defer.CancelledError}).  A later call opens a
        new connection.
        """
        return Deferred.fromCoroutine(self._close())

    async def _close(self) -> None:
        self._reading.cancelAdmissions()
        await self._pool.close()

    def abort(self) -> None:
        """
        Drop every connection now, open or still opening (a server that
        never greets, a login never answered): the calls waiting on them
        fail.  For a job whose stop timed out; a later call opens a new
        connection.
        """
        self._pool.abort()
