# -*- test-case-name: tests.test_state_lock -*-
# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.state.lock}: one owner per state database file,
whatever name reaches it, and how L{SQLiteStateStore} holds it.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import signal
import socket
import sqlite3
import stat

from twisted.internet.task import Clock
from twisted.trial.unittest import SkipTest, SynchronousTestCase

from imapmig.commands import cli
from imapmig.errors import PermanentError
from imapmig.state.lock import HOLDER_ATTRIBUTE, StateFileLock
from imapmig.state.sqlite import SQLiteStateStore
from tests.statesupport import readLine, runPython, startPython
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

# A child that tries to take the lock of the database named on its command
# line, and says what came of it.
_TRY_LOCK = """
import sys
from imapmig.errors import PermanentError
from imapmig.state.lock import StateFileLock
try:
    StateFileLock.acquire(sys.argv[1], seconds=lambda: 0.0)
except PermanentError as e:
    print("refused:", e)
else:
    print("acquired")
"""

# What a holder started at the tests' time says of itself.
_SINCE = "since 2025-11-25 15:40:12 UTC"


def holderName(pid: int) -> str:
    """
    What the holder with process id C{pid}, on this host, at the tests'
    time, says of itself.
    """
    return f"pid {pid} on host {socket.gethostname()}, {_SINCE}"


def posixLocks(path: str) -> list[str]:
    """
    The POSIX (C{fcntl}) locks this process holds on the file C{path}
    reaches, as the kernel lists them in C{/proc/locks}: the locks SQLite
    takes.

    @raise SkipTest: there is no C{/proc/locks} (not Linux).
    """
    if not os.path.exists("/proc/locks"):
        raise SkipTest("/proc/locks (Linux) lists the locks a process holds")
    st = os.stat(path)
    ident = f" {os.getpid()} {os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino} "
    with open("/proc/locks") as f:
        return [line.split(":", 1)[1] for line in f if " POSIX " in line and ident in line]


def descriptorsOn(path: str) -> int:
    """
    How many descriptors this process has open on the file C{path}
    reaches.
    """
    st = os.stat(path)
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            other = os.stat(f"/proc/self/fd/{name}")
        except OSError:
            continue
        count += (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino)
    return count


