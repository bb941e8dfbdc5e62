# -*- test-case-name: tests.test_state_contract -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
The state store's contract: tests written once against the behaviour of
its roles (L{imapmig.state.IStateStore}), mixed by
L{tests.test_state_contract} into a test case per store (memory, SQLite,
PostgreSQL), so that the three are held to one behaviour.

A role's tests are a mixin of their own, for the PostgreSQL store has its
roles one at a time: L{OutcomeJournalContract} (outcomes and the journal,
moved here from C{tests/test_state_journal.py}'s C{JournalBehaviourMixin}
and C{tests/test_state.py}'s C{StateStoreBehaviourMixin}, reading only
through L{IOutcomeJournal}), L{FolderMarksContract} (folder marks and
fallbacks, moved from C{StateStoreBehaviourMixin}) and L{JobRecordsContract}
(failures and holds from C{StateStoreBehaviourMixin}, the timeline from
C{tests/test_state_timeline.py}'s C{TimelineContractMixin}) and
L{BudgetRecordsContract} (from C{tests/test_state_budget.py}'s
C{BudgetBehaviourMixin}).

Every test is synchronous (C{successResultOf}): the PostgreSQL store is
given a thread pool that runs each call at once in the test's thread
(L{SynchronousThreadPool}); the real pool is tested beside it in
L{tests.test_state_postgresql}.
"""

from __future__ import annotations

import atexit
import tempfile
from typing import TYPE_CHECKING, Any, Callable, ParamSpec, TypeVar, cast

import attrs
from twisted.internet.interfaces import IReactorFromThreads
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from imapmig.errors import PermanentError
from imapmig.state import (
    CANCELLED,
    PAUSED,
    TIMELINE_FIRST,
    TIMELINE_LATEST,
    AppendedOutcome,
    AppendedRun,
    FolderFallback,
    FolderKeys,
    FolderMark,
    IBudgetRecords,
    IJobRecords,
    JobHold,
    JournalEntry,
    JournalMessage,
    MessageNames,
    MessageOutcome,
    Transition,
    withNames,
)
from imapmig.state.memory import MemoryStateStore
from imapmig.state.postgresql import PostgreSQLStateStore
from imapmig.state.sqlite import SQLiteStateStore
from imapmig.testing.postgresql import PostgreSQLCluster
from tests.test_state import MARK, appended, failed, noted, present

if TYPE_CHECKING:
    _MixinBase = SynchronousTestCase
else:
    _MixinBase = object

_P = ParamSpec("_P")
_R = TypeVar("_R")

AnyStore = SQLiteStateStore | MemoryStateStore | PostgreSQLStateStore


@implementer(IReactorFromThreads)
class SynchronousReactor:
    """
    A reactor whose C{callFromThread} calls at once: with
    L{SynchronousThreadPool}, a C{deferToThreadPool} fires before it
    returns.
    """

    def callFromThread(
        self, callable: Callable[..., Any], *args: object, **kwargs: object
    ) -> None:
        """
        Call C{callable} now.
        """
        callable(*args, **kwargs)


class SynchronousThreadPool(ThreadPool):
    """
    A thread pool that runs each call at once in the caller's thread.
    """

    def callInThreadWithCallback(
        self,
        onResult: Callable[[bool, _R], object] | None,
        func: Callable[_P, _R],
        *args: _P.args,
        **kw: _P.kwargs,
    ) -> None:
        """
        Call C{func}, then C{onResult} with its result or its failure.
        """
        try:
            result = func(*args, **kw)
        except BaseException:
            if onResult is not None:
                onResult(False, cast(_R, Failure()))
            return
        if onResult is not None:
            onResult(True, result)


_shared: list[PostgreSQLCluster] = []


def sharedCluster() -> PostgreSQLCluster:
    """
    One private PostgreSQL cluster for every test of the process that
    wants one (each in a database of its own), started at the first
    call and destroyed when the process exits.
    """
    if not _shared:
        cluster = PostgreSQLCluster(tempfile.mkdtemp(prefix="imapmig-statecontract-"))
        atexit.register(cluster.destroy)
        cluster.start()
        _shared.append(cluster)
    return _shared[0]


def sent(folderKey: str, messageKey: str, size: int = 100, head: bytes = b"From: a@") -> JournalMessage:
    """
    A journal record of message C{messageKey} of C{folderKey}.
    """
    return JournalMessage(folderKey=folderKey, messageKey=messageKey, size=size, head=head)


BATCH = (
    sent("INBOX", "1"),
    sent("INBOX", "2", size=0, head=b""),
    sent(".Archive.Gr\u00fc\u00dfe", "/1600000000.M1P2.host,S=99:2,S", size=2**63 - 1, head=b"\xff" * 255),
    sent("INBOX", "\u00e9t\u00e9", head=b"\x00\r\n"),
)


def withUID(
    outcome: MessageOutcome, mailbox: str, uid: int | None, uidValidity: int = 7
) -> MessageOutcome:
    """
    C{outcome}, destined to C{mailbox} with C{uid} under C{uidValidity}.
    """
    return MessageOutcome(
        folderKey=outcome.folderKey,
        messageKey=outcome.messageKey,
        mailbox=mailbox,
        size=outcome.size,
        uidValidity=uidValidity,
        uid=uid,
        failure=outcome.failure,
        alreadyPresent=outcome.alreadyPresent,
    )


class OutcomeJournalContract(_MixinBase):
    """
    L{IOutcomeJournal}'s behaviour, which every state store shares: the
    outcomes recorded and read back, and the journal of batches in flight.
    Mixed into a L{SynchronousTestCase} that defines L{makeStore}.
    """

    def makeStore(self) -> AnyStore:
        """
        A new, empty store, closed when the test ends.
        """
        raise NotImplementedError()

    def test_appendedKeys(self) -> None:
        """
        L{IStateStore.appendedKeys} returns the keys of the folder's appended
        messages, and not the failed ones.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes(
                "job",
                [appended("INBOX", "1", uid=1), appended("INBOX", "2"), failed("INBOX", "3")],
            )
        )
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1", "2"})

    def test_checkpoint(self) -> None:
        """
        L{IStateStore.checkpoint} fires with L{None}, and what was recorded
        before is still there after.
        """
        store = self.makeStore()
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "1", uid=1)]))
        self.assertIsNone(self.successResultOf(store.checkpoint()))
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1"})

    def test_emptyBatch(self) -> None:
        """
        Recording no outcomes succeeds and records nothing.
        """
        store = self.makeStore()
        self.assertIsNone(self.successResultOf(store.recordOutcomes("job", [])))
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), set())

    def test_keptApart(self) -> None:
        """
        Outcomes are kept apart by job and by folder: the same message key
        in another folder or another job is another message.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes("a", [appended("INBOX", "1"), appended("Sent", "2")])
        )
        self.successResultOf(
            store.recordOutcomes("b", [appended("INBOX", "3"), failed("Sent", "2")])
        )
        self.assertEqual(self.successResultOf(store.appendedKeys("a", "INBOX")), {"1"})
        self.assertEqual(self.successResultOf(store.appendedKeys("a", "Sent")), {"2"})
        self.assertEqual(self.successResultOf(store.appendedKeys("b", "INBOX")), {"3"})
        self.assertEqual(self.successResultOf(store.appendedKeys("b", "Sent")), set())
        self.assertEqual(self.successResultOf(store.appendedKeys("c", "INBOX")), set())

    def test_laterOutcomeWins(self) -> None:
        """
        A later outcome of a message replaces an earlier one, in a later
        batch as in the same one: a failure replaced by an append counts
        as appended, an append replaced by a failure no longer does.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes("job", [failed("INBOX", "1"), appended("INBOX", "2")])
        )
        self.successResultOf(
            store.recordOutcomes(
                "job",
                [
                    appended("INBOX", "1", uid=5),
                    failed("INBOX", "2", "gone"),
                    failed("INBOX", "3"),
                    appended("INBOX", "3", uid=9),
                    appended("INBOX", "4", uid=10),
                    failed("INBOX", "4"),
                ],
            )
        )
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1", "3"})

    def test_appendedOutcomesInMixedBatch(self) -> None:
        """
        A batch mixing L{AppendedOutcome} tuples with L{MessageOutcome}s
        keeps their order (a later outcome of the same message wins,
        whichever its form), and records each tuple as the
        L{MessageOutcome} it stands for (L{asMessageOutcome}); every field
        of an outcome in the destination reads back as written.
        """
        store = self.makeStore()
        first: AppendedOutcome = ("INBOX", "1", "INBOX", 100, 7, 2, 0)
        converted: AppendedOutcome = ("INBOX", "3", "Box", 120, 7, 4, 1)
        unknownUID: AppendedOutcome = ("INBOX", "4", "INBOX", 90, None, None, 0)
        again: AppendedOutcome = ("INBOX", "5", "INBOX", 80, 7, 9, 0)
        named = attrs.evolve(
            present("INBOX", "6", uid=11),
            messageId="<a@b>", date="Mon, 1 Jan 2024", sender="J\u00f6rg", subject="\u00dcber",
        )  # fmt: skip
        batch: list[MessageOutcome | AppendedOutcome] = [
            first,
            failed("INBOX", "1", "gone"),
            noted("INBOX", "2"),
            converted,
            unknownUID,
            failed("INBOX", "5"),
            again,
            named,
        ]
        self.successResultOf(store.recordOutcomes("job", batch))
        self.assertEqual(
            self.successResultOf(store.destinationMap("job", "INBOX")),
            {
                "2": noted("INBOX", "2"),
                "3": MessageOutcome("INBOX", "3", "Box", 120, 7, 4, lineEndingsConverted=True),
                "4": MessageOutcome("INBOX", "4", "INBOX", 90),
                "5": MessageOutcome("INBOX", "5", "INBOX", 80, 7, 9),
                "6": named,
            },
        )

    def test_manyAppendedOutcomes(self) -> None:
        """
        A long run of L{AppendedOutcome}s (the SQLite store writes them
        many rows per statement) records every one, in order: a later
        outcome of the same message in the run wins.
        """
        store = self.makeStore()
        batch: list[MessageOutcome | AppendedOutcome] = [
            ("INBOX", str(n), "INBOX", 100 + n, 7, n + 1, n % 2) for n in range(150)
        ]
        batch.append(("INBOX", "3", "Other", 5, 8, 1000, 0))
        self.successResultOf(store.recordOutcomes("job", batch))
        recorded = self.successResultOf(store.destinationMap("job", "INBOX"))
        self.assertEqual(len(recorded), 150)
        self.assertEqual(recorded["3"], MessageOutcome("INBOX", "3", "Other", 5, 8, 1000))
        self.assertEqual(
            recorded["149"],
            MessageOutcome("INBOX", "149", "INBOX", 249, 7, 150, lineEndingsConverted=True),
        )
        uids = self.successResultOf(store.recordedUIDs("job", "INBOX", 7, 1))
        self.assertEqual(uids, {n + 1 for n in range(150) if n != 3})

    def test_appendedStretches(self) -> None:
        """
        A run of L{AppendedOutcome}s changing folder, mailbox or
        UIDVALIDITY along the way (the SQLite store binds what a stretch
        shares once per statement) records each with its own.
        """
        store = self.makeStore()
        batch: list[MessageOutcome | AppendedOutcome] = [
            ("INBOX", str(n), "INBOX", n, 7, n + 1, 0) for n in range(70)
        ]
        batch += [("Sent", str(n), "Sent", n, 8, n + 1, 1) for n in range(3)]
        batch += [("INBOX", str(n), "INBOX", n, None, None, 0) for n in range(70, 72)]
        batch += [("INBOX", str(n), "Other", n, 9, n, 0) for n in range(72, 137)]
        batch.append(("INBOX", "5", "INBOX", 5, 7, 500, 0))
        self.successResultOf(store.recordOutcomes("job", batch))
        inbox = self.successResultOf(store.destinationMap("job", "INBOX"))
        expected = {
            str(n): MessageOutcome("INBOX", str(n), "INBOX", n, 7, n + 1) for n in range(70)
        }
        expected["5"] = MessageOutcome("INBOX", "5", "INBOX", 5, 7, 500)
        expected.update(
            (str(n), MessageOutcome("INBOX", str(n), "INBOX", n)) for n in range(70, 72)
        )
        expected.update(
            (str(n), MessageOutcome("INBOX", str(n), "Other", n, 9, n)) for n in range(72, 137)
        )
        self.assertEqual(inbox, expected)
        self.assertEqual(
            self.successResultOf(store.destinationMap("job", "Sent")),
            {
                str(n): MessageOutcome("Sent", str(n), "Sent", n, 8, n + 1, lineEndingsConverted=True)
                for n in range(3)
            },
        )

    def test_interleavedStretches(self) -> None:
        """
        Stretches of two folders alternating in a batch (two connections'
        replies; the SQLite store writes each folder's together) are
        recorded whole; a message recorded in two of them keeps its later
        outcome.
        """
        store = self.makeStore()
        batch: list[MessageOutcome | AppendedOutcome] = []
        for turn in range(4):
            batch += [("A", f"{turn}-{n}", "A", n, 7, 10 * turn + n, 0) for n in range(40)]
            batch += [("B", f"{turn}-{n}", "B", n, 8, 10 * turn + n, 0) for n in range(30)]
        batch.append(("A", "x", "Elsewhere", 1, 9, 1, 0))
        batch.append(("A", "x", "A", 1, 7, 2, 0))
        self.successResultOf(store.recordOutcomes("job", batch))
        folderA = self.successResultOf(store.destinationMap("job", "A"))
        folderB = self.successResultOf(store.destinationMap("job", "B"))
        self.assertEqual((len(folderA), len(folderB)), (161, 120))
        self.assertEqual(folderA["3-39"], MessageOutcome("A", "3-39", "A", 39, 7, 69))
        self.assertEqual(folderB["2-0"], MessageOutcome("B", "2-0", "B", 0, 8, 20))
        self.assertEqual(folderA["x"], MessageOutcome("A", "x", "A", 1, 7, 2))

    def test_appendedRuns(self) -> None:
        """
        L{AppendedRun}s (a tagged reply's outcomes as columns, the hot
        path's form) are recorded as the L{AppendedOutcome}s they stand
        for: runs of two folders alternating in a batch (two connections'
        replies) are recorded whole, each message with its own size, UID
        and conversion; a run the server gave no UIDs records none.
        """
        store = self.makeStore()
        batch: list[MessageOutcome | AppendedOutcome | AppendedRun] = []
        for turn in range(3):
            keys = [f"{turn}-{n}" for n in range(70)]
            uids = [100 * turn + n for n in range(70)]
            batch.append(AppendedRun("A", "A", 7, keys, range(70), uids, [n % 2 for n in range(70)]))
            batch.append(AppendedRun("B", "B", None, keys[:30], range(1, 31), None, [0] * 30))
        self.successResultOf(store.recordOutcomes("job", batch))
        folderA = self.successResultOf(store.destinationMap("job", "A"))
        folderB = self.successResultOf(store.destinationMap("job", "B"))
        self.assertEqual((len(folderA), len(folderB)), (210, 90))
        self.assertEqual(
            folderA["2-69"], MessageOutcome("A", "2-69", "A", 69, 7, 269, lineEndingsConverted=True)
        )
        self.assertEqual(folderA["1-0"], MessageOutcome("A", "1-0", "A", 0, 7, 100))
        self.assertEqual(folderB["1-29"], MessageOutcome("B", "1-29", "B", 30))
        recorded = self.successResultOf(store.recordedUIDs("job", "A", 7, 0))
        self.assertEqual(recorded, {100 * turn + n for turn in range(3) for n in range(70)})

    def test_appendedRunsInOrder(self) -> None:
        """
        Of a message in two L{AppendedRun}s of a batch, or in a run and a
        L{MessageOutcome}, the later outcome is recorded, whichever the
        runs' folders, mailboxes and UIDVALIDITYs.
        """
        store = self.makeStore()
        batch: list[MessageOutcome | AppendedOutcome | AppendedRun] = [
            AppendedRun("A", "A", 7, ["a", "b", "c"], [1, 2, 3], [1, 2, 3], [0, 0, 0]),
            AppendedRun("B", "B", 8, ["a", "b"], [1, 2], [1, 2], [0, 0]),
            AppendedRun("A", "Elsewhere", 9, ["b", "d"], [5, 6], [10, 11], [1, 0]),
            failed("A", "c"),
            AppendedRun("B", "B", 8, ["e"], [9], [3], [0]),
            AppendedRun("A", "A", 7, ["d", "e"], [7, 8], [4, 5], [0, 1]),
            ("A", "a", "Other", 4, 6, 1, 0),
            AppendedRun("C", "C", 7, ["x"], [1], [1], [0]),
            AppendedRun("C", "Elsewhere", 9, ["y"], [2], [2], [0]),
            AppendedRun("C", "C", 7, ["y"], [3], [3], [0]),
        ]
        self.successResultOf(store.recordOutcomes("job", batch))
        self.assertEqual(
            self.successResultOf(store.destinationMap("job", "A")),
            {
                "a": MessageOutcome("A", "a", "Other", 4, 6, 1),
                "b": MessageOutcome("A", "b", "Elsewhere", 5, 9, 10, lineEndingsConverted=True),
                "d": MessageOutcome("A", "d", "A", 7, 7, 4),
                "e": MessageOutcome("A", "e", "A", 8, 7, 5, lineEndingsConverted=True),
            },
        )
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "B")), {"a", "b", "e"})
        self.assertEqual(
            self.successResultOf(store.destinationMap("job", "C"))["y"],
            MessageOutcome("C", "y", "C", 3, 7, 3),
        )

    def test_appendedReplacesEverything(self) -> None:
        """
        An L{AppendedOutcome} of a message recorded before as failed or
        found present, with a note and its names, leaves nothing of that
        record: no failure, no note, not present, no names (the SQLite
        store binds only an appended message's own columns and clears the
        others in its upsert).
        """
        store = self.makeStore()
        names = MessageNames("<a@b>", "Mon, 1 Jan 2024", "J", "S")
        self.successResultOf(
            store.recordOutcomes(
                "job",
                [
                    withNames(attrs.evolve(failed("INBOX", "1"), note="flag dropped"), names),
                    withNames(present("INBOX", "2", uid=3), names),
                ],
            )
        )
        batch: list[MessageOutcome | AppendedOutcome] = [
            ("INBOX", "1", "INBOX", 100, 7, 5, 1),
            ("INBOX", "2", "INBOX", 200, 7, 6, 0),
        ]
        self.successResultOf(store.recordOutcomes("job", batch))
        self.assertEqual(
            self.successResultOf(store.destinationMap("job", "INBOX")),
            {
                "1": MessageOutcome("INBOX", "1", "INBOX", 100, 7, 5, lineEndingsConverted=True),
                "2": MessageOutcome("INBOX", "2", "INBOX", 200, 7, 6),
            },
        )
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1", "2"})

    def test_batchAllOrNothing(self) -> None:
        """
        A batch that cannot be recorded whole (a UID beyond a 64-bit
        integer, text with a lone surrogate) fails with L{PermanentError}
        and records none of its outcomes.
        """
        store = self.makeStore()
        bads: list[MessageOutcome | AppendedOutcome] = [
            ("INBOX", "2", "INBOX", 100, 7, 2**64, 0),
            attrs.evolve(appended("INBOX", "2"), size=2**63),
            failed("INBOX", "2", "\udcff"),
        ]
        for bad in bads:
            batch: list[MessageOutcome | AppendedOutcome] = [
                ("INBOX", "1", "INBOX", 100, 7, 2, 0), bad
            ]
            self.failureResultOf(store.recordOutcomes("job", batch), PermanentError)
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), set())

    def test_destinationMap(self) -> None:
        """
        L{IStateStore.destinationMap} maps the key of every message of the
        folder in the destination (appended or already present) to its
        latest outcome; failures, other folders and other jobs are left out.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes(
                "job",
                [
                    appended("INBOX", "1", uid=1),
                    present("INBOX", "2", uid=40),
                    present("INBOX", "3"),
                    failed("INBOX", "4"),
                    appended("INBOX", "5"),
                    appended("Sent", "1"),
                ],
            )
        )
        self.successResultOf(
            store.recordOutcomes("job", [failed("INBOX", "5"), appended("INBOX", "4", uid=41)])
        )
        self.successResultOf(store.recordOutcomes("other", [appended("INBOX", "9")]))
        self.assertEqual(
            self.successResultOf(store.destinationMap("job", "INBOX")),
            {
                "1": appended("INBOX", "1", uid=1),
                "2": present("INBOX", "2", uid=40),
                "3": present("INBOX", "3"),
                "4": appended("INBOX", "4", uid=41),
            },
        )
        self.assertEqual(
            self.successResultOf(store.destinationMap("job", "Sent")), {"1": appended("Sent", "1")}
        )
        self.assertEqual(self.successResultOf(store.destinationMap("job", "Trash")), {})

    def test_destinationMaps(self) -> None:
        """
        L{IStateStore.destinationMaps} is L{IStateStore.destinationMap} of
        each folder asked, in one read: an empty map for a folder with no
        outcome in the destination, nothing for a folder not asked.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes(
                "job",
                [
                    appended("INBOX", "1", uid=1),
                    present("INBOX", "2"),
                    failed("INBOX", "3"),
                    appended("Sent", "1"),
                    appended("Trash", "1"),
                ],
            )
        )
        self.successResultOf(store.recordOutcomes("other", [appended("Drafts", "9")]))
        self.assertEqual(
            self.successResultOf(store.destinationMaps("job", ["INBOX", "Sent", "Drafts"])),
            {
                "INBOX": {"1": appended("INBOX", "1", uid=1), "2": present("INBOX", "2")},
                "Sent": {"1": appended("Sent", "1")},
                "Drafts": {},
            },
        )
        self.assertEqual(self.successResultOf(store.destinationMaps("job", [])), {})

    def test_destinationMapsShareNames(self) -> None:
        """
        L{IStateStore.destinationMaps} holds a folder's key and its mailbox
        name once, not once a message: a delta pass over a large account
        reads every outcome of the job (issue 31, point 4).
        """
        store = self.makeStore()
        folderKey = "".join(["Arch", "ive"])
        outcomes = [appended(folderKey, str(n), uid=n) for n in range(1, 4)]
        self.successResultOf(store.recordOutcomes("job", outcomes))
        found = self.successResultOf(store.destinationMaps("job", ["Archive"]))["Archive"]
        self.assertEqual(sorted(found), ["1", "2", "3"])
        self.assertEqual(len({id(o.folderKey) for o in found.values()}), 1)
        self.assertEqual(len({id(o.mailbox) for o in found.values()}), 1)

    def test_namesLeaveDestinationAlone(self) -> None:
        """
        L{IStateStore.nameMessages} names failed messages only: an
        appended message's outcome is left as it was, and naming a message
        never recorded, or nothing, is no error.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes("job", [appended("INBOX", "1", uid=3), failed("INBOX", "2")])
        )
        names = MessageNames(messageId="<x@y>", subject="s")
        self.successResultOf(
            store.nameMessages(
                "job", [("INBOX", "1", names), ("INBOX", "2", names), ("INBOX", "9", names)]
            )
        )
        self.successResultOf(store.nameMessages("job", []))
        self.assertEqual(
            self.successResultOf(store.destinationMap("job", "INBOX")),
            {"1": appended("INBOX", "1", uid=3)},
        )

    def test_empty(self) -> None:
        """
        A new store has no journal entries and no recorded UIDs.
        """
        store = self.makeStore()
        self.assertEqual(self.successResultOf(store.journal("job")), [])
        self.assertEqual(self.successResultOf(store.recordedUIDs("job", "INBOX", 7, 1)), set())

    def test_roundTrip(self) -> None:
        """
        A journaled batch reads back as written: its mailbox, UIDVALIDITY,
        UID floor and every message's keys (any text), size (up to the
        largest signed 64-bit integer) and head (0 to 255 octets, any
        octets), in order; the entry id is the one C{journalBatch} gave.
        """
        store = self.makeStore()
        entryId = self.successResultOf(store.journalBatch("job", "Gr\u00fc\u00dfe", 1700000000, 4711, BATCH))
        self.assertEqual(
            self.successResultOf(store.journal("job")),
            [JournalEntry(entryId, "Gr\u00fc\u00dfe", 1700000000, 4711, BATCH)],
        )

    def test_folderKeys(self) -> None:
        """
        A unit journaled as one folder's keys (L{FolderKeys}, the job's
        form) reads back as its messages, keys in order, without sizes or
        heads; a key holding a NUL is refused.
        """
        store = self.makeStore()
        keys = FolderKeys(".Archive", ["1600000000.M1P1.host,S=12:2,S", "caf%E9", "k:3"])
        entryId = self.successResultOf(store.journalBatch("j", "Archive", 7, 10, keys))
        [entry] = self.successResultOf(store.journal("j"))
        self.assertEqual(entry.entryId, entryId)
        self.assertEqual(
            list(entry.messages),
            [JournalMessage(".Archive", key, 0, b"") for key in keys.keys],
        )
        self.failureResultOf(
            store.journalBatch("j", "Archive", 7, 10, FolderKeys("INBOX", ["a\0b"])),
            PermanentError,
        )

    def test_unknownUIDs(self) -> None:
        """
        A batch may be journaled without UIDVALIDITY or UID floor (a
        destination without UIDPLUS), and with no messages.
        """
        store = self.makeStore()
        first = self.successResultOf(store.journalBatch("job", "INBOX", None, None, BATCH[:1]))
        second = self.successResultOf(store.journalBatch("job", "INBOX", None, None, []))
        self.assertEqual(
            self.successResultOf(store.journal("job")),
            [
                JournalEntry(first, "INBOX", None, None, BATCH[:1]),
                JournalEntry(second, "INBOX", None, None, ()),
            ],
        )

    def test_orderAndJobs(self) -> None:
        """
        Entry ids increase in write order, across jobs; a job's journal
        holds its own entries only, by entry id.
        """
        store = self.makeStore()
        ids = [
            self.successResultOf(store.journalBatch(job, "INBOX", 7, n, [sent("INBOX", str(n))]))
            for n, job in enumerate(["a", "b", "a", "a", "b"])
        ]
        self.assertEqual(ids, sorted(set(ids)))
        self.assertEqual(
            [(e.entryId, e.uidFloor) for e in self.successResultOf(store.journal("a"))],
            [(ids[0], 0), (ids[2], 2), (ids[3], 3)],
        )
        self.assertEqual(
            [(e.entryId, e.uidFloor) for e in self.successResultOf(store.journal("b"))],
            [(ids[1], 1), (ids[4], 4)],
        )

    def test_settle(self) -> None:
        """
        C{recordOutcomes} with C{settled} records the outcomes and removes
        those entries, and only those.
        """
        store = self.makeStore()
        first = self.successResultOf(store.journalBatch("job", "INBOX", 7, 1, BATCH[:2]))
        second = self.successResultOf(store.journalBatch("job", "INBOX", 7, 3, BATCH[3:]))
        self.successResultOf(
            store.recordOutcomes(
                "job", [appended("INBOX", "1", uid=1), failed("INBOX", "2")], settled=[first]
            )
        )
        self.assertEqual(
            [e.entryId for e in self.successResultOf(store.journal("job"))], [second]
        )
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1"})

    def test_settleWithoutOutcomes(self) -> None:
        """
        Entries can be settled with no outcomes (a reconciliation that found
        that nothing of them arrived); nothing is recorded.
        """
        store = self.makeStore()
        first = self.successResultOf(store.journalBatch("job", "INBOX", 7, 1, BATCH))
        second = self.successResultOf(store.journalBatch("job", "INBOX", 7, 1, BATCH))
        self.assertIsNone(self.successResultOf(store.recordOutcomes("job", [], [second, first])))
        self.assertEqual(self.successResultOf(store.journal("job")), [])
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), set())

    def test_settleUnknownOrOtherJob(self) -> None:
        """
        Settling an id that is not an unsettled entry of the job (already
        settled, never written, another job's) changes nothing and is not
        an error.
        """
        store = self.makeStore()
        mine = self.successResultOf(store.journalBatch("job", "INBOX", 7, 1, BATCH))
        theirs = self.successResultOf(store.journalBatch("other", "INBOX", 7, 1, BATCH))
        self.successResultOf(store.recordOutcomes("job", [], [mine]))
        self.successResultOf(store.recordOutcomes("job", [], [mine, theirs, theirs + 1000]))
        self.assertEqual(self.successResultOf(store.journal("job")), [])
        self.assertEqual(
            [e.entryId for e in self.successResultOf(store.journal("other"))], [theirs]
        )

    def test_settleAllOrNothing(self) -> None:
        """
        When the outcomes cannot be recorded (a number out of range), the
        entries are not settled either.
        """
        store = self.makeStore()
        entryId = self.successResultOf(store.journalBatch("job", "INBOX", 7, 1, BATCH))
        bad = MessageOutcome("INBOX", "2", "INBOX", size=2**64)
        self.failureResultOf(
            store.recordOutcomes("job", [appended("INBOX", "1"), bad], [entryId]),
            PermanentError,
        )
        self.assertEqual(
            [e.entryId for e in self.successResultOf(store.journal("job"))], [entryId]
        )
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), set())

    def test_idsNotReused(self) -> None:
        """
        An entry written after the newest one was settled gets a new id, so
        that settling the old id again cannot remove it.
        """
        store = self.makeStore()
        first = self.successResultOf(store.journalBatch("job", "INBOX", 7, 1, BATCH))
        second = self.successResultOf(store.journalBatch("job", "INBOX", 7, 1, BATCH))
        self.successResultOf(store.recordOutcomes("job", [], [second]))
        third = self.successResultOf(store.journalBatch("job", "INBOX", 7, 1, BATCH))
        self.assertGreater(third, second)
        self.successResultOf(store.recordOutcomes("job", [], [second]))
        self.assertEqual(
            [e.entryId for e in self.successResultOf(store.journal("job"))], [first, third]
        )

    def test_refused(self) -> None:
        """
        A batch the store cannot hold is refused with L{PermanentError} and
        nothing is journaled: a head over 255 octets, a size or UID beyond
        a signed 64-bit integer, text with a lone surrogate.
        """
        store = self.makeStore()
        lone = "\udcff"
        for job, mailbox, uidValidity, uidFloor, message in [
            ("job", "INBOX", 7, 1, sent("INBOX", "1", head=b"x" * 256)),
            ("job", "INBOX", 7, 1, sent("INBOX", "1", size=2**63)),
            ("job", "INBOX", 7, 1, sent("INBOX", "1", size=-(2**63) - 1)),
            ("job", "INBOX", 2**63, 1, sent("INBOX", "1")),
            ("job", "INBOX", 7, 2**63, sent("INBOX", "1")),
            ("job", "INBOX", 7, 1, sent(lone, "1")),
            ("job", "INBOX", 7, 1, sent("INBOX", lone)),
            ("job", lone, 7, 1, sent("INBOX", "1")),
            (lone, "INBOX", 7, 1, sent("INBOX", "1")),
        ]:
            self.failureResultOf(
                store.journalBatch(job, mailbox, uidValidity, uidFloor, [message]),
                PermanentError,
            )
        self.assertEqual(self.successResultOf(store.journal("job")), [])

    def test_closed(self) -> None:
        """
        After L{close}, journaling, reading the journal and the recorded
        UIDs, and settling fail with L{PermanentError}.
        """
        store = self.makeStore()
        store.close()
        self.failureResultOf(store.journalBatch("job", "INBOX", 7, 1, BATCH), PermanentError)
        self.failureResultOf(store.journal("job"), PermanentError)
        self.failureResultOf(store.recordedUIDs("job", "INBOX", 7, 1), PermanentError)
        self.failureResultOf(store.recordOutcomes("job", [], [1]), PermanentError)

    def test_recordedUIDs(self) -> None:
        """
        C{recordedUIDs} gives the UIDs at or above C{fromUID} of the
        messages of the job whose latest outcome puts them in that mailbox
        under that UIDVALIDITY, appended or already present; not failed
        ones, other mailboxes, UIDVALIDITYs or jobs, nor outcomes without
        a UID.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes(
                "job",
                [
                    withUID(appended("INBOX", "1"), "Archive", 9),
                    withUID(appended("INBOX", "2"), "Archive", 10),
                    withUID(present("INBOX", "3"), "Archive", 12),
                    withUID(appended("INBOX", "4"), "Archive", 8),
                    withUID(appended("INBOX", "5"), "Archive", None),
                    withUID(appended("INBOX", "6"), "Archive", 20, uidValidity=8),
                    withUID(appended("INBOX", "7"), "Sent", 21),
                    withUID(failed("INBOX", "8"), "Archive", 22),
                    # Appended once, failed later: the failure is the latest.
                    withUID(appended("Sent", "1"), "Archive", 23),
                ],
            )
        )
        self.successResultOf(
            store.recordOutcomes("job", [withUID(failed("Sent", "1"), "Archive", None)])
        )
        self.successResultOf(
            store.recordOutcomes("other", [withUID(appended("INBOX", "1"), "Archive", 30)])
        )
        self.assertEqual(
            self.successResultOf(store.recordedUIDs("job", "Archive", 7, 9)), {9, 10, 12}
        )
        self.assertEqual(self.successResultOf(store.recordedUIDs("job", "Archive", 7, 11)), {12})
        self.assertEqual(self.successResultOf(store.recordedUIDs("job", "Archive", 8, 1)), {20})
        self.assertEqual(self.successResultOf(store.recordedUIDs("job", "Sent", 7, 1)), {21})
        self.assertEqual(self.successResultOf(store.recordedUIDs("job", "Archive", 7, 13)), set())

    def test_outcomesUnchanged(self) -> None:
        """
        Journaling and settling leave the outcome queries as they were:
        a journaled message is not counted anywhere until its outcome is
        recorded.
        """
        store = self.makeStore()
        entryId = self.successResultOf(store.journalBatch("job", "INBOX", 7, 1, BATCH))
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), set())
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "1")], [entryId]))
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1"})




