# -*- test-case-name: tests.test_cleartext -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.cleartext}: a daemon whose configuration uses no TLS
runs without loading OpenSSL, and one that uses TLS loads it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from attrs import evolve
from twisted.trial.unittest import SynchronousTestCase

from imapmig import cleartext
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


class DocumentNeedsTLSTests(SynchronousTestCase):
    """
    L{cleartext.documentNeedsTLS} answers no only for a document in which
    nothing asks for TLS.
    """

    def assertNeedsTLS(self, document: object) -> None:
        self.assertTrue(cleartext.documentNeedsTLS(document), document)

    def test_plain(self) -> None:
        """
        Servers on C{tcp:} with C{starttls: off} (unquoted, which YAML
        reads as false, or quoted) and a status page on plain TCP, off or
        absent need no TLS.
        """
        document = _plainDocument()
        self.assertFalse(cleartext.documentNeedsTLS(document))
        document["servers"]["s"]["starttls"] = "off"
        self.assertFalse(cleartext.documentNeedsTLS(document))
        for status in (False, "off", None, {}, {"listen": "unix:/run/imapmig.sock"}):
            document["status"] = status
            self.assertFalse(cleartext.documentNeedsTLS(document), status)
        del document["status"]
        self.assertFalse(cleartext.documentNeedsTLS(document))

    def test_serverTLS(self) -> None:
        """
        A server with STARTTLS (by default or required), a C{tls:}
        endpoint, a CA file, a certificate name or a preset needs TLS.
        """
        changes: list[dict[str, object]] = [
            {"starttls": None},
            {"starttls": "required"},
            {"starttls": True},
            {"endpoint": "tls:127.0.0.1:993", "starttls": False},
            {"endpoint": "TLS:127.0.0.1:993"},
            {"tls_ca": "ca.pem"},
            {"tls_hostname": "imap.example"},
            {"preset": "gmail"},
        ]
        for change in changes:
            document = _plainDocument()
            server = document["servers"]["s"]
            server.update(change)
            if change.get("starttls", False) is None:
                del server["starttls"]
            self.assertNeedsTLS(document)

    def test_elsewhere(self) -> None:
        """
        OAuth 2.0 anywhere, a user list, an HTTPS or C{ssl:} string
        anywhere, or a status page listening on anything but plain TCP or
        a UNIX socket needs TLS.
        """
        document = _plainDocument()
        document["jobs"][0]["destination"]["oauth2"] = {"token_file": "t"}
        self.assertNeedsTLS(document)
        document = _plainDocument()
        document["credentials"] = {"c": {"oauth2": {"token_file": "t"}}}
        self.assertNeedsTLS(document)
        document = _plainDocument()
        document["jobs"] = [{"jobs_from": "users.csv"}]
        self.assertNeedsTLS(document)
        document = _plainDocument()
        document["jobs"][0]["note"] = ["https://example.com/token"]
        self.assertNeedsTLS(document)
        for listen in ("ssl:8443", "systemd:domain=INET:index=0", 8025):
            document = _plainDocument()
            document["status"] = {"listen": listen}
            self.assertNeedsTLS(document)
        document = _plainDocument()
        document["status"] = "on"
        self.assertNeedsTLS(document)

    def test_malformed(self) -> None:
        """
        A document that is not a mapping, or whose servers are missing or
        not mappings, counts as needing TLS: the reader reports it.
        """
        self.assertNeedsTLS(None)
        self.assertNeedsTLS(["servers"])
        document = _plainDocument()
        del document["servers"]
        self.assertNeedsTLS(document)
        document = _plainDocument()
        document["servers"]["s"] = "tcp:127.0.0.1:143"
        self.assertNeedsTLS(document)
        document = _plainDocument()
        document["servers"]["s"]["endpoint"] = ["tcp:127.0.0.1:143"]
        self.assertNeedsTLS(document)


class FileNeedsTLSTests(SynchronousTestCase):
    """
    L{cleartext.fileNeedsTLS} reads the file's YAML document on its own.
    """

    def _write(self, content: bytes) -> str:
        path: str = os.path.abspath(self.mktemp())
        with open(path, "wb") as f:
            f.write(content)
        return path

    def test_plainFile(self) -> None:
        """
        A file whose document needs no TLS needs none.
        """
        path = self._write(
            b"servers:\n  s: {endpoint: 'tcp:127.0.0.1:143', starttls: off}\nstatus: off\n"
        )
        self.assertFalse(cleartext.fileNeedsTLS(path))

    def test_unreadableInvalidOrLarge(self) -> None:
        """
        A missing file, invalid YAML, or a file larger than
        L{cleartext.MAX_PROBED_OCTETS} counts as needing TLS.
        """
        self.assertTrue(cleartext.fileNeedsTLS(os.path.abspath(self.mktemp())))
        self.assertTrue(cleartext.fileNeedsTLS(self._write(b"servers: [\n")))
        plain = b"servers:\n  s: {endpoint: 'tcp:127.0.0.1:143', starttls: off}\n"
        padding = b"#" * cleartext.MAX_PROBED_OCTETS + b"\n"
        self.assertTrue(cleartext.fileNeedsTLS(self._write(plain + padding)))


class ConfigNeedsTLSTests(SynchronousTestCase):
    """
    L{cleartext.configNeedsTLS} answers from the parsed configuration, and
    agrees with L{cleartext.documentNeedsTLS} wherever that answers no.
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
        self.assertFalse(cleartext.documentNeedsTLS(document))
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
            "from imapmig import cleartext\n"
            "print(cleartext.withoutTLS())\n"
            "from twisted.internet import reactor, tcp\n"
            "import imapmig.service\n"
            "from imapmig.imap.client import _isTLSConnection\n"
            "from imapmig.imap.session import _describeTLSError\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in"
            " ('OpenSSL', 'cryptography', 'service_identity')))\n"
            "print(tcp.Connection.TLS, _isTLSConnection(object()),"
            " _describeTLSError(ValueError()))\n"
        )
        self.assertEqual(output.splitlines(), ["True", "['OpenSSL']", "False False None"])


class DaemonOptionsTests(SynchronousTestCase):
    """
    L{imapmig.tap.Options} decides from the configuration, in the daemon's
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
            "from imapmig.tap import Options\n"
            f"Options().parseOptions(['--config', {path!r}])\n"
            "import imapmig.service\n"
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
