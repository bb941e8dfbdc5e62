# -*- test-case-name: tests.test_testing_dovecot -*-
"""
Tests for L{imapmig.testing.dovecot}: the private Dovecot the integration
tests, the demo and the benchmark rely on.
"""

from __future__ import annotations

import hashlib
import imaplib
import io
import os
import signal
import socket
import ssl
import stat
import subprocess
import sys
from datetime import datetime, timezone

import yaml
from twisted.trial.unittest import SkipTest, SynchronousTestCase

import imapmig
from imapmig.errors import DovecotNotFound, DovecotStartFailed
from imapmig.testing import dovecot
from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import (
    DovecotInstance,
    requireDovecot,
)
from imapmig.testing.accounts import FetchedMessage
from tests.processwatch import LineReader, ProcessWatch, defaultSignals, descendants
from tests.support import sourceTreeEnvironment
from tests.support import daemonCommand

_HIDDEN = "IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE IDLE LITERAL- UIDPLUS"


def _notInstalled() -> str:
    raise DovecotNotFound("not here")


class RequireDovecotTests(SynchronousTestCase):
    """
    L{requireDovecot} skips loudly, or fails on CI, when Dovecot is missing.
    """

    def setUp(self) -> None:
        self.patch(dovecot, "findDovecot", _notInstalled)
        self.stderr = io.StringIO()
        self.patch(sys, "stderr", self.stderr)

    def test_skipsLoudly(self) -> None:
        """
        Outside CI a missing Dovecot skips the test and says so on stderr.
        """
        self.patch(os, "environ", {})
        self.assertRaises(SkipTest, requireDovecot, self)
        self.assertIn("*** SKIPPING real-Dovecot tests", self.stderr.getvalue())

    def test_failsOnCI(self) -> None:
        """
        With C{CI=true} a missing Dovecot fails the test instead.
        """
        self.patch(os, "environ", {"CI": "true"})
        self.assertRaises(self.failureException, requireDovecot, self)
        self.assertRaises(AssertionError, requireDovecot)

    def test_found(self) -> None:
        """
        When Dovecot is installed its path is returned.
        """
        self.patch(dovecot, "findDovecot", lambda: "/usr/sbin/dovecot")
        self.assertEqual(requireDovecot(self), "/usr/sbin/dovecot")


