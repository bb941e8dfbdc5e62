# mypy: disallow-untyped-calls=False
# (trial's assertion methods and treq are unannotated.)
"""
Tests for the controls' configuration: C{status.token_file}, and
C{status.listen} on an C{ssl:} endpoint, served over TLS on loopback.
"""

from __future__ import annotations

import json
import os

import treq
from twisted.internet import reactor
from twisted.internet.endpoints import serverFromString
from twisted.internet.ssl import Certificate
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, BrowserLikePolicyForHTTPS

from imapmig.access import cleartext
from imapmig.config import StatusConfig, parseConfig
from imapmig.progress import MigrationProgress
from imapmig.schedule.grants import ConnectionGrants
from imapmig.queue.memory import InMemoryJobQueue
from imapmig.schedule.scheduler import JobQueueService
from imapmig.access.secrets import Secret
from imapmig.state.memory import MemoryStateStore
from imapmig.status.controls import ControlResource
from imapmig.status.resource import StatusResource, buildStatusSite
from imapmig.testing.privateserver import writeTestCertificates
from tests.test_config import ConfigTestCase, writeFile

TOKEN = "0123456789abcdef0123456789abcdef"


class StatusConfigTestCase(ConfigTestCase):
    """
    Tests of the C{status} mapping.
    """

    def withStatus(self, **status: object) -> dict[str, object]:
        """
        A valid document whose C{status} has C{status} beside its listener.
        """
        document = self.document()
        document["status"] = {"listen": "tcp:8025:interface=127.0.0.1", **status}
        return document


class TokenFileTests(StatusConfigTestCase):
    """
    C{status.token_file}.
    """

    def test_absent(self) -> None:
        """
        Without C{token_file}, no token: the controls are disabled.
        """
        loaded = parseConfig(self.withStatus(), self.configPath)
        self.assertEqual(loaded.status, StatusConfig("tcp:8025:interface=127.0.0.1"))
        assert loaded.status is not None
        self.assertIsNone(loaded.status.token)

    def test_read(self) -> None:
        """
        The token is the file's first line, whitespace stripped, relative
        to the configuration file; its C{repr} (and the configuration's)
        never shows it.
        """
        writeFile(os.path.join(self.directory, "status.token"), f"  {TOKEN} \r\nignored\n")
        loaded = parseConfig(self.withStatus(token_file="status.token"), self.configPath)
        assert loaded.status is not None
        self.assertEqual(loaded.status.token, Secret(TOKEN))
        self.assertNotIn(TOKEN, repr(loaded))
        self.assertNotIn(TOKEN, repr(loaded.status))

    def test_missing(self) -> None:
        """
        A token file that does not exist is a problem naming the field and
        the file.
        """
        path = os.path.join(self.directory, "nope.token")
        self.assertOnlyProblem(
            self.withStatus(token_file=path), "status.token_file", f"{path} does not exist"
        )

    def test_empty(self) -> None:
        """
        An empty token file, or one of whitespace only, is a problem.
        """
        empty = writeFile(os.path.join(self.directory, "empty.token"), "")
        self.assertOnlyProblem(
            self.withStatus(token_file=empty), "status.token_file", f"{empty} is empty"
        )
        blank = writeFile(os.path.join(self.directory, "blank.token"), "   \t\n")
        self.assertOnlyProblem(
            self.withStatus(token_file=blank), "status.token_file", "holds only whitespace"
        )

    def test_tooShort(self) -> None:
        """
        A token shorter than 16 characters is refused, saying how to make
        a good one.
        """
        short = writeFile(os.path.join(self.directory, "short.token"), "hunter2\n")
        self.assertOnlyProblem(
            self.withStatus(token_file=short), "status.token_file", "at least 16 are needed"
        )

    def test_private(self) -> None:
        """
        A token file its group or others may read is refused, as a
        password file is, with the fix.
        """
        for mode in (0o640, 0o604, 0o660):
            path = writeFile(os.path.join(self.directory, f"{mode:o}.token"), TOKEN, mode)
            self.assertOnlyProblem(
                self.withStatus(token_file=path),
                "status.token_file",
                f"status token file {path} is accessible to group or others",
            )

    def test_notAString(self) -> None:
        """
        C{token_file} must be a string.
        """
        problems = self.problems(self.withStatus(token_file=3))
        self.assertProblem(problems, "status.token_file", "")

    def test_sslListen(self) -> None:
        """
        C{status.listen} takes an C{ssl:} endpoint (its key and certificate
        loaded when the configuration is read): the daemon then loads
        OpenSSL (L{cleartext}); a missing key is a problem of
        C{status.listen}.
        """
        tls = os.path.join(self.directory, "tls")
        writeTestCertificates(tls)
        listen = (
            f"ssl:8443:interface=127.0.0.1:privateKey={tls}/server.key:certKey={tls}/server.pem"
        )
        document = self.withStatus(listen=listen)
        loaded = parseConfig(document, self.configPath)
        self.assertEqual(loaded.status, StatusConfig(listen))
        self.assertTrue(cleartext.configNeedsTLS(loaded))
        self.assertEqual(cleartext.tlsReason(document), "status.listen asks for TLS")
        plain = self.withStatus()
        plain["servers"] = {
            "new": {"endpoint": "tcp:mail.example.org:143", "starttls": "off", "allow_plaintext": True}
        }
        self.assertIsNone(cleartext.tlsReason(plain))
        self.assertFalse(cleartext.configNeedsTLS(parseConfig(plain, self.configPath)))
        missing = self.withStatus(
            listen=f"ssl:8443:privateKey={tls}/nope.key:certKey={tls}/server.pem"
        )
        self.assertProblem(self.problems(missing), "status.listen", "invalid endpoint")


