"""
Tests for L{imapmig.access.tlsidentity.trustRootFrom}: the trust root of a C{tls_ca} setting.
"""

from __future__ import annotations

import os
import tempfile

from twisted.internet._sslverify import OpenSSLCertificateAuthorities
from twisted.internet.ssl import Certificate, KeyPair, platformTrust
from twisted.trial.unittest import SynchronousTestCase

from imapmig.access.tlsidentity import trustRootFrom


class TrustRootTests(SynchronousTestCase):
    """
    L{trustRootFrom}.
    """

    def test_everyCertificateOfTheFile(self) -> None:
        """
        Every certificate of a PEM file is trusted, whatever surrounds it
        (a key, comments): exactly those, in order.
        """
        certificates = [
            KeyPair.generate(size=2048).selfSignedCert(serial, commonName=f"ca{serial}")
            for serial in (1, 2)
        ]
        fd, path = tempfile.mkstemp(suffix=".pem")
        self.addCleanup(os.unlink, path)
        with os.fdopen(fd, "wb") as f:
            # A private certificate's PEM holds its key before it.
            f.write(b"a comment\n" + certificates[0].dumpPEM())
            f.write(b"\n" + Certificate(certificates[1].original).dumpPEM() + b"\n")
        root = trustRootFrom(path)
        assert isinstance(root, OpenSSLCertificateAuthorities)
        self.assertEqual(
            [c.get_subject().CN for c in root._caCerts],
            ["ca1", "ca2"],
        )

    def test_noFileIsThePlatformTrust(self) -> None:
        """
        Without a file the system's trust store is used.
        """
        self.assertIs(type(trustRootFrom(None)), type(platformTrust()))
