# -*- test-case-name: tests.test_state_budget,tests.test_state_contract -*-
"""
L{IBudgetRecords}: the store's role that keeps the octets each account
moved per day, for the daily budgets (L{imapmig.job.budgets}).

A fleet of daemons shares one account's budget: each unit of work
I{reserves} its octets in the store before it is sent
(L{IBudgetRecords.reserveBudget}, refused when they do not fit, so that no
two daemons both see room for their units) and I{gives back} what it did
not send (L{IBudgetRecords.giveBackBudget}).  In PostgreSQL the reservation
is one conditional upsert whose row lock serialises the daemons; in SQLite
(one daemon) its transaction is the lock.

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

    def reserveBudget(
        server: str, user: str, direction: str, day: str, octets: int, limit: int
    ) -> "Deferred[int | None]":
        """
        Add C{octets} to what L{budgetUsed} reports for the same arguments
        if the total stays within C{limit}, or if nothing is used that day
        yet (the first message of a day passes, however large), in one
        transaction that no other reservation of the account interleaves
        with, whichever daemon makes it.  Records of earlier days may be
        dropped.

        @return: a Deferred firing with the new total, or L{None} (nothing
            added) when C{octets} do not fit.
        """

    def giveBackBudget(
        server: str, user: str, direction: str, day: str, octets: int
    ) -> "Deferred[int]":
        """
        Take C{octets} reserved (L{reserveBudget}) and not used back off
        what L{budgetUsed} reports, never below 0; nothing if the day has
        no record (it was dropped).

        @return: a Deferred firing with the new total.
        """
