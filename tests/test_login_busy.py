"""
A login the server refuses saying "not now" (RFC 5530 C{[UNAVAILABLE]}:
the directory behind it is down; too many connections; "try again
later") is a transient failure, retried; a login refused for its
credentials stays permanent.
"""

from __future__ import annotations

from twisted.logger import LogLevel
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import AuthenticationFailed, ServerBusy, TransientError
from imapmig.testing.hostile import Reply
from tests.test_hostile import SERVER, Hostile


class LoginBusyTests(SynchronousTestCase):
    """
    L{imapmig.imap.session.IMAPSession.login} refused.
    """

    def test_unavailable(self) -> None:
        """
        Dovecot's answer while its authentication backend is down, C{NO
        [UNAVAILABLE] Temporary authentication failure.}, is
        L{ServerBusy} (a L{TransientError}: the job waits and connects
        again), naming the server and the reply, and logs no error.
        """
        hostile = Hostile(
            self,
            {"AUTHENTICATE": Reply(b"NO [UNAVAILABLE] Temporary authentication failure.")},
        )
        failure = self.failureResultOf(
            hostile.run(hostile.session.login("alice", "pw")), ServerBusy
        )
        self.assertIsInstance(failure.value, TransientError)
        self.assertNotIsInstance(failure.value, AuthenticationFailed)
        self.assertEqual(failure.value.code, "UNAVAILABLE")
        self.assertEqual(
            str(failure.value),
            f"{SERVER}: login: the server asks to wait:"
            " NO [UNAVAILABLE] Temporary authentication failure.",
        )
        self.assertEqual(hostile.logged(LogLevel.error), [])

    def test_tooManyConnections(self) -> None:
        """
        A refusal that says there are too many connections, without a
        code, is L{ServerBusy} too.
        """
        hostile = Hostile(self, {"AUTHENTICATE": Reply(b"NO Too many connections, try later")})
        self.failureResultOf(hostile.run(hostile.session.login("alice", "pw")), ServerBusy)

    def test_wrongPasswordStaysPermanent(self) -> None:
        """
        A refusal of the credentials stays L{AuthenticationFailed}: the job
        fails at once, with no retry storm against the account.
        """
        hostile = Hostile(self, {"AUTHENTICATE": Reply(b"NO [AUTHENTICATIONFAILED] no")})
        failure = self.failureResultOf(
            hostile.run(hostile.session.login("alice", "pw")), AuthenticationFailed
        )
        self.assertNotIsInstance(failure.value, TransientError)
