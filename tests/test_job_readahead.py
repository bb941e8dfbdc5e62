"""
Tests for L{imapmig.job.readahead}: a unit's steps read a step ahead.
"""

from __future__ import annotations

import os
import tempfile
from typing import Sequence

from twisted.internet.defer import CancelledError, Deferred
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import TransientError
from imapmig.job.attempt import RunStop
from imapmig.job.readahead import IMAP_READ_AHEAD, ReadAhead
from imapmig.mail.message import MessageBody, SourceFolder, SourceMessage, StreamedBody

_FOLDER = SourceFolder(key="INBOX", path=("INBOX",))


def _messages(*keys: str) -> list[SourceMessage]:
    return [SourceMessage(key=key, flags=(), internalDate=None, size=10) for key in keys]


class _Source:
    """
    A source whose reads complete when the test says: each C{readBodies}
    call is kept with its Deferred.
    """

    def __init__(self) -> None:
        self.reads: list[tuple[list[str], Deferred[Sequence[MessageBody]]]] = []

    def readBodies(
        self, folder: SourceFolder, messages: Sequence[SourceMessage]
    ) -> Deferred[Sequence[MessageBody]]:
        d: Deferred[Sequence[MessageBody]] = Deferred()
        self.reads.append(([m.key for m in messages], d))
        return d

    def keysRead(self) -> list[list[str]]:
        return [keys for keys, _ in self.reads]


def _streamed(case: SynchronousTestCase) -> StreamedBody:
    fd, path = tempfile.mkstemp()
    os.write(fd, b"Subject: x\r\n\r\nbody\r\n")
    os.unlink(path)
    body = StreamedBody.fromDescriptor(fd, "spooled")
    case.addCleanup(body.close)
    return body


def _discardedAhead(case: SynchronousTestCase, source: _Source) -> ReadAhead:
    """
    A reader of two one-message steps from C{source} that handed the
    first over (so reading the second ahead) and was then discarded, its
    read ahead still in flight: the last of C{source.reads}.
    """
    reader = ReadAhead(source, _FOLDER, [_messages("1"), _messages("2")])  # type: ignore[arg-type]
    first = Deferred.fromCoroutine(reader.next())
    source.reads[-1][1].callback([b"a"])
    case.successResultOf(first)
    reader.discard()
    return reader


