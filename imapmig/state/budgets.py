# -*- test-case-name: tests.test_state_budget,tests.test_state_contract -*-
"""
L{IBudgetRecords}: the store's role that keeps the octets each account
moved per day, for the daily budgets (L{imapmig.job.budgets}).

Taken out of C{imapmig/state/__init__.py}, which held every role of the
store in one 25-method interface.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from zope.interface import Interface


class IBudgetRecords(Interface):
    """
    The octets each account moved, per direction and UTC day.
    """

    def budgetUsed(server: str, user: str, direction: str, day: str) -> "Deferred[int]":
        """
        The octets recorded as moved for the account C{user} on C{server}
        in C{direction} on C{day}; 0 if none.

        @param direction: C{"upload"} (APPENDed into the account) or
            C{"download"} (FETCHed from it).
        @param day: the UTC day, C{"YYYY-MM-DD"}.
        """

    def addBudgetUse(
        server: str, user: str, direction: str, day: str, octets: int
    ) -> "Deferred[int]":
        """
        Add C{octets} to what L{budgetUsed} reports for the same arguments,
        in one transaction.  Records of earlier days may be dropped.

        @return: a Deferred firing with the new total.
        """
