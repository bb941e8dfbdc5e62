# -*- test-case-name: tests.test_census -*-
"""
The census: every job's source counted (listed) before or while the
first jobs run, so that the overall totals, progress and ETA cover every
job from the start.

From its start, the census counts the sources of the jobs still queued
and not yet counted, in configuration order, two at a time: a local
source (Maildir, mbox, eml directory) by listing it in a worker thread
(L{imapmig.sources.counting.countListedSource}), an IMAP source over one
short connection (C{LIST}, then C{STATUS} per included folder:
L{imapmig.sources.counting.countIMAPSession}).  An IMAP census
connection is taken under the servers' connection limits only when one
is free at once (L{imapmig.schedule.grants.GrantPools.tryAcquire}: never
one a waiting job is owed); a job whose connection is not free now is
tried again later, while it is still queued.  At most two census
connections are open at once, each under a timeout.

A reload that adds jobs counts their sources with a census of their own
(L{imapmig.daemon.service}); a job a reload removed is no longer counted.

A job that starts lists its source itself, which overrides the census
(L{imapmig.progress.JobProgress.census}).  A census that fails (the
server unreachable, the credentials refused) is logged once as a
warning and leaves the job uncounted: the job reports the real error
when it runs.  Stopping the service gives up every count (a listing
under way in a thread ends at its next folder).
"""

from __future__ import annotations

from collections import deque
from typing import Awaitable, Callable, Sequence

from twisted.application.service import Service
from twisted.internet.defer import CancelledError, Deferred, DeferredList, TimeoutError
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.python.threadpool import ThreadPool

from imapmig.config.model import ImapSourceConfig, JobConfig
from imapmig.imap.session import IMAPSession
from imapmig.progress import JobState, MigrationProgress
from imapmig.errors import ConnectionNotGranted
from imapmig.sources.counting import SourceCount, countIMAPSession
from imapmig.units import Count

__all__ = ["CENSUS_CONNECTIONS", "CENSUS_TIMEOUT", "SourceCensus"]

log = Logger()

CENSUS_CONNECTIONS = 2
"""
The most sources counted at once, and so the most census connections
open at once.
"""

CENSUS_TIMEOUT = 120.0
"""
The most seconds one IMAP source's census (connecting, logging in,
LIST, the STATUS commands, logging out) may take before it is given up.
"""

RETRY_DELAY = 30.0
"""
Seconds before the census tries again the IMAP sources whose connection
was not free.
"""