class ReadAheadTests(SynchronousTestCase):
    """
    L{ReadAhead} reads the next step while the one before is handed over.
    """

    def test_readsNextStepAhead(self) -> None:
        """
        When a step is handed over, the read of the following step has
        already been asked for; the last step starts no read beyond the
        unit; then L{ReadAhead.next} gives L{None}.
        """
        source = _Source()
        steps = [_messages("1", "2"), _messages("3"), _messages("4")]
        reader = ReadAhead(source, _FOLDER, steps)  # type: ignore[arg-type]
        first = Deferred.fromCoroutine(reader.next())
        self.assertEqual(source.keysRead(), [["1", "2"]])
        source.reads[0][1].callback([b"a", b"b"])
        self.assertEqual(self.successResultOf(first), (steps[0], [b"a", b"b"]))
        self.assertEqual(source.keysRead(), [["1", "2"], ["3"]])
        second = Deferred.fromCoroutine(reader.next())
        self.assertNoResult(second)
        source.reads[1][1].callback([b"c"])
        self.assertEqual(self.successResultOf(second), (steps[1], [b"c"]))
        self.assertEqual(source.keysRead(), [["1", "2"], ["3"], ["4"]])
        source.reads[2][1].callback([b"d"])
        self.assertEqual(self.successResultOf(Deferred.fromCoroutine(reader.next())),
                         (steps[2], [b"d"]))  # fmt: skip
        self.assertIsNone(self.successResultOf(Deferred.fromCoroutine(reader.next())))
        self.assertEqual(len(source.reads), 3)

    def test_readsTwoStepsAhead(self) -> None:
        """
        With C{ahead=2} (L{IMAP_READ_AHEAD}, an IMAP source's), once the
        first step is handed over the reads of the next two are in flight
        at once; each step handed over starts one more, in order, never
        beyond the unit; L{ReadAhead.discard} lets go of those in flight.
        """
        self.assertEqual(IMAP_READ_AHEAD, 2)
        source = _Source()
        steps = [_messages(str(n)) for n in range(1, 5)]
        reader = ReadAhead(source, _FOLDER, steps, ahead=IMAP_READ_AHEAD)  # type: ignore[arg-type]
        first = Deferred.fromCoroutine(reader.next())
        self.assertEqual(source.keysRead(), [["1"]])
        source.reads[0][1].callback([b"a"])
        self.assertEqual(self.successResultOf(first), (steps[0], [b"a"]))
        self.assertEqual(source.keysRead(), [["1"], ["2"], ["3"]])
        # The third step's read completes first: the second is still
        # handed over before it.
        source.reads[2][1].callback([b"c"])
        second = Deferred.fromCoroutine(reader.next())
        self.assertNoResult(second)
        source.reads[1][1].callback([b"b"])
        self.assertEqual(self.successResultOf(second), (steps[1], [b"b"]))
        self.assertEqual(source.keysRead(), [["1"], ["2"], ["3"], ["4"]])
        self.assertEqual(self.successResultOf(Deferred.fromCoroutine(reader.next())),
                         (steps[2], [b"c"]))  # fmt: skip
        self.assertEqual(len(source.reads), 4)
        reader.discard()
        source.reads[3][1].errback(TransientError("lost"))
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_notAhead(self) -> None:
        """
        With C{ahead=0} each step is read only when asked for.
        """
        source = _Source()
        steps = [_messages("1"), _messages("2")]
        reader = ReadAhead(source, _FOLDER, steps, ahead=0)  # type: ignore[arg-type]
        first = Deferred.fromCoroutine(reader.next())
        source.reads[0][1].callback([b"a"])
        self.successResultOf(first)
        self.assertEqual(source.keysRead(), [["1"]])
        Deferred.fromCoroutine(reader.next())
        self.assertEqual(source.keysRead(), [["1"], ["2"]])

    def test_noReadAheadWhileStopping(self) -> None:
        """
        Once the job is stopping, a step handed over starts no read of the
        next one (it would hold the source, perhaps waiting for its
        throttle, while the job winds down).
        """
        source = _Source()
        stop = RunStop()
        steps = [_messages("1"), _messages("2"), _messages("3")]
        reader = ReadAhead(
            source, _FOLDER, steps, stop=stop  # type: ignore[arg-type]
        )
        first = Deferred.fromCoroutine(reader.next())
        source.reads[0][1].callback([b"a"])
        self.successResultOf(first)
        self.assertEqual(source.keysRead(), [["1"], ["2"]])
        second = Deferred.fromCoroutine(reader.next())
        stop.requested = True
        source.reads[1][1].callback([b"b"])
        self.assertEqual(self.successResultOf(second), (steps[1], [b"b"]))
        self.assertEqual(source.keysRead(), [["1"], ["2"]])
        reader.discard()

    def test_failureOfTheStepAsked(self) -> None:
        """
        A read that fails fails the L{ReadAhead.next} that waits for it,
        and starts no read ahead.
        """
        source = _Source()
        reader = ReadAhead(source, _FOLDER, [_messages("1"), _messages("2")])  # type: ignore[arg-type]
        first = Deferred.fromCoroutine(reader.next())
        source.reads[0][1].errback(TransientError("lost"))
        self.failureResultOf(first, TransientError)
        self.assertEqual(source.keysRead(), [["1"]])

    def test_discardClosesStreamedBodies(self) -> None:
        """
        L{ReadAhead.discard} gives up the read in flight: once it
        completes, the files of its streamed bodies are closed.
        """
        source = _Source()
        _discardedAhead(self, source)
        streamed = _streamed(self)
        fd = streamed._fd
        source.reads[1][1].callback([b"b", streamed])
        self.assertEqual(streamed._fd, -1)
        with self.assertRaises(OSError):
            os.fstat(fd)

    def test_discardConsumesFailure(self) -> None:
        """
        A read given up that then fails logs no unhandled error.
        """
        source = _Source()
        reader = _discardedAhead(self, source)
        source.reads[1][1].errback(TransientError("lost"))
        self.assertEqual(self.flushLoggedErrors(), [])
        reader.discard()

    def test_discardLogsBug(self) -> None:
        """
        A read given up that fails with something other than an
        operational error or a cancelled wait (a bug) is logged with its
        traceback; a cancelled wait is not.
        """
        source = _Source()
        _discardedAhead(self, source)
        source.reads[1][1].errback(ZeroDivisionError("bug"))
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)

        _discardedAhead(self, source)
        source.reads[3][1].errback(CancelledError())
        self.assertEqual(self.flushLoggedErrors(), [])
