# -*- test-case-name: tests.test_cleartext -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.access.cleartext}: a daemon whose configuration uses no TLS
runs without loading OpenSSL, and one that uses TLS loads it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from attrs import evolve
from twisted.trial.unittest import SynchronousTestCase

from imapmig.access import cleartext
from imapmig.config import StatusConfig, loadConfig

_TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _plainDocument() -> dict[str, Any]:
    """
    A configuration document that uses no TLS: one server over plain TCP
    with C{starttls: off}, the status page on plain TCP.
    """
    return {
        "state": "state.sqlite",
        "status": {"listen": "tcp:8025:interface=127.0.0.1"},
        "servers": {"s": {"endpoint": "tcp:127.0.0.1:1143", "starttls": False}},
        "jobs": [
            {
                "name": "j",
                "source": {"maildir": "Maildir"},
                "destination": {"server": "s", "user": "u", "password_file": "pw"},
            }
        ],
    }


class TLSReasonTests(SynchronousTestCase):
    """
    L{cleartext.tlsReason} answers L{None} only for a document in which
    nothing asks for TLS, and otherwise names what does.
    """

    def assertNeedsTLS(self, document: object, reason: str | None = None) -> None:
        found = cleartext.tlsReason(document)
        self.assertIsNotNone(found, document)
        if reason is not None:
            self.assertEqual(found, reason)

    def test_plain(self) -> None:
        """
        Servers on C{tcp:} with C{starttls: off} (unquoted, which YAML
        reads as false, or quoted) and a status page on plain TCP, off or
        absent need no TLS.
        """
        document = _plainDocument()
        self.assertIsNone(cleartext.tlsReason(document))
        document["servers"]["s"]["starttls"] = "off"
        self.assertIsNone(cleartext.tlsReason(document))
        for status in (False, "off", None, {}, {"listen": "unix:/run/imapmig.sock"}):
            document["status"] = status
            self.assertIsNone(cleartext.tlsReason(document), status)
        del document["status"]
        self.assertIsNone(cleartext.tlsReason(document))

    def test_serverTLS(self) -> None:
        """
        A server with STARTTLS (by default or required), a C{tls:}
        endpoint, a CA file, a certificate name or a preset needs TLS, and
        the reason names the key.
        """
        changes: list[tuple[dict[str, object], str]] = [
            ({"starttls": None}, "servers.s.starttls is not off"),
            ({"starttls": "required"}, "servers.s.starttls is not off"),
            ({"starttls": True}, "servers.s.starttls is not off"),
            ({"endpoint": "tls:127.0.0.1:993", "starttls": False}, "servers.s.endpoint asks for TLS"),
            ({"endpoint": "TLS:127.0.0.1:993"}, "servers.s.endpoint asks for TLS"),
            ({"endpoint": "unix:/run/imap"}, "servers.s.endpoint is not a tcp: endpoint"),
            ({"tls_ca": "ca.pem"}, "servers.s.tls_ca asks for TLS"),
            ({"tls_hostname": "imap.example"}, "servers.s.tls_hostname asks for TLS"),
            ({"preset": "gmail"}, "servers.s.preset asks for TLS"),
        ]
        for change, reason in changes:
            document = _plainDocument()
            server = document["servers"]["s"]
            server.update(change)
            if change.get("starttls", False) is None:
                del server["starttls"]
            self.assertNeedsTLS(document, reason)

    def test_elsewhere(self) -> None:
        """
        OAuth 2.0 anywhere, a user list, an HTTPS or C{ssl:} string
        anywhere, or a status page listening on anything but plain TCP or
        a UNIX socket needs TLS.
        """
        document = _plainDocument()
        document["jobs"][0]["destination"]["oauth2"] = {"token_file": "t"}
        self.assertNeedsTLS(document, "jobs[0].destination.oauth2 asks for TLS")
        document = _plainDocument()
        document["credentials"] = {"c": {"oauth2": {"token_file": "t"}}}
        self.assertNeedsTLS(document, "credentials.c.oauth2 asks for TLS")
        document = _plainDocument()
        document["jobs"] = [{"jobs_from": "users.csv"}]
        self.assertNeedsTLS(document, "jobs[0].jobs_from asks for TLS")
        document = _plainDocument()
        document["jobs"][0]["note"] = ["https://example.com/token"]
        self.assertNeedsTLS(document, "jobs[0].note[0] asks for TLS")
        document = _plainDocument()
        document["status"] = {"listen": "ssl:8443"}
        self.assertNeedsTLS(document, "status.listen asks for TLS")
        document["status"] = {"listen": "systemd:domain=INET:index=0"}
        self.assertNeedsTLS(document, "status.listen is not a tcp: or unix: endpoint")

    def test_malformed(self) -> None:
        """
        A document that is not a mapping, or whose servers or status are
        missing or malformed, and that asks for TLS nowhere, needs none:
        the reader reports what is wrong, in a process without OpenSSL.
        """
        for malformed in (None, ["servers"], "text"):
            self.assertIsNone(cleartext.tlsReason(malformed))
        document = _plainDocument()
        del document["servers"]
        self.assertIsNone(cleartext.tlsReason(document))
        document = _plainDocument()
        document["servers"]["s"] = "tcp:127.0.0.1:143"
        self.assertIsNone(cleartext.tlsReason(document))
        for status in ("on", {"listen": 8025}):
            document = _plainDocument()
            document["status"] = status
            self.assertIsNone(cleartext.tlsReason(document))
        document = _plainDocument()
        document["servers"]["s"]["endpoint"] = ["tcp:127.0.0.1:143"]
        self.assertIsNone(cleartext.tlsReason(document))

    def test_sharedOnce(self) -> None:
        """
        A document is a graph: what aliases share is looked at once, so a
        value that stands for a tree of 2**60 leaves is answered at once
        (walked as a tree, it never was).
        """
        shared: object = ["x", "x"]
        for _ in range(60):
            shared = [shared, shared]
        document = _plainDocument()
        document["bomb"] = shared
        self.assertIsNone(cleartext.tlsReason(document))
        document["bomb"] = {"b": [shared, "https://example.com"]}
        self.assertNeedsTLS(document, "bomb.b[1] asks for TLS")