class AllowedHostsConfigTests(StatusConfigTestCase):
    """
    C{status.allowed_hosts}.
    """

    def test_read(self) -> None:
        """
        The names are lower-cased, without a trailing dot; a leading dot
        is kept (every name under it); absent, there are none.
        """
        document = self.withStatus(allowed_hosts=["Migration.Corp.Example.", ".dash.example"])
        loaded = parseConfig(document, self.configPath)
        assert loaded.status is not None
        self.assertEqual(loaded.status.allowedHosts, ("migration.corp.example", ".dash.example"))
        loaded = parseConfig(self.withStatus(), self.configPath)
        assert loaded.status is not None
        self.assertEqual(loaded.status.allowedHosts, ())

    def test_invalid(self) -> None:
        """
        Not a list, not a string, or not a host name (a port, a scheme, a
        space): a problem naming the field, and the entry.
        """
        self.assertOnlyProblem(
            self.withStatus(allowed_hosts="a.example"), "status.allowed_hosts", "expected a list"
        )
        self.assertOnlyProblem(
            self.withStatus(allowed_hosts=["a.example", 8025]),
            "status.allowed_hosts[1]",
            "expected a host name",
        )
        for bad in ("a.example:8025", "http://a.example", "a example", "", "a..example"):
            self.assertOnlyProblem(
                self.withStatus(allowed_hosts=[bad]), "status.allowed_hosts[0]", "is not a host name"
            )


class MaxJobSeriesConfigTests(StatusConfigTestCase):
    """
    C{status.max_job_series}.
    """

    def test_read(self) -> None:
        """
        An integer from 0 (no per-job series) up; absent, 10,000.
        """
        for written in (0, 25_000):
            loaded = parseConfig(self.withStatus(max_job_series=written), self.configPath)
            assert loaded.status is not None
            self.assertEqual(loaded.status.maxJobSeries, written)
        loaded = parseConfig(self.withStatus(), self.configPath)
        assert loaded.status is not None
        self.assertEqual(loaded.status.maxJobSeries, 10_000)

    def test_invalid(self) -> None:
        """
        Not an integer, negative, or past a million: a problem naming the
        key.
        """
        for bad, problem in (
            ("many", "expected an integer"),
            (True, "expected an integer"),
            (-1, "must be between 0 and 1000000"),
            (1_000_001, "must be between 0 and 1000000"),
        ):
            self.assertOnlyProblem(
                self.withStatus(max_job_series=bad), "status.max_job_series", problem
            )


class TLSListenerTests(TestCase):
    """
    The status site with C{/control} mounted, listening on an C{ssl:}
    endpoint on loopback with the real reactor: a client fetches C{/} and
    posts a control over TLS.
    """

    async def test_servedOverTLS(self) -> None:
        """
        C{GET /} answers 200 over TLS, verified against the test CA; a
        control with the token and the site's own C{https} origin is
        allowed, and the same control over it without the token is 401.
        """
        tls = os.path.abspath(self.mktemp())
        writeTestCertificates(tls)
        listen = (
            f"ssl:0:interface=127.0.0.1:privateKey={tls}/server.key:certKey={tls}/server.pem"
        )
        progress = MigrationProgress(reactor.seconds)
        scheduler = JobQueueService(
            InMemoryJobQueue([], reactor.seconds),
            ConnectionGrants(1, {}),
            lambda config, connections: None,  # type: ignore[arg-type,return-value]
            progress,
            reactor,
            None,
        )
        root = StatusResource(
            progress,
            reactor.seconds,
            MemoryStateStore(),
            control=ControlResource(scheduler.controls, Secret(TOKEN), reactor),
        )
        site = buildStatusSite(root, reactor)
        port = await serverFromString(reactor, listen).listen(site)
        self.addCleanup(port.stopListening)
        with open(os.path.join(tls, "ca.pem"), "rb") as f:
            trustRoot = Certificate.loadPEM(f.read())
        agent = Agent(reactor, contextFactory=BrowserLikePolicyForHTTPS(trustRoot=trustRoot))
        client = treq.client.HTTPClient(agent)
        origin = f"https://localhost:{port.getHost().port}"

        response = await client.get(origin + "/")
        self.assertEqual(response.code, 200)
        await response.content()

        headers: dict[bytes | str, bytes | str] = {
            "Content-Type": "application/json",
            "Origin": origin,
            "Authorization": f"Bearer {TOKEN}",
        }
        response = await client.post(origin + "/control/pause-all", headers=headers, data=b"{}")
        self.assertEqual(response.code, 200)
        self.assertEqual(json.loads(await response.content())["jobs"], 0)
        del headers["Authorization"]
        response = await client.post(origin + "/control/pause-all", headers=headers, data=b"{}")
        self.assertEqual(response.code, 401)
        await response.content()
        # The plain-HTTP origin of the same host and port is another one.
        headers["Authorization"] = f"Bearer {TOKEN}"
        headers["Origin"] = f"http://localhost:{port.getHost().port}"
        response = await client.post(origin + "/control/pause-all", headers=headers, data=b"{}")
        self.assertEqual(response.code, 403)
        await response.content()
        # No connection is left open for the reactor to complain about.
        await agent._pool.closeCachedConnections()