class StateFileLockTests(SynchronousTestCase):
    """
    L{StateFileLock}: an exclusive C{flock} on the database file that
    names its holder in the file's extended attribute.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1764085212)
        self.directory = os.path.abspath(self.mktemp())
        os.makedirs(self.directory)
        self.database = os.path.join(self.directory, "state.sqlite")

    def acquire(self, pid: int | None = None, host: str | None = None) -> StateFileLock:
        """
        Take the lock of L{database}, released when the test ends.
        """
        lock = StateFileLock.acquire(self.database, self.clock.seconds, pid=pid, host=host)
        self.addCleanup(lock.release)
        return lock

    def refusal(self, path: str | None = None) -> str:
        """
        The message of the refusal to lock C{path} (by default
        L{database}) in this process.
        """
        error = self.assertRaises(
            PermanentError, StateFileLock.acquire, path or self.database, self.clock.seconds
        )
        return str(error)

    def holdInChild(self, path: str | None = None) -> int:
        """
        Start a child process holding the lock of C{path} (by default
        L{database}), killed when the test ends.

        @return: its pid.
        """
        child = startPython(self, _HOLD_LOCK, path or self.database)
        self.assertEqual(readLine(self, child).split(), ["holding", str(child.pid)])
        self.addCleanup(child.send_signal, signal.SIGKILL)
        return child.pid

    def attribute(self) -> bytes:
        """
        The holder's name as the database file's attribute says.
        """
        return os.getxattr(self.database, HOLDER_ATTRIBUTE)

    def test_holderWritten(self) -> None:
        """
        The lock creates the database file (empty, mode 0600) and names
        the holder in its attribute: its pid, its host, and since when
        (the injected clock's time, in UTC).  No other file is made.
        """
        lock = self.acquire()
        holder = f"pid {os.getpid()} on host {socket.gethostname()}, {_SINCE}"
        self.assertEqual(lock.holder, holder)
        self.assertEqual(self.attribute(), holder.encode("utf-8"))
        self.assertEqual(stat.S_IMODE(os.stat(self.database).st_mode), 0o600)
        self.assertEqual(os.path.getsize(self.database), 0)
        self.assertEqual(os.listdir(self.directory), ["state.sqlite"])
        self.assertEqual(lock.path, self.database)

    def test_secondRefused(self) -> None:
        """
        While the lock is held, taking it again, even in the same process,
        fails at once with L{PermanentError} naming the database and the
        holder, and leaves the holder's name as it was.
        """
        self.acquire(pid=1234, host="mail1")
        self.assertEqual(
            self.refusal(),
            f"{self.database} is in use by another imapmig"
            f" (pid 1234 on host mail1, {_SINCE}); one daemon per state database",
        )
        self.assertEqual(self.attribute(), f"pid 1234 on host mail1, {_SINCE}".encode())

    def test_release(self) -> None:
        """
        Once released, the lock can be taken again; the holder's name is
        removed, so that no stale holder is shown.  Releasing twice is
        harmless.
        """
        lock = self.acquire(pid=1, host="a")
        lock.release()
        self.assertNotIn(HOLDER_ATTRIBUTE, os.listxattr(self.database))
        lock.release()
        again = self.acquire(pid=2, host="b")
        self.assertTrue(self.attribute().startswith(b"pid 2 on host b,"))
        self.assertIn("held", repr(again))
        self.assertIn("released", repr(lock))

    def test_unnamedHolder(self) -> None:
        """
        A holder that has not written its name yet (or wrote garbage) is
        still refused, the message saying what can be said.
        """
        self.holdInChild()
        os.removexattr(self.database, HOLDER_ATTRIBUTE)
        self.assertIn("(its holder has not written its name yet)", self.refusal())
        os.setxattr(self.database, HOLDER_ATTRIBUTE, b"\x1b[2Jpid \xff\nmore")
        self.assertIn("(?[2Jpid \ufffd)", self.refusal())

    def test_noExtendedAttributes(self) -> None:
        """
        On a file system that keeps no extended attributes, the lock holds
        all the same, and the refusal says why it cannot name the holder.
        """

        def unsupported(*args: object) -> bytes:
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

        self.patch(os, "setxattr", unsupported)
        self.patch(os, "getxattr", unsupported)
        self.acquire()
        self.assertIn(
            "(its holder cannot be named: this file system keeps no extended attributes)",
            self.refusal(),
        )

    def test_missingDirectory(self) -> None:
        """
        A database in a directory that does not exist: L{PermanentError}
        naming the database and the cause.
        """
        database = os.path.join(self.mktemp(), "state.sqlite")
        self.assertEqual(
            self.refusal(database),
            f"{database}: cannot open the state database: No such file or directory",
        )

    def test_notRegularFile(self) -> None:
        """
        A FIFO where the database should be is refused at once (its open
        does not wait for a writer), and so is a directory.
        """
        os.mkfifo(self.database)
        self.assertEqual(
            self.refusal(), f"{self.database}: cannot open the state database: not a regular file"
        )
        directory = os.path.join(self.directory, "dir")
        os.mkdir(directory)
        self.assertIn(f"{directory}: cannot open the state database: ", self.refusal(directory))

    def test_releasedWhenHolderKilled(self) -> None:
        """
        A process holding the lock refuses others; once it is killed with
        SIGKILL (no chance to release anything), the kernel has released
        the lock, and the next daemon takes it, though the killed holder's
        name is still on the file: the lock, not the name, is the truth.
        """
        child = startPython(self, _HOLD_LOCK, self.database)
        words = readLine(self, child).split()
        self.assertEqual(words, ["holding", str(child.pid)])
        self.assertIn(f"({holderName(child.pid)})", self.refusal())
        child.send_signal(signal.SIGKILL)
        self.assertEqual(child.wait(), -signal.SIGKILL)
        self.assertEqual(self.attribute(), holderName(child.pid).encode())
        lock = self.acquire()
        self.assertEqual(self.attribute(), lock.holder.encode("utf-8"))


class AliasTests(SynchronousTestCase):
    """
    Every name that reaches the locked database file meets its lock, and
    the refusal names the holder whichever name either side used.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.directory = os.path.abspath(self.mktemp())
        os.makedirs(os.path.join(self.directory, "real"))
        os.makedirs(os.path.join(self.directory, "other"))
        self.database = os.path.join(self.directory, "real", "state.sqlite")
        self.alias = os.path.join(self.directory, "other", "state.sqlite")

    def holdInChild(self) -> int:
        """
        Start a child process holding the lock of L{database}, killed when
        the test ends.

        @return: its pid.
        """
        child = startPython(self, _HOLD_LOCK, self.database)
        self.assertEqual(readLine(self, child).split(), ["holding", str(child.pid)])
        self.addCleanup(child.send_signal, signal.SIGKILL)
        return child.pid

    def assertRefusedNaming(self, path: str, pid: int) -> None:
        """
        Taking the lock through C{path} fails, naming C{path} and the
        holder C{pid}.
        """
        error = self.assertRaises(PermanentError, StateFileLock.acquire, path, self.clock.seconds)
        self.assertEqual(
            str(error),
            f"{path} is in use by another imapmig ({holderName(pid)});"
            " one daemon per state database",
        )

    def test_symbolicLink(self) -> None:
        """
        A symbolic link to the database, in another directory, is refused
        while another process holds the file's lock.
        """
        pid = self.holdInChild()
        os.symlink(self.database, self.alias)
        self.assertRefusedNaming(self.alias, pid)

    def test_symbolicLinkedDirectory(self) -> None:
        """
        So is the database reached through a symbolic link to its
        directory.
        """
        pid = self.holdInChild()
        linked = os.path.join(self.directory, "linked")
        os.symlink(os.path.dirname(self.database), linked)
        self.assertRefusedNaming(os.path.join(linked, "state.sqlite"), pid)

    def test_hardLink(self) -> None:
        """
        A hard link to the database is refused while another process
        holds the file's lock, naming it; once that holder is gone, both
        names are refused, saying why: SQLite would keep a C{-wal} file per
        name.
        """
        child = startPython(self, _HOLD_LOCK, self.database)
        self.assertEqual(readLine(self, child).split(), ["holding", str(child.pid)])
        os.link(self.database, self.alias)
        self.assertRefusedNaming(self.alias, child.pid)
        child.send_signal(signal.SIGKILL)
        child.wait()
        for path in (self.database, self.alias):
            error = self.assertRaises(
                PermanentError, StateFileLock.acquire, path, self.clock.seconds
            )
            self.assertIn(f"{path}: the state database has 2 hard links;", str(error))
            self.assertIn("a symbolic link is fine", str(error))
        os.unlink(self.alias)
        StateFileLock.acquire(self.database, self.clock.seconds).release()

    def test_removedLockFile(self) -> None:
        """
        Removing what an earlier imapmig locked, C{<database>.lock}, while
        the holder runs, lets no second one in: the lock is on the
        database file itself.
        """
        pid = self.holdInChild()
        if os.path.exists(self.database + ".lock"):
            os.unlink(self.database + ".lock")
        self.assertRefusedNaming(self.database, pid)
        self.assertEqual(os.listdir(os.path.dirname(self.database)), ["state.sqlite"])

    def test_sameProcessAlias(self) -> None:
        """
        A second store of the same process, through a symbolic link, is
        refused too, naming the first.
        """
        lock = StateFileLock.acquire(self.database, self.clock.seconds)
        self.addCleanup(lock.release)
        os.symlink(self.database, self.alias)
        error = self.assertRaises(
            PermanentError, StateFileLock.acquire, self.alias, self.clock.seconds
        )
        self.assertIn(f"({lock.holder})", str(error))

    def test_bindMount(self) -> None:
        """
        The database file bind-mounted over a file in another directory (in
        a private mount namespace of a child, so that nothing leaks):
        through the mount, the child is refused, naming this process as
        the holder.  Needs
        root (C{unshare -m}); with C{CI=true} a missing root or C{unshare}
        fails the test instead of skipping it.
        """
        unshare = shutil.which("unshare")
        why = None
        if os.geteuid() != 0:
            why = "a bind mount needs root"
        elif unshare is None:
            why = "unshare (util-linux) is needed for a private mount namespace"
        if why is not None:
            if os.environ.get("CI") == "true":
                self.fail(why)
            raise SkipTest(why)
        assert unshare is not None
        self.clock.advance(1764085212)
        # As a daemon would have (its store creates the file), whatever
        # the lock does.
        with open(self.database, "wb"):
            pass
        lock = StateFileLock.acquire(self.database, self.clock.seconds)
        self.addCleanup(lock.release)
        with open(self.alias, "wb"):
            pass
        prefix = [
            unshare, "-m", "--propagation", "private", "--", "sh", "-c",
            'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh", self.database, self.alias,
        ]
        result = runPython(_TRY_LOCK, self.alias, prefix=prefix)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(
            result.stdout,
            f"refused: {self.alias} is in use by another imapmig ({holderName(os.getpid())});"
            " one daemon per state database\n",
        )
        # The mount stayed in the child's namespace.
        self.assertNotEqual(os.stat(self.alias).st_ino, os.stat(self.database).st_ino)


class SQLiteLocksKeptTests(SynchronousTestCase):
    """
    Taking, refusing and releasing the lock never drops the POSIX locks
    SQLite holds on the same file in this process (closing any
    descriptor of a file drops them all), and C{flock} does not stand in
    the way of SQLite's own locks in another process.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.path = os.path.join(os.path.abspath(self.mktemp()), "state.sqlite")
        os.makedirs(os.path.dirname(self.path))
        SQLiteStateStore(self.path, self.clock.seconds).close()

    def openStore(self, readOnly: bool = False) -> SQLiteStateStore:
        """
        Open a store on L{path} that has read once (so that SQLite holds
        its locks), closed when the test ends.
        """
        store = SQLiteStateStore(self.path, seconds=self.clock.seconds, readOnly=readOnly)
        self.addCleanup(store.close)
        self.successResultOf(store.appendedKeys("job", "INBOX"))
        return store

    def test_refusedInProcess(self) -> None:
        """
        A second store of this process refused beside the owner leaves
        the owner's SQLite locks in place: another process that opens and
        closes the database then does not take it for the last one and
        remove the write-ahead log from under the owner.
        """
        owner = self.openStore()
        self.successResultOf(owner.recordOutcomes("job", [appended("INBOX", "1")]))
        before = posixLocks(self.path)
        self.assertNotEqual(before, [])
        self.assertRaises(PermanentError, SQLiteStateStore, self.path, self.clock.seconds)
        self.assertEqual(posixLocks(self.path), before)
        result = runPython(
            "import sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1])\n"
            "print(c.execute('SELECT count(*) FROM messages').fetchone()[0])\n"
            "c.close()\n",
            self.path,
        )
        self.assertEqual(result.stdout, "1\n", result.stderr)
        self.assertTrue(os.path.exists(self.path + "-wal"))

    def test_refusedBesideReader(self) -> None:
        """
        Refused because another process holds the lock, beside a reader of
        this process: the reader keeps its SQLite locks, and the
        descriptor opened to try is closed once the reader closes.
        """
        holder = startPython(self, _HOLD_LOCK, self.path)
        readLine(self, holder)
        reader = self.openStore(readOnly=True)
        before = posixLocks(self.path)
        self.assertNotEqual(before, [])
        self.assertRaises(PermanentError, SQLiteStateStore, self.path, self.clock.seconds)
        self.assertEqual(posixLocks(self.path), before)
        reader.close()
        self.assertEqual(descriptorsOn(self.path), 0)

    def test_releasedBesideReader(self) -> None:
        """
        The owner closed beside a reader of this process: the lock is
        released at once (another process takes it), the reader keeps its
        SQLite locks and still reads.
        """
        owner = self.openStore()
        reader = self.openStore(readOnly=True)
        self.successResultOf(owner.recordOutcomes("job", [appended("INBOX", "1")]))
        owner.close()
        before = posixLocks(self.path)
        self.assertNotEqual(before, [])
        self.assertEqual(runPython(_TRY_LOCK, self.path).stdout, "acquired\n")
        self.assertEqual(posixLocks(self.path), before)
        self.assertEqual(self.successResultOf(reader.appendedKeys("job", "INBOX")), {"1"})
        reader.close()
        self.assertEqual(descriptorsOn(self.path), 0)

    def test_otherProcessReadsAndWrites(self) -> None:
        """
        While this process holds the lock, SQLite in another process still
        reads and writes the file (C{flock} and SQLite's C{fcntl} locks are
        independent): only imapmig's lock excludes a second imapmig.
        """
        owner = self.openStore()
        self.successResultOf(owner.recordOutcomes("job", [appended("INBOX", "1")]))
        result = runPython(
            "import sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "c.execute('CREATE TABLE other (x)')\n"
            "print(c.execute('SELECT count(*) FROM messages').fetchone()[0])\n",
            self.path,
        )
        self.assertEqual(result.stdout, "1\n", result.stderr)


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
