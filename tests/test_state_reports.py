# -*- test-case-name: tests.test_state_reports -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.state.reports.FailuresQuery}, the logic of the failure
pages every store shares; the stores' pages themselves are tested in
L{tests.test_state_manifest}.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.state import reports
from imapmig.state.reports import FailuresPage, FailuresQuery
from tests.test_state import failed


class FailuresQueryTests(SynchronousTestCase):
    """
    L{FailuresQuery} plans a page and makes it of the rows read.
    """

    def test_needleFolded(self) -> None:
        """
        The needle has its ASCII letters in lower case and no others (as
        SQLite's C{lower()}); a filtered page searches
        L{reports.FAILURES_SEARCH_ROWS} rows, an unfiltered one counts
        L{reports.FAILURES_COUNT_LIMIT}.
        """
        query = FailuresQuery.of(0, 10, "ÄRCHive", None)
        self.assertEqual(query.needle, "Ärchive")
        self.assertEqual(query.rowsRead, reports.FAILURES_SEARCH_ROWS)
        self.assertEqual(FailuresQuery.of(0, 10, "", None).rowsRead, reports.FAILURES_COUNT_LIMIT)

    def test_limitBounded(self) -> None:
        """
        No page reaches past the count limit: the limit is cut to what is
        left of it after the offset, and is never below 0.
        """
        self.patch(reports, "FAILURES_COUNT_LIMIT", 10)
        self.assertEqual(FailuresQuery.of(0, 4, "", None).limit, 4)
        self.assertEqual(FailuresQuery.of(8, 4, "", None).limit, 2)
        self.assertEqual(FailuresQuery.of(12, 4, "", None).limit, 0)

    def test_parameters(self) -> None:
        """
        The statements' parameters ask one row more than counted and one
        more than the page, and spell C{after} as C{folder} and C{key}.
        """
        self.patch(reports, "FAILURES_SEARCH_ROWS", 50)
        query = FailuresQuery.of(3, 5, "x", ("A", "7"))
        self.assertEqual(
            query.parameters("job"),
            {
                "needle": "x",
                "job": "job",
                "rows": 50,
                "more": 51,
                "limit": 6,
                "offset": 3,
                "folder": "A",
                "key": "7",
            },
        )
        parameters = FailuresQuery.of(0, 5, "", None).parameters("job")
        self.assertEqual((parameters["folder"], parameters["key"]), (None, None))

    def test_readsPage(self) -> None:
        """
        A page from the start reads rows only if matches lie past its
        offset; a page after a key always does; a page of no rows never.
        """
        self.assertFalse(FailuresQuery.of(4, 5, "", None).readsPage(4))
        self.assertTrue(FailuresQuery.of(4, 5, "", None).readsPage(5))
        self.assertTrue(FailuresQuery.of(4, 5, "", ("A", "1")).readsPage(0))
        self.assertFalse(FailuresQuery.of(4, 0, "", ("A", "1")).readsPage(9))

    def test_cut(self) -> None:
        """
        Rows up to the limit are the page and end the failures; a row more
        is cut, and the page's last row is where the next one starts.
        """
        query = FailuresQuery.of(0, 2, "", None)
        rows = [("A", "1", "x"), ("A", "2", "x"), ("B", "1", "x")]
        self.assertEqual(query.cut(rows[:2]), (rows[:2], None))
        self.assertEqual(query.cut(rows), (rows[:2], ("A", "2")))

    def test_searchOn(self) -> None:
        """
        Only a filtered page that did not fill reads where its search
        stopped; the next page starts there when a row follows it.
        """
        filtered = FailuresQuery.of(0, 2, "x", None)
        self.assertTrue(filtered.searchesOn(None))
        self.assertFalse(filtered.searchesOn(("A", "2")))
        self.assertFalse(FailuresQuery.of(0, 2, "", None).searchesOn(None))
        self.assertFalse(FailuresQuery.of(0, 0, "x", None).searchesOn(None))
        self.assertEqual(filtered.searchEnd([("A", "9"), ("B", "1")]), ("A", "9"))
        self.assertIsNone(filtered.searchEnd([("A", "9")]))

    def test_page(self) -> None:
        """
        The page counts its matches, and its count is exact unless more
        rows were counted than the query reads.
        """
        self.patch(reports, "FAILURES_COUNT_LIMIT", 3)
        query = FailuresQuery.of(0, 2, "", None)
        items = [failed("A", "1")]
        self.assertEqual(query.page(3, 3, items, None), FailuresPage(3, tuple(items)))
        self.assertEqual(
            query.page(4, 3, items, ("A", "1")),
            FailuresPage(3, tuple(items), matchedExact=False, next=("A", "1")),
        )
