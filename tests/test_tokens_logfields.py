"""
The line L{imapmig.oauth.tokens.loginWithToken} logs when the server refuses an
access token and it logs in again carries the job's fields, as every line
about a job's connections does (L{imapmig.log.logfields}).
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, succeed
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import CredentialsRefused
from imapmig.oauth.tokens import loginWithToken


class _Tokens:
    """
    An access token source that gives C{tokens} in turn.
    """

    def __init__(self, *tokens: str) -> None:
        self.tokens = list(tokens)

    def current(self) -> Deferred[str]:
        return succeed(self.tokens.pop(0))

    def invalidate(self, token: str) -> None:
        pass


class LoginWithTokenFieldsTests(SynchronousTestCase):
    """
    L{loginWithToken} with log fields.
    """

    def test_refusedTokenLineNamesTheJob(self) -> None:
        """
        A token refused once, the login tried again with the next: the
        line saying so carries C{job}.
        """
        refusals = [CredentialsRefused("no")]

        async def attempt(token: str) -> str:
            if refusals:
                raise refusals.pop()
            return "session"

        with capturedLogs() as events:
            d: Deferred[str] = Deferred.fromCoroutine(
                loginWithToken(
                    _Tokens("at-1", "at-2"), attempt, "alice at tcp:x:143", {"job": "alice"}
                )
            )
        self.assertEqual(self.successResultOf(d), "session")
        [event] = events
        self.assertIn("refused the access token", event["log_format"])
        self.assertEqual(event["job"], "alice")
