# -*- test-case-name: tests.test_state_manifest -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for what the state store answers the status pages and the audit
manifest with: Message-IDs, pages of failures, the manifest in pages, a
health ping; and the upgrade of a version 7 database to version 8.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

import attrs
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import PermanentError
from imapmig.state import FailuresPage, MessageOutcome
from imapmig.state import reports as stateReports
from imapmig.state.memory import MemoryStateStore
from imapmig.state.sqlite import SCHEMA_VERSION, SQLiteStateStore
from tests.test_state import _DROP_NAMES, appended, failed, present

if TYPE_CHECKING:
    _MixinBase = SynchronousTestCase
else:
    _MixinBase = object


def withId(outcome: MessageOutcome, messageId: str) -> MessageOutcome:
    """
    C{outcome} with the Message-ID C{messageId}.
    """
    return attrs.evolve(outcome, messageId=messageId)


class ManifestBehaviourMixin(_MixinBase):
    """
    Failure pages, manifest pages and the ping, alike in every store.
    """

    def makeStore(self) -> SQLiteStateStore | MemoryStateStore:
        """
        A new, empty store, closed when the test ends.
        """
        raise NotImplementedError()

    def test_messageIdRoundTrip(self) -> None:
        """
        A failed or already present message's Message-ID reads back; an
        appended message has none, also when it replaces a failure that
        had one.
        """
        store = self.makeStore()
        first = withId(failed("INBOX", "1"), "<a@example.com>")
        second = withId(present("INBOX", "2", uid=4), "<b@example.com>")
        self.successResultOf(store.recordOutcomes("job", [first, second, failed("INBOX", "3")]))
        self.assertEqual(
            self.successResultOf(store.failures("job")), [first, failed("INBOX", "3")]
        )
        self.assertEqual(self.successResultOf(store.destinationMap("job", "INBOX"))["2"], second)
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "1", uid=9)]))
        self.assertIsNone(
            self.successResultOf(store.destinationMap("job", "INBOX"))["1"].messageId
        )
        self.successResultOf(store.recordOutcomes("job", [("INBOX", "2", "INBOX", 5, 7, 10, 0)]))
        self.assertIsNone(
            self.successResultOf(store.destinationMap("job", "INBOX"))["2"].messageId
        )

    def test_failuresPage(self) -> None:
        """
        L{failuresPage} returns the failures from C{offset}, at most
        C{limit} of them, in folder then key order, with the count of all
        failures; appended and present messages and other jobs' failures
        are left out.
        """
        store = self.makeStore()
        failures = [failed("A", str(n)) for n in range(10, 30)]
        self.successResultOf(
            store.recordOutcomes(
                "job", failures + [appended("A", "5"), present("A", "6"), failed("B", "1")]
            )
        )
        self.successResultOf(store.recordOutcomes("other", [failed("A", "99")]))
        page = self.successResultOf(store.failuresPage("job", 5, 4))
        self.assertEqual(page, FailuresPage(21, tuple(failures[5:9]), next=("A", "18")))
        last = self.successResultOf(store.failuresPage("job", 19, 100))
        self.assertEqual(last, FailuresPage(21, (failures[19], failed("B", "1"))))
        beyond = self.successResultOf(store.failuresPage("job", 50, 10))
        self.assertEqual(beyond, FailuresPage(21, ()))
        self.assertEqual(
            self.successResultOf(store.failuresPage("nobody", 0, 10)), FailuresPage(0, ())
        )

    def test_failuresFiltered(self) -> None:
        """
        The filter keeps failures with the text, in any ASCII case, in the
        folder key, the mailbox, the key, the Message-ID or the reason.
        """
        store = self.makeStore()
        byFolder = failed("Archive", "1", "NO no")
        byMailbox = attrs.evolve(failed("X", "2", "NO no"), mailbox="ARCHIVED")
        byKey = failed("Y", "archive-3", "NO no")
        byId = withId(failed("Z", "4", "NO no"), "<1@archive.example>")
        byReason = failed("Z", "5", "NO [OVERQUOTA] archive full")
        other = withId(failed("Z", "6", "NO no"), "<2@example>")
        self.successResultOf(
            store.recordOutcomes("job", [byFolder, byMailbox, byKey, byId, byReason, other])
        )
        page = self.successResultOf(store.failuresPage("job", 0, 10, "ARCHive"))
        self.assertEqual(page, FailuresPage(5, (byFolder, byMailbox, byKey, byId, byReason)))
        page = self.successResultOf(store.failuresPage("job", 1, 2, "archive"))
        self.assertEqual(page, FailuresPage(5, (byMailbox, byKey), next=("Y", "archive-3")))
        self.assertEqual(
            self.successResultOf(store.failuresPage("job", 0, 10, "nothing")), FailuresPage(0, ())
        )

    def bound(self, count: int, search: int) -> None:
        """
        Bound the failure pages of both stores to C{count} failed messages
        counted and C{search} searched, for this test.
        """
        self.patch(stateReports, "FAILURES_COUNT_LIMIT", count)
        self.patch(stateReports, "FAILURES_SEARCH_ROWS", search)

    def test_failuresCountBounded(self) -> None:
        """
        A job with more failed messages than the count limit: C{matched} is
        the limit and not exact, and pages reach no further than the
        limit; with exactly the limit, the count is exact.
        """
        self.bound(count=10, search=4)
        store = self.makeStore()
        failures = [failed("A", str(n)) for n in range(10, 22)]
        self.successResultOf(store.recordOutcomes("job", failures))
        self.assertEqual(
            self.successResultOf(store.failuresPage("job", 0, 4)),
            FailuresPage(10, tuple(failures[0:4]), matchedExact=False, next=("A", "13")),
        )
        self.assertEqual(
            self.successResultOf(store.failuresPage("job", 8, 4)),
            FailuresPage(10, tuple(failures[8:10]), matchedExact=False, next=("A", "19")),
        )
        self.assertEqual(
            self.successResultOf(store.failuresPage("job", 10, 4)),
            FailuresPage(10, (), matchedExact=False),
        )
        self.successResultOf(store.recordOutcomes("job", [appended("A", "20"), appended("A", "21")]))
        self.assertEqual(
            self.successResultOf(store.failuresPage("job", 6, 100)),
            FailuresPage(10, tuple(failures[6:10])),
        )

    def test_failuresSearchBounded(self) -> None:
        """
        A filter searches only the first failed messages, up to the search
        limit: matches beyond it are neither counted nor shown, and the
        count says it is not exact; when the job has no more failed
        messages than that, it is exact.
        """
        self.bound(count=10, search=4)
        store = self.makeStore()
        failures = [failed("A", str(n), "hit" if n % 2 else "miss") for n in range(10, 16)]
        self.successResultOf(store.recordOutcomes("job", failures))
        self.assertEqual(
            self.successResultOf(store.failuresPage("job", 0, 10, "HIT")),
            FailuresPage(2, (failures[1], failures[3]), matchedExact=False, next=("A", "13")),
        )
        self.assertEqual(
            self.successResultOf(store.failuresPage("job", 1, 10, "hit")),
            FailuresPage(2, (failures[3],), matchedExact=False, next=("A", "13")),
        )
        self.successResultOf(
            store.recordOutcomes("job", [appended("A", "14"), appended("A", "15")])
        )
        self.assertEqual(
            self.successResultOf(store.failuresPage("job", 0, 10, "hit")),
            FailuresPage(2, (failures[1], failures[3])),
        )
        self.assertEqual(
            self.successResultOf(store.failuresPage("job", 0, 10, "nothing")), FailuresPage(0, ())
        )

    def test_failuresAfter(self) -> None:
        """
        Pages that start after the previous page's C{next} go through every
        failed message, past the count limit too, each in key order,
        with C{matched} still counted from the start; the last page has no
        C{next}.
        """
        self.bound(count=10, search=4)
        store = self.makeStore()
        failures = [failed(folder, str(n)) for folder in ("A", "B") for n in range(10, 17)]
        self.successResultOf(store.recordOutcomes("job", failures + [appended("A", "99")]))
        seen: list[MessageOutcome] = []
        after = None
        while True:
            page = self.successResultOf(store.failuresPage("job", 0, 4, after=after))
            self.assertEqual((page.matched, page.matchedExact), (10, False))
            seen.extend(page.items)
            if page.next is None:
                break
            self.assertEqual(page.next, (page.items[-1].folderKey, page.items[-1].messageKey))
            after = page.next
        self.assertEqual(seen, failures)

    def test_failuresSearchAfter(self) -> None:
        """
        A filtered page searches on from C{after}: when its search stops
        (the search limit) before the page is full, C{next} is the last
        failure searched, and the pages together find every match once.
        """
        self.bound(count=10, search=3)
        store = self.makeStore()
        failures = [
            failed("A", str(n), "hit" if n in (10, 16, 17, 18, 19) else "miss")
            for n in range(10, 21)
        ]
        self.successResultOf(store.recordOutcomes("job", failures))
        first = self.successResultOf(store.failuresPage("job", 0, 2, "hit"))
        self.assertEqual(first, FailuresPage(1, (failures[0],), False, ("A", "12")))
        second = self.successResultOf(store.failuresPage("job", 0, 2, "hit", ("A", "12")))
        self.assertEqual(second, FailuresPage(1, (), False, ("A", "15")))
        third = self.successResultOf(store.failuresPage("job", 0, 2, "hit", ("A", "15")))
        self.assertEqual(third, FailuresPage(1, (failures[6], failures[7]), False, ("A", "17")))
        fourth = self.successResultOf(store.failuresPage("job", 0, 2, "hit", ("A", "17")))
        self.assertEqual(fourth, FailuresPage(1, (failures[8], failures[9]), False, None))

    def test_failuresFilterLiteral(self) -> None:
        """
        The filter is plain text: C{%}, C{_} and quotes match themselves.
        """
        store = self.makeStore()
        percent = failed("A", "1", "50% of quota")
        plain = failed("A", "2", "500 of quota")
        self.successResultOf(store.recordOutcomes("job", [percent, plain]))
        self.assertEqual(
            self.successResultOf(store.failuresPage("job", 0, 10, "0%")), FailuresPage(1, (percent,))
        )
        self.assertEqual(
            self.successResultOf(store.failuresPage("job", 0, 10, "'")), FailuresPage(0, ())
        )

    def test_manifestPages(self) -> None:
        """
        L{manifestOutcomes} pages through the failed and already present
        messages of one job, by key: each page starts after the last key
        of the previous one, and an empty page ends.
        """
        store = self.makeStore()
        notCopied = [
            present("A", "1"), failed("A", "2"), present("B", "1"), failed("B", "10"),
            failed("B", "2"),
        ]  # fmt: skip
        self.successResultOf(
            store.recordOutcomes("job", notCopied + [appended("A", "0"), appended("B", "3")])
        )
        self.successResultOf(store.recordOutcomes("other", [failed("A", "3")]))
        pages = []
        after = None
        while True:
            page = self.successResultOf(store.manifestOutcomes("job", after, 2))
            if not page:
                break
            pages.append(page)
            after = (page[-1].folderKey, page[-1].messageKey)
        self.assertEqual(pages, [notCopied[0:2], notCopied[2:4], notCopied[4:]])

    def test_manifestAfterReplacedKey(self) -> None:
        """
        A page may start after a key that is no longer in the manifest
        (its message was appended since): the pages go on from there.
        """
        store = self.makeStore()
        self.successResultOf(store.recordOutcomes("job", [failed("A", "1"), failed("A", "3")]))
        self.successResultOf(store.recordOutcomes("job", [appended("A", "2")]))
        self.assertEqual(
            self.successResultOf(store.manifestOutcomes("job", ("A", "2"), 10)),
            [failed("A", "3")],
        )

    def test_ping(self) -> None:
        """
        L{ping} succeeds while the store is open and fails once it is
        closed.
        """
        store = self.makeStore()
        self.assertIsNone(self.successResultOf(store.ping()))
        store.close()
        self.failureResultOf(store.ping(), PermanentError)
        self.failureResultOf(store.failuresPage("job", 0, 1), PermanentError)
        self.failureResultOf(store.manifestOutcomes("job", None, 1), PermanentError)


