# -*- test-case-name: tests.test_testing_postgresql -*-
"""
A private PostgreSQL cluster on loopback for the tests and the benchmark
of the PostgreSQL state store: Debian's C{postgresql} package (the
binaries of C{/usr/lib/postgresql/VERSION/bin}), nothing of
C{/etc/postgresql} or of the packaged cluster read or touched.

C{initdb} runs once per machine and version into a I{template} data
directory under the temporary directory
(C{imapmig-postgresql-VERSION-UID-HASH}, the hash of its settings: a
changed recipe makes a new one), made beside and renamed into place, so
two test processes racing to make it both end with one whole template).
Each L{PostgreSQLCluster} copies it (C{cp -a}) and runs C{postgres} on a
free port of 127.0.0.1 with its own socket directory, as the C{postgres}
user when this process is root (C{initdb} and C{postgres} refuse to run
as root; the files are given to that user). The template has C{fsync}
and C{full_page_writes} off and 1 MB WAL segments (so a copy is 28 MB);
two roles: the superuser C{postgres}, trusted on loopback, and
L{PASSWORD_ROLE}, which must log in with its password
(C{scram-sha-256}), for the tests of a wrong password.

C{synchronous_commit} stays on: with it off, a commit is acknowledged
before its WAL is written, and a C{-m immediate} stop (the fault tests'
restart) loses it, which a real server does not
(C{test_tableSurvivesImmediateRestart} fails so); with C{fsync} off a
commit is only a C{write}, and 3,000 single-row commits ran as fast with
it on as off (5-25k/s either way on the shared machine).  C{fsync} off
loses nothing when the server crashes, only when the machine does.

Measured on the development machine (2 cores shared, Debian 12,
PostgreSQL 15.18): making the template once 0.6-1.0 s; then
L{PostgreSQLCluster.start} (copy, launch, ready) 0.07-0.2 s,
L{PostgreSQLCluster.restart} after a C{-m immediate} stop (crash recovery
included) 0.04-0.08 s, L{PostgreSQLCluster.stop} 0.02 s.

Why not a L{imapmig.testing.privateserver.PrivateServer}: that base is an
IMAP server with accounts, TLS ports and a greeting to probe; this one
shares its helpers (free ports, the process table, log tails,
L{requireServer}) and its lifecycle's names (C{start}, C{stop}, C{wait},
C{processes}, C{logTail}) instead.

As everywhere in L{imapmig.testing}, everything here is synchronous and
blocking and runs outside any reactor, so polling with C{time.sleep} is
fine here (and only here).

    python -m imapmig.testing.postgresql [--dir DIR]

starts one, prints its URI and serves until C{SIGTERM} or Ctrl-C.
"""

from __future__ import annotations

import argparse
import atexit
import glob
import hashlib
import io
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from typing import Callable, Literal, Mapping, Sequence
from urllib.parse import quote

from twisted.trial import unittest

from imapmig.errors import PostgreSQLNotFound, PostgreSQLStartFailed, Stopped
from imapmig.testing.children import StopSignals, dieWithParent
from imapmig.testing.ports import freePorts
from imapmig.testing.privateserver import (
    _makeTraversable,
    chownTree,
    processStats,
    requireServer,
    tailOfFiles,
)

SUPERUSER = "postgres"
"""
The superuser of every private cluster, trusted on loopback.
"""

PASSWORD_ROLE = "imapmig_password"
"""
A role that logs in only with its password (C{scram-sha-256} over TCP):
L{PostgreSQLCluster.password} is its password.
"""

