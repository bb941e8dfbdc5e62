# -*- test-case-name: tests.test_credentials_files -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for the modes of the files imapmig writes that name accounts and
folders: the SQLite state database (and its C{-wal}, C{-shm}) and the
C{imapmig verify} report, private whatever the umask.
"""

from __future__ import annotations

import json
import os
import stat

from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from imapmig.state.sqlite import SQLiteStateStore
from imapmig.commands.verify import writeReport


def fileMode(path: str) -> int:
    """
    The permission bits of C{path}.
    """
    return stat.S_IMODE(os.stat(path).st_mode)


class UmaskTestCase(SynchronousTestCase):
    """
    Runs each test under the common umask 022, which alone would make new
    files 0644.
    """

    def setUp(self) -> None:
        previous = os.umask(0o022)
        self.addCleanup(os.umask, previous)
        self.directory = os.path.abspath(self.mktemp())
        os.makedirs(self.directory)


class StateFileModeTests(UmaskTestCase):
    """
    The state database is created 0600, and SQLite's files beside it
    follow.
    """

    def test_newDatabase(self) -> None:
        """
        A new database is 0600, and so are its C{-wal} and C{-shm}, which
        SQLite creates as it writes the schema.  No other file is made
        (the lock is on the database itself).
        """
        path = os.path.join(self.directory, "state.sqlite")
        clock = Clock()
        store = SQLiteStateStore(path, seconds=clock.seconds)
        self.addCleanup(store.close)
        self.assertEqual(fileMode(path), 0o600)
        self.assertEqual(
            sorted(os.listdir(self.directory)), ["state.sqlite", "state.sqlite-shm", "state.sqlite-wal"]
        )
        for suffix in ("-wal", "-shm"):
            self.assertTrue(os.path.exists(path + suffix), suffix)
            self.assertEqual(fileMode(path + suffix), 0o600, suffix)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_looseDatabaseWarned(self) -> None:
        """
        An existing database that group or others may read is left as it
        is (an admin may mean it), with one warning naming it, its mode and
        the fix.
        """
        path = os.path.join(self.directory, "state.sqlite")
        SQLiteStateStore(path, seconds=Clock().seconds).close()
        os.chmod(path, 0o644)
        with capturedLogs() as events:
            store = SQLiteStateStore(path, seconds=Clock().seconds)
        store.close()
        warnings = [e for e in events if "may be read by group or others" in e["log_format"]]
        self.assertEqual(len(warnings), 1, events)
        self.assertEqual((warnings[0]["path"], warnings[0]["mode"]), (path, "0644"))
        self.assertIn("chmod 600", warnings[0]["log_format"])
        self.assertEqual(fileMode(path), 0o644)

    def test_privateDatabaseQuiet(self) -> None:
        """
        Opening an existing private database logs no warning.
        """
        path = os.path.join(self.directory, "state.sqlite")
        SQLiteStateStore(path, seconds=Clock().seconds).close()
        with capturedLogs() as events:
            SQLiteStateStore(path, seconds=Clock().seconds).close()
        self.assertEqual([e for e in events if e.get("log_level") is not None and "mode" in e], [])

    def test_readOnlyCreatesNothing(self) -> None:
        """
        A read-only open (C{imapmig report}) of a missing database creates
        no file.
        """
        path = os.path.join(self.directory, "missing.sqlite")
        self.assertRaises(Exception, SQLiteStateStore, path, Clock().seconds, readOnly=True)
        self.assertFalse(os.path.exists(path))


class ReportModeTests(UmaskTestCase):
    """
    C{imapmig verify}'s report is written 0600.
    """

    def test_new(self) -> None:
        """
        A new report is 0600 and holds the document; no partial file is
        left.
        """
        path = os.path.join(self.directory, "imapmig-verify.json")
        writeReport(path, [{"job": "alice", "differences": []}])
        self.assertEqual(fileMode(path), 0o600)
        with open(path, encoding="utf-8") as f:
            self.assertEqual(json.load(f), [{"job": "alice", "differences": []}])
        self.assertFalse(os.path.exists(path + ".partial"))

    def test_replacesLoose(self) -> None:
        """
        A report written over a 0644 one, and over a 0644 partial file an
        interrupted run left, is 0600.
        """
        path = os.path.join(self.directory, "imapmig-verify.json")
        for leftover in (path, path + ".partial"):
            with open(leftover, "w") as f:
                f.write("[]")
            os.chmod(leftover, 0o644)
        writeReport(path, [])
        self.assertEqual(fileMode(path), 0o600)
