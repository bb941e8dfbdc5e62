# -*- test-case-name: tests.test_state_failures -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for what L{SQLiteStateStore}, and the daemon, do with a state
database that cannot be used: read-only, full, failing I/O, corrupt, busy
at open, or owned by another daemon.  Each is a real failure of SQLite or
the kernel, not a simulated one.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import PermanentError
from imapmig.state import JournalMessage, MessageOutcome
from imapmig.state.lock import StateFileLock
from imapmig.state.sqlite import SQLiteStateStore
from tests.statesupport import (
    CHILD_TIMEOUT,
    TWISTD,
    childEnvironment,
    corruptPages,
    readLine,
    runPython,
    startPython,
    withoutDACOverride,
)
from tests.test_state import appended

# A busy timeout no test would wait out: a failure that waited for it
# would show.
BUSY_TIMEOUT = 60.0

BATCH = [JournalMessage("INBOX", str(n), 100, b"12345678") for n in range(50)]


def filled(path: str, messages: int = 3000) -> None:
    """
    Write a state database at C{path} holding C{messages} outcomes over a
    few dozen pages, and close it.
    """
    store = SQLiteStateStore(path, seconds=lambda: 1.0)
    try:
        store.recordOutcomes(
            "job",
            [
                MessageOutcome("INBOX", f"/{1600000000 + n}.M{n}P1.host,S=100:2,S", "INBOX", 100, 7, n)
                for n in range(messages)
            ],
        )
    finally:
        store.close()


def pageCount(path: str) -> int:
    """
    How many pages the database file at C{path} has.
    """
    connection = sqlite3.connect(path)
    try:
        (count,) = connection.execute("PRAGMA page_count").fetchone()
        return int(count)
    finally:
        connection.close()