_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 30.0
_OS_USER = "postgres"
# What the template's postgresql.conf gets: speed over durability (a
# test's cluster is thrown away), little memory (several run at once).
_SETTINGS = """
# imapmig.testing.postgresql: a private test cluster.
fsync = off
full_page_writes = off
shared_buffers = 16MB
max_connections = 60
logging_collector = off
log_min_messages = warning
"""
_HBA = f"""\
# imapmig.testing.postgresql: the superuser trusted, {PASSWORD_ROLE} by password.
local all all trust
host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256
host all {PASSWORD_ROLE} ::1/128 scram-sha-256
host all all 127.0.0.1/32 trust
host all all ::1/128 trust
"""
_INITDB = [
    "-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync", "--wal-segsize=1",
    "--no-instructions",
]  # fmt: skip
# The signal pg_ctl stop -m MODE sends the postmaster.
_STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}
StopMode = Literal["smart", "fast", "immediate"]
_RUNNING: set[PostgreSQLCluster] = set()


def findPostgreSQL() -> str:
    """
    Locate the PostgreSQL server's binaries.

    @return: their directory: C{$IMAPMIG_POSTGRESQL_BIN} when set, else
        the newest C{/usr/lib/postgresql/VERSION/bin} holding C{initdb}.
    @raise PostgreSQLNotFound: there is none, or this process is root and
        there is no C{postgres} user to run the server as.
    """
    given = os.environ.get("IMAPMIG_POSTGRESQL_BIN")
    candidates = [given] if given else sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda path: int(path.split("/")[-2]) if path.split("/")[-2].isdigit() else 0,
    )
    found = [path for path in candidates if _executables(path)]
    if not found:
        raise PostgreSQLNotFound(
            "PostgreSQL is not installed (no initdb, postgres and psql in "
            + (given if given else "/usr/lib/postgresql/*/bin")
            + ")"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(_OS_USER)
        except KeyError:
            raise PostgreSQLNotFound(
                f"running as root, and there is no {_OS_USER!r} user to run PostgreSQL as"
            ) from None
    return found[-1]


def _executables(binDir: str) -> bool:
    names = ("initdb", "postgres", "psql")
    return all(os.access(os.path.join(binDir, name), os.X_OK) for name in names)


def requirePostgreSQL(testCase: unittest.SynchronousTestCase | None = None) -> str:
    """
    Return the PostgreSQL binaries' directory for a test that needs a real
    server, or skip the test loudly when there is none; on CI (C{CI=true})
    fail it instead, so the integration tests cannot silently vanish.

    @param testCase: the test asking, whose C{failureException} is raised
        on CI; L{AssertionError} without one.
    @raise twisted.trial.unittest.SkipTest: PostgreSQL is missing, not on
        CI.
    """
    install = "make setup, or apt-get install postgresql"
    requireServer(testCase, "PostgreSQL", findPostgreSQL, install)
    return findPostgreSQL()


class PostgreSQLCluster:
    """
    A private PostgreSQL cluster on 127.0.0.1, copied from the template.

    @ivar baseDir: the directory holding its data directory (C{data})
        and its output (C{postgresql.log}).
    @ivar address: C{127.0.0.1}.
    @ivar port: the TCP port, chosen at the first L{start} and kept by
        L{restart}; 0 before.
    @ivar socketDirectory: the directory of its Unix socket, made in the
        temporary directory at the first L{start}, removed by L{destroy}.
    @ivar password: the password of L{PASSWORD_ROLE}.
    @ivar pid: the postmaster's process id while running, else L{None}.
    """

    address = "127.0.0.1"

    def __init__(
        self,
        baseDir: str,
        *,
        dieWithParent: bool = False,
        port: int = 0,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        """
        Describe a cluster; nothing happens on disk until L{start}.

        @param baseDir: see L{baseDir}; created if missing.  A data
            directory already there is used as it is (its tables kept).
        @param dieWithParent: have the kernel stop the server when this
            process dies (L{imapmig.testing.children.dieWithParent}); for
            a single-threaded program starting it from its main thread.
        @param port: the port to listen on; 0: a free one.
        @param settings: server settings given on its command line
            (C{-c NAME=VALUE}) over the template's, e.g.
            C{{"synchronous_commit": "off"}}.
        """
        self.baseDir = os.path.abspath(baseDir)
        self.dataDirectory = os.path.join(self.baseDir, "data")
        self.port = port
        self.socketDirectory = ""
        self.password = ""
        self.pid: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._outputPath = os.path.join(self.baseDir, "postgresql.log")
        self._dieWithParent = dieWithParent
        self._binDir = ""
        self._databases = 0
        self._settings = dict(settings or {})

    def __repr__(self) -> str:
        return f"<PostgreSQLCluster {self.baseDir!r} port={self.port}>"

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """
        Copy the template (making it first if needed; not when the data
        directory exists), launch C{postgres} and wait until it accepts
        connections.  Does nothing when running.

        @raise PostgreSQLNotFound: PostgreSQL is not installed.
        @raise PostgreSQLStartFailed: it did not start within 60 s, with
            its log tail.
        """
        if self._process is not None:
            return
        self._binDir = findPostgreSQL()
        template = templateDirectory(self._binDir)
        with open(os.path.join(template, "password")) as f:
            self.password = f.read().strip()
        os.makedirs(self.baseDir, exist_ok=True)
        _makeTraversable(self.baseDir)
        if not os.path.exists(os.path.join(self.dataDirectory, "PG_VERSION")):
            copy = ["cp", "-a", os.path.join(template, "data"), self.dataDirectory]
            _run(copy, "copying the template")
        self._makeSocketDirectory()
        for attempt in range(3):
            fixed = self.port != 0
            if not fixed:
                self.port = freePorts(1)[0]
            try:
                self._launch()
                return
            except PostgreSQLStartFailed as e:
                self.stop("immediate")
                if fixed or attempt == 2 or "already in use" not in str(e):
                    raise
                self.port = 0

    def stop(self, mode: StopMode = "fast") -> None:
        """
        Stop the server as C{pg_ctl stop -m MODE} does (the postmaster gets
        the same signal: C{TERM}, C{INT} or C{QUIT}), and wait until no
        process of it is left (C{KILL} after 30 s); as its parent this
        waits for it directly, without C{pg_ctl}'s 100 ms polls.  The data
        directory stays (L{start} again uses it).  Idempotent.

        @param mode: C{"immediate"} is a crash: the next start recovers
            from the WAL.
        """
        process = self._process
        if process is not None:
            _stopPostmaster(process, _STOP_SIGNALS[mode])
            self._process = None
            self.pid = None
        _RUNNING.discard(self)

    def restart(self, mode: StopMode = "immediate") -> None:
        """
        L{stop} with C{mode}, then L{start} again on the same port and data.
        """
        self.stop(mode)
        self.start()

    def destroy(self, keepData: bool = False) -> None:
        """
        L{stop}, then remove the socket directory and L{baseDir}.

        @param keepData: keep L{baseDir}, so that a cluster there later
            finds its data again.
        """
        self.stop()
        if self.socketDirectory:
            shutil.rmtree(self.socketDirectory, ignore_errors=True)
            self.socketDirectory = ""
        if not keepData:
            shutil.rmtree(self.baseDir, ignore_errors=True)

    def wait(self) -> int:
        """
        Block until the server exits (stopped by someone else, or failed).

        @return: its exit status.
        @raise RuntimeError: it is not running.
        """
        if self._process is None:
            raise RuntimeError(f"{self!r} is not running")
        return self._process.wait()

    def processes(self) -> list[int]:
        """
        The ids of the live processes of the cluster (the postmaster and
        its children); empty once stopped.
        """
        if self._process is None:
            return []
        return clusterProcesses(self._process.pid)

    # -- using it ----------------------------------------------------------

    def dsn(
        self, dbname: str = "postgres", user: str = SUPERUSER, password: str | None = None
    ) -> str:
        """
        A libpq URI reaching database C{dbname} over TCP as C{user}, e.g.
        C{postgresql://postgres@127.0.0.1:5433/postgres}.

        @param password: put into the URI when given (L{password} for
            L{PASSWORD_ROLE}); the superuser needs none.
        """
        secret = "" if password is None else ":" + quote(password, safe="")
        return (
            f"postgresql://{quote(user, safe='')}{secret}@{self.address}:{self.port}"
            f"/{quote(dbname, safe='')}"
        )

    def createDatabase(self, name: str | None = None, owner: str = SUPERUSER) -> str:
        """
        Create a database (by C{psql} as the superuser).

        @param name: its name; L{None}: C{test1}, C{test2}, ...
        @param owner: its owner, e.g. L{PASSWORD_ROLE}.
        @return: its URI as the superuser (L{dsn}).
        """
        if name is None:
            self._databases += 1
            name = f"test{self._databases}"
        quoted = '"' + name.replace('"', '""') + '"'
        self.psql(f'CREATE DATABASE {quoted} OWNER "{owner}"')
        return self.dsn(name)

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        """
        Run C{sql} with C{psql} as the superuser, stopping at the first
        error.

        @return: its output, unaligned and without headers.
        @raise PostgreSQLStartFailed: C{psql} failed, with its errors.
        """
        return _run(
            [os.path.join(self._binDir, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
             "-d", self.dsn(dbname), "-c", sql],
            "psql",
        )  # fmt: skip

    def logTail(self, lines: int = 40) -> str:
        """
        The last C{lines} lines of the server's output.
        """
        return tailOfFiles([self._outputPath], lines)

    # -- internals ---------------------------------------------------------

    def _makeSocketDirectory(self) -> None:
        """
        The socket directory, made once, in the temporary directory: Unix
        socket paths are limited to 107 octets, and trial's temporary
        directories are deep.
        """
        if not self.socketDirectory:
            self.socketDirectory = tempfile.mkdtemp(prefix="imapmig-pg-")
            _makeTraversable(self.socketDirectory)
            _giveToServer(self.socketDirectory)

    def _launch(self) -> None:
        """
        Run C{postgres} and wait until its C{postmaster.pid} says ready.
        """
        command = [
            os.path.join(self._binDir, "postgres"), "-D", self.dataDirectory,
            "-p", str(self.port), "-k", self.socketDirectory, "-h", self.address,
        ]  # fmt: skip
        for name, value in self._settings.items():
            command += ["-c", f"{name}={value}"]
        preexec = dieWithParent() if self._dieWithParent else None
        user, group, groups = _serverUser()
        with open(self._outputPath, "ab") as output:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=self.dataDirectory,
                start_new_session=True,
                preexec_fn=preexec,
                user=user,
                group=group,
                extra_groups=groups,
            )
        self.pid = self._process.pid
        _RUNNING.add(self)
        _waitUntilReady(self._process, self.dataDirectory, self.logTail)


def _waitUntilReady(
    process: subprocess.Popen[bytes], dataDirectory: str, logTail: Callable[[], str]
) -> None:
    """
    Poll until the postmaster's C{postmaster.pid} names it and says
    C{ready} (its eighth line, written once it accepts connections).

    @raise PostgreSQLStartFailed: it exited, or 60 s passed.
    """
    deadline = time.monotonic() + _START_TIMEOUT
    path = os.path.join(dataDirectory, "postmaster.pid")
    while True:
        if process.poll() is not None:
            raise PostgreSQLStartFailed(
                f"postgres exited with status {process.returncode}\n" + logTail()
            )
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            lines = []
        if len(lines) >= 8 and lines[0] == str(process.pid) and lines[7].strip() == "ready":
            return
        if time.monotonic() > deadline:
            raise PostgreSQLStartFailed(
                f"postgres was not ready within {_START_TIMEOUT} s\n" + logTail()
            )
        time.sleep(0.01)


def clusterProcesses(postmaster: int) -> list[int]:
    """
    The ids of the live processes of the cluster whose postmaster is
    C{postmaster}: it and its children (each child of a postmaster calls
    C{setsid}, so its session does not tell).
    """
    return [
        pid
        for pid, fields in processStats()
        if fields[0] != b"Z" and (pid == postmaster or int(fields[1]) == postmaster)
    ]


def _stopPostmaster(process: subprocess.Popen[bytes], signum: int) -> None:
    """
    Send C{signum} to the postmaster and wait until it and its children
    have exited (a postmaster exits after its children); C{KILL} to all
    of them after 30 s.
    """
    if process.poll() is None:
        process.send_signal(signum)
    try:
        process.wait(_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        for pid in clusterProcesses(process.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait()


def templateDirectory(binDir: str) -> str:
    """
    The template this machine's clusters copy, made on first use: a
    directory holding C{data} (the data directory, owned by the user the
    server runs as) and C{password} (L{PASSWORD_ROLE}'s).

    @param binDir: the binaries (L{findPostgreSQL}); the template is kept
        per version and per user the server runs as.
    @raise PostgreSQLStartFailed: C{initdb} or the role's creation failed.
    """
    # "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
    version = _run([os.path.join(binDir, "postgres"), "--version"], "--version").split()[2]
    uid = _serverIds()[0]
    # Keyed by what makes it too, so that a changed one is made anew.
    recipe = hashlib.sha256((" ".join(_INITDB) + _SETTINGS + _HBA).encode()).hexdigest()[:8]
    template = os.path.join(tempfile.gettempdir(), f"imapmig-postgresql-{version}-{uid}-{recipe}")
    parent, name = os.path.split(template)
    if os.path.lexists(template) and not _trusted(template):
        # Someone else's (or a link) at a name anyone can guess: a server
        # started from it would run their settings.  This process makes its
        # own, private, instead.
        private = tempfile.mkdtemp(prefix=name + ".private.", dir=parent)
        _makeTemplate(binDir, private)
        return private
    if _whole(template):
        return template
    making = tempfile.mkdtemp(prefix=name + ".", dir=parent)
    try:
        _makeTemplate(binDir, making)
        try:
            os.rename(making, template)
        except OSError:
            # Another process made it meanwhile: theirs is as good.
            if not _whole(template):
                raise
    finally:
        shutil.rmtree(making, ignore_errors=True)
    return template


def _trusted(template: str) -> bool:
    """
    Whether C{template} was made by this process's user: a directory, not
    a link, that it owns and no one else may write (as C{mkdtemp} makes
    it).
    """
    status = os.lstat(template)
    return (
        stat.S_ISDIR(status.st_mode)
        and status.st_uid == os.geteuid()
        and not status.st_mode & 0o022
    )


def _whole(template: str) -> bool:
    """
    Whether C{template} holds a whole template (the password is written
    last; a data directory's C{PG_VERSION} first).
    """
    return all(
        os.path.exists(os.path.join(template, *parts))
        for parts in (("password",), ("data", "PG_VERSION"))
    )


def _makeTemplate(binDir: str, directory: str) -> None:
    """
    C{initdb} into C{directory/data}, the settings and C{pg_hba.conf}
    written, L{PASSWORD_ROLE} created (by C{postgres --single}), its
    password into C{directory/password} (0600, this process's user).
    """
    os.chmod(directory, 0o755)
    _makeTraversable(directory)
    data = os.path.join(directory, "data")
    password = secrets.token_urlsafe(18)
    _giveToServer(directory)
    _run(
        [os.path.join(binDir, "initdb"), "-D", data, *_INITDB], "initdb", serverUser=True,
    )  # fmt: skip
    with open(os.path.join(data, "postgresql.conf"), "a") as f:
        f.write(_SETTINGS)
    with open(os.path.join(data, "pg_hba.conf"), "w") as f:
        f.write(_HBA)
    _giveToServer(data)
    _run(
        [os.path.join(binDir, "postgres"), "--single", "-D", data,
         "-c", "password_encryption=scram-sha-256", "postgres"],
        "creating the password role", serverUser=True,
        input=f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{password}'\n",
    )  # fmt: skip
    os.chown(directory, os.getuid(), os.getgid())
    passwordPath = os.path.join(directory, "password")
    with open(os.open(passwordPath, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "w") as f:
        f.write(password + "\n")


def _run(
    command: list[str], what: str, serverUser: bool = False, input: str | None = None
) -> str:
    """
    Run C{command} (as the server's user when asked) and return its output.

    @raise PostgreSQLStartFailed: it failed, naming C{what}, with its
        output.
    """
    user, group, groups = _serverUser() if serverUser else (None, None, None)
    completed = subprocess.run(
        command,
        input=input,
        capture_output=True,
        text=True,
        cwd="/",
        user=user,
        group=group,
        extra_groups=groups,
    )
    if completed.returncode != 0:
        raise PostgreSQLStartFailed(
            f"{what} failed (status {completed.returncode}): {' '.join(command)}\n"
            + completed.stdout[-2000:] + completed.stderr[-2000:]
        )
    return completed.stdout


def _serverIds() -> tuple[int, int]:
    """
    The uid and gid the server runs as: C{postgres}'s when root, else
    this process's.
    """
    if os.geteuid() == 0:
        entry = pwd.getpwnam(_OS_USER)
        return entry.pw_uid, entry.pw_gid
    return os.getuid(), os.getgid()


def _serverUser() -> tuple[int | None, int | None, list[int] | None]:
    """
    The L{subprocess.Popen} arguments C{user}, C{group} and
    C{extra_groups} that run a child as the server's user (all L{None}
    when not root: as this process).
    """
    if os.geteuid() != 0:
        return None, None, None
    uid, gid = _serverIds()
    return uid, gid, []


def _giveToServer(path: str) -> None:
    """
    Give C{path} and everything below it to the server's user (when
    root), readable by it alone where PostgreSQL insists (0700).
    """
    if os.geteuid() == 0:
        chownTree(path, *_serverIds())
    os.chmod(path, 0o700)


def _stopAll() -> None:
    """
    Stop every cluster still running when the process exits.
    """
    for cluster in list(_RUNNING):
        cluster.stop("immediate")


atexit.register(_stopAll)


def main(argv: Sequence[str] | None = None) -> int:
    """
    C{python -m imapmig.testing.postgresql}: start a cluster, print its
    URI, serve until a stop signal.

    @return: 0 when stopped by a signal, 1 when it could not start or
        exited by itself.
    """
    parser = argparse.ArgumentParser(
        prog="python -m imapmig.testing.postgresql",
        description="A private PostgreSQL on 127.0.0.1 for trying imapmig's PostgreSQL"
        " state store. Runs until Ctrl-C or SIGTERM.",
    )
    parser.add_argument(
        "--dir",
        help="where to keep its data (kept at the end, and used again next time;"
        " default: a new temporary directory, removed at the end)",
    )
    args = parser.parse_args(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    signals = StopSignals()
    signals.install()
    base = os.path.abspath(args.dir) if args.dir else tempfile.mkdtemp(prefix="imapmig-pg-try-")
    cluster = PostgreSQLCluster(base, dieWithParent=True)
    try:
        with signals.deferred():
            cluster.start()
        print(f"== PostgreSQL (pid {cluster.pid}) in {cluster.dataDirectory}")
        print(f"== Superuser: {cluster.dsn()}")
        print(f"== Unix socket directory: {cluster.socketDirectory}")
        withPassword = cluster.dsn(user=PASSWORD_ROLE, password=cluster.password)
        print(f"== {PASSWORD_ROLE}, with a password: {withPassword}")
        print("== Serving until Ctrl-C or SIGTERM.")
        status = cluster.wait()
        print(f"== postgres exited with status {status}; its log: {cluster._outputPath}")
        return 1
    except Stopped as e:
        print(f"== Stopped by {signal.Signals(e.signum).name}")
        return 0
    except (PostgreSQLNotFound, PostgreSQLStartFailed) as e:
        sys.stderr.write(f"PostgreSQL did not start: {e}\n")
        return 1
    finally:
        signals.cleaningUp()
        cluster.destroy(keepData=bool(args.dir))
        signals.uninstall()


if __name__ == "__main__":
    raise SystemExit(main())
