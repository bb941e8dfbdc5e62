# -*- test-case-name: tests.test_testing_cyrus,tests.test_testing_courier -*-
"""
What the private Cyrus and Courier of L{imapmig.testing.cyrus} and
L{imapmig.testing.courier} share: finding the servers unpacked by
C{.ci/install-servers}, skipping or failing a test when they are missing,
running one as a session of its own, waiting for its greeting,
stopping it with nothing left behind, and reading an account back with
L{imaplib} through the same helpers as L{imapmig.testing.dovecot}.

Like C{dovecot.py}, everything here is synchronous and blocking and runs
outside any reactor.
"""

from __future__ import annotations

import atexit
import os
import pwd
import signal
import socket
import ssl
import stat
import subprocess
import sys
import time
import uuid
from imaplib import IMAP4
from typing import Callable, Iterator, Mapping, Sequence

from twisted.trial import unittest

from imapmig.errors import ServerNotFound, ServerStartFailed
from imapmig.testing.accounts import AccountReader, IMAPUser
from imapmig.testing.children import dieWithParent
from imapmig.testing.ports import freePorts

SERVERS_ROOT = os.environ.get("IMAPMIG_SERVERS_ROOT", "/opt/imapmig-servers")
"""
Where C{.ci/install-servers} unpacks Cyrus and Courier (C{tree/} below it);
the environment variable C{IMAPMIG_SERVERS_ROOT} moves it, for both.
"""

_START_TIMEOUT = 15.0
_STOP_TIMEOUT = 10.0
_RUNNING: set[PrivateServer] = set()


def tree() -> str:
    """
    The directory the Debian packages were unpacked into
    (C{SERVERS_ROOT/tree}).
    """
    return os.path.join(SERVERS_ROOT, "tree")


def requireServer(
    testCase: unittest.SynchronousTestCase | None,
    name: str,
    find: Callable[[], object],
    install: str = "run .ci/install-servers as root",
) -> None:
    """
    Call C{find} (which raises L{ServerNotFound} when the server is
    missing); when it is missing, skip loudly, or fail on CI (C{CI=true}),
    so the integration tests cannot silently vanish.

    @param testCase: the test asking, whose C{failureException} is raised
        on CI; L{AssertionError} without one.
    @param name: the server's name for the messages, e.g. C{"Cyrus"}.
    @param find: a callable of no argument.
    @param install: what installs it, for the messages.
    @raise twisted.trial.unittest.SkipTest: missing, not on CI.
    """
    try:
        find()
        return
    except ServerNotFound as e:
        problem = str(e)
    if os.environ.get("CI") == "true":
        failure = AssertionError if testCase is None else testCase.failureException
        raise failure(
            f"{name} is not usable but CI=true: the real-{name} tests must run on CI "
            f"({install}): {problem}"
        )
    sys.stderr.write(f"\n*** SKIPPING real-{name} tests: {problem}; {install} ***\n")
    raise unittest.SkipTest(f"{name} not usable: {problem}")


def needExecutable(path: str, missing: str) -> None:
    """
    @raise ServerNotFound: saying C{missing}, when C{path} is not an
        executable file.
    """
    if not os.access(path, os.X_OK):
        raise ServerNotFound(missing)


def needUser(name: str, missing: str) -> None:
    """
    @raise ServerNotFound: saying C{missing}, when there is no user C{name}.
    """
    try:
        pwd.getpwnam(name)
    except KeyError:
        raise ServerNotFound(missing) from None


def needRoot(missing: str) -> None:
    """
    @raise ServerNotFound: saying C{missing}, when this process is not
        root.
    """
    if os.geteuid() != 0:
        raise ServerNotFound(missing)