class StoreFailureTests(SynchronousTestCase):
    """
    Each way a state database fails maps to a L{PermanentError} that names
    the file and the cause, at once, and writes nothing.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.path = os.path.abspath(self.mktemp())
        os.makedirs(os.path.dirname(self.path), exist_ok=True)

    def openStore(self, busyTimeout: float = 1.0) -> SQLiteStateStore:
        """
        Open a store on L{path}, closed when the test ends.
        """
        store = SQLiteStateStore(self.path, seconds=self.clock.seconds, busyTimeout=busyTimeout)
        self.addCleanup(store.close)
        return store

    def connection(self, store: SQLiteStateStore) -> sqlite3.Connection:
        """
        C{store}'s own connection.
        """
        connection = store._connection
        assert connection is not None
        return connection

    def assertNamed(self, error: BaseException, cause: str, code: str) -> None:
        """
        C{error} is a L{PermanentError} naming the file, the C{cause} in
        words and SQLite's C{code}.
        """
        self.assertIsInstance(error, PermanentError)
        message = str(error)
        self.assertTrue(message.startswith(self.path + ": "), message)
        self.assertIn(cause, message)
        self.assertIn(code, message)
        self.assertNotIn("\n", message)

    def test_full(self) -> None:
        """
        When the database cannot grow (here its C{max_page_count} is
        reached, as a full disk would stop it), journaling a batch and
        recording outcomes fail with L{PermanentError} saying it is full,
        at once (a long busy timeout is not waited for), nothing is
        written, and once there is room again both succeed.
        """
        store = self.openStore(busyTimeout=BUSY_TIMEOUT)
        started = time.monotonic()
        connection = self.connection(store)
        (pages,) = connection.execute("PRAGMA page_count").fetchone()
        connection.execute(f"PRAGMA max_page_count = {pages}")
        many = [
            MessageOutcome("INBOX", f"{n:06d}" * 20, "INBOX", 100) for n in range(2000)
        ]
        failure = self.failureResultOf(store.recordOutcomes("job", many))
        self.assertNamed(failure.value, "full", "SQLITE_FULL")
        bigBatch = [JournalMessage("INBOX", f"{n:06d}" * 40, 1, b"") for n in range(500)]
        failure = self.failureResultOf(store.journalBatch("job", "INBOX", 7, 1, bigBatch))
        self.assertNamed(failure.value, "full", "SQLITE_FULL")
        self.assertLess(time.monotonic() - started, BUSY_TIMEOUT / 2)
        self.assertEqual(self.successResultOf(store.summary("job")), (0, 0))
        self.assertEqual(self.successResultOf(store.journal("job")), [])
        connection.execute("PRAGMA max_page_count = 1000000")
        self.successResultOf(store.recordOutcomes("job", many))
        self.successResultOf(store.journalBatch("job", "INBOX", 7, 1, bigBatch))

    def test_readOnlyConnection(self) -> None:
        """
        When the database stops taking writes while open (here the
        connection is made C{query_only}, which SQLite enforces as it does
        a read-only file), journaling, recording and settling fail with
        L{PermanentError} saying it is read-only, at once, while reads
        still work.
        """
        store = self.openStore(busyTimeout=BUSY_TIMEOUT)
        started = time.monotonic()
        entryId = self.successResultOf(store.journalBatch("job", "INBOX", 7, 1, BATCH))
        self.connection(store).execute("PRAGMA query_only = 1")
        for d in [
            store.journalBatch("job", "INBOX", 7, 1, BATCH),
            store.recordOutcomes("job", [appended("INBOX", "1")]),
            store.recordOutcomes("job", [], [entryId]),
        ]:
            self.assertNamed(self.failureResultOf(d).value, "read-only", "SQLITE_READONLY")
        self.assertLess(time.monotonic() - started, BUSY_TIMEOUT / 2)
        self.assertEqual(len(self.successResultOf(store.journal("job"))), 1)

    def test_readOnlyFileRefusedAtOpen(self) -> None:
        """
        A database file that this process may not write (mode 0444; for
        root, in a child without C{CAP_DAC_OVERRIDE}) is refused when the
        store opens, with L{PermanentError} saying it is read-only: before
        any batch could leave.
        """
        filled(self.path, 10)
        os.chmod(self.path, 0o444)
        result = runPython(
            "import sys\n"
            "from imapmig.errors import PermanentError\n"
            "from imapmig.state.sqlite import SQLiteStateStore\n"
            "try:\n"
            "    SQLiteStateStore(sys.argv[1], seconds=lambda: 0.0)\n"
            "except PermanentError as e:\n"
            "    print(e)\n"
            "else:\n"
            "    print('opened')\n",
            self.path,
            prefix=withoutDACOverride(self),
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNamed(
            PermanentError(result.stdout.strip()), "read-only", "SQLITE_READONLY"
        )

    def test_ioError(self) -> None:
        """
        A write the kernel refuses (here past the process's file size
        limit, C{EFBIG}) fails with L{PermanentError} naming the I/O error.
        """
        filled(self.path, 10)
        result = runPython(
            "import os, resource, signal, sys\n"
            "from imapmig.state import MessageOutcome\n"
            "from imapmig.state.sqlite import SQLiteStateStore\n"
            "store = SQLiteStateStore(sys.argv[1], seconds=lambda: 0.0)\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "limit = os.path.getsize(sys.argv[1] + '-wal')\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))\n"
            "outcomes = [MessageOutcome('INBOX', str(n) * 50, 'INBOX', 1) for n in range(2000)]\n"
            "d = store.recordOutcomes('job', outcomes)\n"
            "d.addCallbacks(lambda _: print('recorded'), lambda f: print(f.value))\n",
            self.path,
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNamed(PermanentError(result.stdout.strip()), "I/O error", "SQLITE_IOERR")

    def test_corruptRefusedAtOpen(self) -> None:
        """
        A database with garbage over some pages in its middle is refused
        when the store opens, with L{PermanentError} saying it is corrupt;
        the file is left as it was, and the lock released.
        """
        filled(self.path)
        pages = pageCount(self.path)
        corruptPages(self.path, range(pages // 2, pages // 2 + 3))
        with open(self.path, "rb") as f:
            before = f.read()
        error = self.assertRaises(PermanentError, SQLiteStateStore, self.path, self.clock.seconds)
        self.assertNamed(error, "the state database is corrupt", "")
        with open(self.path, "rb") as f:
            self.assertEqual(f.read(), before)
        StateFileLock.acquire(self.path, self.clock.seconds).release()

    def test_corruptFoundLater(self) -> None:
        """
        Pages that go bad after the store opened fail the first read that
        meets them with L{PermanentError} saying the database is corrupt.
        """
        filled(self.path)
        store = self.openStore()
        pages = pageCount(self.path)
        corruptPages(self.path, range(1, pages))
        # Forget the pages read at open, as a long-running daemon has.
        self.connection(store).execute("PRAGMA shrink_memory")
        failure = self.failureResultOf(store.failures("job"))
        self.assertNamed(failure.value, "the state database is corrupt", "SQLITE_CORRUPT")

    def test_notADatabase(self) -> None:
        """
        A file that is not a SQLite database is refused at open, saying
        so.
        """
        with open(self.path, "wb") as f:
            f.write(b"jobs: [this is a YAML file written where the state belongs]\n" * 10)
        error = self.assertRaises(PermanentError, SQLiteStateStore, self.path, self.clock.seconds)
        self.assertNamed(error, "not a SQLite database", "SQLITE_NOTADB")

    def test_busyAtOpen(self) -> None:
        """
        A database another process is writing (one that takes no imapmig
        lock) is refused at open with L{PermanentError} after the busy
        timeout, saying so: the daemon cannot start without its state.
        """
        filled(self.path, 10)
        other = sqlite3.connect(self.path, isolation_level=None)
        self.addCleanup(other.close)
        other.execute("BEGIN IMMEDIATE")
        error = self.assertRaises(
            PermanentError, SQLiteStateStore, self.path, self.clock.seconds, busyTimeout=0
        )
        self.assertIn("another process is writing it", str(error))


def _maildirWithOneMessage(directory: str) -> str:
    """
    A Maildir holding one message, in C{directory}.
    """
    maildir = os.path.join(directory, "Maildir")
    for sub in ("cur", "new", "tmp"):
        os.makedirs(os.path.join(maildir, sub))
    with open(os.path.join(maildir, "cur", "1600000000.M1P1.host,S=44:2,S"), "wb") as f:
        f.write(b"Subject: one\r\nFrom: a@example.com\r\n\r\nbody\r\n")
    return maildir


class DaemonTests(SynchronousTestCase):
    """
    The daemon (C{twistd -n imapmig --config F --exit-when-done}, in a
    child process) refuses an unusable state database with one clear line
    and a non-zero exit status, within a bounded time.

    The destination is a loopback socket that accepts connections and
    never greets: a daemon that got as far as copying would hang there
    until the test's time runs out, so an exit proves it stopped on the
    state database.
    """

    def setUp(self) -> None:
        self.directory = os.path.abspath(self.mktemp())
        os.makedirs(self.directory)
        self.state = os.path.join(self.directory, "state.sqlite")
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        self.addCleanup(silent.close)
        maildir = _maildirWithOneMessage(self.directory)
        password = os.path.join(self.directory, "password")
        fd = os.open(password, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"secret\n")
        os.close(fd)
        self.config = os.path.join(self.directory, "imapmig.yaml")
        with open(self.config, "w") as f:
            f.write(
                f"""\