class FolderMarksContract(_MixinBase):
    """
    L{IFolderMarks}'s behaviour, which every state store shares: folder
    marks and folder fallbacks.  Mixed into a L{SynchronousTestCase} that
    defines L{makeStore}.
    """

    def makeStore(self) -> AnyStore:
        """
        A new, empty store, closed when the test ends.
        """
        raise NotImplementedError()

    def test_folderFallbacks(self) -> None:
        """
        Folder fallbacks are recorded per job, read back by mailbox, and a
        later record for a mailbox replaces the earlier one.
        """
        store = self.makeStore()
        self.assertEqual(self.successResultOf(store.folderFallbacks("job")), [])
        first = FolderFallback("b\\x", "b_x", "NO Invalid mailbox name")
        second = FolderFallback("a\"y", "a_y", "NO [CANNOT] Invalid name")
        self.successResultOf(store.recordFolderFallback("job", first))
        self.successResultOf(store.recordFolderFallback("job", second))
        self.successResultOf(store.recordFolderFallback("other", first))
        replaced = FolderFallback("b\\x", "b_x", "refused again")
        self.successResultOf(store.recordFolderFallback("job", replaced))
        self.assertEqual(
            self.successResultOf(store.folderFallbacks("job")), [second, replaced]
        )
        self.assertEqual(self.successResultOf(store.folderFallbacks("other")), [first])

    def test_folderMark(self) -> None:
        """
        A recorded folder mark is returned as recorded, and a folder without
        one has none.
        """
        store = self.makeStore()
        self.assertIsNone(self.successResultOf(store.folderMark("job", "INBOX")))
        self.assertIsNone(self.successResultOf(store.recordFolderMark("job", "INBOX", MARK)))
        self.assertEqual(self.successResultOf(store.folderMark("job", "INBOX")), MARK)
        self.assertIsNone(self.successResultOf(store.folderMark("job", "Sent")))

    def test_folderMarkWithoutModSeq(self) -> None:
        """
        A folder mark without a HIGHESTMODSEQ comes back without one.
        """
        store = self.makeStore()
        mark = FolderMark(uidValidity=1, uidNext=1, highestModSeq=None, messages=0)
        self.successResultOf(store.recordFolderMark("job", "Übersicht", mark))
        self.assertEqual(self.successResultOf(store.folderMark("job", "Übersicht")), mark)

    def test_folderMarkDeferred(self) -> None:
        """
        A folder mark's deferred UIDs come back as recorded, and a later
        mark without any replaces them.
        """
        store = self.makeStore()
        deferred = attrs.evolve(MARK, deferred=(7, 4000, 2**32 - 1))
        self.successResultOf(store.recordFolderMark("job", "[Gmail]/All Mail", deferred))
        self.assertEqual(self.successResultOf(store.folderMark("job", "[Gmail]/All Mail")), deferred)
        self.successResultOf(store.recordFolderMark("job", "[Gmail]/All Mail", MARK))
        self.assertEqual(self.successResultOf(store.folderMark("job", "[Gmail]/All Mail")), MARK)

    def test_folderMarkFingerprint(self) -> None:
        """
        A local folder's mark keeps its fingerprint and octets (schema 12;
        PostgreSQL's 3); a later mark without them replaces them.
        """
        store = self.makeStore()
        local = FolderMark(
            uidValidity=0,
            uidNext=0,
            highestModSeq=None,
            messages=250_000,
            fingerprint="cur 1234 1765000000123456789 4096 new 1235 1765000000000000001 4096",
            octets=2**40 + 3,
        )
        self.successResultOf(store.recordFolderMark("job", ".Archive", local))
        self.assertEqual(self.successResultOf(store.folderMark("job", ".Archive")), local)
        self.successResultOf(store.recordFolderMark("job", ".Archive", MARK))
        self.assertEqual(self.successResultOf(store.folderMark("job", ".Archive")), MARK)

    def test_folderMarkReplaced(self) -> None:
        """
        A later mark for the same folder replaces the earlier one.
        """
        store = self.makeStore()
        later = FolderMark(uidValidity=1700000001, uidNext=1, highestModSeq=None, messages=0)
        self.successResultOf(store.recordFolderMark("job", "INBOX", MARK))
        self.successResultOf(store.recordFolderMark("job", "INBOX", later))
        self.assertEqual(self.successResultOf(store.folderMark("job", "INBOX")), later)

    def test_folderMarksPerJobAndFolder(self) -> None:
        """
        Folder marks are kept apart by job and by folder, and forgetting one
        leaves the others.
        """
        store = self.makeStore()
        other = FolderMark(uidValidity=2, uidNext=3, highestModSeq=4, messages=5)
        self.successResultOf(store.recordFolderMark("a", "INBOX", MARK))
        self.successResultOf(store.recordFolderMark("a", "Sent", other))
        self.successResultOf(store.recordFolderMark("b", "INBOX", other))
        self.assertEqual(self.successResultOf(store.folderMark("a", "INBOX")), MARK)
        self.assertEqual(self.successResultOf(store.folderMark("a", "Sent")), other)
        self.assertEqual(self.successResultOf(store.folderMark("b", "INBOX")), other)
        self.assertIsNone(self.successResultOf(store.folderMark("b", "Sent")))
        self.successResultOf(store.forgetFolder("b", "INBOX"))
        self.assertEqual(self.successResultOf(store.folderMark("a", "INBOX")), MARK)
        self.assertEqual(self.successResultOf(store.folderMark("a", "Sent")), other)
        self.assertIsNone(self.successResultOf(store.folderMark("b", "INBOX")))

    def test_forgetFolder(self) -> None:
        """
        L{IStateStore.forgetFolder} deletes the folder's mark but keeps its
        messages' outcomes; forgetting a folder without a mark is harmless.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes("job", [appended("INBOX", "1"), failed("INBOX", "2")])
        )
        self.successResultOf(store.recordFolderMark("job", "INBOX", MARK))
        self.assertIsNone(self.successResultOf(store.forgetFolder("job", "INBOX")))
        self.assertIsNone(self.successResultOf(store.folderMark("job", "INBOX")))
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1"})
        self.assertIsNone(self.successResultOf(store.forgetFolder("job", "INBOX")))
        self.assertIsNone(self.successResultOf(store.forgetFolder("nobody", "Nowhere")))
        self.successResultOf(store.recordFolderMark("job", "INBOX", MARK))
        self.assertEqual(self.successResultOf(store.folderMark("job", "INBOX")), MARK)

    def test_folderMarkOutOfRange(self) -> None:
        """
        A folder mark holding a number beyond a 64-bit integer fails with
        L{PermanentError} and leaves the earlier mark in place.
        """
        store = self.makeStore()
        self.successResultOf(store.recordFolderMark("job", "INBOX", MARK))
        for huge in (
            FolderMark(uidValidity=2**64, uidNext=1, highestModSeq=None, messages=0),
            FolderMark(uidValidity=1, uidNext=2**63, highestModSeq=None, messages=0),
            FolderMark(uidValidity=1, uidNext=1, highestModSeq=2**64, messages=0),
            FolderMark(uidValidity=1, uidNext=1, highestModSeq=None, messages=-(2**63) - 1),
        ):
            self.failureResultOf(store.recordFolderMark("job", "INBOX", huge), PermanentError)
        self.assertEqual(self.successResultOf(store.folderMark("job", "INBOX")), MARK)


PAUSING = Transition(1700000100.5, "running", "paused", "paused by the admin", "192.0.2.7")
RESUMING = Transition(1700000200.25, "paused", "queued", "resumed by the admin", "192.0.2.7")


def numbered(n: int) -> Transition:
    """
    The C{n}th transition of a job that backs off and retries, again and
    again: each a second after the one before, its cause naming C{n}.
    """
    source, target = ("running", "backing_off") if n % 2 else ("backing_off", "running")
    return Transition(1700000000.0 + n, source, target, f"attempt {n}")


class JobRecordsContract(_MixinBase):
    """
    L{IJobRecords}' behaviour, which every state store shares: each job's
    failure, the admin's holds, and each job's timeline.  Mixed into a
    L{SynchronousTestCase} that defines L{makeStore}.
    """

    def makeStore(self) -> AnyStore:
        """
        A new, empty store, closed when the test ends.
        """
        raise NotImplementedError()

    def test_jobRecordsInterface(self) -> None:
        """
        The store provides L{IJobRecords}.
        """
        self.assertTrue(verifyObject(IJobRecords, self.makeStore()))

    def test_jobHolds(self) -> None:
        """
        L{IStateStore.recordJobHolds} puts jobs under a hold, replacing
        the one they were under, with who asked; L{None} lifts them (a job
        under none included); L{IStateStore.jobHolds} reads them all.
        """
        store = self.makeStore()
        self.assertEqual(self.successResultOf(store.jobHolds()), {})
        self.successResultOf(store.recordJobHolds(["a", "b", "c"], PAUSED, "admin"))
        self.successResultOf(store.recordJobHolds(["b"], CANCELLED, "other"))
        self.successResultOf(store.recordJobHolds(["c", "never"], None))
        self.successResultOf(store.recordJobHolds([], CANCELLED))
        self.assertEqual(
            self.successResultOf(store.jobHolds()),
            {"a": JobHold(PAUSED, "admin", 0.0), "b": JobHold(CANCELLED, "other", 0.0)},
        )

    def test_jobHoldRefused(self) -> None:
        """
        A hold that is neither L{PAUSED} nor L{CANCELLED} is refused with
        a L{ValueError}, recording nothing; after L{IStateStore.close},
        both methods fail with L{PermanentError}.
        """
        store = self.makeStore()
        self.assertRaises(ValueError, store.recordJobHolds, ["a"], "stopped")
        self.assertEqual(self.successResultOf(store.jobHolds()), {})
        store.close()
        self.failureResultOf(store.recordJobHolds(["a"], PAUSED), PermanentError)
        self.failureResultOf(store.jobHolds(), PermanentError)

    def test_jobFailure(self) -> None:
        """
        A job's failure is recorded per job, a later one replaces it, and
        recording L{None} (the job completed) forgets it.
        """
        store = self.makeStore()
        self.assertIsNone(self.successResultOf(store.jobFailure("job")))
        self.successResultOf(store.recordJobFailure("job", "login refused: NO"))
        self.successResultOf(store.recordJobFailure("job", "TLS refused"))
        self.successResultOf(store.recordJobFailure("other", "gave up"))
        self.assertEqual(self.successResultOf(store.jobFailure("job")), "TLS refused")
        self.successResultOf(store.recordJobFailure("job", None))
        self.successResultOf(store.recordJobFailure("never", None))
        self.assertIsNone(self.successResultOf(store.jobFailure("job")))
        self.assertIsNone(self.successResultOf(store.jobFailure("never")))
        self.assertEqual(self.successResultOf(store.jobFailure("other")), "gave up")

    def test_emptyTimeline(self) -> None:
        """
        A job with no transition recorded has an empty timeline.
        """
        self.assertEqual(self.successResultOf(self.makeStore().timeline("job")), [])

    def test_timelineRoundTrip(self) -> None:
        """
        Transitions come back as recorded, every field (C{by} L{None} or
        not, a time with its fraction, text beyond ASCII), oldest first,
        per job.
        """
        store = self.makeStore()
        started = Transition(1700000000.0, "queued", "running", "started: 3 folders, é")
        self.successResultOf(store.recordTransition("job", started))
        self.successResultOf(store.recordTransition("other", RESUMING))
        self.successResultOf(store.recordTransition("job", PAUSING))
        self.successResultOf(store.recordTransition("job", RESUMING))
        self.assertEqual(
            self.successResultOf(store.timeline("job")), [started, PAUSING, RESUMING]
        )
        self.assertEqual(self.successResultOf(store.timeline("other")), [RESUMING])

    def test_recordedOrderNotTime(self) -> None:
        """
        The timeline is in the order the transitions were recorded, even
        where a clock stepped back between two of them.
        """
        store = self.makeStore()
        self.successResultOf(store.recordTransition("job", RESUMING))
        self.successResultOf(store.recordTransition("job", PAUSING))
        self.assertEqual(self.successResultOf(store.timeline("job")), [RESUMING, PAUSING])

    def test_bounded(self) -> None:
        """
        Past L{TIMELINE_FIRST} + L{TIMELINE_LATEST} transitions, the
        timeline keeps the first L{TIMELINE_FIRST} (how the job began)
        and the latest L{TIMELINE_LATEST}, in order; another job's is
        left as it is.
        """
        store = self.makeStore()
        self.successResultOf(store.recordTransition("other", PAUSING))
        total = TIMELINE_FIRST + TIMELINE_LATEST + 123
        for n in range(1, total + 1):
            self.successResultOf(store.recordTransition("job", numbered(n)))
        kept = self.successResultOf(store.timeline("job"))
        self.assertEqual(len(kept), TIMELINE_FIRST + TIMELINE_LATEST)
        self.assertEqual(
            kept,
            [numbered(n) for n in range(1, TIMELINE_FIRST + 1)]
            + [numbered(n) for n in range(total - TIMELINE_LATEST + 1, total + 1)],
        )
        self.assertEqual(self.successResultOf(store.timeline("other")), [PAUSING])

    def test_exactlyAtTheBound(self) -> None:
        """
        A timeline of exactly L{TIMELINE_FIRST} + L{TIMELINE_LATEST}
        transitions keeps them all; one more drops the first after the
        first L{TIMELINE_FIRST}.
        """
        store = self.makeStore()
        bound = TIMELINE_FIRST + TIMELINE_LATEST
        for n in range(1, bound + 1):
            self.successResultOf(store.recordTransition("job", numbered(n)))
        self.assertEqual(
            self.successResultOf(store.timeline("job")),
            [numbered(n) for n in range(1, bound + 1)],
        )
        self.successResultOf(store.recordTransition("job", numbered(bound + 1)))
        kept = self.successResultOf(store.timeline("job"))
        self.assertNotIn(numbered(TIMELINE_FIRST + 1), kept)
        self.assertEqual(kept[TIMELINE_FIRST - 1 : TIMELINE_FIRST + 1], [
            numbered(TIMELINE_FIRST), numbered(TIMELINE_FIRST + 2)
        ])
        self.assertEqual(kept[-1], numbered(bound + 1))

    def test_unencodableRefused(self) -> None:
        """
        A cause that is not Unicode (a lone surrogate) or a time that is
        not a number is refused with a L{PermanentError}; nothing is
        recorded.
        """
        store = self.makeStore()
        for bad in (
            Transition(1.0, "running", "failed", "login refused: \udcff"),
            Transition(float("nan"), "running", "failed", "why"),
        ):
            self.failureResultOf(store.recordTransition("job", bad), PermanentError)
        self.assertEqual(self.successResultOf(store.timeline("job")), [])

    def test_timelineClosed(self) -> None:
        """
        A closed store records and reads no timeline: both fail with a
        L{PermanentError}.
        """
        store = self.makeStore()
        store.close()
        self.failureResultOf(store.recordTransition("job", PAUSING), PermanentError)
        self.failureResultOf(store.timeline("job"), PermanentError)


class BudgetRecordsContract(_MixinBase):
    """
    L{IBudgetRecords}' behaviour, which every state store shares: the
    octets each account moved per direction and day.  Mixed into a
    L{SynchronousTestCase} that defines L{makeStore}.
    """

    def makeStore(self) -> AnyStore:
        """
        A new, empty store, closed when the test ends.
        """
        raise NotImplementedError()

    def test_budgetRecordsInterface(self) -> None:
        """
        The store provides L{IBudgetRecords}.
        """
        self.assertTrue(verifyObject(IBudgetRecords, self.makeStore()))

    def test_addsUp(self) -> None:
        """
        Uses of one account, direction and day add up; other accounts,
        servers, directions and days are apart; nothing recorded is 0.
        """
        store = self.makeStore()
        self.assertEqual(
            self.successResultOf(store.budgetUsed("gmail", "alice", "upload", "2030-01-01")), 0
        )
        self.assertEqual(
            self.successResultOf(store.addBudgetUse("gmail", "alice", "upload", "2030-01-01", 10)),
            10,
        )
        self.assertEqual(
            self.successResultOf(store.addBudgetUse("gmail", "alice", "upload", "2030-01-01", 5)),
            15,
        )
        self.successResultOf(store.addBudgetUse("gmail", "alice", "download", "2030-01-01", 7))
        self.successResultOf(store.addBudgetUse("gmail", "bob", "upload", "2030-01-01", 3))
        self.successResultOf(store.addBudgetUse("other", "alice", "upload", "2030-01-01", 4))
        for (server, user, direction), expected in {
            ("gmail", "alice", "upload"): 15,
            ("gmail", "alice", "download"): 7,
            ("gmail", "bob", "upload"): 3,
            ("other", "alice", "upload"): 4,
        }.items():
            self.assertEqual(
                self.successResultOf(store.budgetUsed(server, user, direction, "2030-01-01")),
                expected,
            )

    def test_newDay(self) -> None:
        """
        A new day starts from 0; writing it drops the earlier days of that
        account and direction, not those of others.
        """
        store = self.makeStore()
        self.successResultOf(store.addBudgetUse("gmail", "alice", "upload", "2030-01-01", 10))
        self.successResultOf(store.addBudgetUse("gmail", "bob", "upload", "2030-01-01", 9))
        self.assertEqual(
            self.successResultOf(store.budgetUsed("gmail", "alice", "upload", "2030-01-02")), 0
        )
        self.assertEqual(
            self.successResultOf(store.addBudgetUse("gmail", "alice", "upload", "2030-01-02", 2)),
            2,
        )
        self.assertEqual(
            self.successResultOf(store.budgetUsed("gmail", "alice", "upload", "2030-01-01")), 0
        )
        self.assertEqual(
            self.successResultOf(store.budgetUsed("gmail", "bob", "upload", "2030-01-01")), 9
        )

    def test_budgetClosed(self) -> None:
        """
        A closed store refuses budget reads and writes with
        L{PermanentError}.
        """
        store = self.makeStore()
        store.close()
        self.failureResultOf(store.budgetUsed("s", "u", "upload", "2030-01-01"), PermanentError)
        self.failureResultOf(
            store.addBudgetUse("s", "u", "upload", "2030-01-01", 1), PermanentError
        )

    def test_tooLarge(self) -> None:
        """
        A total beyond a signed 64-bit integer is refused with
        L{PermanentError}, and the earlier total is kept.
        """
        store = self.makeStore()
        self.successResultOf(store.addBudgetUse("s", "u", "upload", "2030-01-01", 1))
        self.failureResultOf(
            store.addBudgetUse("s", "u", "upload", "2030-01-01", 2**63), PermanentError
        )
        self.assertEqual(self.successResultOf(store.budgetUsed("s", "u", "upload", "2030-01-01")), 1)