class PrivateServer(AccountReader):
    """
    A server running privately on loopback as a session of its own: the
    lifecycle Dovecot, Cyrus and Courier share (a subclass says how to
    configure and launch it).

    @ivar baseDir: the directory holding everything of this instance.
    @ivar address: the IPv4 address it listens on (127.0.0.1).
    @ivar users: the accounts, in the order added.
    @ivar port: the plain IMAP port, chosen at L{start}; 0 before.
    @ivar tlsPort: the implicit-TLS port, chosen at L{start}; 0 before.
    @ivar caCertificatePath: the PEM file of the private CA that signed
        the server certificate (names C{localhost} and C{127.0.0.1}).
    @ivar pid: the launched process's id (leader of its session)
        while running, else L{None}.
    """

    name = "server"
    startFailed: type[ServerStartFailed] = ServerStartFailed
    startTimeout = _START_TIMEOUT
    # What a failed start's message holds when a port was taken between
    # the probe and the server's bind: then other ports are tried.
    portTaken = "in use"
    # What an account's name or password may not hold.
    unusableInUsers = ":|\t \r\n\0"

    def __init__(self, baseDir: str, users: Sequence[IMAPUser], address: str) -> None:
        for user in users:
            self.checkUser(user)
        self.baseDir = os.path.abspath(baseDir)
        self.users: list[IMAPUser] = list(users)
        self.address = address
        self.port = 0
        self.tlsPort = 0
        self.tlsDir = os.path.join(self.baseDir, "tls")
        self.caCertificatePath = os.path.join(self.tlsDir, "ca.pem")
        self.pid: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._outputPath = os.path.join(self.baseDir, "output.log")
        self._fixedPort = 0
        self._dieWithParent = False
        # Where the server is launched from: its own directory.
        self._workingDirectory: str | None = self.baseDir

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.baseDir!r} port={self.port} tlsPort={self.tlsPort}>"
        )

    def checkUser(self, user: IMAPUser) -> None:
        """
        Refuse an account name or password this server's user file cannot
        hold.

        @raise ValueError: empty, or with a character of
            L{unusableInUsers}.
        """
        for value in (user.name, user.password):
            if not value or any(c in value for c in self.unusableInUsers):
                raise ValueError(f"unusable user name or password for {user.name!r}")

    # -- what a subclass provides -------------------------------------------

    def _check(self) -> None:
        """
        Refuse to start before anything is written: the server is missing
        (L{ServerNotFound}) or cannot run here.
        """

    def _prepare(self) -> None:
        """
        Write what does not depend on the ports (accounts, directories).
        """
        raise NotImplementedError()

    def _configure(self) -> tuple[list[str], Mapping[str, str] | None]:
        """
        Write what depends on L{port} and L{tlsPort}.

        @return: the command line to run and its environment (L{None}: this
            process's).
        """
        raise NotImplementedError()

    def _logPaths(self) -> list[str]:
        """
        The files L{logTail} reads besides the launched process's output.
        """
        return []

    def _greetings(self) -> dict[int, ssl.SSLContext | None]:
        """
        The ports to probe for a greeting once launched, with the TLS
        context of the implicit-TLS one.
        """
        return {
            self.port: None,
            self.tlsPort: ssl.create_default_context(cafile=self.caCertificatePath),
        }

    def _readGreeting(self, port: int, context: ssl.SSLContext | None) -> bytes:
        """
        The first line the server sends on C{port}.
        """
        return _readGreeting(self.address, port, context)

    def _terminate(self, process: subprocess.Popen[bytes]) -> None:
        """
        Send TERM to every process of the instance's session, wait until
        none is left (KILL after 10 s).
        """
        session = process.pid
        _signalSession(session, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_TIMEOUT
        while True:
            process.poll()
            if not processesInSession(session):
                break
            if time.monotonic() > deadline:
                _signalSession(session, signal.SIGKILL)
                deadline = time.monotonic() + _STOP_TIMEOUT
            time.sleep(0.02)
        process.wait()

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """
        Write the certificates, accounts and configuration, launch the
        server and wait until both ports greet.  Does nothing when running.

        @raise ServerNotFound: the server is not installed.
        @raise ServerStartFailed: it did not greet within L{startTimeout}
            seconds (after a few attempts with other ports), with its log
            tail; the subclass's L{startFailed}.
        """
        if self._process is not None:
            return
        self._check()
        os.makedirs(self.baseDir, exist_ok=True)
        os.chmod(self.baseDir, 0o755)
        _makeTraversable(self.baseDir)
        writeTestCertificates(self.tlsDir, self.startFailed)
        self._prepare()
        for attempt in range(3):
            self.port, self.tlsPort = self._choosePorts()
            self._launch(*self._configure())
            try:
                self._waitUntilReady()
            except ServerStartFailed as e:
                self.stop()
                if not self._tryAgain(attempt, e):
                    raise
            else:
                return

    def _tryAgain(self, attempt: int, failure: ServerStartFailed) -> bool:
        """
        Whether a start that failed with C{failure} at try C{attempt} (from
        0) is tried again with other ports: another process may have taken
        a port between the probe and the server's bind.
        """
        return attempt < 2 and self.portTaken in str(failure)

    def stop(self) -> None:
        """
        Stop the server and wait until it has exited (L{_terminate}).
        Idempotent.
        """
        process = self._process
        if process is not None:
            self._terminate(process)
            self._process = None
            self.pid = None
        _RUNNING.discard(self)

    def wait(self) -> int:
        """
        Block until the server exits (stopped by someone else, or failed).

        @return: its exit status, as L{subprocess.Popen.wait} gives it.
        @raise RuntimeError: it is not running.
        """
        if self._process is None:
            raise RuntimeError(f"{self!r} is not running")
        return self._process.wait()

    def processes(self) -> list[int]:
        """
        The ids of the live processes of this instance (its session: it is
        launched as a session leader); empty once stopped.
        """
        if self._process is None:
            return []
        return processesInSession(self._process.pid)

    # -- inspection (as DovecotInstance offers) ------------------------------

    def logTail(self, lines: int = 40) -> str:
        """
        The last C{lines} lines of the server's output and log files.
        """
        return tailOfFiles([self._outputPath, *self._logPaths()], lines)

    def imapClient(self, user: str) -> IMAP4:
        """
        An L{imaplib} client logged in as C{user} on the plain port; the
        caller logs it out.  Mailbox arguments go through L{quoteMailbox}.
        """
        client = IMAP4(self.address, self.port, timeout=60)
        try:
            client.login(user, self.password(user))
        except BaseException:
            client.shutdown()
            raise
        return client

    def password(self, user: str) -> str:
        """
        The password of account C{user}.

        @raise KeyError: there is no such account.
        """
        for each in self.users:
            if each.name == user:
                return each.password
        raise KeyError(f"no user {user!r} in {self!r}")

    def user(self, name: str) -> IMAPUser:
        """
        The account called C{name}.

        @raise KeyError: there is no such account.
        """
        return IMAPUser(name, self.password(name))

    # -- internals ---------------------------------------------------------

    def _choosePorts(self) -> tuple[int, int]:
        """
        The plain and implicit-TLS ports: two free ones, or the fixed
        plain port and a free one.
        """
        port, tlsPort = freePorts(2)
        if self._fixedPort:
            return self._fixedPort, next(p for p in (port, tlsPort) if p != self._fixedPort)
        return port, tlsPort

    def _launch(self, command: list[str], environment: Mapping[str, str] | None) -> None:
        with open(self._outputPath, "ab") as output:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=None if environment is None else dict(environment),
                cwd=self._workingDirectory,
                start_new_session=True,
                preexec_fn=dieWithParent() if self._dieWithParent else None,
            )
        self.pid = self._process.pid
        _RUNNING.add(self)

    def _waitUntilReady(self) -> None:
        assert self._process is not None
        waitForGreetings(
            self.name, self._process, self.address, self._greetings(), self._readGreeting,
            self.logTail, self.startFailed, self.startTimeout,
        )  # fmt: skip


