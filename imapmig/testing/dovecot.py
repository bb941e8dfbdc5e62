# -*- test-case-name: tests.test_testing_dovecot -*-
"""
A private Dovecot on loopback for the integration tests, the demo and the
benchmark.

L{DovecotInstance} writes a standalone configuration (nothing of
C{/etc/dovecot} is read), a private certificate authority and a server
certificate, then runs C{dovecot -F -c FILE} as a child process listening on
two free ports of 127.0.0.1: one for plain IMAP (STARTTLS offered) and one for
implicit TLS.  Several instances can run at once.  The benchmark runs one in
a network namespace of its own: it gives the address to listen on there and
the command prefix (C{ip netns exec NAME}) that runs Dovecot, and the probe
of its greeting, inside that namespace.

Everything here is synchronous and blocking: it runs outside any reactor,
before and after the code under test, so polling with C{time.sleep} and
talking to the server with L{imaplib} are fine in this module (and only
here).

What Dovecot 2.3.19 does with the options, as observed on Debian 12:

  - C{capabilities} sets C{imap_capability}.  After login (in the tagged
    C{OK [CAPABILITY ...]} of LOGIN and in reply to CAPABILITY) the server
    advertises exactly that list.  Before login, the greeting and
    CAPABILITY show the same list plus what the login process adds itself:
    C{STARTTLS} (plain port, before TLS) and C{AUTH=PLAIN AUTH=LOGIN}.
    Without the override the pre-login list is Dovecot's short one
    (C{IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE IDLE LITERAL+ STARTTLS
    AUTH=PLAIN AUTH=LOGIN}) and the full list, with C{MULTIAPPEND},
    C{UIDPLUS}, C{SPECIAL-USE} and the rest, appears only after login.  A
    client must therefore ask again after authenticating (or read the
    C{CAPABILITY} response code of LOGIN), as RFC 3501 requires.
  - C{specialUse=True} declares C{Sent}, C{Drafts}, C{Trash}, C{Junk} and
    C{Archive} with their RFC 6154 attributes and C{auto = no}: the server
    advertises C{SPECIAL-USE} and a mailbox of that name shows its
    attribute once it exists, but none is pre-created, so a fresh account
    holds only C{INBOX} and a migration starts from an empty destination.
  - C{separator} changes the hierarchy separator the inbox namespace shows
    over IMAP; the Maildir++ directories on disk keep C{.} either way.
  - C{inboxPrefix="INBOX."} gives the inbox namespace that prefix, as
    Courier and Cyrus with C{altnamespace: no} have it: NAMESPACE
    C{(("INBOX." ".")) NIL NIL}, every folder under C{INBOX.} (on disk the
    same C{.Sent} directory as without it), and a name outside the prefix
    refused with C{NO Client tried to access nonexistent namespace.
    (Mailbox name should probably be prefixed with: INBOX.)}.  The
    special-use mailboxes keep their attributes (C{INBOX.Sent} is
    C{\\Sent}).
  - A failed login is answered after about 0.5 s, and the per-IP penalty
    that would delay later logins by up to 15 s is disabled (by closing
    anvil's C{anvil-auth-penalty} socket; the auth process logs one error
    about it), so a test of a wrong password does not slow the next ones.
  - Stopping takes about 1.1 s: the master waits that long for its log
    process before it exits.
  - C{oauth2Introspection} adds Dovecot's C{oauth2} passdb (built in:
    C{dovecot --build-options} does not list it among the passdb drivers,
    yet 2.3.19 has it) for the C{oauthbearer} and C{xoauth2} mechanisms
    only; the password passdb is limited to PLAIN and LOGIN.  Each token
    login makes the auth process POST C{token=...} to the introspection
    URL (its HTTP client does not block, so the test's own reactor can
    serve it), with no cache; a token reported inactive is refused with
    an error challenge (C{status invalid_token}) and C{NO
    [AUTHENTICATIONFAILED]}.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import uuid
from typing import Mapping, Sequence

from twisted.trial import unittest

from imapmig.errors import DovecotNotFound, DovecotStartFailed
from imapmig.testing.accounts import IMAPUser
from imapmig.testing.privateserver import (
    PrivateServer,
    _makeTraversable,
    chownTree,
    requireServer,
)

_STOP_TIMEOUT = 10.0
_DH_PATH = "/usr/share/dovecot/dh.pem"
_MAIL_UID = 8  # the Debian "mail" user and group
_SPECIAL_USE = (
    ("Sent", "\\Sent"),
    ("Drafts", "\\Drafts"),
    ("Trash", "\\Trash"),
    ("Junk", "\\Junk"),
    ("Archive", "\\Archive"),
)
DovecotUser = IMAPUser
"""
An account of a private Dovecot: a login name and a plain-text password
(L{imapmig.testing.accounts.IMAPUser}, the account of any private server).
"""

UNUSABLE_IN_PATHS = ":#%\n"
"""
Characters a private Dovecot's directory cannot have (L{DovecotInstance.start}).
"""


def findDovecot() -> str:
    """
    Locate the C{dovecot} binary.

    @return: its path.
    @raise DovecotNotFound: it is neither on C{PATH} nor in C{/usr/sbin}.
    """
    found = shutil.which("dovecot")
    if found is not None:
        return found
    if os.access("/usr/sbin/dovecot", os.X_OK):
        return "/usr/sbin/dovecot"
    raise DovecotNotFound("dovecot is not installed (looked on PATH and in /usr/sbin)")


def requireDovecot(testCase: unittest.SynchronousTestCase | None = None) -> str:
    """
    Return the C{dovecot} binary for a test that needs a real server, or skip
    the test loudly when there is none.

    On CI (C{CI=true} in the environment) a missing Dovecot fails the test
    instead, so the integration tests cannot silently vanish.

    @param testCase: the test asking, whose C{failureException} is raised on
        CI; L{AssertionError} without one.
    @return: the path of the binary.
    @raise twisted.trial.unittest.SkipTest: Dovecot is missing, not on CI.
    """
    requireServer(testCase, "Dovecot", findDovecot, "apt-get install dovecot-imapd")
    return findDovecot()


class DovecotInstance(PrivateServer):
    """
    A private Dovecot serving IMAP on 127.0.0.1 (or an address in a network
    namespace), for tests and the benchmark.

    @ivar address: the IPv4 address it listens on.
    @ivar baseDir: the directory holding the configuration, certificates,
        password file, log and (by default) the users' homes.
    @ivar users: the accounts.
    @ivar masterUsers: the admins who may log in as any user (SASL PLAIN
        with an authorization identity); see C{__init__}.
    @ivar port: the plain IMAP port (STARTTLS offered), chosen at
        L{start}; 0 before.
    @ivar tlsPort: the implicit-TLS port, chosen at L{start}; 0 before.
    @ivar caCertificatePath: the PEM file of the private CA that signed the
        server certificate (subject alternative names C{DNS:localhost} and
        C{IP:127.0.0.1}); it exists once L{start} has run.
    @ivar pid: the master process id while running, else L{None}.
    """

    name = "dovecot"
    startFailed = DovecotStartFailed
    startTimeout = 10.0
    portTaken = "Address already in use"
    unusableInUsers = ":\r\n\0"

    def __init__(
        self,
        baseDir: str,
        *,
        users: Sequence[DovecotUser] = (
            DovecotUser("alice", "alice-pw"),
            DovecotUser("bob", "bob-pw"),
        ),
        capabilities: str | None = None,
        separator: str = ".",
        inboxPrefix: str = "",
        specialUse: bool | Sequence[tuple[str, str]] = True,
        fsync: bool = False,
        compress: bool = False,
        mailRoot: str | None = None,
        address: str = "127.0.0.1",
        commandPrefix: Sequence[str] = (),
        preload: str | None = None,
        masterUsers: Sequence[DovecotUser] = (),
        oauth2Introspection: str | None = None,
        oauth2Mechanisms: Sequence[str] = ("oauthbearer", "xoauth2"),
        dieWithParent: bool = False,
        port: int = 0,
    ) -> None:
        """
        Describe an instance; nothing happens on disk until L{start}.

        @param baseDir: see L{baseDir}; created if missing.
        @param users: the accounts; names and passwords must not contain
            C{:} or line breaks.
        @param capabilities: when given, the complete capability list
            advertised after login (C{imap_capability}), e.g.
            C{"IMAP4rev1 LITERAL- UIDPLUS"} to hide LITERAL+ and
            MULTIAPPEND.
        @param separator: the hierarchy separator of the inbox namespace,
            C{"."} or C{"/"}.
        @param inboxPrefix: the prefix of the inbox (personal) namespace:
            C{""} (Dovecot's default: folders at the top level) or
            C{"INBOX" + separator}, e.g. C{"INBOX."}, as Courier and Cyrus
            with C{altnamespace: no} have it (every folder under C{INBOX.}).
        @param specialUse: declare Sent, Drafts, Trash, Junk and Archive
            with their special-use attributes (not pre-created) so the
            server advertises SPECIAL-USE.  A sequence of C{(name, use)}
            pairs, e.g. C{[("Gesendet", "\\Sent")]}, declares those
            mailboxes instead, likewise not pre-created (a test creates
            them, as a user would, before a migration that should find
            them).  Several names may share a use.
        @param fsync: C{mail_fsync = optimized} when true, C{never} (fast,
            for tests) when false.
        @param compress: load the C{imap_zlib} plugin, which advertises
            COMPRESS=DEFLATE.
        @param mailRoot: the directory holding one home per user, e.g. on
            a tmpfs or a disk for the benchmark; C{baseDir/home} by default.
        @param address: the IPv4 address both listeners bind; an address
            other than 127.0.0.1 belongs to a network namespace that
            C{commandPrefix} enters.
        @param commandPrefix: the command line that runs its arguments where
            Dovecot should run, e.g. C{["ip", "netns", "exec", "srv"]}; it
            must exec them (the process started is the one stopped).  With
            a prefix, readiness is probed by a child process run through it
            (the plain port only), and the L{imaplib} helpers of this class,
            which connect from this process, cannot reach the server.
        @param preload: a shared object every Dovecot process loads first
            (C{LD_PRELOAD}), e.g. the benchmark's C{naglekeep.so}, which
            makes the server leave Nagle's algorithm on.  Dovecot clears
            its children's environment, so the variable is also listed in
            C{import_environment}.
        @param masterUsers: admins ("master users") who may log in as any
            user with SASL PLAIN, giving the user as authorization identity
            (a master passdb, C{pass = yes}: the user must exist); they
            have no mailbox of their own.  No master user separator is
            set, so PLAIN's authorization identity is the only way in.
        @param oauth2Introspection: when given, the URL of an RFC 7662
            token-introspection endpoint (e.g. L{imapmig.testing.oauth2})
            that an C{oauth2} passdb asks, by POST, about every access
            token given with C{oauth2Mechanisms}; the response's
            C{username} must be the login name and C{active} true.  The
            users' passwords still work with PLAIN and LOGIN.
        @param oauth2Mechanisms: the SASL mechanisms offered for tokens,
            among C{oauthbearer} and C{xoauth2}.
        @param dieWithParent: have the kernel stop Dovecot (C{SIGTERM})
            when this process dies, even by C{SIGKILL}
            (L{imapmig.testing.children.dieWithParent}); only for a
            single-threaded program that starts it from its main thread,
            such as the demo.
        @param port: the plain IMAP port to listen on; 0 (the default): a
            free one.  The implicit-TLS port is always a free one.
        """
        _checkOptions(separator, inboxPrefix, oauth2Mechanisms)
        super().__init__(baseDir, users, address)
        for user in masterUsers:
            self.checkUser(user)
        self.masterUsers = tuple(masterUsers)
        self._oauth2Introspection = oauth2Introspection
        self._oauth2Mechanisms = tuple(oauth2Mechanisms)
        self._capabilities = capabilities
        self._separator = separator
        self._inboxPrefix = inboxPrefix
        self._specialUse = specialUse
        self._fsync = fsync
        self._compress = compress
        self._mailRoot = os.path.abspath(
            mailRoot if mailRoot is not None else os.path.join(self.baseDir, "home")
        )
        self._commandPrefix = tuple(commandPrefix)
        self._preload = None if preload is None else os.path.abspath(preload)
        self._binary = ""
        self._runDir: str | None = None
        self._runDirIsTemporary = False
        self._logPath = os.path.join(self.baseDir, "dovecot.log")
        self._outputPath = os.path.join(self.baseDir, "dovecot.out")
        self._configPath = os.path.join(self.baseDir, "dovecot.conf")
        self._passwdPath = os.path.join(self.baseDir, "passwd")
        self._mastersPath = os.path.join(self.baseDir, "masters")
        self._oauth2ConfigPath = os.path.join(self.baseDir, "dovecot-oauth2.conf.ext")
        self._dieWithParent = dieWithParent
        self._fixedPort = port
        # The caller's directory, where a relative command prefix is found.
        self._workingDirectory = None

    # -- lifecycle (PrivateServer.start, stop and wait) ---------------------

    def stop(self) -> None:
        """
        Stop Dovecot: send TERM to the master process and wait until it
        has exited (its children end with it).  Idempotent.
        """
        super().stop()
        if self._runDir is not None and self._runDirIsTemporary:
            shutil.rmtree(self._runDir, ignore_errors=True)
        self._runDir = None

    # -- inspection --------------------------------------------------------

    def maildirPath(self, user: str) -> str:
        """
        The Maildir of C{user} on disk (C{<home>/Maildir}); Dovecot creates
        it at the first login.  A Maildir written there by root must be
        given to the C{mail} user (uid and gid 8) before Dovecot reads it.

        @param user: the login name.
        """
        return os.path.join(self._homeOf(user), "Maildir")

    def chownHome(self, user: str) -> None:
        """
        Give the home of C{user} and everything below it to the uid and gid
        Dovecot runs that user's mail processes as, e.g. after writing a
        Maildir into L{maildirPath} as root.  Nothing to do when not root.

        @param user: the login name.
        """
        if os.geteuid() != 0:
            return
        chownTree(self._homeOf(user), *self._mailIds())

    # -- PrivateServer -----------------------------------------------------

    def _check(self) -> None:
        unusable = sorted(set(UNUSABLE_IN_PATHS).intersection(self.baseDir + self._mailRoot))
        if unusable:
            # The passwd-file splits its lines at ":" (a home there would be
            # cut short: every APPEND then fails with [SERVERBUG]), and "#"
            # starts a comment in dovecot.conf (Dovecot exits at once);
            # Dovecot expands "%" variables in the passwd-file's path and
            # homes (every login then fails, as [UNAVAILABLE]: retried).
            raise DovecotStartFailed(
                f"its directory {self.baseDir} (or its homes' {self._mailRoot}) has"
                f" {' and '.join(map(repr, unusable))},"
                " which Dovecot's configuration cannot carry; choose another directory"
            )
        self._binary = findDovecot()

    def _prepare(self) -> None:
        self._writeUsers()

    def _configure(self) -> tuple[list[str], Mapping[str, str] | None]:
        self._writeConfig()
        environment = None
        if self._preload is not None:
            environment = dict(os.environ, LD_PRELOAD=self._preload)
        return [*self._commandPrefix, self._binary, "-F", "-c", self._configPath], environment

    def _logPaths(self) -> list[str]:
        return [self._logPath]

    def _greetings(self) -> dict[int, ssl.SSLContext | None]:
        if self._commandPrefix:
            return {self.port: None}
        return super()._greetings()

    def _readGreeting(self, port: int, context: ssl.SSLContext | None) -> bytes:
        """
        The first line the server sends on C{port}: read here, or by a child
        process run through the command prefix (plain ports only).
        """
        if not self._commandPrefix:
            return super()._readGreeting(port, context)
        assert context is None
        result = subprocess.run(
            [*self._commandPrefix, sys.executable, "-c", _PROBE, self.address, str(port)],
            capture_output=True,
            timeout=10,
        )
        if result.returncode != 0:
            lines = result.stderr.strip().splitlines() or [b"no output"]
            raise OSError(f"probe exited with status {result.returncode}: {lines[-1]!r}")
        return result.stdout.split(b"\r\n", 1)[0]

    def _terminate(self, process: subprocess.Popen[bytes]) -> None:
        """
        TERM to the master process alone, which stops its children; KILL
        after 10 s.
        """
        if process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    # -- internals ---------------------------------------------------------

    def _homeOf(self, user: str) -> str:
        return os.path.join(self._mailRoot, user)

    def _writeUsers(self) -> None:
        uid, gid = self._mailIds()
        os.makedirs(self._mailRoot, exist_ok=True)
        os.chmod(self._mailRoot, 0o755)
        _makeTraversable(self._mailRoot)
        lines = []
        for user in self.users:
            home = self._homeOf(user.name)
            os.makedirs(home, exist_ok=True)
            os.chmod(home, 0o755)
            if os.geteuid() == 0:
                os.chown(home, uid, gid)
            lines.append(f"{user.name}:{{PLAIN}}{user.password}:{uid}:{gid}::{home}::\n")
        _writeReadable(self._passwdPath, "".join(lines))
        _writeReadable(
            self._mastersPath,
            "".join(f"{user.name}:{{PLAIN}}{user.password}\n" for user in self.masterUsers),
        )

    def _mailIds(self) -> tuple[int, int]:
        if os.geteuid() == 0:
            return _MAIL_UID, _MAIL_UID
        return os.getuid(), os.getgid()

    def _makeRunDir(self) -> str:
        """
        The directory of Dovecot's sockets, made once per start: Unix
        socket paths are limited to 107 octets, and trial's temporary
        directories are deep, so a short one is used when needed.
        """
        if self._runDir is None:
            candidate = os.path.join(self.baseDir, "run")
            if len(candidate) <= 60:
                self._runDir, self._runDirIsTemporary = candidate, False
                os.makedirs(candidate, exist_ok=True)
            else:
                self._runDir = tempfile.mkdtemp(prefix="imapmig-dovecot-")
                self._runDirIsTemporary = True
            os.chmod(self._runDir, 0o755)
            _makeTraversable(self._runDir)
        return self._runDir

    def _writeConfig(self) -> None:
        stateDir = os.path.join(self.baseDir, "state")
        os.makedirs(stateDir, exist_ok=True)
        if self._oauth2Introspection is not None:
            self._writeOAuth2Config()
        text = _CONFIG.format(
            **self._pathSettings(stateDir), **self._authSettings(), **self._mailSettings()
        )
        _writeReadable(self._configPath, text)

    def _pathSettings(self, stateDir: str) -> dict[str, object]:
        """
        The configuration's files, directories, addresses and ids.
        """
        uid, gid = self._mailIds()
        return {
            "runDir": self._makeRunDir(),
            "stateDir": stateDir,
            "instance": f"imapmig-{os.getpid()}-{uuid.uuid4().hex[:12]}",
            "logPath": self._logPath,
            "address": self.address,
            "tlsDir": self.tlsDir,
            "uid": uid,
            "gid": gid,
            "passwdPath": self._passwdPath,
            "port": self.port,
            "tlsPort": self.tlsPort,
            "chroot": "  chroot =\n" if os.geteuid() != 0 else "",
            "settings": "".join(line + "\n" for line in self._optionalSettings()),
        }

    def _authSettings(self) -> dict[str, str]:
        """
        The mechanisms and passdbs: passwords, and where wanted master
        users and OAuth2 tokens.
        """
        tokens = self._oauth2Introspection is not None
        return {
            "tokenMechanisms": "".join(f" {m}" for m in self._oauth2Mechanisms) if tokens else "",
            "passdbs": self._extraPassdbs(),
            "passwordMechanisms": "  mechanisms = plain login\n" if tokens else "",
        }

    def _mailSettings(self) -> dict[str, str]:
        """
        The mail store's settings and the inbox namespace.
        """
        return {
            "fsync": "optimized" if self._fsync else "never",
            "separator": self._separator,
            "prefix": f"  prefix = {self._inboxPrefix}\n" if self._inboxPrefix else "",
            "mailboxes": "".join(_MAILBOX.format(name, use) for name, use in self._declared()),
        }

    def _extraPassdbs(self) -> str:
        """
        The master users' passdb and the OAuth2 tokens' one, where wanted,
        before the passwords' own.
        """
        text = ""
        if self.masterUsers:
            text += _MASTER_PASSDB.format(self._mastersPath)
        if self._oauth2Introspection is not None:
            text += _OAUTH2_PASSDB.format(" ".join(self._oauth2Mechanisms), self._oauth2ConfigPath)
        return text

    def _declared(self) -> Sequence[tuple[str, str]]:
        """
        The special-use mailboxes to declare, as C{(name, use)} pairs.
        """
        if self._specialUse is True:
            return _SPECIAL_USE
        if self._specialUse is False:
            return ()
        return self._specialUse

    def _optionalSettings(self) -> list[str]:
        """
        The last lines of the configuration: the DH parameters where the
        package has them, the users Dovecot's processes run as, and the
        options.
        """
        lines = [f"ssl_dh = <{_DH_PATH}"] if os.path.exists(_DH_PATH) else []
        lines += _processUsers()
        if self._capabilities is not None:
            lines.append(f"imap_capability = {self._capabilities}")
        if self._preload is not None:
            # Dovecot 2.3's default list, plus the variable its children
            # need to load the shim too.
            lines.append(
                "import_environment = TZ CORE_OUTOFMEM CORE_ERROR LISTEN_PID LISTEN_FDS "
                "NOTIFY_SOCKET LD_PRELOAD"
            )
        if self._compress:
            lines += ["protocol imap {", "  mail_plugins = $mail_plugins imap_zlib", "}"]
        return lines

    def _writeOAuth2Config(self) -> None:
        """
        The C{oauth2} passdb's settings: introspection by POST of
        C{token=...}, the user named by C{username}, valid when C{active}
        is true (Dovecot 2.3.19 reads the JSON C{true} as C{"true"}).
        """
        _writeReadable(self._oauth2ConfigPath, _OAUTH2_CONFIG.format(self._oauth2Introspection))


def _checkOptions(separator: str, inboxPrefix: str, oauth2Mechanisms: Sequence[str]) -> None:
    """
    Refuse options L{DovecotInstance} cannot configure.

    @raise ValueError: with what is wrong.
    """
    if separator not in (".", "/"):
        raise ValueError(f"separator must be '.' or '/', not {separator!r}")
    if inboxPrefix not in ("", "INBOX" + separator):
        raise ValueError(f"inboxPrefix must be '' or 'INBOX{separator}', not {inboxPrefix!r}")
    if not set(oauth2Mechanisms) <= {"oauthbearer", "xoauth2"} or not oauth2Mechanisms:
        raise ValueError(f"unknown OAuth2 mechanisms {oauth2Mechanisms!r}")


def _processUsers() -> list[str]:
    """
    The settings naming the users Dovecot's internal and login processes
    run as: Debian's C{dovecot} and C{dovenull} for root, else the current
    user and group.
    """
    if os.geteuid() == 0:
        return ["default_internal_user = dovecot", "default_login_user = dovenull"]
    user = pwd.getpwuid(os.getuid()).pw_name
    group = grp.getgrgid(os.getgid()).gr_name
    return [
        f"default_internal_user = {user}",
        f"default_internal_group = {group}",
        f"default_login_user = {user}",
    ]


def _writeReadable(path: str, text: str) -> None:
    """
    Write C{text} to C{path}, readable by Dovecot's unprivileged processes.
    """
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o644)


_PROBE = (
    "import socket, sys\n"
    "s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)\n"
    "sys.stdout.buffer.write(s.recv(4096))\n"
)

# The configuration of a private instance.  auth_failure_delay = 0 and
# anvil's penalty socket closed (mode = 0) answer a failed login quickly
# and keep it from slowing the next ones down (auth logs one
# "anvil-auth-penalty" error).
_CONFIG = """\
# Written by imapmig.testing.dovecot: a private test instance.
base_dir = {runDir}
state_dir = {stateDir}
instance_name = {instance}
log_path = {logPath}
listen = {address}
protocols = imap
ssl = yes
ssl_cert = <{tlsDir}/server.pem
ssl_key = <{tlsDir}/server.key
disable_plaintext_auth = no
auth_mechanisms = plain login{tokenMechanisms}
auth_failure_delay = 0
first_valid_uid = {uid}
first_valid_gid = {gid}
mail_location = maildir:~/Maildir
mail_fsync = {fsync}
mail_max_userip_connections = 1000
{passdbs}passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {passwdPath}
{passwordMechanisms}}}
userdb {{
  driver = passwd-file
  args = username_format=%u {passwdPath}
}}
service imap-login {{
  inet_listener imap {{
    address = {address}
    port = {port}
  }}
  inet_listener imaps {{
    address = {address}
    port = {tlsPort}
    ssl = yes
  }}
{chroot}}}
service anvil {{
  unix_listener anvil-auth-penalty {{
    mode = 0
  }}
{chroot}}}
service stats {{
  unix_listener stats-writer {{
    mode = 0666
  }}
}}
namespace inbox {{
  inbox = yes
  separator = {separator}
{prefix}{mailboxes}}}
{settings}"""

_MAILBOX = """\
  mailbox {0} {{
    special_use = {1}
    auto = no
  }}
"""

_MASTER_PASSDB = """\
passdb {{
  driver = passwd-file
  master = yes
  args = scheme=PLAIN username_format=%u {0}
  pass = yes
}}
"""

_OAUTH2_PASSDB = """\
passdb {{
  driver = oauth2
  mechanisms = {0}
  args = {1}
}}
"""

_OAUTH2_CONFIG = """\
introspection_mode = post
introspection_url = {0}
force_introspection = yes
username_attribute = username
active_attribute = active
active_value = true
timeout_msecs = 10000
"""


if __name__ == "__main__":
    # python -m imapmig.testing.dovecot: a server to try imapmig on.  The
    # code lives in its own module, which imports this one by its name.
    from imapmig.testing.localserver import main

    raise SystemExit(main())
