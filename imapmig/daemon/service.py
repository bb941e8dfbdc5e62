# -*- test-case-name: tests.test_service -*-
"""
Assembly: turn a L{Config} into the daemon's service tree.

    MigrationService (imapmig.daemon.rootservice)
      +- JobQueueService   the scheduler (imapmig.schedule.scheduler): up
                           to max_jobs jobs at once, claimed in
                           configuration order, their connections granted
                           under the servers' limits
      +- ProgressSampler   samples the progress model every 10 s (current
                           rates, throughput history)
      +- SourceCensus      a daemon alone: counts the queued jobs' sources,
                           so that the totals cover every job from the start
      +- status listener   twisted.web, reads the progress model
                           (L{imapmig.daemon.listener.ListenerService})
      +- systemd notifier  READY, STATUS, WATCHDOG, STOPPING, RELOADING
                           (L{imapmig.daemon.notifyservice}), only when started
                           by systemd with C{$NOTIFY_SOCKET}
      +- SourceCensus      one more per reload that added jobs, for
                           theirs (gone once done)

The service keeps what a reload of the configuration changes (the
queue, the grants, the progress model, the status resource's maps: an
L{imapmig.daemon.reload.ReloadTarget}) and its L{ConfigReloader}:
L{MigrationService.reloadFrom} is what C{SIGHUP} calls.

Endpoint strings become endpoints here, and only here.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import socket
import time
from typing import Any, Awaitable, Callable, Mapping, Sequence

from attrs import evolve

from twisted.internet.defer import Deferred, fail, maybeDeferred, succeed
from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import Logger
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool
from twisted.internet.endpoints import clientFromString, wrapClientTLS
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator, IStreamClientEndpoint

from imapmig.config import (
    Config,
    EmlSourceConfig,
    ImapSourceConfig,
    JobConfig,
    MaildirSourceConfig,
    MboxSourceConfig,
    PostgreSQLState,
    ServerConfig,
)
from imapmig.config.model import AccountConfig, NotifyConfig, StatusConfig, TokenSourceConfig
from imapmig.imap.auth import AdminLogin, Credentials, PasswordLogin, TokenLogin
from imapmig.imap.opening import openSession
from imapmig.imap.outgoing import SendDeadline
from imapmig.imap.session import IMAPSession
from imapmig.job import JobSettings, MigrationJob, RetryPolicy
from imapmig.job.machine import JobMachines
from imapmig.job.joblog import describeSource
from imapmig.log.logfields import AccountName
from imapmig.mail.folders import FolderRules
from imapmig.progress import MigrationProgress, ProgressSampler
from imapmig.daemon.reload import ConfigReloader, ReloadTarget, loadInThread
from imapmig.daemon.reloadapply import LeavingJobs
from imapmig.daemon.rootservice import MigrationService
from imapmig.schedule.census import CENSUS_CONNECTIONS, SourceCensus
from imapmig.schedule.grants import ConnectionGrants, IGrant, JobConnections, connectionDemand
from imapmig.errors import ConnectionNotGranted
from imapmig import __version__
from imapmig.queue import IAsyncJobQueue
from imapmig.queue.memory import InMemoryJobQueue
from imapmig.schedule.scheduler import JobQueueService, withinLimits
from imapmig.throttle import DOWNLOAD, UPLOAD, Throttle, ThrottleRegistry
from imapmig.sources import IMessageSource
from imapmig.sources.counting import SourceCount, countListedSource
from imapmig.sources.imap import IMAPSource
from imapmig.sources.maildir import MaildirSource
from imapmig.state import IStateStore, Transition, transitionRecorder
from imapmig.state.sqlite import SQLiteStateStore
from imapmig.progress.telemetry import Telemetry
from imapmig.oauth.tokens import TokenSources, loginWithToken

log = Logger()

def tlsOptionsFor(server: ServerConfig) -> IOpenSSLClientConnectionCreator:
    """
    Client TLS options for C{server}: verify its certificate against
    C{tls_ca} (or the system's trust store) and its host name; watched, so
    that a failed handshake says how (L{imapmig.imap.tls}).
    """
    # Imported only by a daemon that uses TLS (imapmig.access.cleartext).
    from imapmig.imap.tls import WatchedClientTLS
    from imapmig.access.tlsidentity import HostnameVerifyingTLS, trustRootFrom

    return WatchedClientTLS(HostnameVerifyingTLS(server.tlsHostname, trustRootFrom(server.tlsCA)))


@functools.lru_cache(maxsize=256)
def _sharedTLSOptions(server: ServerConfig) -> IOpenSSLClientConnectionCreator:
    """
    L{tlsOptionsFor}, made once per server and shared by every session to
    it: each makes its own TLS connection from them, and making them (an
    OpenSSL context, the trust store loaded) costs ~1 ms, 10 s for 10,000 jobs.
    """
    return tlsOptionsFor(server)


def sessionOpener(
    reactor: Any,
    server: ServerConfig,
    user: str,
    password: str | None,
    admin: str | None = None,
    oauth2: TokenSourceConfig | None = None,
    tokens: TokenSources | None = None,
    grant: Callable[[], Deferred[IGrant]] | None = None,
    job: str | None = None,
    credentialKey: str | None = None,
) -> Callable[[], Awaitable[IMAPSession]]:
    """
    A function that opens a logged-in session to C{server} as C{user}.
    A connection that cannot be made names the server's
    C{servers.NAME.endpoint}, a refused login C{credentialKey}.

    @param password: the user's password, or the admin's with C{admin};
        L{None} with C{oauth2}.
    @param admin: the admin who logs in on behalf of C{user}, if any.
    @param oauth2: where the user's access token comes from, if the login
        is XOAUTH2 or OAUTHBEARER: read or run afresh for every session,
        or from the refresh grant's cache, so a reconnecting job logs in
        with the current token; a token the server refuses is replaced
        once (L{loginWithToken}).
    @param tokens: the daemon's token sources, shared by its openers (a
        refresh token file has one cache per process); a new one if
        L{None}.
    @param grant: obtains the grant to connect under the servers'
        connection limits (L{JobConnections.grantFor}), awaited before
        connecting; the grant is released when the session's connection
        closes, or when opening fails (once its socket is closed).  L{None}: no limits.  One
        grant covers an open that logs in twice (a refused token
        replaced).
    """
    endpoint, tlsOptions = serverEndpoint(reactor, server)
    description = f"{user} at {server.endpoint}"
    # What every event of the session carries: its job, and the server
    # and user as /metrics labels them (imapmig.log.logfields).
    logFields = {
        **({} if job is None else {"job": job}),
        **AccountName(server.name, user, server.endpoint).fields(),
    }

    def logIn(credentials: Credentials) -> Awaitable[IMAPSession]:
        return openSession(
            endpoint,
            reactor,
            description=description,
            credentials=credentials,
            starttls=server.starttls,
            tlsOptions=tlsOptions,
            timeout=server.timeout,
            compress=server.compress,
            namespaceOverride=server.namespace,
            logFields=logFields,
            endpointKey=f"servers.{server.name}.endpoint",
            credentialKey=credentialKey,
        )

    opener: Callable[[], Awaitable[IMAPSession]]
    if oauth2 is None:
        assert password is not None
        credentials = (
            PasswordLogin(user, password) if admin is None else AdminLogin(user, admin, password)
        )
        opener = lambda: logIn(credentials)  # noqa: E731
    else:
        source = (TokenSources(reactor) if tokens is None else tokens).sourceFor(
            oauth2, description
        )

        def logInWith(token: str) -> Awaitable[IMAPSession]:
            return logIn(TokenLogin(user, token, host=server.tlsHostname))

        def opener() -> Awaitable[IMAPSession]:
            return loginWithToken(source, logInWith, description, logFields)

    return opener if grant is None else grantedOpener(grant, opener)


def serverEndpoint(
    reactor: Any, server: ServerConfig
) -> tuple[IStreamClientEndpoint, IOpenSSLClientConnectionCreator | None]:
    """
    Where C{server} is connected to (wrapped in TLS for a C{tls:}
    endpoint), and the TLS options for it or its STARTTLS (L{None}
    without TLS).
    """
    tlsOptions = None
    if server.starttls or server.implicitTLS:
        tlsOptions = _sharedTLSOptions(server)
    endpoint = clientFromString(reactor, server.tcpEndpoint)
    if server.implicitTLS:
        assert tlsOptions is not None
        endpoint = wrapClientTLS(tlsOptions, endpoint)
    return endpoint, tlsOptions


def grantedOpener(
    grant: Callable[[], Deferred[IGrant]], opener: Callable[[], Awaitable[IMAPSession]]
) -> Callable[[], Awaitable[IMAPSession]]:
    """
    C{opener}, once C{grant} has granted the connection: the grant is
    released when the session's connection closes, or when opening fails
    or is cancelled (never leaked).  A failed opening returns only once
    its aborted socket is closed (L{imapmig.imap.opening.openSession}), so
    the grant counts every socket still open.
    """

    async def opened() -> IMAPSession:
        granted = await grant()
        try:
            session = await opener()
        except BaseException:
            granted.release()
            raise
        releaseWhenClosed(session, granted)
        return session

    return opened


def releaseWhenClosed(session: IMAPSession, granted: IGrant) -> None:
    """
    Release C{granted} when C{session}'s connection closes (however: a
    logout, an abort, the server hanging up).
    """

    def closed(result: object) -> object:
        granted.release()
        return result

    session.client.closed.addBoth(closed)


def accountOpener(
    account: AccountConfig,
    reactor: Any,
    connections: JobConnections | None = None,
    wait: bool = True,
    tokens: TokenSources | None = None,
    job: str | None = None,
) -> Callable[[], Awaitable[IMAPSession]]:
    """
    Opens a logged-in session to C{account} with its credential.

    @param connections: the job's grants, which each session waits for
        (or, without C{wait}, takes only if granted at once); L{None}: no
        limits.
    @param tokens: the daemon's token sources (see L{sessionOpener}).
    @param job: the job the sessions work for (see L{sessionOpener}).
    """
    grant = None
    if connections is not None:
        grant = connections.grantFor(account.server.name, account.user, wait)
    return _openerFor(account, reactor, grant, tokens, job)


def _openerFor(
    account: AccountConfig,
    reactor: Any,
    grant: Callable[[], Deferred[IGrant]] | None,
    tokens: TokenSources | None,
    job: str | None,
) -> Callable[[], Awaitable[IMAPSession]]:
    """
    L{sessionOpener} for C{account}, with its credential.
    """
    return sessionOpener(
        reactor,
        account.server,
        account.user,
        None if account.password is None else account.password.value,
        account.admin,
        account.oauth2,
        tokens,
        grant,
        job,
        account.credentialKey,
    )


def destinationOpener(
    job: JobConfig,
    reactor: Any,
    connections: JobConnections | None = None,
    tokens: TokenSources | None = None,
) -> Callable[[], Awaitable[IMAPSession]]:
    """
    Opens a logged-in session to a job's destination account (as its user,
    as the admin on its behalf, or with its access token).

    @param connections: the job's grants (L{accountOpener}); an extra
        destination connection waits for its grant.
    @param tokens: the daemon's token sources (see L{sessionOpener}).
    """
    return accountOpener(job.destination, reactor, connections, tokens=tokens, job=job.name)


def sourceFor(
    job: JobConfig,
    reactor: Any,
    connections: JobConnections | None = None,
    tokens: TokenSources | None = None,
    throttle: Throttle | None = None,
) -> IMessageSource:
    """
    The source a job's configuration names.

    @param reactor: the reactor a network source connects with.
    @param connections: the job's grants (L{accountOpener}): an IMAP
        source's first connection is the job's own, an extra one is opened
        only if granted at once (the source reads with fewer otherwise:
        a read must not wait for a grant while the job holds others).
    @param tokens: the daemon's token sources (see L{sessionOpener}).
    @param throttle: an IMAP source's rates (L{throttlesFor}).
    """
    source = job.source
    if isinstance(source, MaildirSourceConfig):
        return MaildirSource(source.path)
    if isinstance(source, MboxSourceConfig):
        # Imported by the jobs that read them, as EmlDirectorySource.
        from imapmig.sources.mbox import MboxSource

        return MboxSource(source.path, source.quoting)
    if isinstance(source, ImapSourceConfig):
        return IMAPSource(
            accountOpener(source, reactor, connections, wait=False, tokens=tokens, job=job.name),
            description=f"{source.user} at {source.server.endpoint}",
            connections=job.connections,
            include=job.folders.include,
            labelViews=source.server.labelViews,
            archiveFolder=source.server.archiveFolder,
            job=job.name,
            throttle=throttle,
        )
    assert isinstance(source, EmlSourceConfig)
    from imapmig.sources.eml import EmlDirectorySource

    return EmlDirectorySource(source.path, source.folder)


def settingsFor(job: JobConfig, stopTimeout: float = 30.0) -> JobSettings:
    """
    The copying settings of a job.

    @param stopTimeout: the daemon's C{stop_timeout}.
    """
    pipeline = job.pipeline
    return JobSettings(
        connections=job.connections,
        batchMessages=pipeline.batchMessages,
        batchBytes=pipeline.batchBytes,
        batchGrowth=pipeline.batchGrowth,
        windowMessages=pipeline.windowMessages,
        windowBytes=pipeline.windowBytes,
        stopTimeout=stopTimeout,
        folderNameFallback=job.folderNameFallback,
        maxMessageBytes=job.destination.server.maxMessageSize,
        journalQuiet=job.destination.server.timeout,
    )


def throttlesFor(
    job: JobConfig, registry: ThrottleRegistry
) -> tuple[Throttle | None, Throttle | None]:
    """
    A job's throttles, from the service's one registry: the destination
    server's and account's (uploads), and an IMAP source's (downloads);
    L{None} where no rate or budget is configured.
    """
    destination = job.destination
    upload = registry.throttleFor(
        destination.server.name, destination.server.limits, destination.user, UPLOAD
    )
    source = job.source
    download = None
    if isinstance(source, ImapSourceConfig):
        download = registry.throttleFor(
            source.server.name, source.server.limits, source.user, DOWNLOAD
        )
    return upload, download


def retryPolicyFor(job: JobConfig) -> RetryPolicy:
    """
    How a job retries transient failures.
    """
    retry = job.retry
    return RetryPolicy(
        attempts=retry.attempts,
        maxDelay=float(retry.maxDelay),
        messageAttempts=retry.messageAttempts,
        pause=float(retry.quotaPause),
    )


def censusOpener(
    source: ImapSourceConfig,
    reactor: Any,
    grants: ConnectionGrants,
    tokens: TokenSources | None = None,
    job: str | None = None,
) -> Callable[[], Awaitable[IMAPSession]]:
    """
    Opens a census session to an IMAP source account (L{SourceCensus}):
    under the servers' connection limits, only if a connection is free at
    once, never one a waiting job is owed (failing with
    L{ConnectionNotGranted} otherwise); the grant is released when the
    session's connection closes.

    @param job: the job whose source it counts (see L{sessionOpener}).
    """
    demand = connectionDemand([(source.server.name, source.user)])

    def grant() -> Deferred[IGrant]:
        granted = grants.pools.tryAcquire(demand)
        if granted is None:
            return fail(
                ConnectionNotGranted(
                    f"no census connection to {source.user} at {source.server.name} free now"
                )
            )
        return succeed(granted)

    return _openerFor(source, reactor, grant, tokens, job)


def censusFor(
    config: Config,
    progress: MigrationProgress,
    store: IStateStore,
    grants: ConnectionGrants,
    tokens: TokenSources | None,
    reactor: Any,
) -> SourceCensus:
    """
    The census of the configured jobs' sources: local ones listed in up to
    L{CENSUS_CONNECTIONS} worker threads of its own (a big mbox is scanned
    whole: never on the reactor's thread), IMAP ones over census sessions
    (L{censusOpener}).
    """
    threads = None
    if IReactorFromThreads.providedBy(reactor):
        threads = ThreadPool(minthreads=0, maxthreads=CENSUS_CONNECTIONS, name="imapmig-census")

    def countLocal(job: JobConfig, stopping: Callable[[], bool]) -> Deferred[SourceCount]:
        source = sourceFor(job, reactor)
        if threads is None:
            # A reactor without threads (a test's): counted in place.
            return maybeDeferred(countListedSource, source, job.folders, stopping)
        return deferToThreadPool(reactor, threads, countListedSource, source, job.folders, stopping)

    def openIMAP(job: JobConfig) -> Awaitable[IMAPSession]:
        assert isinstance(job.source, ImapSourceConfig)
        return censusOpener(job.source, reactor, grants, tokens, job.name)()

    def recorded(name: str) -> Deferred[int]:
        return store.summary(name).addCallback(lambda counts: counts[0])

    return SourceCensus(
        config.jobs, progress, countLocal, openIMAP, recorded, reactor, threads=threads
    )


def buildService(
    config: Config,
    reactor: Any,
    whenDone: Callable[[bool], None] | None = None,
    store: IStateStore | None = None,
    environ: Mapping[str, str] = os.environ,
) -> MigrationService:
    """
    Assemble the daemon from C{config}.

    @param reactor: provides the clock, TCP connections and listening.
    @param whenDone: called with whether every job completed once the
        queue is drained; L{None} keeps the daemon serving status.
    @param store: the state store; by default the configuration's SQLite
        file, or its PostgreSQL database with the fleet's job queue
        (L{imapmig.daemon.pgstate.openFleetState}: a L{ConfigError} if not).
    @param environ: the process's environment: with systemd's
        C{NOTIFY_SOCKET} (and C{WATCHDOG_USEC}), the daemon notifies
        systemd (L{imapmig.daemon.notifyservice}); those variables are then
        removed from it (when it is mutable, as C{os.environ} is), so
        that child processes (a C{token_command}) do not inherit them.
    """
    fleetQueue: IAsyncJobQueue | None = None
    if store is None and isinstance(config.state, PostgreSQLState):
        from imapmig.daemon.pgstate import openFleetState  # psycopg: a fleet's daemon only

        fleet = openFleetState(config, reactor)
        store, fleetQueue = fleet.store, fleet.queue
    elif store is None:
        store = SQLiteStateStore(config.statePath, seconds=reactor.seconds)
    tree = _ServiceTree(config, reactor, store)
    root = tree.root
    ProgressSampler(tree.progress, reactor).setServiceParent(root)
    scheduler = tree.addScheduler(whenDone, fleetQueue)
    # After the scheduler: the jobs it starts at once list their sources
    # themselves.  None in a fleet: each daemon would log in to every source.
    if not tree.inFleet:
        tree.census(config).setServiceParent(root)
    tree.addReloader(scheduler, fleetQueue)
    if config.notify is not None:
        tree.addWebhook(config.notify)
    whenListening: Callable[[], Deferred[None]] | None = None
    if config.status is not None:
        whenListening = tree.addStatusSite(config.status, scheduler)
    from imapmig.daemon.notifyservice import addSystemdNotifier

    addSystemdNotifier(root, reactor, environ, whenListening)
    return root


class _ServiceTree:
    """
    The daemon's service tree as L{buildService} assembles it: the parts
    its services share (the progress model, the queue, the grants, the
    throttles, the maps the status site and reloads read), and a step for
    each service it adds to C{root}.
    """

    def __init__(self, config: Config, reactor: Any, store: IStateStore) -> None:
        self.config = config
        self.reactor = reactor
        self.store = store
        self.progress = progress = MigrationProgress(reactor.seconds)
        self.root = MigrationService(store, progress, reactor)
        # Queued jobs cost a progress entry each (about 300 octets); their
        # sources, openers and machines are built only when claimed.
        for jobConfig in config.jobs:
            progress.addJob(jobConfig.name)
        self.tokens = TokenSources(reactor)
        self.grants = ConnectionGrants(
            config.maxJobs, {server.name: server.limits for server in config.servers}
        )
        self.telemetry = Telemetry(reactor.seconds)
        self.telemetry.watchConnections(self.grants.connectionCounts)
        self.throttles = ThrottleRegistry(reactor, store, self.telemetry)
        self.queue = InMemoryJobQueue(config.jobs, time.monotonic)
        self.machines = JobMachines(progress, reactor, transitionRecorder(store), self.queue)
        self.rules: dict[str, FolderRules] = {job.name: job.folders for job in config.jobs}
        self.jobServers = {job.name: job.destination.server.name for job in config.jobs}
        self._censuses = itertools.count(1)
        self.inFleet = False  # then no census (L{buildService})

    def current(self) -> Config:
        """
        The configuration as last reloaded (C{stop_timeout}, C{notify}).
        """
        return self.root.config or self.config

    def buildJob(
        self,
        jobConfig: JobConfig,
        connections: JobConnections,
        store: IStateStore | None = None,
        sendDeadline: SendDeadline | None = None,
        takeover: float | None = None,
    ) -> MigrationJob:
        """
        The job C{jobConfig} configures, claimed by the scheduler with
        C{connections}; a fleet's job writes C{store} (the store's view
        for its claim), sends until C{sendDeadline}, and, taken over,
        reconciles with the quiet period less C{takeover} seconds.
        """
        reactor = self.reactor
        jobConfig = withinLimits(jobConfig)
        upload, download = throttlesFor(jobConfig, self.throttles)
        destination = jobConfig.destination
        return MigrationJob(
            jobConfig.name,
            sourceFor(jobConfig, reactor, connections, self.tokens, download),
            self.store if store is None else store,
            self.progress.job(jobConfig.name),
            destinationOpener(jobConfig, reactor, connections, self.tokens),
            reactor,
            settingsFor(jobConfig, self.current().stopTimeout),
            jobConfig.folders,
            jobConfig.identity,
            jobConfig.eightBit,
            retryPolicyFor(jobConfig),
            throttle=upload,
            sourceThrottle=download,
            defer=True,
            destination=AccountName(
                destination.server.name, destination.user, destination.server.endpoint
            ),
            sourceDescription=describeSource(jobConfig.source),
            telemetry=self.telemetry.server(destination.server.name),
            machine=self.machines.job(jobConfig.name),
            sendDeadline=sendDeadline,
            takeover=takeover,
        )

    def addScheduler(
        self,
        whenDone: Callable[[bool], None] | None,
        fleetQueue: IAsyncJobQueue | None = None,
    ) -> JobQueueService:
        """
        Add the scheduler, which runs the queued jobs (L{buildJob}): over
        the configured jobs in memory, or, given C{fleetQueue} (a fleet's
        shared queue, L{imapmig.queue.postgresql}'s C{ThreadedJobQueue}),
        as a daemon of the fleet (L{FleetScheduler}: its lease the
        configuration's C{fleet.lease}; a database whose schema is newer
        than this imapmig's stops the jobs and the daemon, which exits 2).
        """
        if fleetQueue is None:
            scheduler: JobQueueService = JobQueueService(
                self.queue,
                self.grants,
                self.buildJob,
                self.progress,
                self.reactor,
                whenDone,
                store=self.store,
                machines=self.machines,
            )
        else:
            from imapmig.queue._pgschema import SCHEMA_VERSION
            from imapmig.schedule.fleet import FleetScheduler
            from imapmig.state._pgschema import SCHEMA_VERSION as STATE_SCHEMA_VERSION

            reactor = self.reactor
            fleet = getattr(self.config, "fleet", None)

            def exitTwo() -> None:
                # As tap's exitWhenDone: the status once twistd has cleaned up.
                atexit.register(os._exit, 2)
                reactor.callWhenRunning(reactor.stop)

            self.inFleet = True
            record = transitionRecorder(self.store)
            fleetScheduler: list[FleetScheduler] = []

            def recordHeld(job: str, transition: Transition) -> None:
                # A job whose claim was lost is another daemon's: its
                # stop here would end its timeline after the new owner's.
                if not (fleetScheduler and fleetScheduler[0].lostClaim(job)):
                    record(job, transition)

            self.machines = JobMachines(self.progress, reactor, recordHeld, fleetQueue)
            fleetOne = FleetScheduler(
                fleetQueue, self.grants, self.buildJob, self.progress, reactor, whenDone,
                time.monotonic, 60.0 if fleet is None else fleet.lease,
                (socket.gethostname(), os.getpid(), __version__), exitTwo, SCHEMA_VERSION,
                store=self.store, machines=self.machines,
                stateSchemaVersion=STATE_SCHEMA_VERSION,
            )  # fmt: skip
            fleetScheduler.append(fleetOne)
            fleetOne.controls.userLists = bool(self.config.userLists)
            scheduler = fleetOne
        # Named for the log line of a stop that does not end (stopService).
        scheduler.setName("scheduler")
        scheduler.setServiceParent(self.root)
        return scheduler

    def census(self, config: Config) -> SourceCensus:
        """
        The census of the sources of C{config}'s jobs (L{censusFor}).
        """
        return censusFor(config, self.progress, self.store, self.grants, self.tokens, self.reactor)

    def countSources(self, jobs: Sequence[JobConfig]) -> None:
        """
        Count the sources of C{jobs}, which a reload added, in a census of
        their own, gone once done (not in a fleet: see L{buildService}).
        """
        if self.inFleet:
            return
        census = self.census(evolve(self.config, jobs=tuple(jobs)))
        # One per reload: named apart from the first census.
        census.name = f"census-{next(self._censuses)}"
        census.setServiceParent(self.root)
        census.whenDone().addCallback(lambda _: census.disownServiceParent())

    def addReloader(
        self, scheduler: JobQueueService, fleetQueue: IAsyncJobQueue | None = None
    ) -> None:
        """
        Give the root service its reloader (C{SIGHUP}), which changes the
        queue, grants, progress model and maps of the tree.
        """
        root = self.root
        root.reloader = ConfigReloader(
            self.config,
            lambda path: loadInThread(self.reactor, path),
            ReloadTarget(
                self.queue,
                self.grants,
                self.progress,
                scheduler,
                self.rules,
                self.jobServers,
                self.countSources,
                scheduler.controls,
                fleetQueue,
                None if fleetQueue is None else LeavingJobs(fleetQueue, self.reactor),
            ),
            running=lambda: bool(root.running),
        )

    def addWebhook(self, notify: NotifyConfig) -> None:
        """
        Add the run's watcher, which notifies C{notify}'s webhook.
        """
        # Imported here, as the status site: only a daemon that notifies
        # pays for twisted.web's client.
        from imapmig.daemon.webhook import watchRun

        jobServers = self.jobServers
        watchRun(
            self.root,
            notify,
            self.progress,
            self.reactor,
            lambda job: jobServers.get(job, ""),
            lambda: self.current().notify,
        )

    def addStatusSite(
        self, config: StatusConfig, scheduler: JobQueueService
    ) -> Callable[[], Deferred[None]]:
        """
        Add the status site's listener.

        @return: its C{whenListening}.
        """
        # Imported here: twisted.web (~30 ms) is start-up that a daemon
        # without a status page need not pay (bench/startup.py).  The
        # endpoint parser is the configuration reader's already.
        from twisted.internet.endpoints import serverFromString

        from imapmig.daemon.listener import ListenerService
        from imapmig.status.controls import ControlResource
        from imapmig.queue.fleetview import IFleetView
        from imapmig.schedule.fleet import FleetScheduler  # a fleet's daemon only
        from imapmig.status.fleet import singleDaemon
        from imapmig.status.health import HealthResource
        from imapmig.status.metrics import buildMetricsResource
        from imapmig.status.progressview import ProgressView
        from imapmig.status.resource import StatusResource, buildStatusSite
        from imapmig.status.verifyreport import REPORT_NAME

        reactor, progress, root = self.reactor, self.progress, self.root
        fleet: IFleetView = singleDaemon(progress, reactor.seconds)
        differs = None
        if isinstance(scheduler, FleetScheduler):
            from imapmig.daemon.pgstate import fleetView
            differs = scheduler.member.listDiffers
            fleet = fleetView(self.store, scheduler.member, self.config, reactor, progress) or fleet
        status = StatusResource(
            progress,
            reactor.seconds,
            self.store,
            stopping=lambda: not root.running,
            verifyReportPath=os.path.join(self.config.localDirectory, REPORT_NAME),
            rulesOf=self.rules.get,
            control=ControlResource(scheduler.controls, config.token, reactor, progress),
            metrics=buildMetricsResource(
                progress, self.telemetry, self.jobServers, config.maxJobSeries, fleet=fleet
            ),
            fleet=fleet,
            health=HealthResource(
                ProgressView(progress, reactor.seconds), self.store, lambda: not root.running,
                reactor, self.config.state.pageName(),
                getattr(self.store, "writesFailing", lambda: None),  # PostgreSQL's
            ),  # fmt: skip
            listDiffers=differs,
        )
        listener = ListenerService(
            serverFromString(reactor, config.listen),
            buildStatusSite(status, reactor, config.allowedHosts),
            config.listen,
        )
        listener.setName("status")
        listener.setServiceParent(root)
        from imapmig.status.hostcheck import warnIfRebindable

        warnIfRebindable(config)
        return listener.whenListening

