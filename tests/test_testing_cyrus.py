# -*- test-case-name: tests.test_testing_cyrus -*-
"""
Tests for L{imapmig.testing.cyrus}: the private Cyrus IMAP the integration
tests rely on, with both namespace settings.
"""

from __future__ import annotations

import imaplib
import ssl

from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing import privateserver
from imapmig.testing.cyrus import CyrusInstance, IMAPUser, requireCyrus, startCyrus

_MESSAGE = b"From: a@example.org\r\nSubject: round trip\r\n\r\nHello, Cyrus.\r\n"


class CyrusInstanceTests(SynchronousTestCase):
    """
    A real private Cyrus on loopback.
    """

    def roundTrip(self, instance: CyrusInstance, folder: str) -> None:
        """
        Log in with imaplib, create C{folder}, APPEND a message to it and
        read it back unchanged.
        """
        client = instance.imapClient("alice")
        try:
            self.assertEqual(client.create(folder)[0], "OK")
        finally:
            client.logout()
        uidValidity, uid = instance.appendMessage("alice", folder, _MESSAGE, ["\\Seen"])
        self.assertGreater(uidValidity, 0)
        fetched = instance.fetchMailbox("alice", folder)
        self.assertEqual(list(fetched), [uid])
        self.assertEqual(fetched[uid].body, _MESSAGE)
        self.assertEqual(fetched[uid].flags, ("\\Seen",))

    def test_altNamespace(self) -> None:
        """
        With C{altNamespace=True} folders live at the top level with C{/};
        the full capability list (LITERAL+, MULTIAPPEND, UIDPLUS,
        SPECIAL-USE, BINARY, COMPRESS) is offered; INBOX exists at the
        first login.
        """
        instance = startCyrus(self, altNamespace=True)
        self.assertEqual((instance.separator, instance.personalPrefix), ("/", ""))
        client = instance.imapClient("alice")
        try:
            typ, data = client.namespace()
            self.assertEqual(
                data, [b'(("" "/")) (("Other Users/" "/")) (("Shared Folders/" "/"))']
            )
            capabilities = set(client.capabilities)
        finally:
            client.logout()
        for expected in (
            "LITERAL+", "MULTIAPPEND", "UIDPLUS", "NAMESPACE", "SPECIAL-USE",
            "BINARY", "COMPRESS=DEFLATE",
        ):  # fmt: skip
            self.assertIn(expected, capabilities)
        self.assertNotIn("LITERAL-", capabilities)
        self.assertEqual(instance.mailboxName(("Archive", "2019")), "Archive/2019")
        self.roundTrip(instance, "Archive/2019")
        self.assertEqual(
            [name for _, _, name in instance.listMailboxes("alice")],
            ["INBOX", "Archive", "Archive/2019"],
        )

    def test_debianNamespace(self) -> None:
        """
        With C{altNamespace=False} (Debian's packaged setting) every folder
        lives under C{INBOX.} with C{.}, and one outside it is refused.
        """
        instance = startCyrus(self, altNamespace=False)
        self.assertEqual((instance.separator, instance.personalPrefix), (".", "INBOX."))
        client = instance.imapClient("alice")
        try:
            typ, data = client.namespace()
            self.assertEqual(data, [b'(("INBOX." ".")) (("user." ".")) (("" "."))'])
            typ, data = client.create("Sent")
            self.assertEqual((typ, data), ("NO", [b"Permission denied"]))
        finally:
            client.logout()
        self.assertEqual(instance.mailboxName(("Sent",)), "INBOX.Sent")
        self.roundTrip(instance, "INBOX.Sent")

    def test_tlsAndUsers(self) -> None:
        """
        STARTTLS on the plain port and implicit TLS on C{tlsPort} verify
        with the private CA; a user added while running can log in; a
        wrong password is refused.
        """
        instance = startCyrus(self)
        context = ssl.create_default_context(cafile=instance.caCertificatePath)
        client = imaplib.IMAP4("127.0.0.1", instance.port)
        try:
            self.assertIn("STARTTLS", client.capabilities)
            client.starttls(context)
            self.assertEqual(client.login("alice", "alice-pw")[0], "OK")
        finally:
            client.logout()
        instance.addUser(IMAPUser("carol", "carol-pw"))
        secure = imaplib.IMAP4_SSL("127.0.0.1", instance.tlsPort, ssl_context=context)
        try:
            self.assertEqual(secure.login("carol", "carol-pw")[0], "OK")
        finally:
            secure.logout()
        refused = imaplib.IMAP4("127.0.0.1", instance.port)
        try:
            self.assertRaises(imaplib.IMAP4.error, refused.login, "carol", "wrong")
        finally:
            refused.shutdown()

    def test_stopLeavesNothing(self) -> None:
        """
        Two instances run at once from different directories; stopping one
        ends every one of its processes and leaves the other serving.
        """
        requireCyrus(self)
        first = CyrusInstance(self.mktemp(), altNamespace=True)
        second = CyrusInstance(self.mktemp(), altNamespace=False)
        for instance in (first, second):
            self.addCleanup(instance.stop)
            instance.start()
        self.assertNotEqual(first.port, second.port)
        session = first.pid
        assert session is not None
        self.assertTrue(first.processes())
        first.stop()
        self.assertEqual(first.processes(), [])
        self.assertEqual(privateserver.processesInSession(session), [])
        self.assertRaises(OSError, imaplib.IMAP4, "127.0.0.1", first.port)
        client = second.imapClient("bob")
        client.logout()
