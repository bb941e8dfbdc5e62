"""
Tests for L{imapmig.testing.fakeserver}: the fake server driven with raw
bytes, showing that it behaves as the RFCs say for what it implements, and
once with the real client session over L{twisted.test.iosim}.
"""

from __future__ import annotations

import base64
from typing import Sequence

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.test import iosim
from twisted.trial.unittest import SynchronousTestCase

from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.session import IMAPSession
from imapmig.testing.fakeserver import DEFAULT_CAPABILITIES, FakeIMAPServer
from imapmig.testing.fakestore import FakeMailStore, StoredMessage

DATE = b'"01-Jan-2020 10:00:00 +0000"'


class Connection:
    """
    A fake server on a L{StringTransport}, greeted and optionally logged in.
    """

    def __init__(
        self,
        capabilities: Sequence[str] = DEFAULT_CAPABILITIES,
        login: bool = True,
        **kwargs: object,
    ) -> None:
        self.store = FakeMailStore({"alice": "secret"})
        self.server = FakeIMAPServer(self.store, capabilities, **kwargs)  # type: ignore[arg-type]
        self.transport = StringTransport()
        self.server.makeConnection(self.transport)
        self.greeting = self.take()
        if login:
            self.send(b'0 LOGIN "alice" "secret"\r\n')
            self.take()

    def send(self, data: bytes) -> None:
        """
        Deliver C{data} from the client.
        """
        self.server.dataReceived(data)

    def take(self) -> bytes:
        """
        What the server wrote since the last call.
        """
        value: bytes = self.transport.value()
        self.transport.clear()
        return value


