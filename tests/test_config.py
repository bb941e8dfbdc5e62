# -*- test-case-name: tests.test_config -*-
"""
Tests for L{imapmig.config} and L{imapmig.access.secrets}.
"""

from __future__ import annotations

import datetime
import os
import stat
import textwrap
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from twisted.trial.unittest import SynchronousTestCase

from imapmig import config
from imapmig.config import statelocation
from imapmig.config.statelocation import STATE_KEYS

URI_STATE_KEYS = STATE_KEYS[1:]
from imapmig.config import (
    Config,
    EmlSourceConfig,
    FolderRules,
    ImapSourceConfig,
    MaildirSourceConfig,
    MboxSourceConfig,
    PipelineConfig,
    RetryConfig,
    ServerConfig,
    StatusConfig,
    isLoopbackHost,
    loadConfig,
    parseConfig,
)
from imapmig.errors import SHOWN_PROBLEMS, ConfigError
from imapmig.access.secrets import Secret, readPasswordFile
from imapmig.errors import PasswordFileError
from imapmig.mail.folders import PersonalNamespace
from tests.support import denyAccess

# The issue's example, exactly as written there.
ISSUE_YAML = """\
state: /var/lib/imapmig/state.sqlite      # SQLite, the embedded default
status:
  listen: "tcp:8025:interface=127.0.0.1"  # a Twisted server endpoint string
servers:
  new:
    endpoint: "tcp:mail.example.org:143"  # a client endpoint string; "tls:host:993" for implicit TLS
    starttls: required                    # required | off
defaults:
  connections: 2                          # parallel connections per job
jobs:
  - name: alice
    source: {maildir: /srv/mail/alice/Maildir}
    destination: {server: new, user: alice, password_file: /etc/imapmig/alice.pw}
  - name: archive
    source: {eml_dir: /srv/old-export, folder: Archive}
    destination: {server: new, user: bob, password: "inline is allowed but discouraged"}
"""

INLINE_PASSWORD = "inline is allowed but discouraged"
FILE_PASSWORD = "correct horse battery staple"

EXAMPLE = Path(__file__).parent.parent / "config" / "imapmig.example.yaml"


def makeMaildir(path: str) -> str:
    """
    Create an empty Maildir at C{path} and return C{path}.
    """
    for sub in ("cur", "new", "tmp"):
        os.makedirs(os.path.join(path, sub))
    return path


def writeFile(path: str, content: str | bytes, mode: int = 0o600) -> str:
    """
    Write C{content} to C{path} with permissions C{mode} and return
    C{path}.
    """
    data = content.encode("utf-8") if isinstance(content, str) else content
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return path


