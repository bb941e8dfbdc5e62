# -*- test-case-name: tests.test_trustroots -*-
"""
The certificates a TLS client trusts: those of a configured PEM file
(C{tls_ca}), or the system's trust store.

A leaf: both the IMAP connections (L{imapmig.daemon.service}) and the token
refresh agent (L{imapmig.oauth.tokenrefresh}) load C{tls_ca} through it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, cast

from twisted.internet.ssl import Certificate, platformTrust, trustRootFromCertificates

if TYPE_CHECKING:
    # Twisted exports the interface only from its private module.
    from twisted.internet._sslverify import IOpenSSLTrustRoot

__all__ = ["trustRootFrom"]

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