def processesInSession(session: int) -> list[int]:
    """
    The ids of the live (not zombie) processes of session C{session}, read
    from C{/proc}.  A session, not a process group: C{couriertcpd} moves
    itself into a process group of its own.
    """
    return [
        pid for pid, fields in processStats() if fields[0] != b"Z" and int(fields[3]) == session
    ]


def processStats() -> Iterator[tuple[int, list[bytes]]]:
    """
    Every process's id and the fields of its C{/proc/PID/stat} after the
    command name (state, parent, process group, session, ...), skipping a
    process that ends while it is read.
    """
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name is in parentheses and may hold anything.
        yield int(entry), stat[stat.rindex(b")") + 2 :].split()


def _signalSession(session: int, signum: int) -> None:
    for pid in processesInSession(session):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def tailOfFiles(paths: Sequence[str], lines: int) -> str:
    """
    The last C{lines} lines of each file of C{paths} that exists and is
    not empty, each under a C{--- PATH} line: what a test shows of a
    server's logs when it fails.
    """
    parts = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 200 * lines))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        tail = "\n".join(text.splitlines()[-lines:])
        if tail:
            parts.append(f"--- {path}\n{tail}")
    return "\n".join(parts)


def waitForGreetings(
    name: str,
    process: subprocess.Popen[bytes],
    address: str,
    pending: dict[int, ssl.SSLContext | None],
    readGreeting: Callable[[int, ssl.SSLContext | None], bytes],
    logTail: Callable[[], str],
    failure: type[Exception],
    timeout: float,
) -> None:
    """
    Wait until a server just started greets (C{* OK}) on every port of
    C{pending} (with TLS where a context is given), polling.

    @raise failure: the process exited, or C{timeout} seconds passed; the
        message ends with C{logTail()}.
    """
    deadline = time.monotonic() + timeout
    problem = "no answer"
    while pending:
        if process.poll() is not None:
            raise failure(f"{name} exited with status {process.returncode}\n" + logTail())
        if time.monotonic() > deadline:
            raise failure(
                f"{name} did not greet on {address} port(s) {sorted(pending)}"
                f" within {timeout} s ({problem})\n" + logTail()
            )
        for port, context in list(pending.items()):
            trouble = _greetingProblem(readGreeting, port, context)
            if trouble is None:
                del pending[port]
            else:
                problem = trouble
        if pending:
            time.sleep(0.02)