def selfSignedPEM() -> bytes:
    """
    A freshly generated self-signed CA certificate, PEM-encoded.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "imapmig test CA")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM)


class ConfigTestCase(SynchronousTestCase):
    """
    Sets up a directory holding what a valid configuration names: a
    Maildir, a directory of .eml files and a mode 0600 password file.
    """

    def setUp(self) -> None:
        self.directory = os.path.abspath(self.mktemp())
        os.makedirs(self.directory)
        self.configPath = os.path.join(self.directory, "imapmig.yaml")
        self.statePath = os.path.join(self.directory, "state.sqlite")
        self.maildir = makeMaildir(os.path.join(self.directory, "Maildir"))
        self.emlDir = os.path.join(self.directory, "export")
        os.makedirs(self.emlDir)
        self.passwordFile = writeFile(
            os.path.join(self.directory, "alice.pw"), FILE_PASSWORD + "\n"
        )

    def document(self) -> dict[str, Any]:
        """
        A fresh, valid configuration document for tests to alter.
        """
        return {
            "state": self.statePath,
            "servers": {"new": {"endpoint": "tcp:mail.example.org:143"}},
            "jobs": [
                {
                    "name": "alice",
                    "source": {"maildir": self.maildir},
                    "destination": {
                        "server": "new",
                        "user": "alice",
                        "password_file": self.passwordFile,
                    },
                },
                {
                    "name": "archive",
                    "source": {"eml_dir": self.emlDir},
                    "destination": {
                        "server": "new",
                        "user": "bob",
                        "password": INLINE_PASSWORD,
                    },
                },
            ],
        }

    def issueYAML(self) -> str:
        """
        The issue's example with its paths replaced by the test's own.
        """
        return (
            ISSUE_YAML.replace("/var/lib/imapmig/state.sqlite", self.statePath)
            .replace("/srv/mail/alice/Maildir", self.maildir)
            .replace("/srv/old-export", self.emlDir)
            .replace("/etc/imapmig/alice.pw", self.passwordFile)
        )

    def load(self, text: str) -> Config:
        """
        Write C{text} as the configuration file and load it.
        """
        writeFile(self.configPath, text)
        return loadConfig(self.configPath)

    def problems(self, document: object) -> list[str]:
        """
        The problems L{parseConfig} reports for C{document}.
        """
        error = self.assertRaises(ConfigError, parseConfig, document, self.configPath)
        self.assertNotIn(INLINE_PASSWORD, str(error))
        self.assertNotIn(FILE_PASSWORD, str(error))
        return list(error.problems)

    def yamlProblems(self, text: str) -> list[str]:
        """
        The problems L{loadConfig} reports for a file holding C{text}.
        """
        writeFile(self.configPath, text)
        error = self.assertRaises(ConfigError, loadConfig, self.configPath)
        self.assertNotIn(INLINE_PASSWORD, str(error))
        return list(error.problems)

    def assertProblem(self, problems: list[str], path: str, fragment: str) -> None:
        """
        Assert that C{problems} holds exactly one line about C{path}, in the
        form C{FILE: PATH: PROBLEM}, and that it contains C{fragment}.
        """
        prefix = f"{self.configPath}: {path}: "
        lines = [line for line in problems if line.startswith(prefix)]
        self.assertEqual(
            len(lines), 1, f"expected one problem at {path!r} in {problems!r}"
        )
        self.assertIn(fragment, lines[0])

    def assertOnlyProblem(self, document: object, path: str, fragment: str) -> None:
        """
        Assert that C{document} has exactly one problem, at C{path},
        containing C{fragment}.
        """
        problems = self.problems(document)
        self.assertEqual(len(problems), 1, problems)
        self.assertProblem(problems, path, fragment)


class ValidConfigTests(ConfigTestCase):
    """
    What a valid configuration becomes.
    """

    def test_issueExample(self) -> None:
        """
        The issue's example, as written, parses into the values it states.
        """
        loaded = self.load(self.issueYAML())
        server = ServerConfig(
            name="new",
            endpoint="tcp:mail.example.org:143",
            starttls=True,
            implicitTLS=False,
            tcpEndpoint="tcp:mail.example.org:143:timeout=120",
            tlsHostname="mail.example.org",
            tlsCA=None,
            timeout=120.0,
            compress=True,
        )
        self.assertEqual(loaded.path, self.configPath)
        self.assertEqual(loaded.statePath, self.statePath)
        self.assertEqual(loaded.status, StatusConfig("tcp:8025:interface=127.0.0.1"))
        self.assertEqual(loaded.servers, (server,))
        alice, archive = loaded.jobs
        self.assertEqual(alice.name, "alice")
        self.assertEqual(alice.source, MaildirSourceConfig(path=self.maildir))
        self.assertEqual(alice.destination.server, server)
        self.assertEqual(alice.destination.user, "alice")
        self.assertEqual(alice.destination.password, Secret(FILE_PASSWORD))
        self.assertEqual(alice.connections, 2)
        self.assertEqual(archive.name, "archive")
        self.assertEqual(archive.source, EmlSourceConfig(self.emlDir, ("Archive",)))
        self.assertEqual(archive.destination.user, "bob")
        self.assertEqual(archive.destination.password, Secret(INLINE_PASSWORD))

    def test_defaults(self) -> None:
        """
        Absent optional keys take their documented defaults.
        """
        document = self.document()
        del document["state"]
        statePath = os.path.join(self.directory, "default.sqlite")
        self.patch(statelocation, "DEFAULT_STATE_PATH", statePath)
        loaded = parseConfig(document, self.configPath)
        self.assertEqual(loaded.statePath, statePath)
        self.assertEqual(loaded.status, StatusConfig("tcp:8025:interface=127.0.0.1"))
        [server] = loaded.servers
        self.assertTrue(server.starttls)
        self.assertFalse(server.implicitTLS)
        self.assertIsNone(server.tlsCA)
        self.assertEqual(server.tlsHostname, "mail.example.org")
        self.assertEqual(server.timeout, 120.0)
        for job in loaded.jobs:
            self.assertEqual(job.connections, 2)
            self.assertEqual(
                job.pipeline,
                PipelineConfig(
                    windowMessages=1000,
                    windowBytes=33554432,
                    batchMessages=200,
                    batchBytes=8388608,
                    batchGrowth=100,
                ),
            )
        self.assertEqual(
            loaded.jobs[1].source, EmlSourceConfig(self.emlDir, ("INBOX",))
        )

    def test_defaultStatePath(self) -> None:
        """
        The state database defaults to C{/var/lib/imapmig/state.sqlite}.
        """
        self.assertEqual(statelocation.DEFAULT_STATE_PATH, "/var/lib/imapmig/state.sqlite")

    def test_defaultsAndOverrides(self) -> None:
        """
        C{defaults} applies to every job; a job's own top-level settings
        override it, each independently.
        """
        document = self.document()
        document["defaults"] = {
            "connections": 3,
            "window_messages": 10,
            "window_bytes": 65536,
            "batch_messages": 1,
            "batch_bytes": 1,
            "batch_growth": 50,
        }
        document["jobs"][1].update(
            connections=32, window_messages=20, batch_messages=1000, batch_bytes=99,
            batch_growth=0,
        )  # fmt: skip
        alice, archive = parseConfig(document, self.configPath).jobs
        self.assertEqual(alice.connections, 3)
        self.assertEqual(alice.pipeline, PipelineConfig(10, 65536, 1, 1, 50))
        self.assertEqual(archive.connections, 32)
        self.assertEqual(archive.pipeline, PipelineConfig(20, 65536, 1000, 99, 0))

    def test_relativePaths(self) -> None:
        """
        Relative paths are resolved against the configuration file's
        directory, not the working directory.
        """
        document = self.document()
        document["state"] = "state.sqlite"
        document["jobs"][0]["source"] = {"maildir": "Maildir"}
        document["jobs"][0]["destination"]["password_file"] = "alice.pw"
        document["jobs"][1]["source"] = {"eml_dir": "./export/"}
        loaded = parseConfig(document, self.configPath)
        self.assertEqual(loaded.statePath, self.statePath)
        self.assertEqual(loaded.jobs[0].source, MaildirSourceConfig(self.maildir))
        self.assertEqual(loaded.jobs[0].destination.password, Secret(FILE_PASSWORD))
        self.assertEqual(
            loaded.jobs[1].source, EmlSourceConfig(self.emlDir, ("INBOX",))
        )

    def test_folderHierarchy(self) -> None:
        """
        An eml source's folder is split on C{/} into its hierarchy.
        """
        document = self.document()
        document["jobs"][1]["source"]["folder"] = "Archive/2019"
        loaded = parseConfig(document, self.configPath)
        self.assertEqual(
            loaded.jobs[1].source, EmlSourceConfig(self.emlDir, ("Archive", "2019"))
        )

    def test_statusOff(self) -> None:
        """
        C{status: off} disables the status resource.
        """
        text = self.issueYAML().replace(
            'status:\n  listen: "tcp:8025:interface=127.0.0.1"', "status: off"
        )
        self.assertIn("status: off", text)
        self.assertIsNone(self.load(text).status)

    def test_statusListen(self) -> None:
        """
        C{status.listen} takes any server endpoint string Twisted parses.
        """
        document = self.document()
        document["status"] = {"listen": "unix:/run/imapmig/status.sock"}
        loaded = parseConfig(document, self.configPath)
        self.assertEqual(loaded.status, StatusConfig("unix:/run/imapmig/status.sock"))
        document["status"] = {}
        loaded = parseConfig(document, self.configPath)
        self.assertEqual(loaded.status, StatusConfig("tcp:8025:interface=127.0.0.1"))

    def test_implicitTLS(self) -> None:
        """
        A C{tls:} endpoint means implicit TLS without STARTTLS; its TCP
        form is the same string with a C{tcp:} prefix, and the host it names
        (written positionally or as C{host=}, with C{\\:} escapes) is the
        default TLS hostname; the TCP form gets the server's C{timeout} as
        its connect timeout unless it sets its own (not Twisted's 30 s).
        """
        document = self.document()
        document["servers"] = {
            "a": {"endpoint": "tls:imap.example.com:993"},
            "b": {"endpoint": "TLS:host=\\:\\:1:993:timeout=5", "starttls": False},
            "c": {"endpoint": "tls:port=993:host=10.0.0.1:bindAddress=10.0.0.2"},
        }
        document["jobs"][0]["destination"]["server"] = "a"
        document["jobs"][1]["destination"]["server"] = "b"
        a, b, c = parseConfig(document, self.configPath).servers
        self.assertEqual(
            a,
            ServerConfig(
                name="a",
                endpoint="tls:imap.example.com:993",
                starttls=False,
                implicitTLS=True,
                tcpEndpoint="tcp:imap.example.com:993:timeout=120",
                tlsHostname="imap.example.com",
                tlsCA=None,
                timeout=120.0,
                compress=True,
            ),
        )
        self.assertEqual(
            (b.starttls, b.implicitTLS, b.tcpEndpoint, b.tlsHostname),
            (False, True, "tcp:host=\\:\\:1:993:timeout=5", "::1"),
        )
        self.assertEqual(c.tlsHostname, "10.0.0.1")
        self.assertEqual(c.tcpEndpoint, "tcp:port=993:host=10.0.0.1:bindAddress=10.0.0.2:timeout=120")

    def test_tlsSettings(self) -> None:
        """
        C{tls_ca} names a PEM file of certificates to trust (kept as its
        absolute path), C{tls_hostname} overrides the endpoint's host, and
        C{timeout} takes any positive number of seconds.
        """
        pem = selfSignedPEM()
        writeFile(os.path.join(self.directory, "ca.pem"), pem + pem, 0o644)
        document = self.document()
        document["servers"]["new"].update(
            tls_ca="ca.pem", tls_hostname="imap.internal", timeout=2.5
        )
        [server] = parseConfig(document, self.configPath).servers
        self.assertEqual(server.tlsCA, os.path.join(self.directory, "ca.pem"))
        self.assertEqual(server.tlsHostname, "imap.internal")
        self.assertEqual(server.timeout, 2.5)

    def test_starttlsOff(self) -> None:
        """
        C{starttls: off} (YAML's C{false}) on a C{tcp:} endpoint turns
        STARTTLS off; the quoted string C{"off"} means the same (with
        C{allow_plaintext: true}, the server not being on loopback).
        """
        allowed = "starttls: off\n    allow_plaintext: true"
        text = self.issueYAML().replace("starttls: required", allowed)
        self.assertFalse(self.load(text).servers[0].starttls)
        text = self.issueYAML().replace("starttls: required", 'starttls: "off"\n    allow_plaintext: true')
        self.assertFalse(self.load(text).servers[0].starttls)

    def test_compressAutoByDefault(self) -> None:
        """
        Without C{compress}, COMPRESS=DEFLATE is used for a remote host and
        not for a loopback one (C{localhost}, C{127.*}, C{::1}), written
        positionally or as C{host=}, for C{tcp:} and C{tls:} endpoints.
        """
        document = self.document()
        document["servers"] = {
            "remote": {"endpoint": "tcp:mail.example.org:143"},
            "remoteTLS": {"endpoint": "tls:192.0.2.7:993"},
            "local": {"endpoint": "tcp:127.0.0.1:143", "starttls": False},
            "local8": {"endpoint": "tcp:127.8.9.10:143", "starttls": False},
            "localName": {"endpoint": "tls:localhost:993"},
            "local6": {"endpoint": "tcp:host=\\:\\:1:port=143", "starttls": False},
        }
        document["jobs"][0]["destination"]["server"] = "remote"
        document["jobs"][1]["destination"]["server"] = "local"
        servers = parseConfig(document, self.configPath).servers
        self.assertEqual(
            {server.name: server.compress for server in servers},
            {
                "remote": True,
                "remoteTLS": True,
                "local": False,
                "local8": False,
                "localName": False,
                "local6": False,
            },
        )

    def test_compressOnAndOff(self) -> None:
        """
        C{compress: on} uses COMPRESS=DEFLATE even on loopback, C{compress:
        off} never; YAML reads both as booleans, and their quoted forms mean
        the same.
        """
        text = self.issueYAML().replace(
            '"tcp:mail.example.org:143"', '"tcp:127.0.0.1:143"\n    starttls: off'
        ).replace("    starttls: required", "    compress: COMPRESS")
        for written, expected in [
            ("on", True),
            ('"on"', True),
            ("off", False),
            ('"off"', False),
            ("auto", False),
        ]:
            loaded = self.load(text.replace("COMPRESS", written))
            self.assertEqual(loaded.servers[0].compress, expected, written)
        remote = self.issueYAML().replace(
            "starttls: required", "starttls: required\n    compress: off"
        )
        self.assertFalse(self.load(remote).servers[0].compress)

    def test_badCompress(self) -> None:
        """
        C{compress} is C{auto}, C{on} or C{off}, nothing else.
        """
        document = self.document()
        document["servers"]["new"]["compress"] = "deflate"
        self.assertOnlyProblem(
            document, "servers.new.compress", "must be 'auto', 'on' or 'off', not 'deflate'"
        )
        document["servers"]["new"]["compress"] = 6
        self.assertOnlyProblem(document, "servers.new.compress", "not an integer")

    def test_isLoopbackHost(self) -> None:
        """
        Loopback hosts are C{localhost} and names under C{.localhost},
        C{127.0.0.0/8}, C{::1} (also IPv4-mapped); nothing else, and no name
        is resolved.
        """
        for host in [
            "localhost",
            "LOCALHOST.",
            "imap.localhost",
            "127.0.0.1",
            "127.255.0.3",
            "::1",
            "[::1]",
            "::ffff:127.0.0.1",
        ]:
            self.assertTrue(isLoopbackHost(host), host)
        for host in ["mail.example.org", "10.0.0.1", "::2", "0.0.0.0", "localhost.example.org", ""]:
            self.assertFalse(isLoopbackHost(host), host)

    def test_noPasswordInRepr(self) -> None:
        """
        No password appears in the C{repr} of a loaded configuration.
        """
        loaded = parseConfig(self.document(), self.configPath)
        self.assertNotIn(INLINE_PASSWORD, repr(loaded))
        self.assertNotIn(FILE_PASSWORD, repr(loaded))
        self.assertIn("password=Secret('***')", repr(loaded.jobs[0]))

    def test_valuesAreFrozen(self) -> None:
        """
        The configuration's values cannot be changed.
        """
        loaded = self.load(self.issueYAML())
        self.assertRaises(AttributeError, setattr, loaded, "statePath", "/tmp/x")
        self.assertRaises(AttributeError, setattr, loaded.jobs[0], "connections", 9)


class NamespaceAndFallbackConfigTests(ConfigTestCase):
    """
    A server's C{namespace} override and a job's C{folder_name_fallback}.
    """

    def test_namespaceAbsent(self) -> None:
        """
        Without C{namespace}, the server is asked (L{None}); the fallback
        is on by default.
        """
        loaded = parseConfig(self.document(), self.configPath)
        self.assertIsNone(loaded.servers[0].namespace)
        self.assertTrue(loaded.jobs[0].folderNameFallback)

    def test_namespace(self) -> None:
        """
        C{namespace} gives the personal namespace to believe, marked
        configured: a prefix ending with its separator, the empty prefix
        (the default when absent), or a flat server's null separator.
        """
        for written, expected in [
            ({"prefix": "INBOX.", "separator": "."}, PersonalNamespace("INBOX.", ".", True)),
            ({"separator": "/"}, PersonalNamespace("", "/", True)),
            ({"prefix": "", "separator": None}, PersonalNamespace("", None, True)),
        ]:
            document = self.document()
            document["servers"]["new"]["namespace"] = written
            loaded = parseConfig(document, self.configPath)
            self.assertEqual(loaded.servers[0].namespace, expected)

    def test_badNamespace(self) -> None:
        """
        A bad C{namespace} is one problem naming the file and the field.
        """
        for written, path, fragment in [
            ("INBOX.", "servers.new.namespace", "expected a mapping"),
            ({"prefix": "INBOX."}, "servers.new.namespace.separator", "missing"),
            ({"prefix": 1, "separator": "."}, "servers.new.namespace.prefix", "expected a string"),
            ({"separator": ".."}, "servers.new.namespace.separator", "one character"),
            ({"separator": 7}, "servers.new.namespace.separator", "one character"),
            (
                {"prefix": "INBOX", "separator": "."},
                "servers.new.namespace.prefix",
                "'INBOX' must end with the separator '.' (e.g. 'INBOX.')",
            ),
            ({"prefix": "", "separator": ".", "sep": "."}, "servers.new.namespace.sep", "unknown key"),
            (
                {"prefix": "INBOX.", "separator": None},
                "servers.new.namespace.prefix",
                "'INBOX.' must be empty where the separator is null (a flat server)",
            ),
        ]:
            document = self.document()
            document["servers"]["new"]["namespace"] = written
            self.assertOnlyProblem(document, path, fragment)

    def test_folderNameFallback(self) -> None:
        """
        C{folder_name_fallback: false} turns the fallback off; anything but
        a boolean is a problem.
        """
        document = self.document()
        document["jobs"][0]["folder_name_fallback"] = False
        self.assertFalse(parseConfig(document, self.configPath).jobs[0].folderNameFallback)
        document["jobs"][0]["folder_name_fallback"] = "no way"
        self.assertOnlyProblem(document, "jobs[0].folder_name_fallback", "must be true or false")


class ExampleFileTests(ConfigTestCase):
    """
    C{config/imapmig.example.yaml} stays valid and complete.
    """

    def test_exampleLoads(self) -> None:
        """
        The example loads once the files and directories it names exist
        (created here, the example's paths replaced by theirs, its systemd
        credentials in a C{CREDENTIALS_DIRECTORY}), and shows its
        inline-password job's overrides.
        """
        text = EXAMPLE.read_text("utf-8")
        document = yaml.safe_load(text)
        replacements = {
            document["state"]: self.statePath,
            document["servers"]["new"]["tls_ca"]: writeFile(
                os.path.join(self.directory, "ca.pem"), selfSignedPEM(), 0o644
            ),
        }
        replacements[document["status"]["token_file"]] = self.passwordFile
        replacements[document["notify"]["token_file"]] = self.passwordFile
        credentialsDirectory = os.path.join(self.directory, "credentials")
        os.mkdir(credentialsDirectory, 0o500)
        self.patch(os, "environ", {**os.environ, "CREDENTIALS_DIRECTORY": credentialsDirectory})
        credentialNames = {
            sides["password_credential"]
            for sides in [
                *document["credentials"].values(),
                *(job["destination"] for job in document["jobs"]),
            ]
            if "password_credential" in sides
        }
        self.assertTrue(credentialNames)
        for name in credentialNames:
            writeFile(os.path.join(credentialsDirectory, name), FILE_PASSWORD, 0o400)
        for credential in document["credentials"].values():
            if "password_file" in credential:
                replacements[credential["password_file"]] = self.passwordFile
        for job in document["jobs"]:
            source = job["source"]
            if "maildir" in source:
                replacements[source["maildir"]] = self.maildir
            if "eml_dir" in source:
                replacements[source["eml_dir"]] = self.emlDir
            if "mbox" in source:
                replacements[source["mbox"]] = self.emlDir
            if "password_file" in source:
                replacements[source["password_file"]] = self.passwordFile
            if "password_file" in job["destination"]:
                replacements[job["destination"]["password_file"]] = self.passwordFile
            if "admin" in job["destination"]:
                admin = job["destination"]["admin"]
                replacements[admin["password_file"]] = self.passwordFile
            if "token_file" in job["destination"].get("oauth2", {}):
                replacements[job["destination"]["oauth2"]["token_file"]] = self.passwordFile
        for written, replacement in replacements.items():
            text = text.replace(written, replacement)
        loaded = self.load(text)
        self.assertEqual(
            [job.name for job in loaded.jobs], [job["name"] for job in document["jobs"]]
        )
        self.assertEqual(
            [server.name for server in loaded.servers], list(document["servers"])
        )

    def test_minimalLoads(self) -> None:
        """
        C{config/imapmig.yaml}, the minimal configuration make install
        writes, loads once the password files it names exist (each a
        placeholder written by make install), its state directory here.
        """
        text = (EXAMPLE.parent / "imapmig.yaml").read_text("utf-8")
        document = yaml.safe_load(text)
        replacements = {document["state"]: self.statePath}
        for job in document["jobs"]:
            for side in (job["source"], job["destination"]):
                replacements[side["password_file"]] = self.passwordFile
        for written, replacement in replacements.items():
            text = text.replace(written, replacement)
        loaded = self.load(text)
        self.assertEqual([job.name for job in loaded.jobs], ["alice"])
        self.assertEqual([server.name for server in loaded.servers], ["old", "new"])

    def test_exampleShowsEveryKey(self) -> None:
        """
        Every key of every section appears in the example.
        """
        document = yaml.safe_load(EXAMPLE.read_text("utf-8"))
        servers = document["servers"].values()
        jobs = document["jobs"]
        sections: list[tuple[tuple[str, ...], set[str]]] = [
            # The keys of a PostgreSQL state are shown in comments only:
            # beside the example's SQLite file they are refused.
            (tuple(set(config._TOP_KEYS) - set(URI_STATE_KEYS)), set(document)),
            (config._STATUS_KEYS, set(document["status"])),
            (config.NOTIFY_KEYS, set(document["notify"])),
            (config._SERVER_KEYS, {key for server in servers for key in server}),
            (config._DEFAULTS_KEYS, set(document["defaults"])),
            (config._JOB_KEYS, {key for job in jobs for key in job}),
            # An IMAP source takes a password, an admin or oauth2 like a
            # destination; the example shows the inline password, the
            # admin, oauth2 and the systemd credential under destination only.
            (
                tuple(
                    set(config._SOURCE_KEYS)
                    - {"password", "password_credential", "admin", "oauth2"}
                ),
                {key for job in jobs for key in job["source"]},
            ),
            # The inline password is shown in a comment only: the example
            # is installed group-readable (0640), where an inline password
            # is refused.
            (
                tuple(set(config._DESTINATION_KEYS) - {"password"}),
                {key for job in jobs for key in job["destination"]},
            ),
        ]
        for keys, used in sections:
            self.assertEqual(set(keys), used)
        self.assertIn('(password: "...")', EXAMPLE.read_text("utf-8"))
        for key in URI_STATE_KEYS:
            self.assertIn(f"# {key}: ", EXAMPLE.read_text("utf-8"))

    def test_exampleDefaultsAreTheDefaults(self) -> None:
        """
        The values the example gives in C{defaults} are the built-in
        defaults it documents.
        """
        document = yaml.safe_load(EXAMPLE.read_text("utf-8"))
        self.assertEqual(
            document["defaults"], {s.key: s.default for s in config._SETTINGS}
        )
        self.assertEqual(document["state"], statelocation.DEFAULT_STATE_PATH)
        self.assertEqual(document["status"]["listen"], config._DEFAULT_LISTEN)


class FileProblemTests(ConfigTestCase):
    """
    Problems with the file itself are one line each.
    """

    def test_missingFile(self) -> None:
        """
        A configuration file that does not exist is one problem.
        """
        error = self.assertRaises(ConfigError, loadConfig, self.configPath)
        self.assertEqual(error.problems, (f"{self.configPath}: no such file",))

    def test_directory(self) -> None:
        """
        A directory given as the configuration file is one problem.
        """
        error = self.assertRaises(ConfigError, loadConfig, self.directory)
        self.assertEqual(len(error.problems), 1)
        self.assertIn("is a directory", error.problems[0])

    def test_invalidYAML(self) -> None:
        """
        Invalid YAML is one problem giving the line and column of the
        error.
        """
        problems = self.yamlProblems("state: x\njobs:\n  - name: [alice\n")
        self.assertEqual(len(problems), 1)
        self.assertTrue(
            problems[0].startswith(
                f"{self.configPath}: line 4, column 1: invalid YAML: "
            )
        )
        self.assertIn("line 3", problems[0])

    def test_badIndentation(self) -> None:
        """
        A misindented key is reported at its own line.
        """
        problems = self.yamlProblems("state: x\n  jobs: []\n")
        self.assertEqual(
            problems,
            [
                f"{self.configPath}: line 2, column 7: invalid YAML:"
                " mapping values are not allowed here"
            ],
        )

    def test_emptyFile(self) -> None:
        """
        An empty file (or one of comments only) is one problem.
        """
        empty = [f"{self.configPath}: the file is empty"]
        self.assertEqual(self.yamlProblems(""), empty)
        self.assertEqual(self.yamlProblems("# nothing yet\n"), empty)

    def test_notAMapping(self) -> None:
        """
        A document that is not a mapping is one problem.
        """
        problems = self.yamlProblems("- name: alice\n")
        self.assertEqual(len(problems), 1)
        self.assertTrue(
            problems[0].startswith(f"{self.configPath}: the document must be a mapping")
        )
        self.assertIn("not a list", problems[0])
        self.assertEqual(len(self.yamlProblems("just a string\n")), 1)


class ProblemTests(ConfigTestCase):
    """
    Each problem with the content is reported at the path of its key.
    """

    def test_unknownKeyWithHint(self) -> None:
        """
        An unknown key is a problem, with a hint when it is close to a known
        one.
        """
        document = self.document()
        document["jobs"][0]["conections"] = 4
        document["servers"]["new"]["starttsl"] = "required"
        document["stat"] = "x"
        problems = self.problems(document)
        self.assertEqual(len(problems), 3, problems)
        self.assertIn(
            f"{self.configPath}: jobs[0].conections: unknown key 'conections'"
            " (did you mean 'connections'?)",
            problems,
        )
        self.assertProblem(problems, "servers.new.starttsl", "did you mean 'starttls'?")
        self.assertProblem(problems, "stat", "did you mean 'state'?")

    def test_noHintPastTheShownProblems(self) -> None:
        """
        Past the problems shown (L{SHOWN_PROBLEMS}), an unknown key is
        reported without a hint: no close match is looked for in lines no
        one sees (400,000 unknown keys took 15 s in a reload's thread).
        Known keys beside them are still read.
        """
        document = self.document()
        document["defaults"] = {"conections": 1, "connections": "many"}
        document["defaults"].update({f"k{n}": 1 for n in range(SHOWN_PROBLEMS + 10)})
        problems = self.problems(document)
        self.assertProblem(problems, "defaults.conections", "did you mean 'connections'?")
        self.assertProblem(problems, "defaults.connections", "")
        key = f"k{SHOWN_PROBLEMS + 5}"
        past = [p for p in problems if p.endswith(f"defaults.{key}: unknown key '{key}'")]
        self.assertEqual(len(past), 1, problems[-3:])

    def test_unknownKeyWithoutHint(self) -> None:
        """
        An unknown key close to no known key lists the known keys.
        """
        document = self.document()
        document["jobs"][0]["destination"]["zzz"] = 1
        self.assertOnlyProblem(
            document,
            "jobs[0].destination.zzz",
            "unknown key 'zzz' (known keys: server, user, password, password_file,"
            " password_credential, admin, oauth2)",
        )

    def test_wrongType(self) -> None:
        """
        A value of the wrong type is a problem naming both types.
        """
        document = self.document()
        document["jobs"][0]["destination"]["user"] = ["alice"]
        document["jobs"][1]["connections"] = "4"
        document["servers"]["new"]["timeout"] = "fast"
        problems = self.problems(document)
        self.assertEqual(len(problems), 3, problems)
        self.assertProblem(
            problems, "jobs[0].destination.user", "expected a string, got a list"
        )
        self.assertProblem(
            problems, "jobs[1].connections", "expected an integer, got a string"
        )
        self.assertProblem(problems, "servers.new.timeout", "got a string")

    def test_numberForString(self) -> None:
        """
        A number where text is expected (a numeric user name or password)
        is refused with a hint to quote it, without showing the value.
        """
        text = self.issueYAML().replace(
            f'password: "{INLINE_PASSWORD}"', "password: 84172"
        )
        problems = self.yamlProblems(text)
        self.assertEqual(len(problems), 1, problems)
        self.assertProblem(problems, "jobs[1].destination.password", "quote it")
        self.assertNotIn("84172", problems[0])

    def test_boolAsInt(self) -> None:
        """
        YAML's C{true} and C{false} are not integers.
        """
        text = self.issueYAML().replace("connections: 2", "connections: true")
        problems = self.yamlProblems(text)
        self.assertEqual(
            problems,
            [
                f"{self.configPath}: defaults.connections:"
                " expected an integer, got a boolean"
            ],
        )
        document = self.document()
        document["jobs"][0]["batch_messages"] = False
        document["servers"]["new"]["timeout"] = True
        problems = self.problems(document)
        self.assertProblem(problems, "jobs[0].batch_messages", "got a boolean")
        self.assertProblem(problems, "servers.new.timeout", "got a boolean")

    def test_outOfRange(self) -> None:
        """
        Integers outside their range are problems stating the range.
        """
        document = self.document()
        document["defaults"] = {
            "connections": 33,
            "window_messages": 0,
            "window_bytes": 65535,
            "batch_messages": 1001,
            "batch_bytes": 0,
            "batch_growth": -1,
        }
        document["jobs"][0]["connections"] = 0
        document["servers"]["new"]["timeout"] = 0
        problems = self.problems(document)
        self.assertEqual(len(problems), 8, problems)
        self.assertProblem(problems, "defaults.batch_growth", "at least 0, not -1")
        self.assertProblem(problems, "defaults.connections", "between 1 and 32, not 33")
        self.assertProblem(problems, "defaults.window_messages", "at least 1, not 0")
        self.assertProblem(problems, "defaults.window_bytes", "at least 65536")
        self.assertProblem(problems, "defaults.batch_messages", "between 1 and 1000")
        self.assertProblem(problems, "defaults.batch_bytes", "at least 1, not 0")
        self.assertProblem(problems, "jobs[0].connections", "between 1 and 32, not 0")
        self.assertProblem(problems, "servers.new.timeout", "greater than 0")

    def test_infiniteTimeout(self) -> None:
        """
        A timeout must be finite.
        """
        text = self.issueYAML().replace(
            "starttls: required", "starttls: required\n    timeout: .inf"
        )
        self.assertProblem(self.yamlProblems(text), "servers.new.timeout", "inf")

    def test_unknownServer(self) -> None:
        """
        A destination naming no configured server is a problem listing the
        servers there are.
        """
        text = self.issueYAML().replace(
            "{server: new, user: bob", "{server: nwe, user: bob"
        )
        problems = self.yamlProblems(text)
        self.assertEqual(len(problems), 1, problems)
        self.assertEqual(
            problems[0],
            f"{self.configPath}: jobs[1].destination.server:"
            " no server named 'nwe' (servers: new)",
        )
        self.assertIn("jobs[1].destination.server: no server named 'nwe'", problems[0])

    def test_invalidServerNotReportedAgain(self) -> None:
        """
        A job naming a server that is declared but invalid adds no problem
        of its own: the server's is enough.
        """
        document = self.document()
        document["servers"]["new"]["endpoint"] = "tcp:mail.example.org:imap"
        problems = self.problems(document)
        self.assertEqual(len(problems), 1, problems)
        self.assertProblem(problems, "servers.new.endpoint", "invalid endpoint")

    def test_duplicateJobName(self) -> None:
        """
        A job name used twice is a problem on the second, naming the first.
        """
        document = self.document()
        document["jobs"][1]["name"] = "alice"
        self.assertOnlyProblem(
            document,
            "jobs[1].name",
            "duplicate job name 'alice' (first used by jobs[0])",
        )

    def test_sameMigrationTwice(self) -> None:
        """
        Two jobs with the same source, destination and folders (one job
        renamed by a copy, or a reload that kept the old one) are one
        problem on the second, naming both; another folder rule, source
        or destination makes them two migrations.
        """
        document = self.document()
        document["jobs"][1] = dict(document["jobs"][0], name="extra")
        self.assertOnlyProblem(
            document,
            "jobs[1]",
            "job 'extra' has the same source, destination and folders as job 'alice'"
            " (jobs[0]): the same messages would be copied twice",
        )
        document["jobs"][1]["destination"] = dict(document["jobs"][0]["destination"], user="eve")
        self.assertEqual(len(parseConfig(document, self.configPath).jobs), 2)
        document["jobs"][1]["destination"] = document["jobs"][0]["destination"]
        document["jobs"][1]["folders"] = {"include": ["INBOX"]}
        self.assertEqual(len(parseConfig(document, self.configPath).jobs), 2)

    def test_invalidJobName(self) -> None:
        """
        Job names are letters, digits and C{. _ @ -}, starting with a
        letter or digit; they are required.
        """
        document = self.document()
        document["jobs"][0]["name"] = "-alice"
        del document["jobs"][1]["name"]
        problems = self.problems(document)
        self.assertEqual(len(problems), 2, problems)
        self.assertProblem(problems, "jobs[0].name", "invalid job name '-alice'")
        self.assertProblem(problems, "jobs[1].name", "missing")

    def test_badEndpointString(self) -> None:
        """
        An endpoint string Twisted's parser refuses is a problem with
        Twisted's reason and the expected form.
        """
        document = self.document()
        document["servers"]["new"]["endpoint"] = "tcp:mail.example.org:143:nodelay=1"
        self.assertOnlyProblem(
            document,
            "servers.new.endpoint",
            "invalid endpoint 'tcp:mail.example.org:143:nodelay=1':"
            " got an unexpected keyword argument 'nodelay';"
            " expected 'tcp:HOST:PORT",
        )
        document["servers"]["new"]["endpoint"] = "tcp:mail.example.org"
        self.assertOnlyProblem(document, "servers.new.endpoint", "'port'")
        document["servers"]["new"]["endpoint"] = "tcp:mail.example.org:143:x"
        self.assertOnlyProblem(
            document, "servers.new.endpoint", "unexpected argument 'x'"
        )
        document["servers"]["new"]["endpoint"] = "tcp::143"
        self.assertOnlyProblem(document, "servers.new.endpoint", "the host is empty")
        document["servers"]["new"]["endpoint"] = "tcp:mail.example.org:143\\"
        self.assertOnlyProblem(document, "servers.new.endpoint", "lone backslash")

    def test_badPort(self) -> None:
        """
        A port that is not a number, or out of range, is a problem.
        """
        document = self.document()
        document["servers"]["new"]["endpoint"] = "tls:mail.example.org:imaps"
        self.assertOnlyProblem(
            document,
            "servers.new.endpoint",
            "invalid endpoint 'tls:mail.example.org:imaps'",
        )
        document["servers"]["new"]["endpoint"] = "tcp:mail.example.org:65536"
        self.assertOnlyProblem(
            document, "servers.new.endpoint", "port 65536 is out of range (1-65535)"
        )
        document["servers"]["new"]["endpoint"] = "tcp:mail.example.org:0"
        self.assertOnlyProblem(document, "servers.new.endpoint", "out of range")

    def test_unsupportedPrefix(self) -> None:
        """
        Only C{tcp:} and C{tls:} endpoints are accepted; the problem says
        why, and suggests C{tls:} for C{ssl:}.
        """
        document = self.document()
        for endpoint in ["unix:/run/dovecot/imap", "mail.example.org:143", "ssl:h:993"]:
            document["servers"]["new"]["endpoint"] = endpoint
            self.assertOnlyProblem(
                document,
                "servers.new.endpoint",
                f"unsupported endpoint {endpoint!r}",
            )
        problems = self.problems(document)
        self.assertIn("write tls: for implicit TLS", problems[0])
        self.assertIn("only 'tcp:HOST:PORT'", problems[0])

    def test_tlsArgumentsInEndpoint(self) -> None:
        """
        TLS arguments of Twisted's C{tls:} endpoint are refused with a
        pointer to C{tls_ca}.
        """
        document = self.document()
        document["servers"]["new"]["endpoint"] = (
            "tls:mail.example.org:993:trustRoots=/etc/ssl/certs:certificate=c.pem"
        )
        self.assertOnlyProblem(
            document,
            "servers.new.endpoint",
            "not supported (certificate=, trustRoots=): set the CA certificates"
            " to trust with tls_ca",
        )

    def test_tlsWithStarttlsRequired(self) -> None:
        """
        An implicit TLS endpoint with C{starttls: required} is a problem.
        """
        text = self.issueYAML().replace(
            "tcp:mail.example.org:143", "tls:mail.example.org:993"
        )
        problems = self.yamlProblems(text)
        self.assertEqual(len(problems), 1, problems)
        self.assertProblem(problems, "servers.new.starttls", "must be off (or absent)")

    def test_badStarttls(self) -> None:
        """
        C{starttls} is C{required} or C{off}, nothing else.
        """
        text = self.issueYAML().replace("starttls: required", "starttls: yes")
        self.assertProblem(
            self.yamlProblems(text),
            "servers.new.starttls",
            "must be 'required' or 'off', not a boolean",
        )
        text = self.issueYAML().replace("starttls: required", "starttls: optional")
        self.assertProblem(
            self.yamlProblems(text), "servers.new.starttls", "not 'optional'"
        )

    def test_tlsSettingsWithoutTLS(self) -> None:
        """
        C{tls_ca} and C{tls_hostname} on a C{tcp:} endpoint without
        STARTTLS would have no effect, and are problems.
        """
        document = self.document()
        document["servers"]["new"].update(
            starttls=False, allow_plaintext=True, tls_hostname="x"
        )
        self.assertOnlyProblem(document, "servers.new.tls_hostname", "no effect")

    def test_badCertificateFile(self) -> None:
        """
        C{tls_ca} must be an existing file of valid PEM certificates.
        """
        document = self.document()
        document["servers"]["new"]["tls_ca"] = "missing.pem"
        self.assertOnlyProblem(
            document,
            "servers.new.tls_ca",
            f"no such file: {os.path.join(self.directory, 'missing.pem')}",
        )
        writeFile(os.path.join(self.directory, "text.pem"), "hello\n")
        document["servers"]["new"]["tls_ca"] = "text.pem"
        self.assertOnlyProblem(
            document, "servers.new.tls_ca", "contains no PEM certificate"
        )
        writeFile(
            os.path.join(self.directory, "bad.pem"),
            selfSignedPEM()
            + b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        document["servers"]["new"]["tls_ca"] = "bad.pem"
        self.assertOnlyProblem(
            document, "servers.new.tls_ca", "certificate 2 in"
        )

    def test_badStatus(self) -> None:
        """
        C{status} is a mapping or C{off}, and its C{listen} a server
        endpoint Twisted parses.
        """
        document = self.document()
        document["status"] = {"listen": "tcp:http"}
        self.assertOnlyProblem(document, "status.listen", "invalid endpoint 'tcp:http'")
        document["status"] = {"listen": "tcp:70000"}
        self.assertOnlyProblem(document, "status.listen", "out of range")
        document["status"] = {"listen": "carrier-pigeon:1"}
        self.assertOnlyProblem(document, "status.listen", "Unknown endpoint type")
        document["status"] = {"listen": "tcp6:70000"}
        self.assertOnlyProblem(document, "status.listen", "out of range")

    def test_statusEndpointHints(self) -> None:
        """
        Where Twisted's parser names only an index or an argument, the
        problem says what to do: a C{systemd:} endpoint outside the
        service its socket unit starts (no LISTEN_FDS) names the socket
        missing; an IPv6 interface with its colons not escaped says to
        escape them.
        """
        document = self.document()
        document["status"] = {"listen": "systemd:domain=INET:index=0"}
        self.assertOnlyProblem(
            document,
            "status.listen",
            "invalid endpoint 'systemd:domain=INET:index=0': systemd passed this process no"
            " socket at index 0 (LISTEN_FDS, LISTEN_FDNAMES): a systemd: endpoint works only"
            " in a service its .socket unit starts",
        )
        document["status"] = {"listen": "systemd:domain=INET:name=status"}
        self.assertOnlyProblem(document, "status.listen", "no socket named 'status'")
        document["status"] = {"listen": "tcp:8025:interface=::1"}
        self.assertOnlyProblem(
            document, "status.listen", "escape the colons of an IPv6 address with backslashes"
        )
        document["status"] = True
        self.assertOnlyProblem(
            document, "status", "expected a mapping {listen: ENDPOINT} or off"
        )

    def test_bothPasswords(self) -> None:
        """
        A destination with both C{password} and C{password_file} is a
        problem.
        """
        document = self.document()
        document["jobs"][1]["destination"]["password_file"] = self.passwordFile
        self.assertOnlyProblem(
            document,
            "jobs[1].destination",
            "give exactly one of password, password_file, password_credential,"
            " not password and password_file",
        )

    def test_neitherPassword(self) -> None:
        """
        A destination with neither C{password} nor C{password_file} is a
        problem.
        """
        document = self.document()
        del document["jobs"][0]["destination"]["password_file"]
        self.assertOnlyProblem(document, "jobs[0].destination", "missing password")

    def test_groupReadablePasswordFile(self) -> None:
        """
        A password file readable by its group is a problem telling to
        C{chmod 600} it.
        """
        os.chmod(self.passwordFile, 0o640)
        self.assertOnlyProblem(
            self.document(),
            "jobs[0].destination.password_file",
            f"(mode 0640); run: chmod 600 {self.passwordFile}",
        )

    def test_missingFiles(self) -> None:
        """
        Missing directories and password files are problems naming the
        resolved path.
        """
        document = self.document()
        document["jobs"][0]["source"]["maildir"] = "nope"
        document["jobs"][0]["destination"]["password_file"] = "nope.pw"
        document["jobs"][1]["source"]["eml_dir"] = self.passwordFile
        document["state"] = "/nonexistent-imapmig/state.sqlite"
        problems = self.problems(document)
        self.assertEqual(len(problems), 4, problems)
        nope = os.path.join(self.directory, "nope")
        self.assertProblem(
            problems, "jobs[0].source.maildir", f"no such directory: {nope}"
        )
        self.assertProblem(
            problems, "jobs[0].destination.password_file", f"{nope}.pw does not exist"
        )
        self.assertProblem(problems, "jobs[1].source.eml_dir", "not a directory")
        self.assertProblem(
            problems, "state", "directory /nonexistent-imapmig does not exist"
        )

    def test_notAMaildir(self) -> None:
        """
        A Maildir source must have C{cur} and C{new} subdirectories.
        """
        document = self.document()
        document["jobs"][0]["source"]["maildir"] = self.emlDir
        self.assertOnlyProblem(document, "jobs[0].source.maildir", "is not a Maildir")

    def test_badSource(self) -> None:
        """
        A source is exactly one of C{maildir} and C{eml_dir}; C{folder}
        goes with C{eml_dir} only and has no empty hierarchy component.
        """
        document = self.document()
        document["jobs"][0]["source"]["eml_dir"] = self.emlDir
        document["jobs"][1]["source"] = {}
        problems = self.problems(document)
        self.assertProblem(problems, "jobs[0].source", "exactly one of maildir")
        self.assertProblem(problems, "jobs[1].source", "exactly one of maildir")
        document = self.document()
        document["jobs"][0]["source"]["folder"] = "Archive"
        document["jobs"][1]["source"]["folder"] = "Archive//2019"
        problems = self.problems(document)
        self.assertEqual(len(problems), 2, problems)
        self.assertProblem(problems, "jobs[0].source.folder", "does not apply to a maildir source")
        self.assertProblem(problems, "jobs[1].source.folder", "'Archive//2019'")

    def test_missingSections(self) -> None:
        """
        C{servers} and C{jobs} are required and must not be empty.
        """
        problems = self.problems({"state": self.statePath})
        self.assertEqual(len(problems), 2, problems)
        self.assertProblem(problems, "servers", "missing")
        self.assertProblem(problems, "jobs", "missing")
        problems = self.problems({"state": self.statePath, "servers": {}, "jobs": []})
        self.assertProblem(problems, "servers", "at least one server")
        self.assertProblem(problems, "jobs", "at least one job")

    def test_nonStringKey(self) -> None:
        """
        A mapping key that YAML reads as something else than text is a
        problem.
        """
        document = self.document()
        document["jobs"][0][1] = "x"
        self.assertOnlyProblem(document, "jobs[0]", "key 1 is an integer, not a string")

    def test_severalProblems(self) -> None:
        """
        Every problem is reported, in file order, not just the first.
        """
        text = textwrap.dedent(
            f"""\
            state: {self.statePath}
            status: {{listen: "tcp:eighty"}}
            servers:
              new: {{endpoint: "tcp:mail.example.org:143", starttls: maybe}}
            defaults: {{connections: 0}}
            jobs:
              - name: alice
                source: {{maildir: {self.maildir}}}
                destination: {{server: old, user: alice, password: "{INLINE_PASSWORD}"}}
              - name: alice
                sauce: {{maildir: {self.maildir}}}
                destination: {{server: new, user: alice}}
            """
        )
        problems = self.yamlProblems(text)
        paths = [line.split(": ")[1] for line in problems]
        self.assertEqual(
            paths,
            [
                "status.listen",
                "servers.new.starttls",
                "defaults.connections",
                "jobs[0].destination.server",
                "jobs[1].sauce",
                "jobs[1].name",
                "jobs[1].source",
                "jobs[1].destination",
            ],
        )
        self.assertProblem(problems, "jobs[1].sauce", "did you mean 'source'?")


class SecretTests(SynchronousTestCase):
    """
    Passwords never show.
    """

    def test_repr(self) -> None:
        """
        A L{Secret}'s C{repr} and C{str} hide its value.
        """
        secret = Secret("hunter2")
        self.assertEqual(repr(secret), "Secret('***')")
        self.assertEqual(str(secret), "Secret('***')")
        self.assertEqual(f"{secret}", "Secret('***')")
        self.assertEqual(secret.value, "hunter2")


class ReadPasswordFileTests(SynchronousTestCase):
    """
    Tests for L{readPasswordFile}.
    """

    def setUp(self) -> None:
        self.directory = os.path.abspath(self.mktemp())
        os.makedirs(self.directory)
        self.path = os.path.join(self.directory, "password")

    def test_firstLine(self) -> None:
        """
        The password is the first line, without its line ending, LF or
        CRLF; a file without a final newline works too.
        """
        for content in [b"s3cret\n", b"s3cret\r\nignored\n", b"s3cret"]:
            writeFile(self.path, content)
            self.assertEqual(readPasswordFile(self.path), "s3cret")
        writeFile(self.path, " spaces are kept \n".encode())
        self.assertEqual(readPasswordFile(self.path), " spaces are kept ")
        writeFile(self.path, "pässwörd\n", 0o400)
        self.assertEqual(readPasswordFile(self.path), "pässwörd")

    def test_isValueError(self) -> None:
        """
        L{PasswordFileError} is a L{ValueError}.
        """
        self.assertTrue(issubclass(PasswordFileError, ValueError))

    def test_missing(self) -> None:
        """
        A missing file is refused.
        """
        error = self.assertRaises(PasswordFileError, readPasswordFile, self.path)
        self.assertEqual(str(error), f"password file {self.path} does not exist")

    def test_directory(self) -> None:
        """
        A directory is refused.
        """
        error = self.assertRaises(PasswordFileError, readPasswordFile, self.directory)
        self.assertIn("is a directory", str(error))

    def test_notRegular(self) -> None:
        """
        A FIFO is refused, without blocking on it.
        """
        os.mkfifo(self.path, 0o600)
        error = self.assertRaises(PasswordFileError, readPasswordFile, self.path)
        self.assertIn("not a regular file", str(error))

    def test_accessibleToOthers(self) -> None:
        """
        A file its group or others may read or write is refused, with the
        command that fixes it.
        """
        for mode in [0o640, 0o604, 0o620, 0o602, 0o660]:
            writeFile(self.path, "s3cret\n", mode)
            error = self.assertRaises(PasswordFileError, readPasswordFile, self.path)
            self.assertEqual(
                str(error),
                f"password file {self.path} is accessible to group or others"
                f" (mode {mode:04o}); run: chmod 600 {self.path}",
            )
            self.assertNotIn("s3cret", str(error))

    def test_unreadable(self) -> None:
        """
        A file the daemon may not read is refused.
        """
        writeFile(self.path, "s3cret\n", 0o600)
        denyAccess(self, self.path)
        error = self.assertRaises(PasswordFileError, readPasswordFile, self.path)
        self.assertIn("cannot be read", str(error))

    def test_empty(self) -> None:
        """
        An empty file, or one whose first line is empty, is refused.
        """
        for content in [b"", b"\n", b"\r\nsecond line\n"]:
            writeFile(self.path, content)
            error = self.assertRaises(PasswordFileError, readPasswordFile, self.path)
            self.assertIn("is empty", str(error))

    def test_notUTF8(self) -> None:
        """
        A password that is not UTF-8 is refused without quoting it.
        """
        writeFile(self.path, b"caf\xe9\n")
        error = self.assertRaises(PasswordFileError, readPasswordFile, self.path)
        self.assertEqual(str(error), f"password file {self.path} is not UTF-8 text")


class SourceKindsTests(ConfigTestCase):
    """
    mbox and IMAP sources, folder rules and the identity check.
    """

    def test_mboxFileAndDirectory(self) -> None:
        """
        An mbox source names an existing file or directory; quoting defaults
        to mboxrd.
        """
        mbox = writeFile(os.path.join(self.directory, "inbox.mbox"), "From a Mon Jan  1 00:00:00 2001\n\n")
        document = self.document()
        document["jobs"][0]["source"] = {"mbox": mbox}
        document["jobs"][1]["source"] = {"mbox": self.emlDir, "quoting": "mboxo"}
        loaded = parseConfig(document, self.configPath)
        self.assertEqual(loaded.jobs[0].source, MboxSourceConfig(mbox, "mboxrd"))
        self.assertEqual(loaded.jobs[1].source, MboxSourceConfig(self.emlDir, "mboxo"))

    def test_mboxProblems(self) -> None:
        """
        A missing mbox path and an unknown quoting are reported at their
        keys; a key of another source kind is refused by name.
        """
        document = self.document()
        document["jobs"][0]["source"] = {"mbox": "/nonexistent/x.mbox"}
        document["jobs"][1]["source"] = {"mbox": self.emlDir, "quoting": "mboxcl9", "folder": "X"}
        problems = self.problems(document)
        self.assertProblem(problems, "jobs[0].source.mbox", "/nonexistent/x.mbox does not exist")
        self.assertProblem(problems, "jobs[1].source.folder", "does not apply to a mbox source")

    def test_imapSource(self) -> None:
        """
        An IMAP source names a server, a user and a password, like a
        destination.
        """
        document = self.document()
        document["servers"]["old"] = {"endpoint": "tls:old.example.org:993"}
        document["jobs"][0]["source"] = {
            "server": "old",
            "user": "alice-old",
            "password_file": self.passwordFile,
        }
        loaded = parseConfig(document, self.configPath)
        source = loaded.jobs[0].source
        assert isinstance(source, ImapSourceConfig)
        self.assertEqual(source.server.name, "old")
        self.assertEqual(source.user, "alice-old")
        self.assertEqual(source.password, Secret(FILE_PASSWORD))

    def test_imapSourceProblems(self) -> None:
        """
        An unknown server and a missing password are reported under
        C{source}.
        """
        document = self.document()
        document["jobs"][0]["source"] = {"server": "nope", "user": "a"}
        problems = self.problems(document)
        self.assertProblem(problems, "jobs[0].source.server", "no server named 'nope'")
        self.assertProblem(problems, "jobs[0].source", "missing password")

    def test_twoKinds(self) -> None:
        """
        Two source kinds at once are refused, naming both.
        """
        document = self.document()
        document["jobs"][0]["source"] = {"maildir": self.maildir, "mbox": self.emlDir}
        self.assertOnlyProblem(document, "jobs[0].source", "not maildir and mbox")

    def test_folderRules(self) -> None:
        """
        include, exclude (a list or one string) and rename are read into
        L{FolderRules}, paths with C{/}; defaults: everything, no rename,
        identity by fingerprint.
        """
        document = self.document()
        document["jobs"][0]["folders"] = {
            "include": ["INBOX", "Archive*"],
            "exclude": "Archive/Old",
            "rename": {"Sent Items": "Sent", "A/B": "C/D"},
        }
        document["jobs"][0]["identity"] = "message-id"
        document["jobs"][0]["eight_bit"] = "fail"
        loaded = parseConfig(document, self.configPath)
        self.assertEqual(
            loaded.jobs[0].folders,
            FolderRules(
                include=("INBOX", "Archive*"),
                exclude=("Archive/Old",),
                rename=(("Sent Items", "Sent"), ("A/B", "C/D")),
            ),
        )
        self.assertEqual(loaded.jobs[0].identity, "message-id")
        self.assertEqual(loaded.jobs[1].folders, FolderRules())
        self.assertEqual(loaded.jobs[1].identity, "fingerprint")
        self.assertEqual((loaded.jobs[0].eightBit, loaded.jobs[1].eightBit), ("fail", "literal"))

    def test_identityOffUnquoted(self) -> None:
        """
        C{identity: off} written unquoted (which YAML reads as false) means
        the identity check is off, as C{status: off} and C{starttls: off}
        do; C{true} is still refused.
        """
        document = self.document()
        document["jobs"][0]["identity"] = yaml.safe_load("off")
        self.assertEqual(parseConfig(document, self.configPath).jobs[0].identity, "off")
        document["jobs"][0]["identity"] = True
        self.assertProblem(self.problems(document), "jobs[0].identity", "expected a string")

    def test_retrySettings(self) -> None:
        """
        The retry settings come from C{defaults}, each job may override
        them, and C{stop_timeout} is read at the top.
        """
        document = self.document()
        document["defaults"] = {"retry_attempts": 4, "quota_pause": 60}
        document["jobs"][1]["message_attempts"] = 7
        document["jobs"][1]["retry_max_delay"] = 20
        document["stop_timeout"] = 5
        loaded = parseConfig(document, self.configPath)
        self.assertEqual(loaded.jobs[0].retry, RetryConfig(4, 300, 3, 60))
        self.assertEqual(loaded.jobs[1].retry, RetryConfig(4, 20, 7, 60))
        self.assertEqual(loaded.stopTimeout, 5.0)
        document["stop_timeout"] = 0
        document["jobs"][0]["retry_attempts"] = 0
        problems = self.problems(document)
        self.assertProblem(problems, "stop_timeout", "must be greater than 0 seconds")
        self.assertProblem(problems, "jobs[0].retry_attempts", "must be at least 1")

    def test_folderRulesProblems(self) -> None:
        """
        Wrong types, empty patterns, bad rename targets and an unknown
        identity are each reported at their path.
        """
        document = self.document()
        document["jobs"][0]["folders"] = {
            "include": {"a": 1},
            "exclude": ["ok", ""],
            "rename": {"A": "B//C"},
            "bogus": 1,
        }
        document["jobs"][1]["folders"] = {"rename": ["A", "B"]}
        document["jobs"][1]["identity"] = "sha1"
        document["jobs"][1]["eight_bit"] = "drop"
        problems = self.problems(document)
        self.assertProblem(problems, "jobs[0].folders.include", "expected a list of folder patterns")
        self.assertProblem(problems, "jobs[0].folders.exclude[1]", "must not be empty")
        self.assertProblem(problems, "jobs[0].folders.rename['A']", "an empty name between slashes")
        self.assertProblem(problems, "jobs[0].folders.bogus", "")
        self.assertProblem(problems, "jobs[1].folders.rename", "expected a mapping")
        self.assertProblem(problems, "jobs[1].identity", "unknown identity check 'sha1'")
        self.assertProblem(problems, "jobs[1].eight_bit", "unknown eight_bit choice 'drop'")
