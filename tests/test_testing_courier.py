# -*- test-case-name: tests.test_testing_courier -*-
"""
Tests for L{imapmig.testing.courier}: the private Courier-IMAP the
integration tests rely on.
"""

from __future__ import annotations

import imaplib
import os
import ssl

from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing import privateserver
from imapmig.testing.courier import (
    CourierInstance,
    IMAPUser,
    requireCourier,
    startCourier,
)

_MESSAGE = b"From: a@example.org\r\nSubject: round trip\r\n\r\nHello, Courier.\r\n"


class CourierInstanceTests(SynchronousTestCase):
    """
    A real private Courier-IMAP on loopback.
    """

    def test_namespaceAndCapabilities(self) -> None:
        """
        Courier's personal namespace is C{INBOX.} with C{.}; a folder
        outside it is refused; it offers UIDPLUS and NAMESPACE but neither
        LITERAL+ nor LITERAL-, MULTIAPPEND, SPECIAL-USE, BINARY or
        COMPRESS, the same before and after login.
        """
        instance = startCourier(self)
        self.assertEqual((instance.separator, instance.personalPrefix), (".", "INBOX."))
        client = imaplib.IMAP4("127.0.0.1", instance.port)
        try:
            before = set(client.capabilities)
            client.login("alice", "alice-pw")
            typ, data = client.capability()
            after = set(bytes(data[0]).decode("ascii").upper().split())
            typ, data = client.namespace()
            self.assertEqual(data, [b'(("INBOX." ".")) NIL (("#shared." ".")("shared." "."))'])
            self.assertEqual(client.create("Sent"), ("NO", [b"Invalid mailbox name."]))
        finally:
            client.logout()
        self.assertEqual(before - {"STARTTLS"}, after)
        self.assertLessEqual({"IMAP4REV1", "UIDPLUS", "NAMESPACE", "STARTTLS"}, before)
        for missing in (
            "LITERAL+", "LITERAL-", "MULTIAPPEND", "SPECIAL-USE", "BINARY", "COMPRESS=DEFLATE",
        ):  # fmt: skip
            self.assertNotIn(missing, before | after)

    def test_roundTrip(self) -> None:
        """
        A message appended under C{INBOX.} reads back with its flags; one
        without a final CRLF is stored with one added.
        """
        instance = startCourier(self)
        name = instance.mailboxName(("Archive", "2019"))
        self.assertEqual(name, "INBOX.Archive.2019")
        instance.createMailbox("alice", name)
        _, uid = instance.appendMessage("alice", name, _MESSAGE, ["\\Flagged"])
        _, bare = instance.appendMessage("alice", name, b"Subject: bare\r\n\r\nno end")
        fetched = instance.fetchMailbox("alice", name)
        self.assertEqual(fetched[uid].body, _MESSAGE)
        self.assertEqual(fetched[uid].flags, ("\\Flagged",))
        self.assertEqual(fetched[bare].body, b"Subject: bare\r\n\r\nno end\r\n")
        self.assertIn(name, [each for _, _, each in instance.listMailboxes("alice")])
        self.assertTrue(os.path.isdir(os.path.join(instance.maildirPath("alice"), ".Archive.2019")))

    def test_tlsAndUsers(self) -> None:
        """
        STARTTLS on the plain port and implicit TLS on C{tlsPort} verify
        with the private CA; a user added while running can log in.
        """
        instance = startCourier(self)
        context = ssl.create_default_context(cafile=instance.caCertificatePath)
        client = imaplib.IMAP4("127.0.0.1", instance.port)
        try:
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

    def test_twoInstancesAndStop(self) -> None:
        """
        Two instances run at once, each with its own accounts (each has
        its own authdaemond in its own mount namespace: the first refuses
        the second's password, after Courier's 5 s); stopping one ends
        every one of its processes and leaves the other serving.
        """
        requireCourier(self)
        first = CourierInstance(self.mktemp(), users=[IMAPUser("alice", "first-pw")])
        second = CourierInstance(self.mktemp(), users=[IMAPUser("alice", "second-pw")])
        for instance in (first, second):
            self.addCleanup(instance.stop)
            instance.start()
        client = imaplib.IMAP4("127.0.0.1", first.port)
        try:
            self.assertRaises(imaplib.IMAP4.error, client.login, "alice", "second-pw")
        finally:
            client.shutdown()
        for instance in (first, second):
            instance.imapClient("alice").logout()
        session = first.pid
        assert session is not None
        first.stop()
        self.assertEqual(first.processes(), [])
        self.assertEqual(privateserver.processesInSession(session), [])
        self.assertRaises(OSError, imaplib.IMAP4, "127.0.0.1", first.port)
        second.imapClient("alice").logout()
