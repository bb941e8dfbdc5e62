# -*- test-case-name: tests.test_state_names -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests that the state stores record what the owner of a message not
migrated knows it by (Message-ID, Date, From, Subject), name failures
recorded earlier, say what a job's records cover (L{IStateStore.activity}),
and that a version 9 database is upgraded to hold the names.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.state import IStateStore, JobActivity, MessageNames, MessageOutcome, withNames
from imapmig.state.memory import MemoryStateStore
from imapmig.state.sqlite import SCHEMA_VERSION, SQLiteStateStore
from tests.test_state import _DROP_NAMES, MARK, appended, failed, present

if TYPE_CHECKING:
    _MixinBase = SynchronousTestCase
else:
    _MixinBase = object

NAMES = MessageNames("<a@example.com>", "Tue, 3 Mar 2020 10:00:00 +0100", "Ann <a@x>", "Hé")


class StoreNamesMixin(_MixinBase):
    """
    Names and activity, as every store records them.
    """

    clock: Clock

    def makeStore(self) -> IStateStore:
        raise NotImplementedError()

    def test_namesRoundTrip(self) -> None:
        """
        A failed outcome's names are read back by C{failures},
        C{failuresPage} (which also finds a message by its From or
        Subject) and C{manifestOutcomes}.
        """
        store = self.makeStore()
        named = withNames(failed("INBOX", "1"), NAMES)
        self.successResultOf(store.recordOutcomes("job", [named, appended("INBOX", "2")]))
        self.assertEqual(self.successResultOf(store.failures("job")), [named])
        self.assertEqual(
            self.successResultOf(store.manifestOutcomes("job", None, 10)), [named]
        )
        for needle in ("ann <A@", "hé"):
            page = self.successResultOf(store.failuresPage("job", 0, 10, needle))
            self.assertEqual(page.items, (named,), needle)

    def test_nameMessages(self) -> None:
        """
        L{IStateStore.nameMessages} names the messages whose latest
        outcome is a failure, and leaves the others (appended, already
        present, unknown) as they are.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes(
                "job", [failed("INBOX", "1"), appended("INBOX", "2"), present("INBOX", "3")]
            )
        )
        self.successResultOf(
            store.nameMessages(
                "job",
                [("INBOX", key, NAMES) for key in ("1", "2", "3", "4")]
                + [("Sent", "1", NAMES)],
            )
        )
        self.assertEqual(
            self.successResultOf(store.failures("job")), [withNames(failed("INBOX", "1"), NAMES)]
        )
        self.assertEqual(
            self.successResultOf(store.manifestOutcomes("job", None, 10)),
            [withNames(failed("INBOX", "1"), NAMES), present("INBOX", "3")],
        )
        self.assertEqual(
            self.successResultOf(store.destinationMap("job", "INBOX"))["2"],
            appended("INBOX", "2"),
        )

    def test_appendedClearsNames(self) -> None:
        """
        A message that failed and is appended later keeps no names.
        """
        store = self.makeStore()
        self.successResultOf(store.recordOutcomes("job", [withNames(failed("INBOX", "1"), NAMES)]))
        self.successResultOf(store.recordOutcomes("job", [("INBOX", "1", "INBOX", 10, 7, 3, 0)]))
        outcome = self.successResultOf(store.destinationMap("job", "INBOX"))["1"]
        self.assertEqual(outcome, MessageOutcome("INBOX", "1", "INBOX", 10, 7, 3))

    def test_activity(self) -> None:
        """
        L{IStateStore.activity} sums the octets of the messages copied
        (not those failed or already present), spans the times the copies
        were recorded (a failure recorded later, as a rerun records it
        again, does not stretch it), and counts the folder marks; a job
        with no record has none of these.
        """
        store = self.makeStore()
        self.assertEqual(
            self.successResultOf(store.activity("job")), JobActivity(0, None, None, 0)
        )
        self.clock.advance(100)
        self.successResultOf(
            store.recordOutcomes("job", [appended("INBOX", "1"), failed("INBOX", "2")])
        )
        self.clock.advance(30)
        self.successResultOf(
            store.recordOutcomes("job", [present("INBOX", "3"), appended("INBOX", "4")])
        )
        self.clock.advance(600)
        self.successResultOf(store.recordOutcomes("job", [failed("INBOX", "2")]))
        self.successResultOf(store.recordOutcomes("other", [appended("INBOX", "1")]))
        self.successResultOf(store.recordFolderMark("job", "INBOX", MARK))
        sizes = appended("INBOX", "1").size + appended("INBOX", "4").size
        self.assertEqual(
            self.successResultOf(store.activity("job")), JobActivity(sizes, 100.0, 130.0, 1)
        )


class MemoryStoreNamesTests(StoreNamesMixin, SynchronousTestCase):
    """
    L{MemoryStateStore} records names and activity.
    """

    def makeStore(self) -> MemoryStateStore:
        self.clock = Clock()
        store = MemoryStateStore(seconds=self.clock.seconds)
        self.addCleanup(store.close)
        return store


class SQLiteStoreNamesTests(StoreNamesMixin, SynchronousTestCase):
    """
    L{SQLiteStateStore} records names and activity.
    """

    def makeStore(self) -> SQLiteStateStore:
        self.clock = Clock()
        store = SQLiteStateStore(self.mktemp(), seconds=self.clock.seconds)
        self.addCleanup(store.close)
        return store


class MigrateFromVersion9Tests(SynchronousTestCase):
    """
    A version 9 database, which has Message-IDs but no Date, From or
    Subject, is read and upgraded.
    """

    def test_migrateFromVersion9(self) -> None:
        """
        Opened read-only, a version 9 database reads its failures with
        their Message-IDs and no other names, and is left as it is;
        opened to write, it is upgraded with its rows kept, and records
        and reads names.
        """
        path = self.mktemp()
        first = SQLiteStateStore(path, seconds=Clock().seconds)
        old = MessageOutcome("INBOX", "1", "INBOX", 10, failure="NO", messageId="<old@x>")
        self.successResultOf(first.recordOutcomes("job", [old]))
        first.close()
        connection = sqlite3.connect(path, isolation_level=None)
        self.addCleanup(connection.close)
        connection.executescript(
            _DROP_NAMES
            + "UPDATE schema_version SET version = 9;"
        )
        readOnly = SQLiteStateStore(path, seconds=Clock().seconds, readOnly=True)
        self.assertEqual(self.successResultOf(readOnly.failures("job")), [old])
        self.assertEqual(self.successResultOf(readOnly.manifestOutcomes("job", None, 5)), [old])
        page = self.successResultOf(readOnly.failuresPage("job", 0, 5, "old@"))
        self.assertEqual(page.items, (old,))
        readOnly.close()
        self.assertEqual(connection.execute("SELECT version FROM schema_version").fetchall(), [(9,)])
        store = SQLiteStateStore(path, seconds=Clock().seconds)
        self.addCleanup(store.close)
        self.assertEqual(
            connection.execute("SELECT version FROM schema_version").fetchall(),
            [(SCHEMA_VERSION,)],
        )
        self.assertEqual(self.successResultOf(store.failures("job")), [old])
        self.successResultOf(store.nameMessages("job", [("INBOX", "1", NAMES)]))
        self.assertEqual(
            self.successResultOf(store.failures("job")), [withNames(old, NAMES)]
        )
