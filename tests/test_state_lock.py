# -*- test-case-name: tests.test_state_lock -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.state.lock}: one owner per state database, and how
L{SQLiteStateStore} holds it.
"""

from __future__ import annotations

import io
import os
import signal
import socket
import sqlite3
import stat

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig import cli
from imapmig.errors import PermanentError
from imapmig.state.lock import StateFileLock
from imapmig.state.sqlite import SQLiteStateStore
from tests.statesupport import readLine, startPython
from tests.test_state import appended

# A child that takes the lock of the database named on its command line,
# says so with its pid, and holds it until it is killed.
_HOLD_LOCK = """
import os, sys
from imapmig.state.lock import StateFileLock
lock = StateFileLock.acquire(sys.argv[1], seconds=lambda: 1764085212.0)
print("holding", os.getpid(), flush=True)
sys.stdin.read()
"""


class StateFileLockTests(SynchronousTestCase):
    """
    L{StateFileLock}: an exclusive C{flock} on C{<database>.lock} that
    names its holder.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1764085212)
        self.database = os.path.abspath(self.mktemp())
        os.makedirs(os.path.dirname(self.database), exist_ok=True)
        self.lockPath = self.database + ".lock"

    def acquire(self, pid: int | None = None, host: str | None = None) -> StateFileLock:
        """
        Take the lock of L{database}, released when the test ends.
        """
        lock = StateFileLock.acquire(self.database, self.clock.seconds, pid=pid, host=host)
        self.addCleanup(lock.release)
        return lock

    def content(self) -> bytes:
        """
        What the lock file holds.
        """
        with open(self.lockPath, "rb") as f:
            return f.read()

    def test_holderWritten(self) -> None:
        """
        The lock file, created with mode 0600, names the holder: its pid,
        its host, and since when (the injected clock's time, in UTC).
        """
        lock = self.acquire()
        holder = (
            f"pid {os.getpid()} on host {socket.gethostname()}, since 2025-11-25 15:40:12 UTC"
        )
        self.assertEqual(lock.holder, holder)
        self.assertEqual(self.content(), holder.encode("utf-8") + b"\n")
        self.assertEqual(stat.S_IMODE(os.stat(self.lockPath).st_mode), 0o600)
        self.assertEqual(lock.path, self.lockPath)

    def test_secondRefused(self) -> None:
        """
        While the lock is held, taking it again (another open file, even in
        the same process) fails at once with L{PermanentError} naming the
        database and the holder, and leaves the holder's file as it was.
        """
        self.acquire(pid=1234, host="mail1")
        before = self.content()
        error = self.assertRaises(
            PermanentError, StateFileLock.acquire, self.database, self.clock.seconds
        )
        self.assertEqual(
            str(error),
            f"{self.database} is in use by another imapmig"
            " (pid 1234 on host mail1, since 2025-11-25 15:40:12 UTC);"
            " one daemon per state database",
        )
        self.assertEqual(self.content(), before)

    def test_release(self) -> None:
        """
        Once released, the lock can be taken again; the file stays, empty,
        so that no stale holder is shown.  Releasing twice is harmless.
        """
        lock = self.acquire(pid=1, host="a")
        lock.release()
        self.assertEqual(self.content(), b"")
        lock.release()
        again = self.acquire(pid=2, host="b")
        self.assertTrue(self.content().startswith(b"pid 2 on host b,"))
        self.assertIn("held", repr(again))
        self.assertIn("released", repr(lock))

    def test_unnamedHolder(self) -> None:
        """
        A holder that has not written its name yet (or wrote garbage) is
        still refused, the message saying what can be said.
        """
        self.acquire()
        with open(self.lockPath, "wb") as f:
            f.write(b"")
        error = self.assertRaises(
            PermanentError, StateFileLock.acquire, self.database, self.clock.seconds
        )
        self.assertIn("its holder has not written its name yet", str(error))
        with open(self.lockPath, "wb") as f:
            f.write(b"\x1b[2Jpid \xff\n")
        error = self.assertRaises(
            PermanentError, StateFileLock.acquire, self.database, self.clock.seconds
        )
        self.assertIn("(?[2Jpid \ufffd)", str(error))

    def test_symlinkRefused(self) -> None:
        """
        A symbolic link in place of the lock file is not followed (the
        file is truncated and written): L{PermanentError} names it.
        """
        target = self.mktemp()
        with open(target, "wb") as f:
            f.write(b"precious")
        os.symlink(os.path.abspath(target), self.lockPath)
        error = self.assertRaises(
            PermanentError, StateFileLock.acquire, self.database, self.clock.seconds
        )
        self.assertIn(self.lockPath, str(error))
        self.assertIn("symbolic link", str(error))
        with open(target, "rb") as f:
            self.assertEqual(f.read(), b"precious")

    def test_missingDirectory(self) -> None:
        """
        A database in a directory that does not exist: L{PermanentError}
        naming the database and the lock file.
        """
        database = os.path.join(self.mktemp(), "state.sqlite")
        error = self.assertRaises(
            PermanentError, StateFileLock.acquire, database, self.clock.seconds
        )
        self.assertIn(database + ".lock", str(error))
        self.assertIn("No such file or directory", str(error))

    def test_releasedWhenHolderKilled(self) -> None:
        """
        A process holding the lock refuses others; once it is killed with
        SIGKILL (no chance to release anything), the kernel has released
        the lock, and the next daemon takes it.
        """
        child = startPython(self, _HOLD_LOCK, self.database)
        words = readLine(self, child).split()
        self.assertEqual(words, ["holding", str(child.pid)])
        error = self.assertRaises(
            PermanentError, StateFileLock.acquire, self.database, self.clock.seconds
        )
        self.assertIn(f"(pid {child.pid} on host {socket.gethostname()}, since", str(error))
        child.send_signal(signal.SIGKILL)
        self.assertEqual(child.wait(), -signal.SIGKILL)
        lock = self.acquire()
        self.assertEqual(self.content(), lock.holder.encode("utf-8") + b"\n")


