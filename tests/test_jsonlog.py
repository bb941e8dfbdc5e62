# -*- test-case-name: tests.test_jsonlog -*-
"""
Tests for L{imapmig.log.jsonlog}: log events as JSON lines.
"""

from __future__ import annotations

import io
import json
from typing import Any

from twisted.logger import Logger, LogLevel
from twisted.logger._legacy import publishToNewObserver
from twisted.python.log import textFromEventDict
from twisted.trial.unittest import SynchronousTestCase

from imapmig.log.journald import messageID
from imapmig.log.jsonlog import REPR_LIMIT, eventAsJSONLine, jsonLinesLogObserver


class Opaque:
    """
    A value JSON cannot hold, with a long C{repr}.
    """

    def __repr__(self) -> str:
        return "<Opaque " + "o" * 200 + ">"


def logged(*events: tuple[str, dict[str, Any]], level: LogLevel = LogLevel.info) -> list[Any]:
    """
    The objects a JSON lines observer writes for events logged in
    C{imapmig.job.joblog} at C{level}, each line parsed.

    @param events: each a format and its fields.
    """
    out = io.StringIO()
    log = Logger(namespace="imapmig.job.joblog", observer=jsonLinesLogObserver(out))
    for format, fields in events:
        log.emit(level, format, **fields)
    text = out.getvalue()
    lines = text.split("\n")
    assert lines[-1] == "", text
    return [json.loads(line) for line in lines[:-1]]


class JSONLinesTests(SynchronousTestCase):
    """
    L{jsonLinesLogObserver} and L{eventAsJSONLine}.
    """

    def test_object(self) -> None:
        """
        Each event is one line holding one object: its level, namespace,
        text, event type id and fields, numbers as numbers.
        """
        (record,) = logged(("Job {job}: {copied:,} copied", dict(job="alice", copied=1200)))
        self.assertEqual(
            {k: v for k, v in record.items() if k != "time"},
            {
                "level": "info",
                "namespace": "imapmig.job.joblog",
                "message": "Job alice: 1,200 copied",
                "id": messageID("imapmig.job.joblog", "Job {job}: {copied:,} copied"),
                "job": "alice",
                "copied": 1200,
            },
        )

    def test_time(self) -> None:
        """
        The time is ISO 8601 in UTC, with milliseconds.
        """
        line = eventAsJSONLine(
            {"log_time": 1764129600.25, "log_format": "x", "log_level": LogLevel.warn}
        )
        record = json.loads(line)
        self.assertEqual(record["time"], "2025-11-26T04:00:00.250Z")
        self.assertEqual(record["level"], "warn")
        self.assertTrue(line.endswith("}\n"))

    def test_oneLine(self) -> None:
        """
        A message with newlines stays on one line.
        """
        records = logged(("a {x}", dict(x="one\ntwo")), ("b", {}))
        self.assertEqual([r["message"] for r in records], ["a one\ntwo", "b"])

    def test_values(self) -> None:
        """
        Values JSON holds are kept (a tuple as a list); others, and numbers
        JSON has not (NaN), become a short C{repr}.
        """
        (record,) = logged(
            (
                "v",
                dict(
                    names=("INBOX", "Sent"),
                    counts={"a": 1},
                    nothing=None,
                    flag=True,
                    ratio=0.5,
                    opaque=Opaque(),
                    nan=float("nan"),
                    nested=[Opaque()],
                ),
            )
        )
        self.assertEqual(record["names"], ["INBOX", "Sent"])
        self.assertEqual(record["counts"], {"a": 1})
        self.assertIsNone(record["nothing"])
        self.assertIs(record["flag"], True)
        self.assertEqual(record["ratio"], 0.5)
        self.assertEqual(record["nan"], "nan")
        self.assertTrue(record["opaque"].startswith("<Opaque ooo"))
        self.assertLessEqual(len(record["opaque"]), REPR_LIMIT)
        self.assertLessEqual(len(record["nested"]), REPR_LIMIT)

    def test_reservedNames(self) -> None:
        """
        A field named like one of the object's own keys keeps its value
        under its name with C{_} appended.
        """
        (record,) = logged(("{time} {id}", dict(time="soon", id=3)))
        self.assertEqual(record["message"], "soon 3")
        self.assertEqual(record["time_"], "soon")
        self.assertEqual(record["id_"], 3)
        self.assertEqual(record["id"], messageID("imapmig.job.joblog", "{time} {id}"))

    def test_failure(self) -> None:
        """
        A failure's traceback is in C{failure}, not in the message.
        """
        out = io.StringIO()
        log = Logger(namespace="n", observer=jsonLinesLogObserver(out))
        try:
            1 / 0
        except ZeroDivisionError:
            log.failure("Job {job} crashed", job="bob")
        record = json.loads(out.getvalue())
        self.assertEqual(record["message"], "Job bob crashed")
        self.assertEqual(record["level"], "critical")
        self.assertIn("ZeroDivisionError", record["failure"])
        self.assertTrue(record["failure"].startswith("Traceback"))
        (noFailure,) = logged(("x", {}))
        self.assertNotIn("failure", noFailure)

    def test_twistedInternals(self) -> None:
        """
        Twisted's own keys (C{log_logger}, C{log_source}, ...) are left out.
        """
        (record,) = logged(("x", {}))
        self.assertEqual(sorted(record), ["id", "level", "message", "namespace", "time"])

    def test_legacy(self) -> None:
        """
        An event from L{twisted.python.log} has its text as the message,
        without the old-style keys repeating it.
        """
        out = io.StringIO()
        publishToNewObserver(
            jsonLinesLogObserver(out),
            {"message": ("old", "style"), "isError": 0, "system": "-", "time": 0.0},
            textFromEventDict,
        )
        record = json.loads(out.getvalue())
        self.assertEqual(record["message"], "old style")
        self.assertEqual(record["namespace"], "log_legacy")
        self.assertEqual(sorted(record), ["id", "level", "message", "namespace", "time"])
