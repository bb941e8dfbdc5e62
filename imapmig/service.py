# -*- test-case-name: tests.test_service -*-
"""
Assembly: turn a L{Config} into the daemon's service tree.

    MigrationService (MultiService)
      +- JobQueueService   runs the configured jobs, in order
      +- status listener   twisted.web, reads the progress model

Endpoint strings become endpoints here, and only here.
"""

from __future__ import annotations

import re
from typing import Any, Awaitable, Callable

from twisted.application import strports
from twisted.application.service import MultiService, Service
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import clientFromString, wrapClientTLS
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from twisted.internet.ssl import (
    Certificate,
    optionsForClientTLS,
    platformTrust,
    trustRootFromCertificates,
)
from twisted.logger import Logger

from imapmig.config import (
    Config,
    EmlSourceConfig,
    ImapSourceConfig,
    JobConfig,
    MaildirSourceConfig,
    MboxSourceConfig,
    ServerConfig,
)
from imapmig.config.model import AccountConfig, TokenSourceConfig
from imapmig.imap.auth import AdminLogin, Credentials, PasswordLogin, TokenLogin
from imapmig.errors import AuthenticationFailed
from imapmig.imap.session import IMAPSession, openSession
from imapmig.imap.tls import WatchedClientTLS
from imapmig.job import JobSettings, MigrationJob, RetryPolicy
from imapmig.progress import MigrationProgress
from imapmig.schedule.throttle import DOWNLOAD, UPLOAD, Throttle, ThrottleRegistry
from imapmig.sources import IMessageSource
from imapmig.sources.eml import EmlDirectorySource
from imapmig.sources.imap import IMAPSource
from imapmig.sources.maildir import MaildirSource
from imapmig.sources.mbox import MboxSource
from imapmig.state import IStateStore
from imapmig.state.sqlite import SQLiteStateStore
from imapmig.tokens import obtainToken

log = Logger()

_PEM_CERTIFICATE = re.compile(
    rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL
)


def tlsOptionsFor(server: ServerConfig) -> IOpenSSLClientConnectionCreator:
    """
    Client TLS options for C{server}: verify its certificate against
    C{tls_ca} (or the system's trust store) and its host name; watched, so
    that a failed handshake says how (L{imapmig.imap.tls}).
    """
    if server.tlsCA is None:
        trustRoot = platformTrust()
    else:
        with open(server.tlsCA, "rb") as f:
            pem = f.read()
        trustRoot = trustRootFromCertificates(
            [Certificate.loadPEM(block) for block in _PEM_CERTIFICATE.findall(pem)]
        )
    return WatchedClientTLS(optionsForClientTLS(server.tlsHostname, trustRoot=trustRoot))


def sessionOpener(
    reactor: Any,
    server: ServerConfig,
    user: str,
    password: str | None,
    admin: str | None = None,
    oauth2: TokenSourceConfig | None = None,
) -> Callable[[], Awaitable[IMAPSession]]:
    """
    A function that opens a logged-in session to C{server} as C{user}.

    @param password: the user's password, or the admin's with C{admin};
        L{None} with C{oauth2}.
    @param admin: the admin who logs in on behalf of C{user}, if any.
    @param oauth2: where the user's access token comes from, if the login
        is XOAUTH2 or OAUTHBEARER: obtained afresh for every session, so
        a reconnecting job logs in with the current token.
    """
    fixed: Credentials | None = None
    if oauth2 is None:
        assert password is not None
        fixed = (
            PasswordLogin(user, password)
            if admin is None
            else AdminLogin(user, admin, password)
        )
    tlsOptions = tlsOptionsFor(server)
    endpoint = clientFromString(reactor, server.tcpEndpoint)
    if server.implicitTLS:
        endpoint = wrapClientTLS(tlsOptions, endpoint)
    description = f"{user} at {server.endpoint}"

    async def open() -> IMAPSession:
        credentials = fixed
        if credentials is None:
            assert oauth2 is not None
            try:
                token = await obtainToken(oauth2, reactor)
            except AuthenticationFailed as e:
                raise AuthenticationFailed(f"{description}: {e}") from None
            credentials = TokenLogin(user, token, host=server.tlsHostname)
        session = await openSession(
            endpoint,
            reactor,
            description=description,
            credentials=credentials,
            starttls=server.starttls,
            tlsOptions=tlsOptions,
            timeout=server.timeout,
            compress=server.compress,
            namespaceOverride=server.namespace,
        )
        return session

    return open


def accountOpener(account: AccountConfig, reactor: Any) -> Callable[[], Awaitable[IMAPSession]]:
    """
    Opens a logged-in session to C{account} with its credential.
    """
    return sessionOpener(
        reactor,
        account.server,
        account.user,
        None if account.password is None else account.password.value,
        account.admin,
        account.oauth2,
    )


