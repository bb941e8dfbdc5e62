# -*- test-case-name: tests.test_tlsidentity,tests.test_trustroots -*-
"""
Client TLS that checks the server's host name and refuses a certificate
it cannot check, saying why in words.

Twisted's C{optionsForClientTLS} checks the host name with
C{service_identity}, which raises C{CertificateError} (not
C{VerificationError}) for a certificate without any C{subjectAltName}
(since service_identity 24.1: one that names its host in its Common Name
only).  Twisted's verify callback catches that as an unexpected error: it
logs a traceback ("while verifying certificate") and returns OpenSSL's own
verdict, so a certificate that a trusted CA signed is I{accepted} without
its host name checked, and an untrusted one is refused as "certificate
verify failed" with the reason only in the traceback.

L{HostnameVerifyingTLS} wraps C{optionsForClientTLS}: the connection it
makes verifies the leaf certificate's identity with a callback of its
own, for which any failure to check the name is a refusal, and the
connection ends with an L{IdentityRefused} (an C{SSL.Error}, read as a
TLS failure everywhere: L{imapmig.imap.tls.handshakeFailure}, the token
client) that says what is wrong with the certificate.

L{trustRootFrom} gives the certificates such a client trusts: those of a
C{tls_ca} file, or the system's trust store.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable, cast

from OpenSSL import SSL
from OpenSSL.crypto import X509
from service_identity import CertificateError, VerificationError
from service_identity.hazmat import DNS_ID, IPAddress_ID, ServiceID, verify_service_identity
from service_identity.pyopenssl import extract_patterns
from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from twisted.internet.ssl import (
    Certificate,
    optionsForClientTLS,
    platformTrust,
    trustRootFromCertificates,
)
from twisted.python.failure import Failure
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer

from imapmig.errors import TLSFailed

if TYPE_CHECKING:
    # Twisted exports the interface only from its private module.
    from twisted.internet._sslverify import IOpenSSLTrustRoot

__all__ = [
    "HostnameVerifyingPolicy",
    "HostnameVerifyingTLS",
    "IdentityRefused",
    "describeIdentityError",
    "trustRootFrom",
]


_VERIFY = SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT


class IdentityRefused(TLSFailed, SSL.Error):
    """
    The server's certificate was refused because it does not show the host
    name imapmig connected to, or shows it in a way that cannot be checked.
    An C{SSL.Error}, which Twisted's TLS layer catches, and a L{TLSFailed}
    of imapmig's hierarchy; it stays here rather than in L{imapmig.errors},
    which does not load OpenSSL.

    Its arguments have the shape of OpenSSL's error queue (a list of
    C{(library, function, reason)}), which is what Twisted and
    L{imapmig.imap.tls.describeTLSError} read.

    @ivar reason: the refusal in words.
    """

    def __init__(self, reason: str) -> None:
        super().__init__([("imapmig", "verify_hostname", reason)])
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


def describeIdentityError(error: Exception, hostname: str) -> str:
    """
    What is wrong with a certificate that C{service_identity} refused for
    C{hostname}, in words.
    """
    if isinstance(error, VerificationError):
        return f"the server's certificate does not match {hostname}"
    text = str(error).replace("`", "")
    if "subjectAltName" in text:
        return (
            f"the server's certificate does not contain any subjectAltName, so it"
            f" cannot be checked for {hostname} (a host name in the Common Name"
            f" only is not accepted: the certificate must be reissued with"
            f" subjectAltName entries)"
        )
    return f"the server's certificate cannot be checked for {hostname}: {text}"


def _serviceID(hostname: str) -> ServiceID:
    if isIPAddress(hostname) or isIPv6Address(hostname):
        return IPAddress_ID(hostname)
    return DNS_ID(hostname)


def _verifier(
    tlsProtocol: Any, service: ServiceID, hostname: str
) -> Callable[[SSL.Connection, X509, int, int, int], bool]:
    """
    The verify callback of one connection: OpenSSL's verdict for the chain,
    and for the leaf also the host name, any failure to check it being a
    refusal that ends the connection with an L{IdentityRefused}.
    """
    # Dropped after the leaf is checked, as Twisted does: no cycle through
    # the OpenSSL connection.
    protocols = [tlsProtocol]

    def verify(connection: SSL.Connection, certificate: X509, err: int, depth: int, ok: int) -> bool:
        if depth != 0 or not ok:
            # The chain is OpenSSL's to judge; an untrusted leaf is
            # refused by it ("certificate verify failed").
            return bool(ok)
        try:
            verify_service_identity(extract_patterns(certificate), [service], [])
        except (VerificationError, CertificateError) as e:
            refusal = IdentityRefused(describeIdentityError(e, hostname))
        except Exception as e:
            # An exception must not escape an OpenSSL callback (it would
            # be lost, and the certificate accepted): refuse instead.
            refusal = IdentityRefused(
                f"the server's certificate cannot be checked for {hostname}:"
                f" {type(e).__name__}: {e}"
            )
        else:
            return True
        if protocols:
            protocols.pop().failVerification(Failure(refusal))
        return False

    return verify


@implementer(IOpenSSLClientConnectionCreator)
class HostnameVerifyingTLS:
    """
    Client TLS options as C{optionsForClientTLS} makes them (trust root,
    SNI), whose connections check the server's host name themselves (see
    the module's docstring).
    """

    def __init__(self, hostname: str, trustRoot: IOpenSSLTrustRoot | None = None) -> None:
        """
        @param hostname: the name (or IP address) the server's certificate
            must carry.
        @param trustRoot: the certificates to trust, or L{None} for the
            platform's.
        """
        self._hostname = hostname
        self._service = _serviceID(hostname)
        self._options = optionsForClientTLS(hostname, trustRoot=trustRoot)

    def clientConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        """
        The wrapped options' connection, with this module's verify
        callback in place of Twisted's.
        """
        connection: SSL.Connection = self._options.clientConnectionForTLS(tlsProtocol)
        connection.set_verify(_VERIFY, _verifier(tlsProtocol, self._service, self._hostname))
        return connection


@implementer(IPolicyForHTTPS)
class HostnameVerifyingPolicy:
    """
    The HTTPS policy of a web client (C{twisted.web.client.Agent}) that
    verifies certificates against a trust root and checks host names as
    L{HostnameVerifyingTLS} does: C{BrowserLikePolicyForHTTPS} with the
    refusal of a certificate without subjectAltName.
    """

    def __init__(self, trustRoot: IOpenSSLTrustRoot | None = None) -> None:
        """
        @param trustRoot: the certificates to trust, or L{None} for the
            platform's.
        """
        self._trustRoot = trustRoot

    def creatorForNetloc(self, hostname: bytes, port: int) -> HostnameVerifyingTLS:
        """
        The TLS options for a connection to C{hostname}.
        """
        return HostnameVerifyingTLS(hostname.decode("ascii"), self._trustRoot)


# The trust roots (moved here from imapmig.access.trustroots): the
# certificates a TLS client trusts, those of a configured PEM file (tls_ca),
# or the system's trust store; both the IMAP connections
# (imapmig.daemon.service) and the token refresh agent
# (imapmig.oauth.tokenrefresh) load tls_ca through it.

_PEM_CERTIFICATE = re.compile(
    rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL
)


def trustRootFrom(pemFile: str | None) -> IOpenSSLTrustRoot:
    """
    The trust root of a C{tls_ca} setting.

    @param pemFile: the path of a PEM file holding the certificates to
        trust (every C{CERTIFICATE} block in it), or L{None} for the
        system's trust store.
    @return: the trust root to verify a peer's certificate against.
    """
    if pemFile is None:
        return cast("IOpenSSLTrustRoot", platformTrust())
    with open(pemFile, "rb") as f:
        pem = f.read()
    return cast(
        "IOpenSSLTrustRoot",
        trustRootFromCertificates(
            [Certificate.loadPEM(block) for block in _PEM_CERTIFICATE.findall(pem)]
        ),
    )
