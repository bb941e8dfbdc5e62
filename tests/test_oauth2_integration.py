# -*- test-case-name: tests.test_oauth2_integration -*-
"""
Integration tests of OAuth 2.0 logins with the refresh grant: the daemon,
on the real reactor, obtains access tokens from the test authorization
server (L{imapmig.testing.oauth2}, served by this reactor) and logs in
with XOAUTH2 or OAUTHBEARER to a private Dovecot whose C{oauth2} passdb
asks that server's introspection endpoint about every token.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Iterable

from twisted.internet import reactor as _globalReactor
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from imapmig.config import Config, parseConfig
from imapmig.config.model import TokenRefreshConfig
from imapmig.progress import JobProgress, JobState
from imapmig.testing.corpus import Corpus, writeMaildir
from imapmig.testing.dovecot import (
    DovecotInstance,
    DovecotUser,
    requireDovecot,
)
from imapmig.testing.privateserver import writeTestCertificates
from imapmig.testing.faultproxy import FaultProxy
from imapmig.testing.faults import Direction, Fault, Reset
from imapmig.testing.oauth2 import OAuth2Provider, OAuth2Server
from imapmig.errors import TokenRefreshRefused
from imapmig.oauth.tokenrefresh import IssuedToken, RefreshGrantClient, agentFor
from tests.support import (
    _rootDirectory,
    corpusView,
    fetchedView,
    newDirectory,
    runDaemon,
    settleConnections,
    writePasswordFile,
)

# Only integration tests use the global reactor: they run the daemon for real.
reactor: Any = _globalReactor

JOB = "job"
USER = DovecotUser("user01", "password-01")
CLIENT_ID = "imapmig-integration"
CLIENT_SECRET = "client-secret-of-the-test"


class OAuth2RefreshTests(TestCase):
    """
    A job whose destination logs in with tokens from a token endpoint.
    """

    def startProvider(self, **settings: Any) -> OAuth2Server:
        """
        An authorization server on loopback in this reactor, stopped when
        the test ends.
        """
        provider = OAuth2Provider(
            reactor.seconds, clientId=CLIENT_ID, clientSecret=CLIENT_SECRET, **settings
        )
        server = OAuth2Server(reactor, provider)
        server.listen()
        self.addCleanup(lambda: Deferred.fromCoroutine(server.stop()))
        return server

    def startDovecot(self, server: OAuth2Server, mechanisms: Iterable[str] = ("oauthbearer", "xoauth2")) -> DovecotInstance:
        """
        A Dovecot of this test's own whose C{oauth2} passdb asks C{server},
        offering C{mechanisms}; stopped when the test ends.
        """
        requireDovecot(self)
        instance = DovecotInstance(
            tempfile.mkdtemp(prefix="oauth2-", dir=_rootDirectory()),
            users=[USER],
            oauth2Introspection=server.url("introspect"),
            oauth2Mechanisms=tuple(mechanisms),
        )
        self.addCleanup(instance.stop)
        instance.start()
        return instance

    def configure(
        self, server: OAuth2Server, port: int, messages: int, **job: object
    ) -> tuple[Config, Corpus, str]:
        """
        One job migrating a new Maildir of C{messages} messages into
        C{user01}'s account at C{port} on loopback, with a refresh token
        of C{user01} in a file (mode 0600) and the client's secret in
        another.

        @return: the configuration, the corpus, and the refresh token
            file's path.
        """
        directory = newDirectory(self)
        maildir = os.path.join(directory, "Maildir")
        corpus = writeMaildir(maildir, messages, profile="small")
        refreshFile = writePasswordFile(
            os.path.join(directory, "user01.refresh"), server.provider.addRefreshToken(USER.name)
        )
        secretFile = writePasswordFile(os.path.join(directory, "client.secret"), CLIENT_SECRET)
        document = {
            "state": os.path.join(directory, "state.sqlite"),
            "status": "off",
            "servers": {
                "dovecot": {"endpoint": f"tcp:127.0.0.1:{port}", "starttls": "off", "compress": "off"}
            },
            "jobs": [
                {
                    "name": JOB,
                    "source": {"maildir": maildir},
                    "destination": {
                        "server": "dovecot",
                        "user": USER.name,
                        "oauth2": {
                            "token_endpoint": server.url("token"),
                            "client_id": CLIENT_ID,
                            "client_secret_file": secretFile,
                            "refresh_token_file": refreshFile,
                            "scope": "imap",
                            "timeout": 10,
                        },
                    },
                    **job,
                }
            ],
        }
        return parseConfig(document, os.path.join(directory, "imapmig.yaml")), corpus, refreshFile

    async def proxy(self, instance: DovecotInstance, faults: Iterable[Fault]) -> tuple[FaultProxy, int]:
        """
        A fault proxy to C{instance}, stopped when the test ends, and its
        port.
        """
        proxy = FaultProxy(reactor, reactor, "127.0.0.1", instance.port, faults)
        port = await proxy.listen()
        self.addCleanup(lambda: Deferred.fromCoroutine(proxy.stop()))
        return proxy, port

    def assertExact(self, instance: DovecotInstance, corpus: Corpus, progress: JobProgress) -> None:
        """
        The job completed and the account holds every message once, with
        its flags and date.
        """
        self.assertEqual(
            (progress.state, progress.messagesDone, progress.messagesFailed, progress.error),
            (JobState.DONE, len(corpus.messages), 0, None),
        )
        self.assertEqual(fetchedView(instance.fetchAll(USER.name)), corpusView(corpus.messages))

    def dovecotLog(self, instance: DovecotInstance) -> str:
        with open(os.path.join(instance.baseDir, "dovecot.log"), encoding="utf-8", errors="replace") as f:
            return f.read()

    async def migrateWith(self, mechanisms: tuple[str, ...], method: str) -> None:
        server = self.startProvider()
        instance = self.startDovecot(server, mechanisms)
        config, corpus, refreshFile = self.configure(server, instance.port, 30)
        with open(refreshFile) as f:
            firstRefreshToken = f.read()

        completed, progress = await runDaemon(reactor, config)
        self.assertTrue(completed, progress[JOB].error)
        # Read before assertExact logs in with the password to look.
        log = self.dovecotLog(instance)
        self.assertIn(f"Login: user=<{USER.name}>, method={method}", log)
        self.assertNotIn("method=PLAIN", log)
        self.assertExact(instance, corpus, progress[JOB])
        # One token for every session of the run; the rotated refresh
        # token is in the file for the next start.
        counts = server.provider.counts
        self.assertEqual((counts.refreshesGranted, counts.refreshesRefused, counts.inactive), (1, 0, 0))
        with open(refreshFile) as f:
            stored = f.read()
        self.assertNotEqual(stored, firstRefreshToken)
        self.assertTrue(stored.startswith("rt-"))
        self.assertEqual(os.stat(refreshFile).st_mode & 0o777, 0o600)

    async def test_oauthBearer(self) -> None:
        """
        With both mechanisms offered, the daemon logs in with OAUTHBEARER
        and a token from the endpoint, and migrates a Maildir exactly.
        """
        await self.migrateWith(("oauthbearer", "xoauth2"), "OAUTHBEARER")

    async def test_xoauth2(self) -> None:
        """
        Where only XOAUTH2 is offered (as Microsoft 365 does), the daemon
        logs in with it and migrates a Maildir exactly.
        """
        await self.migrateWith(("xoauth2",), "XOAUTH2")

    async def reconnectingRun(self, **provider: Any) -> tuple[OAuth2Server, FaultProxy]:
        """
        Migrate 300 messages over one connection that the proxy resets
        twice, a third and two thirds of the way, so the job logs in three
        times, each more than a second after the one before (its retry
        waits at least one second); assert the account exact.
        """
        server = self.startProvider(**provider)
        instance = self.startDovecot(server)
        messages = 300
        directory = newDirectory(self)
        sizes = writeMaildir(os.path.join(directory, "probe"), messages, profile="small")
        total = sum(m.size for m in sizes.messages)
        proxy, port = await self.proxy(instance, [Reset(Direction.TO_SERVER, total // 3, times=2)])
        config, corpus, _ = self.configure(server, port, messages, connections=1)

        completed, progress = await runDaemon(reactor, config, timeout=90)
        self.assertTrue(completed, progress[JOB].error)
        self.assertEqual(len(proxy.fired), 2)
        self.assertExact(instance, corpus, progress[JOB])
        return server, proxy

    async def test_expiresMidRun(self) -> None:
        """
        Tokens said to live one second are renewed by the daemon before
        they expire: after each reconnection it logs in with a new token
        (three refreshes at least), the server never sees an expired one,
        and every message arrives once.  (The server honours each token
        three seconds, so that a slow machine cannot make a login that
        started in time arrive late; imapmig goes by the one second.)
        """
        server, proxy = await self.reconnectingRun(lifetime=3.0, reportedLifetime=1.0)
        counts = server.provider.counts
        self.assertGreaterEqual(counts.refreshesGranted, 3)
        self.assertEqual((counts.refreshesRefused, counts.inactive), (0, 0))

    async def test_refusedMidRun(self) -> None:
        """
        Tokens said to live an hour but dead after a second (revoked, as
        far as the daemon can tell): after a reconnection the server
        refuses the cached token, and the daemon obtains a new one and
        logs in again, without failing the job.
        """
        server, proxy = await self.reconnectingRun(lifetime=1.0, reportedLifetime=3600)
        counts = server.provider.counts
        self.assertGreaterEqual(counts.inactive, 1)
        self.assertGreaterEqual(counts.refreshesGranted, 1 + counts.inactive)
        self.assertEqual(counts.refreshesRefused, 0)

    async def test_revokedRefreshToken(self) -> None:
        """
        A revoked refresh token fails the job permanently (nothing is
        appended, one request to the endpoint) with a message naming the
        account, the endpoint and the OAuth error, and no token.
        """
        server = self.startProvider()
        instance = self.startDovecot(server)
        config, corpus, refreshFile = self.configure(server, instance.port, 5)
        with open(refreshFile) as f:
            refreshToken = f.read().strip()
        server.provider.revokeRefreshTokens()

        completed, progress = await runDaemon(reactor, config)
        self.assertFalse(completed)
        job = progress[JOB]
        self.assertEqual((job.state, job.messagesDone), (JobState.FAILED, 0))
        error = job.error or ""
        self.assertIn(f"{USER.name} at tcp:127.0.0.1:{instance.port}", error)
        self.assertIn(f"token endpoint {server.url('token')}", error)
        self.assertIn("invalid_grant (refresh token revoked or unknown)", error)
        self.assertNotIn(refreshToken, error)
        self.assertEqual(server.provider.counts.refreshRequests, 1)


class TokenEndpointTLSTests(TestCase):
    """
    The refresh grant over https, on the real reactor: the endpoint's
    certificate is verified.
    """

    async def refreshOver(self, trusted: bool) -> IssuedToken:
        tlsDirectory = os.path.join(newDirectory(self), "tls")
        writeTestCertificates(tlsDirectory)
        provider = OAuth2Provider(reactor.seconds)
        server = OAuth2Server(reactor, provider)
        server.listen(tlsDirectory)
        self.addCleanup(lambda: Deferred.fromCoroutine(server.stop()))
        config = TokenRefreshConfig(
            server.url("token"),
            provider.clientId,
            None,
            "/nonexistent",
            timeout=10,
            tlsCA=os.path.join(tlsDirectory, "ca.pem") if trusted else None,
        )
        client = RefreshGrantClient(config, agentFor(config, reactor), reactor, "alice")
        try:
            return await client.refresh(provider.addRefreshToken("alice"))
        finally:
            await settleConnections(reactor)

    async def test_privateCA(self) -> None:
        """
        With C{tls_ca} naming the CA that signed the endpoint's
        certificate, the refresh succeeds over https.
        """
        issued = await self.refreshOver(trusted=True)
        self.assertTrue(issued.accessToken.startswith("at-"))

    async def test_untrusted(self) -> None:
        """
        A certificate the system trust store does not vouch for fails the
        refresh permanently, saying so.
        """
        with self.assertRaises(TokenRefreshRefused) as caught:
            await self.refreshOver(trusted=False)
        self.assertIn("TLS failed", str(caught.exception))
        self.assertIn("certificate verify failed", str(caught.exception))