def destinationOpener(job: JobConfig, reactor: Any) -> Callable[[], Awaitable[IMAPSession]]:
    """
    Opens a logged-in session to a job's destination account (as its user,
    as the admin on its behalf, or with its access token).
    """
    return accountOpener(job.destination, reactor)


def sourceFor(
    job: JobConfig, reactor: Any, throttle: Throttle | None = None
) -> IMessageSource:
    """
    The source a job's configuration names.

    @param reactor: the reactor a network source connects with.
    @param throttle: an IMAP source's rates (L{throttlesFor}).
    """
    source = job.source
    if isinstance(source, MaildirSourceConfig):
        return MaildirSource(source.path)
    if isinstance(source, MboxSourceConfig):
        return MboxSource(source.path, source.quoting)
    if isinstance(source, ImapSourceConfig):
        return IMAPSource(
            accountOpener(source, reactor),
            description=f"{source.user} at {source.server.endpoint}",
            connections=job.connections,
            include=job.folders.include,
            throttle=throttle,
        )
    assert isinstance(source, EmlSourceConfig)
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
        windowMessages=pipeline.windowMessages,
        windowBytes=pipeline.windowBytes,
        stopTimeout=stopTimeout,
        folderNameFallback=job.folderNameFallback,
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


class JobQueueService(Service):
    """
    Runs the configured jobs one after another, then calls C{whenDone}
    with C{True} if every job completed.
    """

    def __init__(
        self,
        jobs: list[MigrationJob],
        whenDone: Callable[[bool], None] | None,
    ) -> None:
        self._jobs = jobs
        self._whenDone = whenDone
        self._current: MigrationJob | None = None
        self._running: Deferred[None] | None = None

    def startService(self) -> None:
        Service.startService(self)
        self._running = Deferred.fromCoroutine(self._runAll())

    async def _runAll(self) -> None:
        allCompleted = True
        for job in self._jobs:
            if not self.running:
                break
            self._current = job
            try:
                completed = await job.run()
            except Exception:
                # A bug of ours: the queue goes on, and the daemon still
                # exits when told to.
                log.failure("Job {job} crashed", job=job.name)
                completed = False
            allCompleted = allCompleted and completed
        self._current = None
        log.info(
            "Job queue drained: {count} jobs, {outcome}",
            count=len(self._jobs),
            outcome="all completed" if allCompleted else "some failed",
        )
        if self._whenDone is not None and self.running:
            self._whenDone(allCompleted)

    def stopService(self) -> Deferred[None] | None:
        Service.stopService(self)
        if self._current is not None:
            self._current.stop()
        return self._running


class MigrationService(MultiService):
    """
    The daemon: the job queue, the status listener, and the state store
    they share (closed when the service stops).
    """

    def __init__(self, store: IStateStore, progress: MigrationProgress) -> None:
        MultiService.__init__(self)
        self.store = store
        self.progress = progress

    def stopService(self) -> Deferred[None]:
        d: Deferred[None] = MultiService.stopService(self)

        def closeStore(result: object) -> object:
            self.store.close()
            return result

        d.addBoth(closeStore)
        return d


def buildService(
    config: Config,
    reactor: Any,
    whenDone: Callable[[bool], None] | None = None,
    store: IStateStore | None = None,
) -> MigrationService:
    """
    Assemble the daemon from C{config}.

    @param reactor: provides the clock, TCP connections and listening.
    @param whenDone: called with whether every job completed once the
        queue is drained; L{None} keeps the daemon serving status.
    @param store: the state store; by default the SQLite file the
        configuration names.
    """
    if store is None:
        store = SQLiteStateStore(config.statePath, seconds=reactor.seconds)
    progress = MigrationProgress(reactor.seconds)
    root = MigrationService(store, progress)
    throttles = ThrottleRegistry(reactor, store)
    jobs = []
    for jobConfig in config.jobs:
        upload, download = throttlesFor(jobConfig, throttles)
        jobs.append(
            MigrationJob(
                jobConfig.name,
                sourceFor(jobConfig, reactor, download),
                store,
                progress.addJob(jobConfig.name),
                destinationOpener(jobConfig, reactor),
                reactor,
                settingsFor(jobConfig, config.stopTimeout),
                jobConfig.folders,
                jobConfig.identity,
                jobConfig.eightBit,
                retryPolicyFor(jobConfig),
                throttle=upload,
                sourceThrottle=download,
            )
        )
    JobQueueService(jobs, whenDone).setServiceParent(root)
    if config.status is not None:
        # Imported here: twisted.web costs ~30 ms of start-up that a daemon
        # without a status page need not pay (bench/startup.py).
        from imapmig.status.resource import buildStatusSite

        listener = strports.service(
            config.status.listen, buildStatusSite(progress, reactor), reactor=reactor
        )
        listener.setName("status")
        listener.setServiceParent(root)
    return root