def _greetingProblem(
    readGreeting: Callable[[int, ssl.SSLContext | None], bytes],
    port: int,
    context: ssl.SSLContext | None,
) -> str | None:
    """
    What keeps C{port} from greeting with C{* OK} now, or L{None} when it
    does.
    """
    try:
        greeting = readGreeting(port, context)
    except (OSError, ssl.SSLError, subprocess.TimeoutExpired) as e:
        return repr(e)
    return None if greeting.startswith(b"* OK") else f"greeting {greeting[:80]!r}"


def writeTestCertificates(
    tlsDir: str, failure: type[ServerStartFailed] = ServerStartFailed
) -> None:
    """
    Write a private certificate authority (C{ca.pem}) and a server
    certificate it signed (C{server.pem}, key in C{server.key}; subject
    alternative names C{DNS:localhost} and C{IP:127.0.0.1}) into C{tlsDir},
    unless both certificates are there already.  Every private server of
    L{imapmig.testing} uses it.

    @param tlsDir: the directory, created if missing.
    @param failure: what to raise when C{openssl} fails.
    @raise ServerStartFailed: C{openssl} failed, with its error output (as
        C{failure}).
    """
    caCertificatePath = os.path.join(tlsDir, "ca.pem")
    serverCert = os.path.join(tlsDir, "server.pem")
    if os.path.exists(serverCert) and os.path.exists(caCertificatePath):
        return
    os.makedirs(tlsDir, exist_ok=True)
    os.chmod(tlsDir, 0o755)
    opensslConfig = os.path.join(tlsDir, "openssl.cnf")
    with open(opensslConfig, "w") as f:
        f.write(_OPENSSL_CONFIG)
    ecKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    serial = str(uuid.uuid4().int >> 64)
    commands = [
        ["openssl", "req", "-x509", "-config", opensslConfig, "-extensions", "ca_ext",
         *ecKey, "-keyout", "ca.key", "-out", "ca.tmp", "-days", "3650",
         "-subj", "/CN=imapmig test CA " + serial],
        ["openssl", "req", "-new", "-config", opensslConfig,
         *ecKey, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"],
        ["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.tmp",
         "-CAkey", "ca.key", "-set_serial", serial, "-days", "3650",
         "-extfile", opensslConfig, "-extensions", "server_ext", "-out", "server.tmp"],
    ]  # fmt: skip
    for command in commands:
        completed = subprocess.run(command, cwd=tlsDir, capture_output=True)
        if completed.returncode != 0:
            raise failure(
                f"{' '.join(command)} failed:\n"
                + completed.stderr.decode("utf-8", "replace")
            )
    os.rename(os.path.join(tlsDir, "ca.tmp"), caCertificatePath)
    os.rename(os.path.join(tlsDir, "server.tmp"), serverCert)


def _readGreeting(address: str, port: int, context: ssl.SSLContext | None) -> bytes:
    """
    Connect to C{port} on C{address} (over TLS when C{context} is given) and
    return the first line the server sends.
    """
    with socket.create_connection((address, port), timeout=2) as raw:
        # wrap_socket takes the descriptor over from raw: the TLS socket
        # must be closed itself, or it lingers until collected.
        sock: socket.socket = raw
        if context is not None:
            sock = context.wrap_socket(raw, server_hostname="localhost")
        try:
            data = b""
            while b"\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
            return data.split(b"\r\n", 1)[0]
        finally:
            sock.close()


def chownTree(path: str, uid: int, gid: int) -> None:
    """
    Give C{path} and everything below it to C{uid} and C{gid} (symbolic
    links themselves, not what they point to).
    """
    for directory, _subdirectories, files in os.walk(path):
        os.chown(directory, uid, gid)
        for name in files:
            os.lchown(os.path.join(directory, name), uid, gid)


def _makeTraversable(path: str) -> None:
    """
    When root, add the search (execute) permission for group and others to
    C{path} and each of its ancestors that lacks it, so Dovecot's
    unprivileged processes can reach the files below.
    """
    if os.geteuid() != 0:
        return
    current = os.path.abspath(path)
    while True:
        mode = os.stat(current).st_mode
        wanted = mode | stat.S_IXGRP | stat.S_IXOTH
        if wanted != mode:
            os.chmod(current, stat.S_IMODE(wanted))
        parent = os.path.dirname(current)
        if parent == current:
            return
        current = parent


_OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no

[dn]
CN = imapmig test

[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
"""


def _stopAll() -> None:
    """
    Stop every instance still running when the process exits.
    """
    for instance in list(_RUNNING):
        instance.stop()


atexit.register(_stopAll)
