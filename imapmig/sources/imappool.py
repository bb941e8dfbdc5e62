# -*- test-case-name: tests.test_sources_imappool,tests.test_sources_imap -*-
"""
The connections an L{imapmig.sources.imap.IMAPSource} reads on: a small
pool, one call at a time on each.

A call goes to an idle connection that has its folder open already, else
to an idle one with no folder open, else to a new one while the pool may
grow, else to any idle one, else it waits its turn on the connection with
its folder open (or the least busy).  Beyond those, a pool may have
read-ahead connections: opened only for a call that finds every other
connection busy (two reads ahead of one worker run at once).  So two workers reading two folders
each keep their own folder open instead of re-EXAMINEing it on every read.
A connection is opened when first needed; if the server refuses an extra
one (many limit connections per account) the pool stays at the size it
has.  A connection is dropped when a call on it fails with a
L{TransientError} (the next call opens a new one).

Split out of L{imapmig.sources.imap}, whose facade holds one pool.
"""

from __future__ import annotations

import weakref
from typing import (
    Any,
    Awaitable,
    Callable,
    Concatenate,
    Coroutine,
    ParamSpec,
    TypeVar,
)

from twisted.internet import tcp
from twisted.internet.defer import Deferred, DeferredLock
from twisted.logger import Logger

from imapmig.errors import ImapmigError, TransientError
from imapmig.imap.inplace import readInPlace
from imapmig.imap.session import IMAPSession
from imapmig.mail.message import SourceFolder
from imapmig.sources.imapthrottle import IThrottle

__all__ = ["SOURCE_READ_BYTES", "PooledSession", "SessionPool", "widenReads"]

T = TypeVar("T")
P = ParamSpec("P")

log = Logger()

SOURCE_READ_BYTES = 256 * 1024
"""
The most one read of a source connection takes from its socket (Twisted's
C{bufferSize}, 64 KiB by default).  A source connection brings message
bodies and sends only commands, so the write buffer's pause threshold,
which the same attribute sets, never matters to it; and what is handled
per read (the reactor's wakeup, the C{recv}, the reply reader's and the
TLS receiver's calls) is paid a fourth as often.
"""

# Wrappers between a session's protocol and its TCP transport: TLS,
# COMPRESS.
_MAX_WRAPPERS = 4


def widenReads(transport: object, size: int = SOURCE_READ_BYTES) -> bool:
    """
    Have the TCP transport under C{transport} (through an implicit-TLS or
    COMPRESS wrapper; after STARTTLS, the transport itself) read up to
    C{size} octets at a time, and, for a plain connection, FETCH literals
    into their final buffers (L{imapmig.imap.inplace.readInPlace}).

    @return: whether a TCP transport was found (not in a test's memory).
    """
    for _ in range(_MAX_WRAPPERS + 1):
        if isinstance(transport, tcp.Connection):
            transport.bufferSize = size
            readInPlace(transport)
            return True
        transport = getattr(transport, "transport", None)
        if transport is None:
            return False
    return False


class PooledSession:
    """
    One connection of an L{imapmig.sources.imap.IMAPSource}'s pool.

    @ivar lock: held by the call running on it.
    @ivar session: the logged-in session, or L{None} until opened (or after
        it was dropped).
    @ivar examined: the key of the folder it has open, if any.
    """

    def __init__(self) -> None:
        self.lock = DeferredLock()
        self.session: IMAPSession | None = None
        self.examined: str | None = None

    def forget(self) -> None:
        """
        Let go of the session (it was dropped, or logged out).
        """
        self.session = None
        self.examined = None

    def abort(self, why: str) -> None:
        """
        Drop the connection now, if open: the call running on it fails,
        and forgets it.
        """
        session = self.session
        if session is None:
            return
        if not self.lock.locked:
            # The call running on a locked reader forgets its session
            # itself, as the abort fails it.
            self.forget()
        session.abort(why)