class DovecotInstanceTests(SynchronousTestCase):
    """
    A real private Dovecot on loopback.
    """

    def setUp(self) -> None:
        requireDovecot(self)

    def startInstance(
        self, *, capabilities: str | None = None, separator: str = "."
    ) -> DovecotInstance:
        """
        Start an instance in a fresh directory, stopped at cleanup.
        """
        instance = DovecotInstance(
            self.mktemp(), capabilities=capabilities, separator=separator
        )
        instance.start()
        self.addCleanup(instance.stop)
        return instance

    def test_plainStartTLSAndImplicitTLS(self) -> None:
        """
        LOGIN works on the plain port, STARTTLS verifies against the private
        CA, and the implicit-TLS port verifies for host name C{localhost}.
        """
        instance = self.startInstance()
        context = ssl.create_default_context(cafile=instance.caCertificatePath)

        client = imaplib.IMAP4("127.0.0.1", instance.port)
        self.assertIn("STARTTLS", client.capabilities)
        client.starttls(context)
        self.assertIsInstance(client.sock, ssl.SSLSocket)
        self.assertEqual(client.login("alice", "alice-pw")[0], "OK")
        client.logout()

        with socket.create_connection(("127.0.0.1", instance.tlsPort)) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                self.assertTrue(tls.recv(1024).startswith(b"* OK"))

        with socket.create_connection(("127.0.0.1", instance.tlsPort)) as raw:
            self.assertRaises(
                ssl.SSLCertVerificationError,
                ssl.create_default_context().wrap_socket,
                raw,
                server_hostname="localhost",
            )

    def test_appendAndFetchAll(self) -> None:
        """
        A message APPENDed with imaplib comes back from L{fetchAll} with its
        flags (without C{\\Recent}), internal date and exact bytes.
        """
        instance = self.startInstance()
        body = b"From: a@example.com\r\nSubject: hello\r\n\r\n\xc3\xa9t\xc3\xa9\r\n"
        client = imaplib.IMAP4("127.0.0.1", instance.port)
        client.login("bob", "bob-pw")
        client.create('"Gr&APwA3w-e"')
        typ, _ = client.append(
            '"Gr&APwA3w-e"', "(\\Seen \\Flagged)", '"02-Jan-2019 03:04:05 +0000"', body
        )
        self.assertEqual(typ, "OK")
        client.logout()
        self.assertEqual(
            instance.fetchAll("bob"),
            {
                "INBOX": [],
                "Grüße": [
                    FetchedMessage(
                        flags=("\\Flagged", "\\Seen"),
                        internalDate=datetime(2019, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
                        body=body,
                    )
                ],
            },
        )

    def test_corpusThroughDovecot(self) -> None:
        """
        A generated Maildir written into a user's home is read by Dovecot as
        the corpus describes it: same bodies (CRLF), flags (in the same
        order) and dates.
        """
        instance = self.startInstance(separator="/")
        corpus = writeMaildir(
            instance.maildirPath("alice"), 60, seed=3, profile="small"
        )
        instance.chownHome("alice")
        fetched = instance.fetchAll("alice")
        for folder in corpus.folders:
            expected = sorted(
                (m.sha256, m.flags, m.internalDate)
                for m in corpus.inFolder(folder)
            )
            got = sorted(
                (hashlib.sha256(m.body).hexdigest(), m.flags, m.internalDate)
                for m in fetched["/".join(folder)]
            )
            self.assertEqual(got, expected)

    def test_capabilitiesOverride(self) -> None:
        """
        C{capabilities} is exactly what the server advertises after login;
        before login Dovecot adds STARTTLS and its AUTH= mechanisms.
        """
        instance = self.startInstance(capabilities=_HIDDEN)
        client = imaplib.IMAP4("127.0.0.1", instance.port)
        self.assertEqual(
            set(client.capabilities),
            set(_HIDDEN.upper().split()) | {"STARTTLS", "AUTH=PLAIN", "AUTH=LOGIN"},
        )
        client.login("alice", "alice-pw")
        typ, data = client.capability()
        client.logout()
        self.assertEqual(typ, "OK")
        self.assertEqual(data[-1], _HIDDEN.encode("ascii"))

    def test_slashSeparator(self) -> None:
        """
        With C{separator="/"} LIST shows C{/} as the delimiter, while the
        Maildir++ directory on disk still uses dots.
        """
        instance = self.startInstance(separator="/")
        client = imaplib.IMAP4("127.0.0.1", instance.port)
        client.login("alice", "alice-pw")
        self.assertEqual(client.create('"Archive/2019"')[0], "OK")
        client.logout()
        mailboxes = instance.listMailboxes("alice")
        self.assertEqual({delimiter for _, delimiter, _ in mailboxes}, {"/"})
        self.assertEqual(
            {name for _, _, name in mailboxes}, {"INBOX", "Archive", "Archive/2019"}
        )
        attributes = {name: attrs for attrs, _, name in mailboxes}
        self.assertIn("\\Archive", attributes["Archive"])
        self.assertTrue(
            os.path.isdir(os.path.join(instance.maildirPath("alice"), ".Archive.2019"))
        )

    def test_inboxPrefix(self) -> None:
        """
        With C{inboxPrefix="INBOX."} NAMESPACE shows C{(("INBOX." "."))},
        a folder outside the prefix is refused with Dovecot's
        "nonexistent namespace" reply, and one under it is created (on disk
        the same Maildir++ directory as without the prefix) and keeps its
        special-use attribute.
        """
        instance = DovecotInstance(self.mktemp(), inboxPrefix="INBOX.")
        instance.start()
        self.addCleanup(instance.stop)
        client = imaplib.IMAP4("127.0.0.1", instance.port)
        try:
            client.login("alice", "alice-pw")
            self.assertEqual(client.namespace(), ("OK", [b'(("INBOX." ".")) NIL NIL']))
            typ, data = client.create("Sent")
            self.assertEqual(typ, "NO")
            self.assertIn(b"Client tried to access nonexistent namespace", data[0])
            self.assertEqual(client.create("INBOX.Sent.2019")[0], "OK")
        finally:
            client.logout()
        attributes = {name: attrs for attrs, _, name in instance.listMailboxes("alice")}
        self.assertEqual(set(attributes), {"INBOX", "INBOX.Sent", "INBOX.Sent.2019"})
        self.assertIn("\\Sent", attributes["INBOX.Sent"])
        self.assertTrue(
            os.path.isdir(os.path.join(instance.maildirPath("alice"), ".Sent.2019"))
        )

    def test_inboxPrefixMatchesSeparator(self) -> None:
        """
        The prefix can only be C{INBOX} followed by the separator.
        """
        self.assertRaises(ValueError, DovecotInstance, "x", inboxPrefix="INBOX/")
        self.assertRaises(ValueError, DovecotInstance, "x", separator="/", inboxPrefix="INBOX.")
        self.assertRaises(ValueError, DovecotInstance, "x", inboxPrefix="Mail.")

    def test_stop(self) -> None:
        """
        L{DovecotInstance.stop} ends the master process and closes the
        ports; calling it again does nothing.
        """
        instance = self.startInstance()
        pid = instance.pid
        assert pid is not None
        instance.stop()
        self.assertIsNone(instance.pid)
        self.assertRaises(ProcessLookupError, os.kill, pid, 0)
        self.assertRaises(
            ConnectionRefusedError, socket.create_connection, ("127.0.0.1", instance.port)
        )
        instance.stop()

    def test_addressAndCommandPrefix(self) -> None:
        """
        With C{address} and C{commandPrefix} (as the benchmark runs it in a
        network namespace), Dovecot and the probe of its greeting run
        through the prefix, the listeners bind that address only, and
        L{DovecotInstance.stop} ends the process the prefix became.
        """
        base = self.mktemp()
        os.makedirs(base)
        calls = os.path.join(base, "calls")
        prefix = os.path.join(base, "prefix")
        with open(prefix, "w") as f:
            f.write(f'#!/bin/sh\necho "$1" >> {calls}\nexec "$@"\n')
        os.chmod(prefix, 0o755)
        instance = DovecotInstance(
            os.path.join(base, "dovecot"), address="127.0.0.2", commandPrefix=[prefix]
        )
        instance.start()
        self.addCleanup(instance.stop)

        with open(calls) as f:
            programs = f.read().split()
        # Dovecot once, and the probe once or more (it retries until the
        # greeting comes); in whatever order their shells got to run: a
        # probe may well log before Dovecot does.
        self.assertEqual(programs.count(dovecot.findDovecot()), 1, programs)
        self.assertEqual(set(programs), {dovecot.findDovecot(), sys.executable}, programs)
        client = instance.imapClient("alice")
        self.assertEqual(client.noop()[0], "OK")
        client.logout()
        self.assertRaises(
            ConnectionRefusedError, socket.create_connection, ("127.0.0.1", instance.port)
        )
        pid = instance.pid
        assert pid is not None
        instance.stop()
        self.assertRaises(ProcessLookupError, os.kill, pid, 0)

    def test_startFailureShowsLog(self) -> None:
        """
        When Dovecot refuses its configuration, L{start} raises
        L{DovecotStartFailed} carrying Dovecot's complaint.
        """
        instance = DovecotInstance(self.mktemp())
        self.addCleanup(instance.stop)
        writeConfig = instance._writeConfig

        def brokenConfig() -> None:
            writeConfig()
            with open(instance._configPath, "a") as f:
                f.write("no_such_setting_here = 1\n")

        self.patch(instance, "_writeConfig", brokenConfig)
        error = self.assertRaises(DovecotStartFailed, instance.start)
        self.assertIn("no_such_setting_here", str(error))
        self.assertIsNone(instance.pid)


class FixedPortTests(SynchronousTestCase):
    """
    L{DovecotInstance} listens on the plain port it is given.
    """

    def test_port(self) -> None:
        """
        With C{port=P}, the plain IMAP port is P and the implicit-TLS port
        another one; L{DovecotInstance.wait} returns once it is stopped.
        """
        requireDovecot(self)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            wanted = s.getsockname()[1]
        instance = DovecotInstance(self.mktemp(), port=wanted)
        self.addCleanup(instance.stop)
        instance.start()
        self.assertEqual(instance.port, wanted)
        self.assertNotEqual(instance.tlsPort, wanted)
        client = instance.imapClient("alice")
        self.assertEqual(client.noop()[0], "OK")
        client.logout()
        assert instance.pid is not None
        os.kill(instance.pid, signal.SIGTERM)
        self.assertEqual(instance.wait(), 0)


class LocalServerTests(SynchronousTestCase):
    """
    C{python -m imapmig.testing.dovecot}: a private Dovecot with seeded
    accounts and a ready configuration, until a stop signal.
    """

    def setUp(self) -> None:
        requireDovecot(self)

    def start(self, *arguments: str) -> tuple[subprocess.Popen[bytes], LineReader, str]:
        """
        Start it with C{arguments}; wait until it serves.

        @return: the process, its console, and the configuration's path.
        """
        process = subprocess.Popen(
            [sys.executable, "-m", "imapmig.testing.dovecot", *arguments],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=sourceTreeEnvironment(),
            cwd=self.workingDirectory(),
            preexec_fn=defaultSignals,
        )

        def cleanUp() -> None:
            if process.poll() is None:
                process.kill()
                process.wait()
            assert process.stdout is not None
            process.stdout.close()

        self.addCleanup(cleanUp)
        console = LineReader(process)
        configPath = console.until("== Configuration: ").split(": ", 1)[1]
        console.until("== Serving until")
        return process, console, configPath

    def workingDirectory(self) -> str:
        """
        A new directory to run it from, so that nothing lands in trial's.
        """
        path: str = os.path.abspath(self.mktemp())
        os.makedirs(path)
        return path

    def stop(self, process: subprocess.Popen[bytes], console: LineReader) -> str:
        """
        Send C{SIGTERM}; check that it exits 0 and that Dovecot (and every
        process it started) is gone.

        @return: the whole console.
        """
        watch = ProcessWatch(descendants(process.pid))
        self.addCleanup(watch.killRemaining)
        self.assertTrue(len(watch) > 0)
        process.send_signal(signal.SIGTERM)
        text = console.rest()
        self.assertEqual(process.wait(60), 0, text)
        self.assertEqual(watch.remaining(30), [], text)
        self.assertIn("== Stopped by SIGTERM", text)
        return text

    def test_readyConfiguration(self) -> None:
        """
        The configuration it prints passes C{imapmig-daemon --check-config};
        the daemon then migrates each seeded source account into its empty
        destination; C{SIGTERM} stops Dovecot and removes the temporary
        directory it made.
        """
        process, console, configPath = self.start("--users", "2", "--messages", "12")
        text = "\n".join(console.lines)
        self.assertIn("state:", text)
        with open(configPath) as f:
            config = yaml.safe_load(f)
        self.assertEqual(stat.S_IMODE(os.stat(configPath).st_mode), 0o600)
        self.assertEqual([job["name"] for job in config["jobs"]], ["source1", "source2"])
        daemon = daemonCommand(configPath)
        checked = subprocess.run(
            [*daemon, "--check-config"], capture_output=True, env=sourceTreeEnvironment(),
            timeout=60,
        )  # fmt: skip
        self.assertEqual(checked.returncode, 0, checked.stderr)
        self.assertIn(b"configuration OK: 2 jobs, 1 server", checked.stdout)
        # The status port it names (8025 when it was free) may be taken
        # since by a test beside this one (the demo's): the run listens
        # on a port the kernel picks.
        config["status"]["listen"] = "tcp:0:interface=127.0.0.1"
        with open(configPath, "w") as f:
            yaml.safe_dump(config, f)
        ran = subprocess.run(
            [*daemon, "--exit-when-done"], capture_output=True, env=sourceTreeEnvironment(),
            timeout=120,
        )  # fmt: skip
        self.assertEqual(ran.returncode, 0, ran.stdout[-4000:])
        # Both start lines name imapmig's version.
        version = imapmig.__version__.encode("ascii")
        self.assertIn(b"imapmig " + version + b" (python ", ran.stdout)
        self.assertIn(b"imapmig " + version + b": configuration ", ran.stdout)
        # imapmig verify, run from elsewhere, writes its report beside the
        # state database; --report writes it where it says.
        elsewhere = self.workingDirectory()
        verify = [sys.executable, "-m", "imapmig.cli", "verify", "--config", configPath]
        verified = subprocess.run(
            verify, capture_output=True, env=sourceTreeEnvironment(), cwd=elsewhere, timeout=120
        )
        self.assertEqual(verified.returncode, 0, verified.stdout + verified.stderr)
        beside = os.path.join(os.path.dirname(config["state"]), "imapmig-verify.json")
        self.assertIn(f"report written to {beside}".encode(), verified.stdout)
        self.assertIn(b": 0 differences", verified.stdout)
        self.assertTrue(os.path.exists(beside))
        self.assertEqual(os.listdir(elsewhere), [])
        verified = subprocess.run(
            [*verify, "--report", "r.json"], capture_output=True, env=sourceTreeEnvironment(),
            cwd=elsewhere, timeout=120,
        )  # fmt: skip
        self.assertEqual(verified.returncode, 0, verified.stdout + verified.stderr)
        self.assertEqual(os.listdir(elsewhere), ["r.json"])
        port = int(config["servers"]["local"]["endpoint"].rsplit(":", 1)[1])
        for job in config["jobs"]:
            counts = []
            for side in ("source", "destination"):
                with open(job[side]["password_file"]) as f:
                    password = f.read().strip()
                client = imaplib.IMAP4("127.0.0.1", port)
                client.login(job[side]["user"], password)
                typ, data = client.select("INBOX", readonly=True)
                counts.append(int(data[0] or b"0"))
                client.logout()
            self.assertEqual(counts[0], counts[1], job["name"])
            self.assertGreater(counts[0], 0, job["name"])
        self.stop(process, console)
        self.assertFalse(os.path.exists(os.path.dirname(configPath)))

    def test_directoryAndPort(self) -> None:
        """
        With C{--dir} and C{--port} it uses that port and keeps the
        directory after C{SIGTERM}.
        """
        directory = os.path.abspath(self.mktemp())
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        process, console, configPath = self.start(
            "--dir", directory, "--port", str(port), "--messages", "3"
        )
        self.assertEqual(configPath, os.path.join(directory, "imapmig.yaml"))
        with open(configPath) as f:
            config = yaml.safe_load(f)
        self.assertEqual(config["servers"]["local"]["endpoint"], f"tcp:127.0.0.1:{port}")
        self.stop(process, console)
        self.assertTrue(os.path.exists(configPath))
