"""
Tests for L{imapmig.config.userrows}: the rows of a user list read on
their own, without a template (the whole path, with templates, is tested
in L{tests.test_config_userlist}).
"""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from imapmig.config.userrows import _COLUMNS, _RowReader
from tests.test_config import writeFile


class RowReaderTests(SynchronousTestCase):
    """
    L{_RowReader.readAll} with no template checks the header and the rows
    against each other, each problem naming the file, the row and the
    column.
    """

    def read(self, content: str) -> list[str]:
        """
        The problems of a user list holding C{content}.
        """
        directory = self.mktemp()
        os.mkdir(directory)
        path = writeFile(os.path.join(directory, "users.csv"), content)
        rows = _RowReader(path, {})
        self.assertEqual(rows.readAll(None, {}), [])
        return [problem.removeprefix(f"{path}: ") for problem in rows._problems]

    def test_unknownColumnHint(self) -> None:
        """
        An unknown column close to a known one is named with that one.
        """
        self.assertEqual(
            self.read("name,destination_usr\n"),
            ["row 1: destination_usr: unknown column (did you mean 'destination_user'?)"],
        )

    def test_unknownColumnKnown(self) -> None:
        """
        An unknown column close to no known one lists the known columns.
        """
        self.assertEqual(
            self.read("zzz\n"),
            [f"row 1: zzz: unknown column (known columns: {', '.join(_COLUMNS)})"],
        )

    def test_duplicateAndEmptyColumns(self) -> None:
        """
        A column given twice, and an empty column name, are each a problem.
        """
        self.assertEqual(
            self.read("name,name,\n"),
            ["row 1: name: duplicate column", "row 1: column 3: empty column name"],
        )

    def test_fieldCount(self) -> None:
        """
        A row with more fields than the header is refused; its job name is
        not read.
        """
        self.assertEqual(
            self.read("name\nalice,extra\n"),
            ["row 2: 2 fields, but the header has 1"],
        )

    def test_duplicateNames(self) -> None:
        """
        Two rows naming the same job: the second is refused, naming the
        first.
        """
        problems = self.read("name\nalice\nalice\n")
        self.assertEqual(len(problems), 1)
        self.assertTrue(
            problems[0].startswith("row 3: name: duplicate job name 'alice' (first used by "),
            problems[0],
        )

    def test_noRows(self) -> None:
        """
        A header without rows is a problem of the file.
        """
        self.assertEqual(
            self.read("name\n"), ["no users: the file has a header row but no rows"]
        )

    def test_connections(self) -> None:
        """
        A row's connections must be an integer within the job setting's
        bounds.
        """
        self.assertEqual(
            self.read("name,connections\nalice,many\nbob,99\n"),
            [
                "row 2: connections: expected an integer, got 'many'",
                "row 3: connections: must be between 1 and 32, not 99",
            ],
        )
