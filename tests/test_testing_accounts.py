# -*- test-case-name: tests.test_testing_accounts -*-
"""
Tests for L{imapmig.testing.accounts}: reading an account of a private
server back with L{imaplib}.  (The tests against a running server are in
the servers' own test modules, e.g. L{tests.test_testing_dovecot}.)
"""

from __future__ import annotations

from datetime import datetime, timezone

from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing import accounts


class FetchParsingTests(SynchronousTestCase):
    """
    The FETCH reply parser reads metadata around the literal, never from it.
    """

    def test_itemsAfterLiteral(self) -> None:
        """
        FLAGS and INTERNALDATE are found whether they come before or after
        the body literal; C{\\Recent} is dropped and the other flags put in
        canonical order; the body is untouched.
        """
        body = b"Subject: FLAGS (\\Deleted) UID 99\r\n\r\nx\r\n"
        parsed = accounts._parseFetch(
            [
                (
                    b"1 (UID 7 FLAGS (\\Seen Junk \\Recent $Label1 \\Answered) BODY[] {%d}"
                    % len(body),
                    body,
                ),
                b' INTERNALDATE " 2-Jan-2019 03:04:05 -0130")',
            ]
        )
        self.assertEqual(list(parsed), [7])
        self.assertEqual(parsed[7].flags, ("\\Answered", "\\Seen", "$Label1", "Junk"))
        self.assertEqual(parsed[7].body, body)
        self.assertEqual(
            parsed[7].internalDate, datetime(2019, 1, 2, 4, 34, 5, tzinfo=timezone.utc)
        )