state: {self.state}
status: off
servers:
  silent:
    endpoint: "tcp:127.0.0.1:{silent.getsockname()[1]}"
    starttls: "off"
jobs:
  - name: j
    source: {{maildir: {maildir}}}
    destination: {{server: silent, user: u, password_file: {password}}}
"""
            )

    def runDaemon(self, prefix: tuple[str, ...] | list[str] = ()) -> tuple[int, str, str]:
        """
        Run the daemon on L{config} until it exits, failing the test if it
        has not within L{CHILD_TIMEOUT} seconds.

        @return: its exit status, standard output and standard error.
        """
        started = time.monotonic()
        try:
            result = subprocess.run(
                [*prefix, sys.executable, "-c", TWISTD, "-n", "--pidfile=", "imapmig"]
                + ["--config", self.config, "--exit-when-done"],
                capture_output=True,
                text=True,
                env=childEnvironment(),
                timeout=CHILD_TIMEOUT,
            )
        except subprocess.TimeoutExpired as e:
            self.fail(f"the daemon did not exit within {CHILD_TIMEOUT} s: {e.stdout!r}")
        self.assertLess(time.monotonic() - started, CHILD_TIMEOUT)
        return result.returncode, result.stdout, result.stderr

    def assertRefused(self, status: int, out: str, err: str, *words: str) -> None:
        """
        The daemon exited with status 2 after writing one line, naming the
        state database and C{words}, and no traceback.
        """
        self.assertEqual(status, 2, out + err)
        lines = err.splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith(self.state), lines[0])
        for word in words:
            self.assertIn(word, lines[0])
        self.assertNotIn("Traceback", out + err)

    def test_corrupt(self) -> None:
        """
        A state database with corrupt pages: exit status 2 and one line
        saying the database is corrupt.
        """
        filled(self.state)
        pages = pageCount(self.state)
        corruptPages(self.state, range(pages // 2, pages // 2 + 3))
        status, out, err = self.runDaemon()
        self.assertRefused(status, out, err, "the state database is corrupt")

    def test_inUse(self) -> None:
        """
        A state database another process holds the lock of: exit status 2
        and one line naming that process.
        """
        holder = startPython(
            self,
            "import os, sys\n"
            "from imapmig.state.lock import StateFileLock\n"
            "lock = StateFileLock.acquire(sys.argv[1], seconds=lambda: 0.0)\n"
            "print(os.getpid(), flush=True)\n"
            "sys.stdin.read()\n",
            self.state,
        )
        self.assertEqual(readLine(self, holder), str(holder.pid))
        status, out, err = self.runDaemon()
        self.assertRefused(
            status,
            out,
            err,
            f"is in use by another imapmig (pid {holder.pid} on host {socket.gethostname()},"
            " since 1970-01-01 00:00:00 UTC); one daemon per state database",
        )

    def test_readOnly(self) -> None:
        """
        A state database the daemon may not write: exit status 2 and one
        line saying it is read-only, before anything is sent.
        """
        filled(self.state, 10)
        os.chmod(self.state, 0o444)
        status, out, err = self.runDaemon(withoutDACOverride(self))
        self.assertRefused(status, out, err, "read-only", "SQLITE_READONLY")

    def test_failsBeforeReactorRuns(self) -> None:
        """
        A job that fails before the reactor even runs (its state database
        lost a table: the first read fails at once) still ends the daemon,
        with exit status 1 and the job's failure naming the database.
        (Before, C{reactor.stop} raised there and the daemon never exited.)
        """
        filled(self.state, 10)
        connection = sqlite3.connect(self.state)
        connection.execute("DROP TABLE messages")
        connection.commit()
        connection.close()
        status, out, err = self.runDaemon()
        self.assertEqual(status, 1, out + err)
        failed = [line for line in out.splitlines() if "Job j failed" in line]
        self.assertEqual(len(failed), 1, out)
        self.assertIn(f"{self.state}: cannot read", failed[0])
        self.assertIn("no such table: messages", failed[0])