class SQLiteStoreLockTests(SynchronousTestCase):
    """
    L{SQLiteStateStore} holds the database's lock from open to close;
    readers and in-memory databases take none.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.path = os.path.abspath(self.mktemp())
        os.makedirs(os.path.dirname(self.path), exist_ok=True)

    def openStore(self, readOnly: bool = False) -> SQLiteStateStore:
        """
        Open a store on L{path}, closed when the test ends.
        """
        store = SQLiteStateStore(self.path, seconds=self.clock.seconds, readOnly=readOnly)
        self.addCleanup(store.close)
        return store

    def test_secondStoreRefused(self) -> None:
        """
        A second store on the same file fails with L{PermanentError} naming
        the file and the holder, before touching the database; once the
        first is closed, it opens.
        """
        first = self.openStore()
        error = self.assertRaises(PermanentError, SQLiteStateStore, self.path, self.clock.seconds)
        self.assertIn(f"{self.path} is in use by another imapmig (pid {os.getpid()}", str(error))
        self.assertIn("one daemon per state database", str(error))
        first.close()
        self.openStore()

    def test_memoryTakesNoLock(self) -> None:
        """
        C{":memory:"} databases take no lock: any number open at once, and
        no file is created.
        """
        stores = [SQLiteStateStore(":memory:", self.clock.seconds) for _ in range(2)]
        for store in stores:
            store.close()
        self.assertFalse(os.path.exists(":memory:.lock"))

    def test_readerBesideOwner(self) -> None:
        """
        A C{readOnly} store opens while the owner holds the lock, reads
        what the owner committed, and cannot write: L{PermanentError}
        saying the database is read-only.
        """
        owner = self.openStore()
        self.successResultOf(owner.recordOutcomes("job", [appended("INBOX", "1")]))
        reader = self.openStore(readOnly=True)
        self.assertEqual(self.successResultOf(reader.appendedKeys("job", "INBOX")), {"1"})
        self.successResultOf(owner.recordOutcomes("job", [appended("INBOX", "2")]))
        self.assertEqual(self.successResultOf(reader.appendedKeys("job", "INBOX")), {"1", "2"})
        failure = self.failureResultOf(
            reader.recordOutcomes("job", [appended("INBOX", "3")]), PermanentError
        )
        self.assertIn("read-only", str(failure.value))

    def test_readerNeedsFile(self) -> None:
        """
        A C{readOnly} store on a file that does not exist fails with
        L{PermanentError}, and creates nothing.
        """
        error = self.assertRaises(
            PermanentError, SQLiteStateStore, self.path, self.clock.seconds, readOnly=True
        )
        self.assertIn(self.path, str(error))
        self.assertFalse(os.path.exists(self.path))
        self.assertFalse(os.path.exists(self.path + ".lock"))

    def test_readerRefusesForeignFile(self) -> None:
        """
        A C{readOnly} store on a SQLite file without imapmig's schema fails
        with L{PermanentError} saying so.
        """
        connection = sqlite3.connect(self.path)
        connection.execute("CREATE TABLE t (x)")
        connection.commit()
        connection.close()
        error = self.assertRaises(
            PermanentError, SQLiteStateStore, self.path, self.clock.seconds, readOnly=True
        )
        self.assertIn("not an imapmig state database", str(error))

    def test_releasedWhenOpenFails(self) -> None:
        """
        When the file cannot be opened as a state database, the lock taken
        for it is released.
        """
        with open(self.path, "wb") as f:
            f.write(b"not a database, but long enough to have a header" * 4)
        self.assertRaises(PermanentError, SQLiteStateStore, self.path, self.clock.seconds)
        lock = StateFileLock.acquire(self.path, self.clock.seconds)
        lock.release()


class ReportBesideDaemonTests(SynchronousTestCase):
    """
    C{imapmig report} reads the state database while the daemon owns it.
    """

    def test_report(self) -> None:
        """
        With a store holding the database's lock (as the running daemon
        does), C{imapmig report} reads what it recorded, and exits 0.
        """
        base = os.path.abspath(self.mktemp())
        maildir = os.path.join(base, "Maildir")
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(maildir, sub))
        state = os.path.join(base, "state.sqlite")
        owner = SQLiteStateStore(state, seconds=lambda: 1.0)
        self.addCleanup(owner.close)
        self.successResultOf(owner.recordOutcomes("alice", [appended("INBOX", "m1")]))
        config = os.path.join(base, "c.yaml")
        # Private: it holds an inline password.
        with open(os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(
                f"state: {state}\nservers: {{s: {{endpoint: 'tcp:127.0.0.1:143'}}}}\n"
                f"jobs: [{{name: alice, source: {{maildir: {maildir}}},"
                " destination: {server: s, user: a, password: p}}]\n"
            )
        out = io.StringIO()
        self.assertEqual(cli.main(["report", "--config", config], out), 0)
        self.assertTrue(out.getvalue().startswith("alice: 1 appended"), out.getvalue())
