"""
Tests for L{imapmig.config.reader}: the declared key tables (L{Key},
L{Check}) that L{ConfigReader._readKeys} walks, and its small helpers.
"""

from __future__ import annotations

from typing import Any, Mapping

from twisted.trial.unittest import SynchronousTestCase

from imapmig.config.reader import (
    Check,
    ConfigReader,
    Key,
    Step,
    everyOne,
    givenKeys,
    keyNames,
    notThese,
)


class _Reader(ConfigReader):
    """
    A reader of a test section: C{name} (required), C{count} (default 3),
    C{label} (null is absent), C{flag}, then a check that C{count} and
    C{flag} go together.
    """

    def _readCount(self, value: object, path: str) -> int | None:
        return self._readInteger(value, path, 1, 10)

    def _checkFlag(
        self, section: Mapping[str, object], path: str, values: dict[str, Any]
    ) -> bool:
        if values["flag"] and values["counted"] == 1:
            self._problem(path, "flag needs a count above 1")
            return False
        return True


_TABLE: tuple[Step, ...] = (
    Key("name", _Reader._readString, missing="missing: the name"),
    Key("count", _Reader._readCount, "counted", default=3),
    Key("label", _Reader._readString, nullIsAbsent=True),
    Key("flag", _Reader._readBoolean),
    Check(_Reader._checkFlag),
)

_STOPPING: tuple[Step, ...] = (
    Key("count", _Reader._readCount, stops=True),
    Key("name", _Reader._readString, missing="missing: the name"),
)


class KeyTableTests(SynchronousTestCase):
    """
    L{ConfigReader._readKeys} reads each key of a table in order, with
    its default, and records every problem with the file and key path.
    """

    def read(
        self, section: dict[str, object], table: tuple[Step, ...] = _TABLE
    ) -> tuple[dict[str, Any] | None, list[str]]:
        reader = _Reader("/etc/imapmig.yaml")
        return reader._readKeys(section, "section", table), reader._problems

    def test_values(self) -> None:
        """
        Each key's value is kept under its field; an absent key takes its
        default, read as a written one is; an absent optional key is
        L{None}.
        """
        values, problems = self.read({"name": "x", "flag": True})
        self.assertEqual(problems, [])
        self.assertEqual(values, {"name": "x", "counted": 3, "label": None, "flag": True})

    def test_missing(self) -> None:
        """
        A required key that is absent is a problem naming its path; the
        other keys are still read.
        """
        values, problems = self.read({"count": 0})
        self.assertIsNone(values)
        self.assertEqual(
            problems,
            [
                "/etc/imapmig.yaml: section.name: missing: the name",
                "/etc/imapmig.yaml: section.count: must be between 1 and 10, not 0",
            ],
        )

    def test_nullIsAbsent(self) -> None:
        """
        A null value reads as absent where the key says so, and as null
        (refused by its reader) where it does not.
        """
        values, problems = self.read({"name": "x", "label": None})
        self.assertEqual(problems, [])
        assert values is not None
        self.assertIsNone(values["label"])
        values, problems = self.read({"name": None})
        self.assertIsNone(values)
        self.assertEqual(
            problems, ["/etc/imapmig.yaml: section.name: expected a string, got null"]
        )

    def test_check(self) -> None:
        """
        A check runs after the keys before it, and sees their values.
        """
        values, problems = self.read({"name": "x", "count": 1, "flag": True})
        self.assertIsNone(values)
        self.assertEqual(problems, ["/etc/imapmig.yaml: section: flag needs a count above 1"])

    def test_stops(self) -> None:
        """
        A problem with a key that stops the section leaves the keys after
        it unread.
        """
        values, problems = self.read({"count": "many"}, _STOPPING)
        self.assertIsNone(values)
        self.assertEqual(
            problems, ["/etc/imapmig.yaml: section.count: expected an integer, got a string"]
        )

    def test_keyNames(self) -> None:
        """
        A table's keys are its L{Key}s' names, in order.
        """
        self.assertEqual(keyNames(_TABLE), ("name", "count", "label", "flag"))


class HelperTests(SynchronousTestCase):
    """
    The helpers of the section readers.
    """

    def test_everyOne(self) -> None:
        """
        L{everyOne} gives the items read, or L{None} if one could not be.
        """
        self.assertEqual(everyOne([1, 2]), (1, 2))
        self.assertIsNone(everyOne([1, None]))

    def test_givenKeys(self) -> None:
        """
        L{givenKeys} names the keys a mapping gives, in the order asked;
        L{notThese} names them at the end of a problem.
        """
        given = givenKeys({"mbox": 1, "maildir": 2}, ("maildir", "eml_dir", "mbox"))
        self.assertEqual(given, ["maildir", "mbox"])
        self.assertEqual(notThese(given), ", not maildir and mbox")
        self.assertEqual(notThese([]), "")