class MemoryManifestTests(ManifestBehaviourMixin, SynchronousTestCase):
    """
    L{MemoryStateStore} pages failures and the manifest.
    """

    def makeStore(self) -> MemoryStateStore:
        """
        A new L{MemoryStateStore}.
        """
        store = MemoryStateStore()
        self.addCleanup(store.close)
        return store


class SQLiteManifestTests(ManifestBehaviourMixin, SynchronousTestCase):
    """
    L{SQLiteStateStore} pages failures and the manifest.
    """

    def makeStore(self) -> SQLiteStateStore:
        """
        A new L{SQLiteStateStore} in a new file.
        """
        store = SQLiteStateStore(self.mktemp(), seconds=Clock().seconds)
        self.addCleanup(store.close)
        return store

    def test_indexRead(self) -> None:
        """
        SQLite answers a failure page and a manifest page from the index of
        messages not copied, not by reading every message of the job: they
        are answered, and every query the store makes names the index,
        after the index is dropped only if SQLite refuses them.
        """
        path = self.mktemp()
        store = SQLiteStateStore(path, seconds=Clock().seconds)
        self.addCleanup(store.close)
        self.successResultOf(store.recordOutcomes("job", [failed("A", "1")]))
        self.successResultOf(store.failuresPage("job", 0, 1, "x"))
        self.successResultOf(store.manifestOutcomes("job", None, 1))
        self.successResultOf(store.manifestOutcomes("job", ("A", "0"), 1))
        connection = sqlite3.connect(path, isolation_level=None)
        self.addCleanup(connection.close)
        connection.execute("DROP INDEX messages_not_copied")
        for refused in (
            store.failuresPage("job", 0, 1),
            store.failuresPage("job", 0, 1, "x"),
            store.manifestOutcomes("job", None, 1),
            store.manifestOutcomes("job", ("A", "0"), 1),
        ):
            error = self.failureResultOf(refused, PermanentError)
            self.assertIn("no such index: messages_not_copied", str(error.value))