class SourceCensus(Service):
    """
    Counts the sources of the queued jobs not yet counted, from its
    start (see the module's docstring).
    """

    name = "census"

    def __init__(
        self,
        jobs: Sequence[JobConfig],
        progress: MigrationProgress,
        countLocal: Callable[[JobConfig, Callable[[], bool]], Deferred[SourceCount]],
        openIMAP: Callable[[JobConfig], Awaitable[IMAPSession]],
        recorded: Callable[[str], Deferred[int]],
        clock: IReactorTime,
        connections: int = CENSUS_CONNECTIONS,
        timeout: float = CENSUS_TIMEOUT,
        retryDelay: float = RETRY_DELAY,
        threads: ThreadPool | None = None,
    ) -> None:
        """
        @param jobs: every configured job, in configuration order.
        @param countLocal: counts a local source (in a worker thread),
            given the job and whether the census is stopping.
        @param openIMAP: opens a census session to a job's IMAP source:
            fails with L{ConnectionNotGranted} when no connection is free
            at once.
        @param recorded: how many messages of a job the state store
            records as in the destination (earlier runs).
        @param connections: sources counted at once.
        @param timeout: see L{CENSUS_TIMEOUT}.
        @param retryDelay: see L{RETRY_DELAY}.
        @param threads: the worker threads C{countLocal} runs in, started
            with the census and stopped once it ended (a listing under way
            ends at its next folder: it is waited for, never abandoned).
        """
        self._threads = threads
        self._jobs = jobs
        self._progress = progress
        self._countLocal = countLocal
        self._openIMAP = openIMAP
        self._recorded = recorded
        self._clock = clock
        self._connections = connections
        self._timeout = timeout
        self._retryDelay = retryDelay
        self._stopping = False
        self._counting: set[Deferred[SourceCount]] = set()
        self._waiting: Deferred[None] | None = None
        self._running: Deferred[None] | None = None
        self._whenDone: list[Deferred[None]] = []
        # How many sources were counted, and how many could not be.
        self.counted = 0
        self.failed = 0

    def startService(self) -> None:
        Service.startService(self)
        self._stopping = False
        threads = self._threads
        if threads is not None:
            threads.start()
        running = Deferred.fromCoroutine(self._census())

        def tell(result: object) -> object:
            waiting, self._whenDone = self._whenDone, []
            for d in waiting:
                d.callback(None)
            return result

        running.addBoth(tell)
        if threads is not None:

            def stopThreads(result: object) -> object:
                # No work is left in them: joining them does not block.
                threads.stop()
                return result

            running.addBoth(stopThreads)
        self._running = running

    def whenDone(self) -> Deferred[None]:
        """
        Fires once the census has counted every source it could (or was
        stopped).
        """
        d: Deferred[None] = Deferred()
        if self._running is None or self._running.called:
            d.callback(None)
        else:
            self._whenDone.append(d)
        return d

    def stopService(self) -> Deferred[None] | None:
        Service.stopService(self)
        self._stopping = True
        for counting in list(self._counting):
            counting.cancel()
        if self._waiting is not None:
            self._waiting.cancel()
        return self._running

    def _wanted(self, job: JobConfig) -> bool:
        """
        Whether C{job}'s source is still to be counted: it is queued and
        not counted (a job that started lists its source itself).  A job
        paused by the admin is not: a pause keeps imapmig off its servers.
        """
        if job.name not in self._progress:
            # Removed from the configuration by a reload.
            return False
        progress = self._progress.job(job.name)
        return not progress.counted and progress.state is JobState.QUEUED

    async def _census(self) -> None:
        queue = deque(job for job in self._jobs if self._wanted(job))
        if queue:
            log.info(
                "Census: counting the sources of {jobs}, {at} at a time",
                count=len(queue),
                jobs=Count(len(queue), "queued job"),
                at=self._connections,
            )
        while queue and not self._stopping:
            later: list[JobConfig] = []
            workers = [
                Deferred.fromCoroutine(self._work(queue, later))
                for _ in range(self._connections)
            ]
            await DeferredList(workers)
            if not later or self._stopping or not await self._pause():
                break
            queue.extend(job for job in later if self._wanted(job))
        if not self._stopping:
            self._logDone()

    def _logDone(self) -> None:
        """
        Say how many sources the census counted, and could not; nothing to
        count (every job started at once, or counted by its own listing)
        is not worth a line at the default level.
        """
        emit = log.info if self.counted or self.failed else log.debug
        emit(
            "Census: done; {counted} sources counted, {failed} could not be",
            counted=self.counted,
            failed=self.failed,
        )

    async def _pause(self) -> bool:
        """
        Wait before trying again the jobs whose connections were not free:
        the jobs running have time to give some back.

        @return: whether it waited to the end (not stopped).
        """
        waiting = self._waiting = deferLater(self._clock, self._retryDelay)
        try:
            await waiting
        except CancelledError:
            return False
        finally:
            self._waiting = None
        return True

    async def _work(self, queue: deque[JobConfig], later: list[JobConfig]) -> None:
        """
        Count the sources of C{queue}, one at a time, until it is empty;
        jobs whose census connection is not free now go to C{later}.
        """
        while queue and not self._stopping:
            job = queue.popleft()
            if not self._wanted(job):
                continue
            try:
                count = await self._count(job)
                recorded = await self._recorded(job.name)
            except ConnectionNotGranted:
                later.append(job)
                continue
            except CancelledError:
                if self._stopping:
                    return
                self._failed(job, "cancelled")
                continue
            except TimeoutError:
                self._failed(job, f"no answer within {self._timeout:g} s")
                continue
            except Exception as e:
                self._failed(job, str(e) or e.__class__.__name__)
                continue
            self._counted(job, count, recorded)

    def _counted(self, job: JobConfig, count: SourceCount, recorded: int) -> None:
        """
        Show C{job}'s source as counted, unless a reload removed the job
        or it started meanwhile.
        """
        if job.name in self._progress and self._progress.job(job.name).census(
            count.messages, count.octets, count.folders, count.excluded, recorded
        ):
            self.counted += 1
            log.debug(
                "Census: job {job}: {messagesCounted} ({octets} octets) in"
                " {inFolders}",
                messagesCounted=Count(count.messages, "message"),
                inFolders=Count(count.folders, "folder"),
                job=job.name,
                messages=count.messages,
                octets=count.octets,
                folders=count.folders,
            )

    def _failed(self, job: JobConfig, why: str) -> None:
        self.failed += 1
        log.warn(
            "Census: cannot count the source of job {job} ({why}); its totals are"
            " counted when it runs",
            job=job.name,
            why=why,
        )

    def _count(self, job: JobConfig) -> Deferred[SourceCount]:
        """
        Count C{job}'s source: an IMAP source under the timeout, given up
        on a stop.
        """
        if not isinstance(job.source, ImapSourceConfig):
            # Not cancelled on a stop: the listing ends at its next folder.
            return self._countLocal(job, lambda: self._stopping)
        counting = Deferred.fromCoroutine(self._countIMAP(job))
        counting.addTimeout(self._timeout, self._clock)
        self._counting.add(counting)

        def done(result: object) -> object:
            self._counting.discard(counting)
            return result

        return counting.addBoth(done)

    async def _countIMAP(self, job: JobConfig) -> SourceCount:
        source = job.source
        assert isinstance(source, ImapSourceConfig)
        description = f"{source.user} at {source.server.endpoint}"
        session = await self._openIMAP(job)
        try:
            count = await countIMAPSession(
                session, job.folders, source.server.labelViews, description
            )
        except BaseException:
            session.abort("the census was given up")
            raise
        # The census ends once its connection is closed (and its grant
        # released): logging out closes it, within the session's timeout.
        closed: Deferred[None] = Deferred()

        def gone(result: None) -> None:
            closed.callback(None)
            return result

        session.client.closed.addBoth(gone)
        await session.logout()
        await closed
        return count
