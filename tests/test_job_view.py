"""
Tests for L{imapmig.job.view.DestinationView}: the personal namespace new
folders go in, with LIST's delimiter only where the server gave none.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.test import iosim
from twisted.trial.unittest import SynchronousTestCase

from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.session import IMAPSession
from imapmig.job.view import DestinationView
from imapmig.mail.folders import PersonalNamespace
from imapmig.testing.fakeserver import DEFAULT_CAPABILITIES, FakeIMAPServer
from imapmig.testing.fakestore import FakeMailStore


class NamespaceTests(SynchronousTestCase):
    """
    L{DestinationView.read} against the fake server, whose delimiter is
    C{.}.
    """

    def read(
        self, store: FakeMailStore, override: PersonalNamespace | None = None
    ) -> DestinationView:
        """
        Log in, set C{override}, and read the view twice: the second time
        with the first's namespace, as a job re-reading its destination
        does; both must agree.
        """
        clock = Clock()
        client = MigrationIMAP4Client(clock)
        server = FakeIMAPServer(store, DEFAULT_CAPABILITIES + ("NAMESPACE",))
        pump = iosim.connect(
            server, iosim.makeFakeServer(server), client, iosim.makeFakeClient(client), clock=clock
        )
        session = IMAPSession(client, "alice at memory")
        session.namespaceOverride = override
        login: Deferred[None] = Deferred.fromCoroutine(session.login("alice", "secret"))
        pump.flush()
        self.successResultOf(login)
        first = Deferred.fromCoroutine(DestinationView.read(session))
        pump.flush()
        view = self.successResultOf(first)
        again = Deferred.fromCoroutine(DestinationView.read(session, view.namespace))
        pump.flush()
        self.assertEqual(self.successResultOf(again).namespace, view.namespace)
        self.assertEqual(clock.getDelayedCalls(), [])
        return view

    def test_serverWithoutDelimiter(self) -> None:
        """
        A NAMESPACE response without a delimiter (C{NIL}) takes LIST's.
        """
        store = FakeMailStore({"alice": "secret"}, namespaceText=b'(("" NIL)) NIL NIL')
        self.assertEqual(self.read(store).namespace, PersonalNamespace("", "."))

    def test_configuredFlat(self) -> None:
        """
        An override without a separator makes the destination flat,
        whatever LIST shows.
        """
        store = FakeMailStore({"alice": "secret"})
        view = self.read(store, PersonalNamespace("", None))
        self.assertIsNone(view.namespace.delimiter)
        self.assertEqual(view.namespace.mailbox(("a", "b")), "a_b")