class ConfigNeedsTLSTests(SynchronousTestCase):
    """
    L{cleartext.configNeedsTLS} answers from the parsed configuration, and
    agrees with L{cleartext.tlsReason} wherever that answers no.
    """

    def _load(self, document: dict[str, Any]) -> Any:
        directory = os.path.abspath(self.mktemp())
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(directory, "Maildir", sub))
        with open(os.open(os.path.join(directory, "pw"), os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("pw\n")
        import yaml

        path = os.path.join(directory, "imapmig.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(document, f)
        return loadConfig(path)

    def test_plain(self) -> None:
        """
        The plain document's configuration needs no TLS, with the status
        page on plain TCP, off or absent (the default listener).
        """
        document = _plainDocument()
        self.assertFalse(cleartext.configNeedsTLS(self._load(document)))
        document["status"] = "off"
        self.assertFalse(cleartext.configNeedsTLS(self._load(document)))
        del document["status"]
        self.assertIsNone(cleartext.tlsReason(document))
        self.assertFalse(cleartext.configNeedsTLS(self._load(document)))

    def test_tls(self) -> None:
        """
        STARTTLS (the default), a C{tls:} endpoint, an OAuth 2.0 login or a
        status page on C{ssl:} need TLS.
        """
        document = _plainDocument()
        del document["servers"]["s"]["starttls"]
        self.assertTrue(cleartext.configNeedsTLS(self._load(document)))
        document = _plainDocument()
        document["servers"]["s"] = {"endpoint": "tls:127.0.0.1:993"}
        self.assertTrue(cleartext.configNeedsTLS(self._load(document)))
        document = _plainDocument()
        destination = document["jobs"][0]["destination"]
        del destination["password_file"]
        destination["oauth2"] = {"token_file": "pw"}
        self.assertTrue(cleartext.configNeedsTLS(self._load(document)))
        plain = self._load(_plainDocument())
        status = StatusConfig(listen="ssl:8443:privateKey=key.pem")
        self.assertTrue(cleartext.configNeedsTLS(evolve(plain, status=status)))


def _child(statement: str) -> str:
    """
    Run C{statement} in a fresh Python process (so that what this process
    imported hides nothing) from this source tree; return its output.
    """
    env = dict(os.environ, PYTHONPATH=_TREE)
    done = subprocess.run(
        [sys.executable, "-c", statement], env=env, capture_output=True, cwd=_TREE
    )
    if done.returncode != 0:
        raise AssertionError(done.stdout.decode() + done.stderr.decode())
    return done.stdout.decode().strip()


class WithoutTLSTests(SynchronousTestCase):
    """
    L{cleartext.withoutTLS} keeps OpenSSL out of a process that has not
    decided on TLS yet, and leaves any other alone.
    """

    def test_tooLate(self) -> None:
        """
        In a process whose reactor is loaded (this one), it does nothing.
        """
        before = sys.modules.get("OpenSSL")
        self.assertFalse(cleartext.withoutTLS())
        self.assertIs(sys.modules.get("OpenSSL"), before)

    def test_freshProcess(self) -> None:
        """
        In a fresh process, the reactor and the daemon's modules then load
        without OpenSSL, cryptography or service_identity; Twisted's TCP
        connections offer no TLS, and no transport handle is taken for an
        OpenSSL connection.
        """
        output = _child(
            "import sys\n"
            "from imapmig.access import cleartext\n"
            "print(cleartext.withoutTLS())\n"
            "from twisted.internet import reactor, tcp\n"
            "import imapmig.daemon.service\n"
            "from imapmig.imap.starttls import isTLSConnection\n"
            "from imapmig.imap.errormap import _describeTLSError\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in"
            " ('OpenSSL', 'cryptography', 'service_identity')))\n"
            "print(tcp.Connection.TLS, isTLSConnection(object()),"
            " _describeTLSError(ValueError()))\n"
        )
        self.assertEqual(output.splitlines(), ["True", "['OpenSSL']", "False False None"])


class DaemonOptionsTests(SynchronousTestCase):
    """
    L{imapmig.daemon.tap.Options} decides from the configuration, in the daemon's
    own process.
    """

    def _parse(self, server: dict[str, object]) -> str:
        directory = os.path.abspath(self.mktemp())
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(directory, "Maildir", sub))
        with open(os.open(os.path.join(directory, "pw"), os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("pw\n")
        document = _plainDocument()
        document["servers"]["s"] = server
        import yaml

        path = os.path.join(directory, "imapmig.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(document, f)
        return _child(
            "import sys\n"
            "from imapmig.daemon.tap import Options\n"
            f"Options().parseOptions(['--config', {path!r}])\n"
            "import imapmig.daemon.service\n"
            "from twisted.internet import reactor\n"
            "print('OpenSSL.SSL' in sys.modules)\n"
        )

    def test_plainConfiguration(self) -> None:
        """
        A configuration without TLS is run without OpenSSL.
        """
        self.assertEqual(self._parse({"endpoint": "tcp:127.0.0.1:1143", "starttls": False}), "False")

    def test_tlsConfiguration(self) -> None:
        """
        A configuration with STARTTLS is run with OpenSSL.
        """
        self.assertEqual(self._parse({"endpoint": "tcp:127.0.0.1:1143"}), "True")
