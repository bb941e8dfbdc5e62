"""
Tests for L{imapmig.access.tlsidentity}: a certificate whose host name cannot be
checked is refused, with the reason in words and no traceback.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from twisted.internet import reactor
from twisted.internet.endpoints import (
    SSL4ServerEndpoint,
    TCP4ClientEndpoint,
    connectProtocol,
    wrapClientTLS,
)
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.ssl import (
    Certificate,
    PrivateCertificate,
    optionsForClientTLS,
    trustRootFromCertificates,
)
from twisted.internet.defer import Deferred
from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface.verify import verifyObject

from imapmig.config import parseConfig
from imapmig.errors import TLSFailed
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.tls import WatchedClientTLS
from imapmig.progress import JobState
from imapmig.daemon.service import buildService
from imapmig.access.tlsidentity import (
    HostnameVerifyingPolicy,
    HostnameVerifyingTLS,
    IdentityRefused,
)
from tests.support import newDirectory, writePasswordFile

GREETING = b"* OK [CAPABILITY IMAP4rev1 AUTH=PLAIN] ready\r\n"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def makeCertificates(names: list[x509.GeneralName] | None) -> tuple[bytes, bytes]:
    """
    A CA and a server certificate it signed for C{CN=localhost}, with
    C{names} as its subjectAltName (none at all if L{None}).

    @return: the CA's certificate and the server's key and certificate, in
        PEM.
    """
    now = datetime.datetime.now(datetime.timezone.utc)
    caKey = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("imapmig test CA"))
        .issuer_name(_name("imapmig test CA"))
        .public_key(caKey.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(caKey, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if names is not None:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    leaf = builder.sign(caKey, hashes.SHA256())
    server = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ) + leaf.public_bytes(serialization.Encoding.PEM)
    return ca.public_bytes(serialization.Encoding.PEM), server


class _Greeter(Protocol):
    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.write(GREETING)


async def handshake(
    test: TestCase, options: Any, serverPEM: bytes
) -> tuple[MigrationIMAP4Client, Failure | None]:
    """
    Connect an IMAP client under client TLS C{options} (watched, as the
    daemon's are) to a server on loopback greeting over TLS with
    C{serverPEM}.

    @return: the client, and how its greeting failed (L{None} if it
        arrived); the connection is closed.
    """
    serverTLS = PrivateCertificate.loadPEM(serverPEM).options()
    port = await SSL4ServerEndpoint(reactor, 0, serverTLS, interface="127.0.0.1").listen(
        Factory.forProtocol(_Greeter)
    )
    test.addCleanup(port.stopListening)
    client = MigrationIMAP4Client(reactor, 10, peer="alice at tls:localhost")
    endpoint = wrapClientTLS(
        WatchedClientTLS(options), TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port)
    )
    await connectProtocol(endpoint, client)
    failure = None
    try:
        await client.greeted
    except Exception:
        failure = Failure()
    assert client.transport is not None
    client.transport.loseConnection()
    await client.closed
    return client, failure


class HostnameVerifyingTLSTests(TestCase):
    """
    L{HostnameVerifyingTLS} against servers on loopback with each kind of
    certificate.
    """

    def trusting(self, ca: bytes, hostname: str = "localhost") -> HostnameVerifyingTLS:
        return HostnameVerifyingTLS(hostname, trustRootFromCertificates([Certificate.loadPEM(ca)]))

    def test_interfaces(self) -> None:
        """
        The options and the web policy provide their interfaces.
        """
        self.assertTrue(verifyObject(IOpenSSLClientConnectionCreator, HostnameVerifyingTLS("a.example")))
        policy = HostnameVerifyingPolicy()
        self.assertTrue(verifyObject(IPolicyForHTTPS, policy))
        self.assertIsInstance(policy.creatorForNetloc(b"a.example", 443), HostnameVerifyingTLS)

    async def test_matching(self) -> None:
        """
        A certificate a trusted CA signed whose subjectAltName carries the
        host name is accepted: the greeting arrives.
        """
        ca, server = makeCertificates([x509.DNSName("localhost")])
        client, failure = await handshake(self, self.trusting(ca), server)
        self.assertIsNone(failure)

    async def test_matchingIP(self) -> None:
        """
        An IP address is checked against the certificate's IP entries.
        """
        ca, server = makeCertificates([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        client, failure = await handshake(self, self.trusting(ca, "127.0.0.1"), server)
        self.assertIsNone(failure)

    async def test_noSubjectAltName(self) -> None:
        """
        A certificate a trusted CA signed for C{CN=localhost} without any
        subjectAltName is refused: the greeting fails with a permanent
        L{TLSFailed} that says so in words, and nothing is logged (no
        traceback).
        """
        ca, server = makeCertificates(None)
        with capturedLogs() as events:
            client, failure = await handshake(self, self.trusting(ca), server)
        assert failure is not None
        error = failure.trap(TLSFailed) and failure.value
        self.assertEqual(
            str(error),
            "TLS handshake failed: the server's certificate does not contain any"
            " subjectAltName, so it cannot be checked for localhost (a host name in"
            " the Common Name only is not accepted: the certificate must be reissued"
            " with subjectAltName entries)",
        )
        self.assertEqual([e for e in events if e["log_level"] >= LogLevel.warn], [])
        self.assertEqual(self.flushLoggedErrors(), [])

    async def test_noSubjectAltNameTwisted(self) -> None:
        """
        What L{test_noSubjectAltName} guards against: Twisted's own options
        accept that certificate, host name unchecked, after logging a
        traceback.
        """
        ca, server = makeCertificates(None)
        options = optionsForClientTLS(
            "localhost", trustRoot=trustRootFromCertificates([Certificate.loadPEM(ca)])
        )
        client, failure = await handshake(self, options, server)
        self.assertIsNone(failure)
        self.assertEqual(len(self.flushLoggedErrors()), 1)

    async def test_mismatch(self) -> None:
        """
        A certificate for another name is refused, naming the one expected.
        """
        ca, server = makeCertificates([x509.DNSName("other.example")])
        with capturedLogs() as events:
            client, failure = await handshake(self, self.trusting(ca), server)
        assert failure is not None
        error = failure.trap(TLSFailed) and failure.value
        self.assertEqual(
            str(error), "TLS handshake failed: the server's certificate does not match localhost"
        )
        self.assertEqual([e for e in events if e["log_level"] >= LogLevel.warn], [])

    async def test_untrusted(self) -> None:
        """
        A certificate no trusted CA signed is refused by OpenSSL, with no
        traceback even when it has no subjectAltName either.
        """
        ca, server = makeCertificates(None)
        other, _ = makeCertificates([x509.DNSName("localhost")])
        with capturedLogs() as events:
            client, failure = await handshake(self, self.trusting(other), server)
        assert failure is not None
        error = failure.trap(TLSFailed) and failure.value
        self.assertIn("certificate verify failed", str(error))
        self.assertEqual([e for e in events if e["log_level"] >= LogLevel.warn], [])
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_refusalReadsAsOpenSSLError(self) -> None:
        """
        L{IdentityRefused} is an C{SSL.Error} shaped like OpenSSL's queue
        (what the token client and L{imapmig.imap.tls} read), and its text
        is the reason alone.
        """
        refusal = IdentityRefused("why")
        self.assertEqual(refusal.args, ([("imapmig", "verify_hostname", "why")],))
        self.assertEqual(str(refusal), "why")

    def test_refusalInHierarchy(self) -> None:
        """
        L{IdentityRefused} is also a L{TLSFailed} of imapmig's hierarchy,
        and a handshake it ends still reads as before: C{TLS handshake
        failed:} and the reason, from OpenSSL's queue.
        """
        from imapmig.errors import TLSFailed
        from imapmig.imap.tls import handshakeFailure

        refusal = IdentityRefused("the certificate is for other.example")
        self.assertIsInstance(refusal, TLSFailed)
        failure = handshakeFailure(refusal, object())
        self.assertEqual(
            (type(failure), str(failure)),
            (TLSFailed, "TLS handshake failed: the certificate is for other.example"),
        )


class _Recorder(Protocol):
    """
    Greets as an IMAP server, and keeps what the client sends.
    """

    def __init__(self, received: list[bytes]) -> None:
        self.received = received

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.write(GREETING)

    def dataReceived(self, data: bytes) -> None:
        self.received.append(data)


class JobCertificateTests(TestCase):
    """
    The daemon's job against an implicit-TLS server whose certificate has
    no subjectAltName.
    """

    async def test_noSubjectAltNameFailsTheJob(self) -> None:
        """
        The job fails at once (one connection), its error says in words
        that the certificate has no subjectAltName, the log holds one error
        line saying so (the job's end line) and no traceback, and the
        server never received the password.
        """
        ca, server = makeCertificates(None)
        received: list[bytes] = []
        connections: list[_Recorder] = []

        def build() -> _Recorder:
            connections.append(_Recorder(received))
            return connections[-1]

        serverTLS = PrivateCertificate.loadPEM(server).options()
        port = await SSL4ServerEndpoint(reactor, 0, serverTLS, interface="127.0.0.1").listen(
            Factory.forProtocol(build)
        )
        self.addCleanup(port.stopListening)
        number = port.getHost().port
        directory = newDirectory(self)
        caPath = os.path.join(directory, "ca.pem")
        with open(caPath, "wb") as f:
            f.write(ca)
        emlDirectory = os.path.join(directory, "eml")
        os.mkdir(emlDirectory)
        with open(os.path.join(emlDirectory, "1.eml"), "wb") as f:
            f.write(b"Subject: one\r\n\r\nbody\r\n")
        document = {
            "state": os.path.join(directory, "state.sqlite"),
            "status": "off",
            "servers": {
                "nosan": {
                    "endpoint": f"tls:127.0.0.1:{number}",
                    "tls_hostname": "localhost",
                    "tls_ca": caPath,
                }
            },
            "jobs": [
                {
                    "name": "tls",
                    "source": {"eml_dir": emlDirectory},
                    "destination": {
                        "server": "nosan",
                        "user": "alice",
                        "password_file": writePasswordFile(
                            os.path.join(directory, "password"), "secret"
                        ),
                    },
                }
            ],
        }
        config = parseConfig(document, os.path.join(directory, "imapmig.yaml"))
        finished: Deferred[bool] = Deferred()
        service = buildService(config, reactor, whenDone=finished.callback)
        with capturedLogs() as events:
            service.startService()
            try:
                completed = await finished.addTimeout(30, reactor)
            finally:
                await service.stopService()
        self.assertFalse(completed)
        progress = service.progress.job("tls")
        self.assertEqual(progress.state, JobState.FAILED)
        self.assertIn("does not contain any subjectAltName", progress.error or "")
        errors = [formatEvent(e) for e in events if e["log_level"] >= LogLevel.error]
        self.assertEqual(len(errors), 1, errors)
        self.assertTrue(errors[0].startswith("Job tls failed after "), errors[0])
        self.assertIn(
            f"alice at tls:127.0.0.1:{number}: TLS handshake failed: the server's certificate"
            " does not contain any subjectAltName, so it cannot be checked for localhost",
            errors[0],
        )
        self.assertEqual([e for e in events if "log_failure" in e], [])
        self.assertEqual(self.flushLoggedErrors(), [])
        self.assertEqual(len(connections), 1)
        self.assertNotIn(b"secret", b"".join(received))