class SessionPool:
    """
    The connections of one source account (see the module's docstring).
    """

    def __init__(
        self,
        openSession: Callable[[], Awaitable[IMAPSession]],
        description: str,
        connections: int,
        job: str | None,
        throttle: IThrottle | None,
        readAhead: int = 0,
    ) -> None:
        """
        @param openSession: opens a new logged-in session to the account.
        @param description: names the account in logs.
        @param connections: the most connections to open at once for
            calls that find one idle.
        @param job: the name of the job reading, carried by every log
            event as C{job}.
        @param throttle: told of a server's "wait", or L{None}.
        @param readAhead: how many more connections may be opened, each
            only for a call that finds every other connection busy.
        """
        self._job = job
        self._openSession = openSession
        self.description = description
        self._connections = max(1, connections)
        self._readAhead = max(0, readAhead)
        self._readers: list[PooledSession] = []
        self._throttle = throttle
        # The errors this source raised (see raised).
        self._raised: weakref.WeakSet[ImapmigError] = weakref.WeakSet()
        # The connections still opening: L{abort} gives them up.
        self._openings: set[Deferred[IMAPSession]] = set()

    def raised(self, error: BaseException) -> bool:
        """
        Whether C{error} came from this source (a call of it failed so):
        a throttling signal in it is the source server's, never the
        destination's, whether or not the source has a throttle.
        """
        return isinstance(error, ImapmigError) and error in self._raised

    def abort(self) -> None:
        """
        Drop every connection now, open or still opening (a server that
        never greets, a login never answered): the calls waiting on them
        fail.  For a job whose stop timed out; a later call opens a new
        connection.
        """
        for opening in list(self._openings):
            opening.cancel()
        for reader in self._readers:
            reader.abort("the job's stop timed out")

    def open(self) -> Deferred[IMAPSession]:
        """
        Open a session, given up by L{abort} while it opens.
        """

        async def opened() -> IMAPSession:
            session = await self._openSession()
            widenReads(session.client.transport)
            return session

        opening = Deferred.fromCoroutine(opened())
        if not opening.called:
            self._openings.add(opening)

            def over(result: object) -> object:
                self._openings.discard(opening)
                return result

            opening.addBoth(over)
        return opening

    def call(
        self,
        method: Callable[Concatenate[PooledSession, IMAPSession, P], Coroutine[Any, Any, T]],
        folder: SourceFolder | None,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Deferred[T]:
        """
        L{run}, as a Deferred.
        """
        return Deferred.fromCoroutine(self.run(method, folder, *args, **kwargs))

    def choose(self, folderKey: str | None) -> PooledSession:
        """
        The connection a call about C{folderKey} (L{None}: about no folder)
        should run on: the first of the best rank (L{_rank}), or a new one
        while the pool may grow and none ranks above L{_GROW}.
        """
        best = min(self._readers, key=lambda reader: _rank(reader, folderKey), default=None)
        if best is None or self._mayGrow(_rank(best, folderKey)):
            # A connection of its own rather than close another worker's
            # folder.
            best = PooledSession()
            self._readers.append(best)
        return best

    def _mayGrow(self, best: tuple[int, int]) -> bool:
        """
        Whether a call whose best connection ranks C{best} gets a new one:
        while the pool is smaller than its connections and none ranks
        above L{_GROW}, or into a read-ahead connection when every one is
        busy.
        """
        count = len(self._readers)
        if count < self._connections:
            return best > _GROW
        return count < self._connections + self._readAhead and best >= _BUSY_ON_FOLDER

    async def run(
        self,
        method: Callable[Concatenate[PooledSession, IMAPSession, P], Coroutine[Any, Any, T]],
        folder: SourceFolder | None,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """
        Run C{method(reader, session, *args, **kwargs)} alone on a connection
        of the pool (L{choose}), opening it first if needed; a
        L{TransientError} drops that connection.  An L{ImapmigError} it
        raises is remembered as this source's (L{raised}).
        """
        try:
            return await self._runOn(method, folder, *args, **kwargs)
        except ImapmigError as e:
            self._raised.add(e)
            raise

    async def _runOn(
        self,
        method: Callable[Concatenate[PooledSession, IMAPSession, P], Coroutine[Any, Any, T]],
        folder: SourceFolder | None,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        reader, session = await self._ready(None if folder is None else folder.key)
        try:
            return await method(reader, session, *args, **kwargs)
        except TransientError as e:
            self._drop(reader, session, e)
            raise
        finally:
            reader.lock.release()

    async def _ready(self, folderKey: str | None) -> tuple[PooledSession, IMAPSession]:
        """
        A connection for a call about C{folderKey} (L{choose}), locked, and
        its session, opened if need be; if the server refuses an extra
        connection, another connection of the pool.  Nothing stays locked
        if it fails.
        """
        reader = self.choose(folderKey)
        await reader.lock.acquire()
        try:
            return reader, await self._sessionOf(reader)
        except ImapmigError as e:
            if not self._refusedExtra(reader, e):
                reader.lock.release()
                raise
        except BaseException:
            reader.lock.release()
            raise
        reader.lock.release()
        return await self._readyAfterRefusal(folderKey)

    async def _readyAfterRefusal(self, folderKey: str | None) -> tuple[PooledSession, IMAPSession]:
        """
        L{_ready} once an extra connection was refused and the pool shrunk:
        a failure to open this one stands.
        """
        reader = self.choose(folderKey)
        await reader.lock.acquire()
        try:
            session = await self._sessionOf(reader)
        except BaseException:
            reader.lock.release()
            raise
        # Taken over after a refusal: its folder is opened again.
        reader.examined = None
        return reader, session

    async def _sessionOf(self, reader: PooledSession) -> IMAPSession:
        """
        C{reader}'s session, opened first if it has none.
        """
        if reader.session is None:
            session = await self.open()
            reader.session = session
            reader.examined = None
        return reader.session

    def _refusedExtra(self, reader: PooledSession, error: ImapmigError) -> bool:
        """
        Whether opening C{reader}'s session failed with C{error} as an
        extra connection refused (another connection of the pool is
        open): if so, the pool shrinks to the connections it has (a
        read-ahead connection refused is logged at the info level: the
        servers' limits leave no room for it, which is no fault).
        """
        if not any(other.session is not None for other in self._readers):
            return False
        if reader in self._readers:
            self._readers.remove(reader)
        readAhead = len(self._readers) >= self._connections
        self._connections = max(1, len(self._readers))
        self._readAhead = 0
        (log.info if readAhead else log.warn)(
            "{source}: an extra connection was refused, reading with "
            "{count} connection(s): {why}",
            source=self.description,
            job=self._job,
            count=self._connections,
            why=str(error),
        )
        return True

    def _drop(self, reader: PooledSession, session: IMAPSession, error: TransientError) -> None:
        """
        A call on C{reader} failed with C{error}: tell the throttle, and
        drop the connection (the next call opens a new one).
        """
        if self._throttle is not None:
            self._throttle.signalled(error)
        reader.forget()
        session.abort()

    async def close(self) -> None:
        """
        Log every connection out, after the call in progress on it.
        """
        readers, self._readers = self._readers, []
        for reader in readers:
            await reader.lock.acquire()
            try:
                session = reader.session
                reader.forget()
                if session is not None:
                    await session.logout()
            finally:
                reader.lock.release()


# The ranks of the connections for a call (see _rank), best first.  A new
# connection, while the pool may grow, ranks just after _GROW.
_READY = (0, 0)
_UNUSED = (1, 0)
_GROW = _UNUSED
_OTHER_FOLDER = (3, 0)
_UNOPENED = (4, 0)
_BUSY_ON_FOLDER = (5, 0)
_BUSY = 6


def _rank(reader: PooledSession, folderKey: str | None) -> tuple[int, int]:
    """
    How good C{reader} is for a call about C{folderKey}, lowest best: idle
    with that folder open (any open session, for a call about no folder),
    idle with no folder open, (a new connection), idle with another folder
    open, idle and not yet opened, busy with that folder open, else busy,
    by how many calls wait for it.
    """
    if reader.lock.locked:
        return _busyRank(reader, folderKey)
    if reader.session is None:
        return _UNOPENED
    if folderKey is None:
        return _READY
    return {None: _UNUSED, folderKey: _READY}.get(reader.examined, _OTHER_FOLDER)


def _busyRank(reader: PooledSession, folderKey: str | None) -> tuple[int, int]:
    """
    L{_rank} of a connection running a call.
    """
    if folderKey is not None and reader.examined == folderKey:
        return _BUSY_ON_FOLDER
    return (_BUSY, len(reader.lock.waiting))
