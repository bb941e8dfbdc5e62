# -*- test-case-name: tests.test_state_contract -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
The state store's contract, continued (L{tests.statecontract}): what a
store answers of the outcomes recorded, the reports' role
(L{IReportQueries}) with the outcomes' (L{IOutcomeJournal}) that feeds
it.  L{ReportQueriesContract} was C{tests/test_state.py}'s
C{StateStoreBehaviourMixin}, L{FailurePagesContract}
C{tests/test_state_manifest.py}'s C{ManifestBehaviourMixin}, and
L{NamesContract} C{tests/test_state_names.py}'s C{StoreNamesMixin}, moved
here unchanged to hold the PostgreSQL store to them too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from imapmig.errors import PermanentError
from imapmig.state import (
    AppendedOutcome,
    FailuresPage,
    FolderFallback,
    IStateStore,
    JobActivity,
    JobReport,
    MessageNames,
    MessageOutcome,
    OutcomeCounts,
    Transition,
    withNames,
)
from imapmig.state import reports as stateReports
from tests.statecontract import PAUSING, RESUMING, AnyStore
from tests.test_state import MARK, appended, failed, noted, present

if TYPE_CHECKING:
    _MixinBase = SynchronousTestCase
else:
    _MixinBase = object

NAMES = MessageNames("<a@example.com>", "Tue, 3 Mar 2020 10:00:00 +0100", "Ann <a@x>", "H\u00e9")


def withId(outcome: MessageOutcome, messageId: str) -> MessageOutcome:
    """
    C{outcome} with the Message-ID C{messageId}.
    """
    return attrs.evolve(outcome, messageId=messageId)


