"""
Tests for L{imapmig.imap.namespace} and L{IMAPSession.namespaces}: the
NAMESPACE response (RFC 2342) read, and asked of a server only where it
offers it.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, LogLevel, formatEvent, globalLogPublisher
from twisted.test import iosim
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import CommandFailed, ProtocolError
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.namespace import (
    MAX_NAMESPACES,
    ServerNamespaces,
    namespaceResponse,
    parseNamespaceResponse,
)
from imapmig.imap.session import IMAPSession
from imapmig.mail.folders import PersonalNamespace
from imapmig.testing.fakeserver import DEFAULT_CAPABILITIES, FakeIMAPServer
from imapmig.testing.fakestore import FakeMailStore

T = TypeVar("T")


class ParseTests(SynchronousTestCase):
    """
    L{parseNamespaceResponse} reads the three lists, and refuses a
    malformed response with a L{ProtocolError} that shows it.
    """

    def test_courier(self) -> None:
        """
        Courier's response: one personal namespace, no others.
        """
        self.assertEqual(
            parseNamespaceResponse(b'NAMESPACE (("INBOX." ".")) NIL NIL'),
            ServerNamespaces(personal=(PersonalNamespace("INBOX.", "."),)),
        )

    def test_all(self) -> None:
        """
        All three kinds, several of a kind, a NIL delimiter, and extension
        data after a namespace (RFC 2342 section 5) ignored.
        """
        parsed = parseNamespaceResponse(
            b'NAMESPACE (("" "/")("#mh/" "/" "X-PARAM" ("FLAG1" "FLAG2")))'
            b' (("~" "/")) (("#shared/" "/")("#public" NIL))'
        )
        self.assertEqual(
            parsed.personal, (PersonalNamespace("", "/"), PersonalNamespace("#mh/", "/"))
        )
        self.assertEqual(parsed.others, (PersonalNamespace("~", "/"),))
        self.assertEqual(
            parsed.shared,
            (PersonalNamespace("#shared/", "/"), PersonalNamespace("#public", None)),
        )
        self.assertEqual(parsed.personalNamespace(), PersonalNamespace("", "/"))

    def test_modifiedUTF7Prefix(self) -> None:
        """
        A prefix is a mailbox name: modified UTF-7 is decoded.
        """
        parsed = parseNamespaceResponse(b'namespace (("Entw&APw-rfe/" "/")) NIL NIL')
        self.assertEqual(parsed.personal, (PersonalNamespace("Entwürfe/", "/"),))

    def test_noPersonal(self) -> None:
        """
        A NIL personal list leaves the empty prefix without a delimiter.
        """
        self.assertEqual(
            parseNamespaceResponse(b"NAMESPACE NIL NIL NIL").personalNamespace(),
            PersonalNamespace(),
        )

    def test_malformed(self) -> None:
        """
        Each kind of malformed response is a L{ProtocolError} naming the
        problem, with an escaped excerpt of the line.
        """
        for line in [
            b"NAMESPACE",
            b'NAMESPACE (("" "/"))',
            b'NAMESPACE (("" "/") NIL NIL',
            b'NAMESPACE (("" "/")) NIL NIL)',
            b'NAMESPACE "x" NIL NIL',
            b"NAMESPACE () NIL NIL",
            b'NAMESPACE (("")) NIL NIL',
            b'NAMESPACE ((NIL "/")) NIL NIL',
            b'NAMESPACE (("" ("/"))) NIL NIL',
            b'NAMESPACE ("" "/") NIL NIL',
            b'NAMESPACE (("\x00" "/)) NIL NIL',
            b'LIST (("" "/")) NIL NIL',
        ]:
            error = self.assertRaises(ProtocolError, parseNamespaceResponse, line)
            self.assertIn("NAMESPACE", str(error), line)
            self.assertNotIn("\x00", str(error))

    def test_prefixWithoutDelimiter(self) -> None:
        """
        A personal prefix that does not end with its delimiter takes it, so
        that folders are not glued onto the prefix: C{INBOX} with C{.} is
        C{INBOX.}, C{INBOX.Sent} the path C{("Sent",)}.  Other users' and
        shared prefixes are left as sent.
        """
        parsed = parseNamespaceResponse(
            b'NAMESPACE (("INBOX" ".")("#mh/" "/")) (("~" "/")) (("#shared" "/"))'
        )
        self.assertEqual(
            parsed.personal, (PersonalNamespace("INBOX.", "."), PersonalNamespace("#mh/", "/"))
        )
        self.assertEqual(parsed.others, (PersonalNamespace("~", "/"),))
        self.assertEqual(parsed.shared, (PersonalNamespace("#shared", "/"),))
        personal = parsed.personalNamespace()
        self.assertEqual(personal.mailbox(("Sent",)), "INBOX.Sent")
        self.assertEqual(personal.path("INBOX.Sent"), ("Sent",))

    def test_prefixWithoutDelimiterFlat(self) -> None:
        """
        A prefix with a C{NIL} delimiter, or the empty prefix, is left as
        sent.
        """
        self.assertEqual(
            parseNamespaceResponse(b'NAMESPACE (("INBOX" NIL)) NIL NIL').personal,
            (PersonalNamespace("INBOX", None),),
        )
        self.assertEqual(
            parseNamespaceResponse(b'NAMESPACE (("" "/")) NIL NIL').personal,
            (PersonalNamespace("", "/"),),
        )

    def test_delimiterNotOneCharacter(self) -> None:
        """
        A delimiter of more than one character, or NUL, in any of the three
        lists is a malformed response (RFC 2342 allows one character).
        """
        for line in [
            b'NAMESPACE (("" "//")) NIL NIL',
            b'NAMESPACE (("INBOX." "ab")) NIL NIL',
            b'NAMESPACE (("" "\x00")) NIL NIL',
            b'NAMESPACE (("" "/")) (("~" "::")) NIL',
            b'NAMESPACE (("" "/")) NIL (("#s/" "/-"))',
        ]:
            error = self.assertRaises(ProtocolError, parseNamespaceResponse, line)
            self.assertIn("one character", str(error), line)
            self.assertNotIn("\x00", str(error))

    def test_bounded(self) -> None:
        """
        More than L{MAX_NAMESPACES} namespaces of a kind are refused.
        """
        many = b"(" + b'("a" "/")' * (MAX_NAMESPACES + 1) + b")"
        error = self.assertRaises(
            ProtocolError, parseNamespaceResponse, b"NAMESPACE " + many + b" NIL NIL"
        )
        self.assertIn(f"more than {MAX_NAMESPACES}", str(error))

    def test_amongOthers(self) -> None:
        """
        L{namespaceResponse} finds the NAMESPACE response among other
        untagged responses, and refuses a reply without one.
        """
        lines = [b"3 EXISTS", b'NAMESPACE (("" ".")) NIL NIL']
        self.assertEqual(
            namespaceResponse(lines).personal, (PersonalNamespace("", "."),)
        )
        self.assertRaises(ProtocolError, namespaceResponse, [b"3 EXISTS"])

    def test_foreignKind(self) -> None:
        """
        A name is in another user's or a shared namespace by its longest
        matching prefix; the personal one wins where it is longer.
        """
        spaces = parseNamespaceResponse(
            b'NAMESPACE (("" "/")) (("Other Users/" "/")) (("Shared/" "/"))'
        )
        self.assertEqual(spaces.foreignKind("Shared/team/x"), "shared")
        self.assertEqual(spaces.foreignKind("Shared"), "shared")
        self.assertEqual(spaces.foreignKind("Other Users/bob/INBOX"), "other users'")
        self.assertIsNone(spaces.foreignKind("Sent"))
        self.assertIsNone(spaces.foreignKind("INBOX"))


class SessionTests(SynchronousTestCase):
    """
    L{IMAPSession.namespaces} against the fake server.
    """

    def connect(
        self, store: FakeMailStore, capabilities: tuple[str, ...] = DEFAULT_CAPABILITIES
    ) -> tuple[IMAPSession, FakeIMAPServer]:
        self.clock = Clock()
        client = MigrationIMAP4Client(self.clock)
        server = FakeIMAPServer(store, capabilities)
        self.pump = iosim.connect(
            server,
            iosim.makeFakeServer(server),
            client,
            iosim.makeFakeClient(client),
            clock=self.clock,
        )
        session = IMAPSession(client, "alice at memory")
        self.drive(session.login("alice", "secret"))
        return session, server

    def drive(self, coroutine: object) -> object:
        d: Deferred[object] = Deferred.fromCoroutine(coroutine)  # type: ignore[arg-type]
        self.pump.flush()
        return self.successResultOf(d)

    def test_asked(self) -> None:
        """
        A server offering NAMESPACE is asked, and its answer is read.
        """
        store = FakeMailStore({"alice": "secret"}, prefix="INBOX.")
        session, server = self.connect(store, DEFAULT_CAPABILITIES + ("NAMESPACE",))
        spaces = self.drive(session.namespaces())
        assert isinstance(spaces, ServerNamespaces)
        self.assertEqual(spaces.personalNamespace(), PersonalNamespace("INBOX.", "."))
        self.assertEqual(server.received[-1][5:], b"NAMESPACE")
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_notOffered(self) -> None:
        """
        Without NAMESPACE, the empty prefix and the delimiter of C{LIST ""
        ""}; NAMESPACE is not sent.
        """
        session, server = self.connect(FakeMailStore({"alice": "secret"}, delimiter="/"))
        spaces = self.drive(session.namespaces())
        assert isinstance(spaces, ServerNamespaces)
        self.assertEqual(spaces.personalNamespace(), PersonalNamespace("", "/"))
        self.assertEqual(server.received[-1][5:], b'LIST "" ""')

    def test_personalNil(self) -> None:
        """
        A NAMESPACE response without a personal namespace: the empty prefix
        with LIST's delimiter.
        """
        store = FakeMailStore({"alice": "secret"}, namespaceText=b'NIL NIL (("#s/" "/"))')
        session, _ = self.connect(store, DEFAULT_CAPABILITIES + ("NAMESPACE",))
        spaces = self.drive(session.namespaces())
        assert isinstance(spaces, ServerNamespaces)
        self.assertEqual(spaces.personalNamespace(), PersonalNamespace("", "."))
        self.assertEqual(spaces.shared, (PersonalNamespace("#s/", "/"),))

    def test_override(self) -> None:
        """
        With the configuration's override, a server offering NAMESPACE is
        still asked: the override replaces only the personal namespace,
        marked configured; other users' and shared ones are the server's.
        """
        store = FakeMailStore(
            {"alice": "secret"}, namespaceText=b'(("INBOX." ".")) (("user." ".")) (("shared." "."))'
        )
        session, server = self.connect(store, DEFAULT_CAPABILITIES + ("NAMESPACE",))
        session.namespaceOverride = PersonalNamespace("", ".")
        spaces = self.drive(session.namespaces())
        self.assertEqual(
            spaces,
            ServerNamespaces(
                personal=(PersonalNamespace("", ".", configured=True),),
                others=(PersonalNamespace("user.", "."),),
                shared=(PersonalNamespace("shared.", "."),),
            ),
        )
        self.assertEqual(server.received[-1][5:], b"NAMESPACE")

    def test_overrideNotOffered(self) -> None:
        """
        With the override and a server without NAMESPACE, the override
        alone: nothing is sent.
        """
        session, server = self.connect(FakeMailStore({"alice": "secret"}))
        session.namespaceOverride = PersonalNamespace("INBOX.", ".")
        sent = len(server.received)
        spaces = self.drive(session.namespaces())
        self.assertEqual(
            spaces, ServerNamespaces(personal=(PersonalNamespace("INBOX.", ".", configured=True),))
        )
        self.assertEqual(len(server.received), sent)

    def test_overrideMalformed(self) -> None:
        """
        With the override, a malformed NAMESPACE response is one warning,
        and the override alone is believed.
        """
        store = FakeMailStore({"alice": "secret"}, namespaceText=b'(("" "//")) NIL NIL')
        session, _ = self.connect(store, DEFAULT_CAPABILITIES + ("NAMESPACE",))
        session.namespaceOverride = PersonalNamespace("", None)
        events: list[dict[str, Any]] = []
        observer = cast(ILogObserver, events.append)
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        spaces = self.drive(session.namespaces())
        self.assertEqual(
            spaces, ServerNamespaces(personal=(PersonalNamespace("", None, configured=True),))
        )
        warnings = [e for e in events if e["log_level"] is LogLevel.warn]
        self.assertEqual(len(warnings), 1)
        text = formatEvent(warnings[0])
        self.assertTrue(text.startswith("alice at memory: a malformed NAMESPACE response"), text)
        self.assertIn("the configured namespace alone", text)

    def test_malformed(self) -> None:
        """
        A malformed response is a L{ProtocolError} naming the session, not
        a traceback from the parser.
        """
        store = FakeMailStore({"alice": "secret"}, namespaceText=b'(("INBOX." ".")')
        session, _ = self.connect(store, DEFAULT_CAPABILITIES + ("NAMESPACE",))
        d = Deferred.fromCoroutine(session.namespaces())
        self.pump.flush()
        error = self.failureResultOf(d, ProtocolError).value
        self.assertTrue(str(error).startswith("alice at memory: a malformed NAMESPACE response"))

    def test_overrideRefused(self) -> None:
        """
        With the override, a server that offers NAMESPACE and refuses it is
        one warning, and the override alone is believed; without the
        override the refusal is the caller's.
        """
        store = FakeMailStore({"alice": "secret"})
        store.namespaceRefusal = b"NO Not today"
        session, _ = self.connect(store, DEFAULT_CAPABILITIES + ("NAMESPACE",))
        session.namespaceOverride = PersonalNamespace("INBOX.", ".")
        events: list[dict[str, Any]] = []
        observer = cast(ILogObserver, events.append)
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        spaces = self.drive(session.namespaces())
        self.assertEqual(
            spaces, ServerNamespaces(personal=(PersonalNamespace("INBOX.", ".", configured=True),))
        )
        warnings = [formatEvent(e) for e in events if e["log_level"] is LogLevel.warn]
        self.assertEqual(
            warnings,
            [
                "alice at memory: the server refused NAMESPACE (NO Not today); believing the"
                " configured namespace alone (other users' and shared namespaces unknown)"
            ],
        )
        session.namespaceOverride = None
        d = Deferred.fromCoroutine(session.namespaces())
        self.pump.flush()
        self.assertEqual(self.failureResultOf(d, CommandFailed).value.text, "Not today")

    def test_malformedPointsToOverride(self) -> None:
        """
        The error for a malformed response (here a two-character
        delimiter) says that the server's C{namespace:} setting in the
        configuration overrides it.
        """
        store = FakeMailStore({"alice": "secret"}, namespaceText=b'(("" "//")) NIL NIL')
        session, _ = self.connect(store, DEFAULT_CAPABILITIES + ("NAMESPACE",))
        d = Deferred.fromCoroutine(session.namespaces())
        self.pump.flush()
        error = self.failureResultOf(d, ProtocolError).value
        self.assertIn("one character", str(error))
        self.assertIn("namespace:", str(error))
        self.assertIn("configuration", str(error))