class FakeServerTests(SynchronousTestCase):
    """
    The fake server, byte for byte.
    """

    def test_greetingAndCapability(self) -> None:
        """
        The greeting and CAPABILITY advertise exactly the configured
        capabilities.
        """
        c = Connection(("IMAP4rev1", "LITERAL-"), login=False)
        self.assertEqual(c.greeting, b"* OK [CAPABILITY IMAP4rev1 LITERAL-] Fake IMAP server ready.\r\n")
        c.send(b"a CAPABILITY\r\n")
        self.assertEqual(c.take(), b"* CAPABILITY IMAP4rev1 LITERAL-\r\na OK Capability completed.\r\n")

    def test_authenticationFailure(self) -> None:
        """
        A wrong password, with LOGIN or AUTHENTICATE PLAIN, is answered
        C{NO [AUTHENTICATIONFAILED]}; the right one logs in.
        """
        c = Connection(login=False)
        c.send(b'a LOGIN "alice" "wrong"\r\n')
        self.assertEqual(c.take(), b"a NO [AUTHENTICATIONFAILED] Authentication failed.\r\n")
        c.send(b"b AUTHENTICATE PLAIN " + base64.b64encode(b"\0alice\0wrong") + b"\r\n")
        self.assertEqual(c.take(), b"b NO [AUTHENTICATIONFAILED] Authentication failed.\r\n")
        self.assertIsNone(c.server.user)
        c.send(b"c AUTHENTICATE PLAIN " + base64.b64encode(b"\0alice\0secret") + b"\r\n")
        self.assertEqual(c.take(), b"c OK Logged in.\r\n")
        self.assertEqual(c.server.user, "alice")

    def test_notLoggedIn(self) -> None:
        """
        Mailbox commands before login are refused; unknown commands are BAD.
        """
        c = Connection(login=False)
        c.send(b"a SELECT INBOX\r\nb FROB\r\n")
        self.assertEqual(
            c.take(), b"a BAD Command not allowed before login\r\nb BAD Unknown command\r\n"
        )

    def test_appendUID(self) -> None:
        """
        APPEND stores the message with its flags and date and answers with
        C{APPENDUID uidvalidity uid} (RFC 4315).
        """
        c = Connection()
        c.send(b"a APPEND INBOX (\\Seen $Label) " + DATE + b" {5+}\r\nhello\r\n")
        c.send(b'b APPEND "INBOX" {3+}\r\nbye\r\n')
        self.assertEqual(
            c.take(),
            b"a OK [APPENDUID 1 1] Append completed.\r\nb OK [APPENDUID 1 2] Append completed.\r\n",
        )
        self.assertEqual(
            c.store.mailbox("alice", "INBOX"),
            [
                StoredMessage(b"hello", ("\\Seen", "$Label"), "01-Jan-2020 10:00:00 +0000", 1),
                StoredMessage(b"bye", (), None, 2),
            ],
        )

    def test_withoutUIDPLUS(self) -> None:
        """
        Without the UIDPLUS capability, APPEND answers a plain OK.
        """
        c = Connection(("IMAP4rev1", "LITERAL+"))
        c.send(b"a APPEND INBOX {3+}\r\none\r\n")
        self.assertEqual(c.take(), b"a OK Append completed.\r\n")

    def test_multiappend(self) -> None:
        """
        A MULTIAPPEND command stores every message and answers with a UID
        set; while the mailbox is selected an untagged EXISTS precedes it.
        """
        c = Connection()
        c.send(b"a SELECT INBOX\r\n")
        self.assertIn(b"a OK [READ-WRITE]", c.take())
        c.send(b"b APPEND INBOX (\\Seen) {3+}\r\none " + DATE + b" {3+}\r\ntwo {5+}\r\nthree\r\n")
        self.assertEqual(c.take(), b"* 3 EXISTS\r\nb OK [APPENDUID 1 1:3] Append completed.\r\n")
        self.assertEqual(
            [(m.body, m.flags, m.internalDate) for m in c.store.mailbox("alice", "INBOX")],
            [
                (b"one", ("\\Seen",), None),
                (b"two", (), "01-Jan-2020 10:00:00 +0000"),
                (b"three", (), None),
            ],
        )

    def test_multiappendAtomic(self) -> None:
        """
        One refused message refuses the whole MULTIAPPEND command with the
        refusal's text, and nothing of it is stored (RFC 3502).
        """
        c = Connection(refuse=lambda body: "NO [LIMIT] too big" if body == b"big" else None)
        c.send(b"a APPEND INBOX {3+}\r\none {3+}\r\nbig {3+}\r\ntwo\r\nb NOOP\r\n")
        self.assertEqual(c.take(), b"a NO [LIMIT] too big\r\nb OK NOOP completed.\r\n")
        self.assertEqual(c.store.mailbox("alice", "INBOX"), [])

    def test_multiappendNotAdvertised(self) -> None:
        """
        Without the MULTIAPPEND capability, an APPEND of several messages is
        BAD and stores nothing.
        """
        c = Connection(("IMAP4rev1", "LITERAL+"))
        c.send(b"a APPEND INBOX {3+}\r\none {3+}\r\ntwo\r\n")
        self.assertEqual(c.take(), b"a BAD MULTIAPPEND is not supported\r\n")
        self.assertEqual(c.store.mailbox("alice", "INBOX"), [])

    def test_synchronizingLiteral(self) -> None:
        """
        A synchronizing literal is read only after the server's
        continuation request.
        """
        c = Connection(("IMAP4rev1", "MULTIAPPEND", "UIDPLUS"))
        c.send(b"a APPEND INBOX {5}\r\n")
        self.assertEqual(c.take(), b"+ Ready for literal data\r\n")
        c.send(b"hello {3}\r\n")
        self.assertEqual(c.take(), b"+ Ready for literal data\r\n")
        c.send(b"bye\r\n")
        self.assertEqual(c.take(), b"a OK [APPENDUID 1 1:2] Append completed.\r\n")

    def test_nonSynchronizingWithoutLiteralPlus(self) -> None:
        """
        Without LITERAL+ or LITERAL-, a non-synchronizing literal makes the
        command BAD, and its octets are still read, not taken for commands.
        """
        c = Connection(("IMAP4rev1",))
        c.send(b"a APPEND INBOX {10+}\r\nb LOGOUT\r\n\r\nc NOOP\r\n")
        self.assertEqual(
            c.take(), b"a BAD Non-synchronizing literal without LITERAL+\r\nc OK NOOP completed.\r\n"
        )
        self.assertEqual(c.store.mailbox("alice", "INBOX"), [])

    def test_literalMinusLimit(self) -> None:
        """
        With LITERAL- only, a non-synchronizing literal of 4096 octets is
        accepted and one of 4097 is BAD [TOOBIG], its octets read and
        discarded (RFC 7888).
        """
        c = Connection(("IMAP4rev1", "LITERAL-", "UIDPLUS"))
        c.send(b"a APPEND INBOX {4096+}\r\n" + b"x" * 4096 + b"\r\n")
        self.assertEqual(c.take(), b"a OK [APPENDUID 1 1] Append completed.\r\n")
        c.send(b"b APPEND INBOX {4097+}\r\n" + b"y" * 4097 + b"\r\nc NOOP\r\n")
        self.assertEqual(
            c.take(),
            b"b BAD [TOOBIG] Non-synchronizing literal over 4096 octets\r\nc OK NOOP completed.\r\n",
        )
        self.assertEqual(len(c.store.mailbox("alice", "INBOX")), 1)

    def test_rejectedBeforeSynchronizingLiteral(self) -> None:
        """
        When a command is already rejected as a synchronizing literal is
        announced, the server answers at once instead of asking for it.
        """
        c = Connection(("IMAP4rev1", "LITERAL-", "MULTIAPPEND"))
        c.send(b"a APPEND INBOX {4097+}\r\n" + b"y" * 4097 + b" {3}\r\n")
        self.assertEqual(c.take(), b"a BAD [TOOBIG] Non-synchronizing literal over 4096 octets\r\n")
        c.send(b"b NOOP\r\n")
        self.assertEqual(c.take(), b"b OK NOOP completed.\r\n")

    def test_rejectedCommandLiteralRead(self) -> None:
        """
        An APPEND to a missing mailbox is answered C{NO [TRYCREATE]} after
        its non-synchronizing literal has been read.
        """
        c = Connection()
        c.send(b"a APPEND Nope {6+}\r\nb NOOP\r\nc NOOP\r\n")
        self.assertEqual(
            c.take(), b"a NO [TRYCREATE] Mailbox doesn't exist\r\nc OK NOOP completed.\r\n"
        )

    def test_badDateAndFlag(self) -> None:
        """
        A malformed date-time or an unknown system flag makes APPEND BAD.
        """
        c = Connection()
        c.send(b'a APPEND INBOX "yesterday" {1+}\r\nx\r\nb APPEND INBOX (\\Recent) {1+}\r\nx\r\n')
        self.assertEqual(c.take(), b"a BAD Invalid date-time\r\nb BAD Invalid system flag\r\n")

    def test_mailboxes(self) -> None:
        """
        CREATE, SUBSCRIBE, LIST (with the delimiter, modified UTF-7 names and
        children attributes) and SELECT.
        """
        c = Connection()
        c.send(b'a CREATE "Archive"\r\nb CREATE "Archive.Entw&APw-rfe"\r\nc SUBSCRIBE "Archive"\r\n')
        c.send(b'd CREATE "Archive"\r\n')
        self.assertEqual(
            c.take(),
            b"a OK Create completed.\r\nb OK Create completed.\r\nc OK Subscribe completed.\r\n"
            b"d NO [ALREADYEXISTS] Mailbox already exists\r\n",
        )
        self.assertEqual(c.store.mailboxes("alice"), ["INBOX", "Archive", "Archive.Entwürfe"])
        self.assertEqual(c.store.subscriptions("alice"), ["Archive"])
        c.send(b'e LIST "" ""\r\nf LIST "" "*"\r\ng LIST "" "%"\r\n')
        self.assertEqual(
            c.take(),
            b'* LIST (\\Noselect) "." ""\r\ne OK List completed.\r\n'
            b'* LIST (\\HasNoChildren) "." "INBOX"\r\n'
            b'* LIST (\\HasChildren) "." "Archive"\r\n'
            b'* LIST (\\HasNoChildren) "." "Archive.Entw&APw-rfe"\r\n'
            b"f OK List completed.\r\n"
            b'* LIST (\\HasNoChildren) "." "INBOX"\r\n'
            b'* LIST (\\HasChildren) "." "Archive"\r\n'
            b"g OK List completed.\r\n",
        )
        c.send(b"h SELECT Archive\r\ni SELECT Nope\r\n")
        self.assertEqual(
            c.take(),
            b"* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft)\r\n* 0 EXISTS\r\n"
            b"* 0 RECENT\r\n* OK [UIDVALIDITY 2] UIDs valid\r\n"
            b"* OK [PERMANENTFLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft \\*)] "
            b"Flags permitted.\r\nh OK [READ-WRITE] Select completed.\r\n"
            b"i NO [NONEXISTENT] Mailbox doesn't exist\r\n",
        )

    def test_logout(self) -> None:
        """
        LOGOUT answers BYE, then OK, then closes the connection.
        """
        c = Connection()
        c.send(b"a LOGOUT\r\nb NOOP\r\n")
        self.assertEqual(c.take(), b"* BYE Logging out\r\na OK Logout completed.\r\n")
        self.assertTrue(c.transport.disconnecting)

    def test_dropAfterAppends(self) -> None:
        """
        With C{dropAfterAppends=1}, the second APPEND closes the connection
        unanswered and unstored, and nothing after it is read.
        """
        c = Connection(dropAfterAppends=1)
        c.send(b"a APPEND INBOX {1+}\r\nx\r\nb APPEND INBOX {1+}\r\ny\r\nc NOOP\r\n")
        self.assertEqual(c.take(), b"a OK [APPENDUID 1 1] Append completed.\r\n")
        self.assertTrue(c.transport.disconnecting)
        self.assertEqual([m.body for m in c.store.mailbox("alice", "INBOX")], [b"x"])
        c.send(b"d NOOP\r\n")
        self.assertEqual(c.take(), b"")

    def test_received(self) -> None:
        """
        C{received} holds every line outside literals, never literal octets.
        """
        c = Connection(login=False)
        c.send(b'a LOGIN "alice" "secret"\r\nb APPEND INBOX {5+}\r\nhello (\\Seen) {3+}\r\nbye\r\n')
        self.assertEqual(
            c.server.received,
            [b'a LOGIN "alice" "secret"', b"b APPEND INBOX {5+}", b" (\\Seen) {3+}", b""],
        )