class SchemaVersion8Tests(SynchronousTestCase):
    """
    A version 7 database, as imapmig 0.1.0 of issue 17 wrote it, is read
    and upgraded.
    """

    def writeVersion7(self, path: str) -> sqlite3.Connection:
        """
        Write a version 7 database at C{path} with an appended, an already
        present and a failed message: the current schema without version
        8's column and index.

        @return: a connection to it, closed when the test ends.
        """
        store = SQLiteStateStore(path, seconds=Clock().seconds)
        self.successResultOf(
            store.recordOutcomes(
                "job", [appended("INBOX", "1", uid=3), present("INBOX", "2", uid=4),
                        failed("INBOX", "3")],
            )
        )  # fmt: skip
        store.close()
        connection = sqlite3.connect(path, isolation_level=None)
        self.addCleanup(connection.close)
        connection.executescript(
            _DROP_NAMES
            + "DROP TABLE job_holds; DROP INDEX messages_not_copied; ALTER TABLE messages DROP COLUMN message_id;"
            " UPDATE schema_version SET version = 7;"
        )
        return connection

    def test_readOnlyVersion7(self) -> None:
        """
        Opened read-only (by C{imapmig report}), a version 7 database is
        read without Message-IDs, pages its failures and its manifest, and
        is left at version 7.
        """
        path = self.mktemp()
        connection = self.writeVersion7(path)
        store = SQLiteStateStore(path, seconds=Clock().seconds, readOnly=True)
        self.addCleanup(store.close)
        self.assertEqual(self.successResultOf(store.failures("job")), [failed("INBOX", "3")])
        self.assertEqual(
            self.successResultOf(store.failuresPage("job", 0, 10, "too big")),
            FailuresPage(1, (failed("INBOX", "3"),)),
        )
        self.assertEqual(
            self.successResultOf(store.manifestOutcomes("job", None, 10)),
            [present("INBOX", "2", uid=4), failed("INBOX", "3")],
        )
        self.assertIsNone(self.successResultOf(store.ping()))
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(), [(7,)]
        )

    def test_upgradeFromVersion7(self) -> None:
        """
        Opened to write, a version 7 database is upgraded (through
        version 8, the Message-IDs, to the current version): its
        rows read back with no Message-ID, it records Message-IDs, and its
        schema (columns and indexes) is a new database's.
        """
        path = self.mktemp()
        connection = self.writeVersion7(path)
        store = SQLiteStateStore(path, seconds=Clock().seconds)
        self.addCleanup(store.close)
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(),
            [(SCHEMA_VERSION,)],
        )
        self.assertEqual(
            self.successResultOf(store.manifestOutcomes("job", None, 10)),
            [present("INBOX", "2", uid=4), failed("INBOX", "3")],
        )
        recorded = withId(failed("INBOX", "4"), "<x@y>")
        self.successResultOf(store.recordOutcomes("job", [recorded]))
        self.assertEqual(
            self.successResultOf(store.failuresPage("job", 0, 10, "<X@")),
            FailuresPage(1, (recorded,)),
        )
        freshPath = self.mktemp()
        SQLiteStateStore(freshPath, seconds=Clock().seconds).close()
        fresh = sqlite3.connect(freshPath)
        self.addCleanup(fresh.close)
        for query in (
            "PRAGMA table_info(messages)",
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' ORDER BY name",
        ):
            self.assertEqual(connection.execute(query).fetchall(), fresh.execute(query).fetchall())