class ReportQueriesContract(_MixinBase):
    """
    The behaviour every state store shares.  Mixed into a
    L{SynchronousTestCase} that defines L{makeStore}.
    """

    def makeStore(self) -> AnyStore:
        """
        A new, empty store, closed when the test ends.
        """
        raise NotImplementedError()

    def test_interface(self) -> None:
        """
        The store provides L{IStateStore}.
        """
        self.assertTrue(verifyObject(IStateStore, self.makeStore()))

    def test_empty(self) -> None:
        """
        A new store knows of no appended and no failed messages.
        """
        store = self.makeStore()
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), set())
        self.assertEqual(self.successResultOf(store.failures("job")), [])
        self.assertEqual(self.successResultOf(store.summary("job")), (0, 0))
        self.assertEqual(
            self.successResultOf(store.counts("job")), OutcomeCounts(0, 0, 0, 0, 0)
        )
        self.assertEqual(self.successResultOf(store.notes("job")), [])
        self.assertEqual(self.successResultOf(store.destinationMap("job", "INBOX")), {})
        self.assertIsNone(self.successResultOf(store.folderMark("job", "INBOX")))

    def test_emptyBatch(self) -> None:
        """
        Recording no outcomes succeeds and records nothing.
        """
        store = self.makeStore()
        self.assertIsNone(self.successResultOf(store.recordOutcomes("job", [])))
        self.assertEqual(self.successResultOf(store.summary("job")), (0, 0))

    def test_appendedKeysPerFolderAndJob(self) -> None:
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
        self.assertEqual(self.successResultOf(store.failures("a")), [])
        self.assertEqual(self.successResultOf(store.failures("b")), [failed("Sent", "2")])

    def test_failuresOrdered(self) -> None:
        """
        L{IStateStore.failures} returns the failed outcomes as recorded,
        ordered by folder key and then message key, whatever the order they
        were recorded in.
        """
        store = self.makeStore()
        outcomes = [
            failed("Sent", "b", "NO [OVERQUOTA] full"),
            failed("INBOX", "z"),
            appended("INBOX", "m"),
            failed("INBOX", "a"),
            failed("Archive", "q", "unreadable: permission denied"),
        ]
        self.successResultOf(store.recordOutcomes("job", outcomes[:2]))
        self.successResultOf(store.recordOutcomes("job", outcomes[2:]))
        self.assertEqual(
            self.successResultOf(store.failures("job")),
            [outcomes[4], outcomes[3], outcomes[1], outcomes[0]],
        )

    def test_fieldsRoundTrip(self) -> None:
        """
        Every field of an outcome, including non-ASCII text and missing
        UIDs, comes back as recorded.
        """
        store = self.makeStore()
        outcome = MessageOutcome(
            folderKey="Gesendete Objekte/\u00dcbersicht",
            messageKey="1700000000.M1P2.h\u00f6st,S=12:2,S",
            mailbox="\u041e\u0442\u043f\u0440\u0430\u0432\u043b\u0435\u043d\u043d\u044b\u0435",
            size=2**40,
            uidValidity=None,
            uid=None,
            failure="NO [LIMIT] message too large \u2014 35 MB",
        )
        self.successResultOf(store.recordOutcomes("j\u00f6b", [outcome]))
        self.assertEqual(self.successResultOf(store.failures("j\u00f6b")), [outcome])

    def test_laterOutcomeReplacesFailure(self) -> None:
        """
        A message that failed and is later recorded as appended counts as
        appended, no longer as failed.
        """
        store = self.makeStore()
        self.successResultOf(store.recordOutcomes("job", [failed("INBOX", "1")]))
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "1", uid=5)]))
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1"})
        self.assertEqual(self.successResultOf(store.failures("job")), [])
        self.assertEqual(self.successResultOf(store.summary("job")), (1, 0))

    def test_laterOutcomeReplacesAppended(self) -> None:
        """
        A later failure replaces an earlier success for the same message.
        """
        store = self.makeStore()
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "1")]))
        self.successResultOf(store.recordOutcomes("job", [failed("INBOX", "1", "gone")]))
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), set())
        self.assertEqual(
            self.successResultOf(store.failures("job")), [failed("INBOX", "1", "gone")]
        )

    def test_lastInBatchWins(self) -> None:
        """
        When one batch holds two outcomes for the same message, the later
        one is recorded.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes("job", [failed("INBOX", "1"), appended("INBOX", "1", uid=9)])
        )
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1"})
        self.assertEqual(self.successResultOf(store.failures("job")), [])

    def test_lastInMixedBatchWins(self) -> None:
        """
        A batch mixing outcomes with and without a failure or a note keeps
        their order: a later failure of the same message replaces an
        earlier success, and every field of each outcome is recorded.
        """
        store = self.makeStore()
        noted = attrs.evolve(appended("INBOX", "2", uid=3), note="flag 'x' dropped")
        present = attrs.evolve(appended("INBOX", "3", uid=4), alreadyPresent=True)
        converted = attrs.evolve(appended("INBOX", "4", uid=5), lineEndingsConverted=True)
        batch = [
            appended("INBOX", "1", uid=2),
            failed("INBOX", "1", "gone"),
            noted,
            present,
            converted,
            appended("INBOX", "5"),
        ]
        self.successResultOf(store.recordOutcomes("job", batch))
        self.assertEqual(
            self.successResultOf(store.destinationMap("job", "INBOX")),
            {o.messageKey: o for o in batch[2:]},
        )
        self.assertEqual(self.successResultOf(store.failures("job")), [batch[1]])

    def test_appendedOutcomesInMixedBatch(self) -> None:
        """
        A batch mixing L{AppendedOutcome} tuples with L{MessageOutcome}s
        keeps their order (a later outcome of the same message wins,
        whichever its form), and records each tuple as the
        L{MessageOutcome} it stands for (L{asMessageOutcome}).
        """
        store = self.makeStore()
        first: AppendedOutcome = ("INBOX", "1", "INBOX", 100, 7, 2, 0)
        converted: AppendedOutcome = ("INBOX", "3", "Box", 120, 7, 4, 1)
        unknownUID: AppendedOutcome = ("INBOX", "4", "INBOX", 90, None, None, 0)
        again: AppendedOutcome = ("INBOX", "5", "INBOX", 80, 7, 9, 0)
        batch: list[MessageOutcome | AppendedOutcome] = [
            first,
            failed("INBOX", "1", "gone"),
            noted("INBOX", "2"),
            converted,
            unknownUID,
            failed("INBOX", "5"),
            again,
        ]
        self.successResultOf(store.recordOutcomes("job", batch))
        self.assertEqual(
            self.successResultOf(store.destinationMap("job", "INBOX")),
            {
                "2": noted("INBOX", "2"),
                "3": MessageOutcome("INBOX", "3", "Box", 120, 7, 4, lineEndingsConverted=True),
                "4": MessageOutcome("INBOX", "4", "INBOX", 90),
                "5": MessageOutcome("INBOX", "5", "INBOX", 80, 7, 9),
            },
        )
        self.assertEqual(self.successResultOf(store.failures("job")), [failed("INBOX", "1", "gone")])
        self.assertEqual(
            self.successResultOf(store.counts("job")),
            OutcomeCounts(copied=4, alreadyPresent=0, failed=1, lineEndingsConverted=1, withNotes=1),
        )

    def test_appendedOutcomeAllOrNothing(self) -> None:
        """
        A batch of L{AppendedOutcome}s that cannot be recorded whole (a UID
        beyond a 64-bit integer) records none of them.
        """
        store = self.makeStore()
        batch: list[MessageOutcome | AppendedOutcome] = [
            ("INBOX", "1", "INBOX", 100, 7, 2, 0),
            ("INBOX", "2", "INBOX", 100, 7, 2**64, 0),
        ]
        self.failureResultOf(store.recordOutcomes("job", batch), PermanentError)
        self.assertEqual(self.successResultOf(store.summary("job")), (0, 0))

    def test_summary(self) -> None:
        """
        L{summary} counts a job's appended and failed messages by their
        latest outcome.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes(
                "job",
                [
                    appended("INBOX", "1"),
                    appended("Sent", "1"),
                    failed("INBOX", "2"),
                    failed("INBOX", "3"),
                ],
            )
        )
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "3")]))
        self.successResultOf(store.recordOutcomes("other", [failed("INBOX", "1")]))
        self.assertEqual(self.successResultOf(store.summary("job")), (3, 1))
        self.assertEqual(self.successResultOf(store.summary("other")), (0, 1))

    def test_batchAllOrNothing(self) -> None:
        """
        A batch that cannot be recorded whole (here a UID beyond a 64-bit
        integer) fails with L{PermanentError} and records none of its
        outcomes.
        """
        store = self.makeStore()
        self.successResultOf(store.recordOutcomes("job", [failed("INBOX", "1")]))
        batch = [appended("INBOX", "1"), appended("INBOX", "2"), appended("INBOX", "3", uid=2**64)]
        self.failureResultOf(store.recordOutcomes("job", batch), PermanentError)
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), set())
        self.assertEqual(self.successResultOf(store.failures("job")), [failed("INBOX", "1")])
        self.successResultOf(store.recordOutcomes("job", batch[:2]))
        self.assertEqual(self.successResultOf(store.summary("job")), (2, 0))

    def test_surrogateRefused(self) -> None:
        """
        A batch holding text that is not valid Unicode (a lone surrogate,
        as C{surrogateescape} decoding leaves) fails with L{PermanentError}
        and records none of its outcomes; so does a folder mark for such a
        folder key.
        """
        store = self.makeStore()
        batch = [appended("INBOX", "1"), noted("INBOX", "2", "keyword '\udcff' dropped")]
        self.failureResultOf(store.recordOutcomes("job", batch), PermanentError)
        self.assertEqual(self.successResultOf(store.summary("job")), (0, 0))
        self.failureResultOf(
            store.recordFolderMark("job", "Entw\udcfcrfe", MARK), PermanentError
        )
        self.assertIsNone(self.successResultOf(store.folderMark("job", "Entw\u00fcrfe")))

    def test_closed(self) -> None:
        """
        After L{IStateStore.close}, every call fails with L{PermanentError};
        closing again is harmless.
        """
        store = self.makeStore()
        store.close()
        store.close()
        self.failureResultOf(store.recordOutcomes("job", [appended("INBOX", "1")]), PermanentError)
        self.failureResultOf(store.appendedKeys("job", "INBOX"), PermanentError)
        self.failureResultOf(store.failures("job"), PermanentError)
        self.failureResultOf(store.summary("job"), PermanentError)
        self.failureResultOf(store.counts("job"), PermanentError)
        self.failureResultOf(store.notes("job"), PermanentError)
        self.failureResultOf(store.destinationMap("job", "INBOX"), PermanentError)
        self.failureResultOf(store.folderMark("job", "INBOX"), PermanentError)
        self.failureResultOf(store.recordFolderMark("job", "INBOX", MARK), PermanentError)
        self.failureResultOf(store.forgetFolder("job", "INBOX"), PermanentError)

    def test_fidelityFieldsRoundTrip(self) -> None:
        """
        An outcome's note, already-present and line-endings flags come back
        as recorded, through every method that returns outcomes.
        """
        store = self.makeStore()
        inDestination = MessageOutcome(
            folderKey="INBOX",
            messageKey="1",
            mailbox="INBOX",
            size=1234,
            uidValidity=9,
            uid=77,
            note="keyword 'two words' dropped: not a valid IMAP keyword — ü",
            alreadyPresent=True,
            lineEndingsConverted=True,
        )
        refused = MessageOutcome(
            folderKey="INBOX",
            messageKey="2",
            mailbox="INBOX",
            size=99,
            failure="refused by server: NO [LIMIT] too big",
            note="flag \\Recent dropped",
            lineEndingsConverted=True,
        )
        plain = appended("INBOX", "3", uid=5)
        self.successResultOf(store.recordOutcomes("job", [inDestination, refused, plain]))
        self.assertEqual(self.successResultOf(store.failures("job")), [refused])
        self.assertEqual(self.successResultOf(store.notes("job")), [inDestination])
        self.assertEqual(
            self.successResultOf(store.destinationMap("job", "INBOX")),
            {"1": inDestination, "3": plain},
        )

    def test_fidelityFieldsReplaced(self) -> None:
        """
        A later outcome for the same message replaces the fidelity fields
        too: a note, already-present or line-endings flag recorded earlier
        does not linger.
        """
        store = self.makeStore()
        earlier = MessageOutcome(
            "INBOX", "1", "INBOX", 10, note="lost", alreadyPresent=True, lineEndingsConverted=True
        )
        self.successResultOf(store.recordOutcomes("job", [earlier]))
        self.successResultOf(store.recordOutcomes("job", [appended("INBOX", "1", uid=3)]))
        self.assertEqual(
            self.successResultOf(store.destinationMap("job", "INBOX")),
            {"1": appended("INBOX", "1", uid=3)},
        )
        self.assertEqual(self.successResultOf(store.notes("job")), [])

    def test_alreadyPresentIsAppended(self) -> None:
        """
        A message found already in the destination counts as appended for
        L{IStateStore.appendedKeys} and L{IStateStore.summary}, so that a
        later pass skips it.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes(
                "job", [present("INBOX", "1", uid=4), appended("INBOX", "2"), failed("INBOX", "3")]
            )
        )
        self.assertEqual(self.successResultOf(store.appendedKeys("job", "INBOX")), {"1", "2"})
        self.assertEqual(self.successResultOf(store.summary("job")), (2, 1))

    def test_counts(self) -> None:
        """
        L{IStateStore.counts} counts a job's messages by their latest
        outcome: copied (appended, not already present), already present,
        failed, and, among those in the destination, with line endings
        converted and with a note.
        """
        store = self.makeStore()
        converted = MessageOutcome("INBOX", "4", "INBOX", 10, lineEndingsConverted=True)
        convertedFailure = MessageOutcome(
            "INBOX", "5", "INBOX", 10, failure="NO", note="lost", lineEndingsConverted=True
        )
        self.successResultOf(
            store.recordOutcomes(
                "job",
                [
                    appended("INBOX", "1"),
                    present("INBOX", "2", uid=8),
                    present("Sent", "2"),
                    noted("Sent", "3"),
                    converted,
                    convertedFailure,
                    failed("Sent", "6"),
                ],
            )
        )
        self.successResultOf(store.recordOutcomes("other", [appended("INBOX", "1")]))
        self.assertEqual(
            self.successResultOf(store.counts("job")),
            OutcomeCounts(
                copied=3, alreadyPresent=2, failed=2, lineEndingsConverted=1, withNotes=1
            ),
        )
        self.assertEqual(self.successResultOf(store.summary("job")), (5, 2))
        self.assertEqual(
            self.successResultOf(store.counts("other")), OutcomeCounts(1, 0, 0, 0, 0)
        )

    def test_countsLatestOutcome(self) -> None:
        """
        An outcome replaced by a later one is counted only as the later one.
        """
        store = self.makeStore()
        self.successResultOf(
            store.recordOutcomes(
                "job", [failed("INBOX", "1"), noted("INBOX", "2"), appended("INBOX", "3")]
            )
        )
        self.successResultOf(
            store.recordOutcomes(
                "job", [present("INBOX", "1"), appended("INBOX", "2"), failed("INBOX", "3")]
            )
        )
        self.assertEqual(
            self.successResultOf(store.counts("job")),
            OutcomeCounts(
                copied=1, alreadyPresent=1, failed=1, lineEndingsConverted=0, withNotes=0
            ),
        )

    def test_notesOrdered(self) -> None:
        """
        L{IStateStore.notes} returns the job's messages in the destination
        that carry a note, ordered by folder key and then message key,
        whatever the order they were recorded in; failed messages and
        messages without a note are left out.
        """
        store = self.makeStore()
        withNote = [
            noted("Sent", "a", "flag $Junk dropped"),
            noted("INBOX", "z"),
            MessageOutcome(
                "INBOX", "b", "INBOX", 5, note="internal date missing", alreadyPresent=True
            ),
            noted("Archive", "q"),
        ]
        self.successResultOf(
            store.recordOutcomes(
                "job", [withNote[0], failed("Archive", "a"), appended("INBOX", "c"), withNote[1]]
            )
        )
        self.successResultOf(
            store.recordOutcomes(
                "job",
                [
                    withNote[2],
                    withNote[3],
                    MessageOutcome("INBOX", "d", "INBOX", 5, failure="NO", note="lost"),
                ],
            )
        )
        self.successResultOf(store.recordOutcomes("other", [noted("INBOX", "a")]))
        self.assertEqual(
            self.successResultOf(store.notes("job")),
            [withNote[3], withNote[2], withNote[1], withNote[0]],
        )


class FailurePagesContract(_MixinBase):
    """
    Failure pages, manifest pages and the ping, alike in every store.
    """

    def makeStore(self) -> AnyStore:
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


class NamesContract(_MixinBase):
    """
    Names and activity, as every store records them.
    """

    clock: Clock

    def makeStore(self) -> AnyStore:
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

    def oneByOne(self, store: AnyStore, job: str) -> JobReport:
        """
        The report of C{job} from C{store}'s reads of one job each.
        """
        failures: list[MessageOutcome] = self.successResultOf(store.failures(job))
        notes: list[MessageOutcome] = self.successResultOf(store.notes(job))
        fallbacks: list[FolderFallback] = self.successResultOf(store.folderFallbacks(job))
        timeline: list[Transition] = self.successResultOf(store.timeline(job))
        return JobReport(
            job,
            self.successResultOf(store.jobFailure(job)),
            self.successResultOf(store.counts(job)),
            self.successResultOf(store.activity(job)),
            tuple(failures),
            tuple(notes),
            tuple(fallbacks),
            tuple(timeline),
        )

    def test_jobReports(self) -> None:
        """
        L{IStateStore.jobReports} gives each job, in the order asked (one
        named twice, twice), what the store's reads of one job give:
        failure, counts, activity, failures, notes, folder fallbacks and
        timeline; a job with nothing recorded has its zeros; no job, no
        report.
        """
        store = self.makeStore()
        self.clock.advance(100)
        self.successResultOf(
            store.recordOutcomes(
                "a",
                [
                    appended("INBOX", "1"),
                    failed("Sent", "2"),
                    failed("INBOX", "3"),
                    present("INBOX", "4"),
                    noted("INBOX", "5"),
                ],
            )
        )
        self.clock.advance(30)
        self.successResultOf(store.recordOutcomes("b", [noted("Sent", "1"), appended("X", "2")]))
        self.successResultOf(store.recordFolderMark("a", "INBOX", MARK))
        self.successResultOf(store.recordFolderMark("a", "Sent", MARK))
        self.successResultOf(
            store.recordFolderFallback("b", FolderFallback("b\\x", "b_x", "NO Invalid"))
        )
        self.successResultOf(
            store.recordFolderFallback("b", FolderFallback("a\"y", "a_y", "NO Invalid"))
        )
        self.successResultOf(store.recordJobFailure("a", "login refused"))
        for change in (PAUSING, RESUMING):
            self.successResultOf(store.recordTransition("b", change))
        jobs = ["b", "none", "a", "b"]
        reports = self.successResultOf(store.jobReports(jobs))
        self.assertEqual(reports, [self.oneByOne(store, job) for job in jobs])
        self.assertEqual(reports[2].failure, "login refused")
        self.assertEqual(len(reports[2].failures), 2)
        self.assertEqual(reports[2].activity.folders, 2)
        self.assertEqual(len(reports[0].fallbacks), 2)
        self.assertEqual(reports[0].timeline, (PAUSING, RESUMING))
        self.assertEqual(
            reports[1],
            JobReport(
                "none", None, OutcomeCounts(0, 0, 0, 0, 0), JobActivity(0, None, None, 0),
                (), (), (), (),
            ),
        )  # fmt: skip
        self.assertEqual(self.successResultOf(store.jobReports([])), [])