class FakeServerSessionTests(SynchronousTestCase):
    """
    The fake with the real client session over an in-memory connection.
    """

    def test_session(self) -> None:
        """
        The session logs in with SASL-IR PLAIN, reads the delimiter and the
        mailboxes, creates and selects one.
        """
        clock = Clock()
        store = FakeMailStore({"alice": "secret"}, delimiter="/")
        client = MigrationIMAP4Client(clock)
        server = FakeIMAPServer(store)
        pump = iosim.connect(
            server, iosim.makeFakeServer(server), client, iosim.makeFakeClient(client), clock=clock
        )
        session = IMAPSession(client, "alice at memory")

        def run(d: Deferred[object]) -> object:
            pump.flush()
            return self.successResultOf(d)

        run(Deferred.fromCoroutine(session.login("alice", "secret")))
        self.assertEqual(
            server.received,
            [b"0001 AUTHENTICATE PLAIN " + base64.b64encode(b"\0alice\0secret"), b"0002 CAPABILITY"],
        )
        self.assertIn(b"MULTIAPPEND", session.capabilities)
        self.assertEqual(run(Deferred.fromCoroutine(session.hierarchyDelimiter())), "/")
        run(Deferred.fromCoroutine(session.create("Entwürfe")))
        self.assertEqual(
            [info.name for info in run(Deferred.fromCoroutine(session.listMailboxes()))],  # type: ignore[attr-defined]
            ["INBOX", "Entwürfe"],
        )
        selected = run(Deferred.fromCoroutine(session.select("Entwürfe")))
        self.assertEqual(selected.uidValidity, 2)  # type: ignore[attr-defined]
        run(Deferred.fromCoroutine(session.logout()))
        self.assertTrue(client.closed.called)
        self.assertEqual(clock.getDelayedCalls(), [])
