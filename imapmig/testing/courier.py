# -*- test-case-name: tests.test_testing_courier -*-
"""
A private Courier-IMAP on loopback for the integration tests.

L{CourierInstance} runs Debian's Courier-IMAP 5.0 as C{.ci/install-servers}
unpacked it (C{imaplogin} and C{imapd} from C{/opt/imapmig-servers/tree},
see L{imapmig.testing.privateserver.SERVERS_ROOT}) under the installed
C{couriertcpd}, C{couriertls} and C{authdaemond}.  Courier's authentication
library has its paths compiled in: C{authdaemond} reads
C{/etc/courier/authdaemonrc} and C{/etc/courier/userdb.dat}, and
C{imaplogin} asks it over C{/run/courier/authdaemon/socket}.  So each
instance runs in a mount namespace of its own (C{unshare -m}, which needs
root) in which its own directories are bind-mounted over C{/etc/courier}
and C{/run/courier/authdaemon}: an C{authdaemond} of its own with a
C{userdb} of its own (C{authuserdb}, written with C{makeuserdb -f}), and
two C{couriertcpd}, the plain port and the implicit-TLS port.  Nothing of
the machine's C{/etc/courier} is read or changed, and several instances
(tests running with C{-j2}) run at once.  Mail is Maildir under
C{baseDir/home/USER/Maildir}, owned by the C{mail} user (uid 8), which
the sessions run as.  Courier's standard error goes to
C{baseDir/courier.log}.

Observed with Debian's Courier-IMAP 5.0.13 (bookworm), its packaged
C{imapd} settings:

  - Capabilities, the same before and after login (LOGIN's tagged OK has
    no capability code): C{IMAP4rev1 UIDPLUS CHILDREN NAMESPACE
    THREAD=ORDEREDSUBJECT THREAD=REFERENCES SORT QUOTA IDLE ACL
    ACL2=UNION ENABLE UTF8=ACCEPT}, plus C{STARTTLS} on the plain port.
    No C{LITERAL+}/C{LITERAL-} (synchronizing literals only), no
    C{MULTIAPPEND}, no C{SPECIAL-USE}, no C{BINARY}, no C{COMPRESS}, no
    C{AUTH=} mechanism (LOGIN works; AUTH=PLAIN after STARTTLS).
  - NAMESPACE C{(("INBOX." ".")) NIL (("#shared." ".")("shared." ".")))}:
    separator C{.}, every folder under C{INBOX.}; C{CREATE Top} is
    refused with C{NO Invalid mailbox name.}
  - A message without a final CRLF is stored with one added.
  - Courier sets no C{TCP_NODELAY}: C{couriertcpd} sets only
    C{SO_KEEPALIVE} and C{SO_LINGER} on an accepted socket, and neither
    C{imaplogin} nor C{imapd} sets an option (seen with C{strace -f -e
    trace=setsockopt} on C{couriertcpd} during a session), so Nagle stays
    on: the server for issue 16's delayed-ACK stall.
  - TLS: C{STARTTLS} on L{port} and implicit TLS on L{tlsPort}, by
    C{couriertls} (GnuTLS) with the private CA's server certificate.
    C{couriertls} runs as the session's user for STARTTLS: a certificate
    that user cannot read makes the server answer C{OK Begin SSL/TLS
    negotiation now.} and then close the TLS session at once.
  - A failed login is answered after 5 s (C{NO Login failed.}); no
    setting shortens it.
  - Each instance starts in about 0.4 s and stops at once (TERM to every
    process of its session; C{couriertcpd} puts itself in a process group
    of its own).
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
from typing import Mapping, Sequence

from twisted.trial import unittest

from imapmig.errors import ServerNotFound, ServerStartFailed
from imapmig.testing.accounts import IMAPUser
from imapmig.testing.privateserver import (
    chownTree,
    needExecutable,
    needRoot,
    needUser,
    PrivateServer,
    requireServer,
    tree,
)

__all__ = [
    "CourierInstance",
    "IMAPUser",
    "findCourier",
    "requireCourier",
    "startCourier",
]

_MAIL_UID = 8  # the Debian "mail" user and group
_AUTHDAEMOND = "/usr/lib/courier/courier-authlib/authdaemond"
_COURIERTCPD = "/usr/sbin/couriertcpd"
_COURIERTLS = "/usr/bin/couriertls"
_MAKEUSERDB = "/usr/sbin/makeuserdb"
_MAILDIRMAKE = "/usr/bin/maildirmake.courier"
_AUTHDAEMON_VAR = "/run/courier/authdaemon"
_HOST_DHPARAMS = "/etc/courier/dhparams.pem"


def findCourier() -> str:
    """
    Check that a private Courier can run here: the unpacked C{imapd} and
    C{imaplogin}, the installed Courier programs, C{unshare} and root.

    @return: the unpacked tree.
    @raise ServerNotFound: something is missing.
    """
    root = tree()
    needed = [
        os.path.join(root, "usr", "bin", "imapd"),
        os.path.join(root, "usr", "lib", "courier", "courier", "imaplogin"),
        _AUTHDAEMOND,
        _COURIERTCPD,
        _COURIERTLS,
        _MAKEUSERDB,
        _MAILDIRMAKE,
    ]
    for path in needed:
        needExecutable(path, f"no {path}")
    needUser("courier", "no user courier (package courier-base)")
    if shutil.which("unshare") is None:
        raise ServerNotFound("no unshare (util-linux)")
    needRoot("a private Courier runs in a mount namespace, which needs root")
    return root


def requireCourier(testCase: unittest.SynchronousTestCase | None = None) -> str:
    """
    The unpacked tree for a test that needs a real Courier; skip loudly
    when it is missing, or fail on CI (C{CI=true}).
    """
    requireServer(testCase, "Courier", findCourier)
    return findCourier()


class CourierInstance(PrivateServer):
    """
    A private Courier-IMAP on 127.0.0.1, in a mount namespace of its own.
    """

    name = "Courier"
    separator = "."
    personalPrefix = "INBOX."

    def __init__(
        self,
        baseDir: str,
        *,
        users: Sequence[IMAPUser] = (IMAPUser("alice", "alice-pw"), IMAPUser("bob", "bob-pw")),
        address: str = "127.0.0.1",
    ) -> None:
        """
        Describe an instance; nothing happens on disk until L{start}.

        @param baseDir: the instance's directory, created if missing.
        @param users: the first accounts (more with L{addUser}).
        @param address: the IPv4 address to listen on.
        """
        super().__init__(baseDir, users, address)
        self._etc = os.path.join(self.baseDir, "etc")
        self._authVar = os.path.join(self.baseDir, "authdaemon")
        self._logPath = os.path.join(self.baseDir, "courier.log")

    def mailboxName(self, folder: Sequence[str]) -> str:
        """
        The full name of a folder given as its hierarchy levels:
        C{("Archive", "2019")} is C{"INBOX.Archive.2019"}; C{("INBOX",)}
        is C{"INBOX"}.
        """
        if tuple(folder) == ("INBOX",):
            return "INBOX"
        return self.personalPrefix + self.separator.join(folder)

    def maildirPath(self, user: str) -> str:
        """
        The Maildir of C{user} on disk (created at L{start} or L{addUser}).
        """
        return os.path.join(self.baseDir, "home", user, "Maildir")

    def addUser(self, user: IMAPUser) -> None:
        """
        Add an account, at once when running (C{authuserdb} reopens its
        database when it changes).
        """
        if any(each.name == user.name for each in self.users):
            raise ValueError(f"user {user.name!r} exists already")
        self.checkUser(user)
        self.users.append(user)
        if os.path.isdir(self._etc):
            self._writeUsers()

    def breakStartTLS(self) -> None:
        """
        Misconfigure STARTTLS as an admin might: the key and certificate
        become readable by root only, so C{couriertls}, which runs as the
        C{courier} user, cannot start.  Courier then answers C{OK Begin
        SSL/TLS negotiation now.} and ends the handshake at once with a TLS
        C{close_notify} (what issue 16 saw).  Call it after L{start}.
        """
        certificate = os.path.join(self._etc, "server-and-key.pem")
        os.chown(certificate, 0, 0)
        os.chmod(certificate, 0o600)

    # -- PrivateServer -------------------------------------------------------

    def _prepare(self) -> None:
        root = findCourier()
        os.makedirs(self._etc, exist_ok=True)
        os.makedirs(self._authVar, exist_ok=True)
        os.chmod(self._authVar, 0o750)
        for name in ("imapd", "imapd-ssl"):
            shutil.copyfile(
                os.path.join(root, "etc", "courier", name), os.path.join(self._etc, name)
            )
        with open(os.path.join(self._etc, "authdaemonrc"), "w") as f:
            f.write(
                'authmodulelist="authuserdb"\n'
                "daemons=2\n"
                f"authdaemonvar={_AUTHDAEMON_VAR}\n"
                "DEBUG_LOGIN=0\n"
                'DEFAULTOPTIONS=""\n'
                'LOGGEROPTS=""\n'
            )
        # For STARTTLS imaplogin runs couriertls as the courier user: the
        # key must be readable by it.
        certificate = os.path.join(self._etc, "server-and-key.pem")
        with open(certificate, "wb") as out:
            for name in ("server.key", "server.pem"):
                with open(os.path.join(self.tlsDir, name), "rb") as part:
                    out.write(part.read())
        courier = pwd.getpwnam("courier")
        os.chown(certificate, courier.pw_uid, courier.pw_gid)
        os.chmod(certificate, 0o600)
        dhparams = os.path.join(self._etc, "dhparams.pem")
        if os.path.exists(_HOST_DHPARAMS):
            shutil.copyfile(_HOST_DHPARAMS, dhparams)
            os.chmod(dhparams, 0o644)
        self._writeUsers()
        # The mount point must exist outside the namespace: Debian's
        # tmpfiles.d entry creates it at boot, this covers a fresh install.
        os.makedirs(_AUTHDAEMON_VAR, exist_ok=True)

    def _configure(self) -> tuple[list[str], Mapping[str, str] | None]:
        root = findCourier()
        launcher = os.path.join(self.baseDir, "launch.sh")
        imaplogin = os.path.join(root, "usr", "lib", "courier", "courier", "imaplogin")
        imapd = os.path.join(root, "usr", "bin", "imapd")
        tcpd = (
            f"{_COURIERTCPD} -address={self.address} -maxprocs=100 -maxperip=100"
            f" -nodnslookup -noidentlookup -stderr={shlex.quote(self._logPath)}"
        )
        session = f"{shlex.quote(imaplogin)} {shlex.quote(imapd)} Maildir"
        dhparams = os.path.join(self._etc, "dhparams.pem")
        script = f"""#!/bin/sh
# Written by imapmig.testing.courier: runs in a private mount namespace.
set -e
mount --bind {shlex.quote(self._etc)} /etc/courier
mount --bind {shlex.quote(self._authVar)} {_AUTHDAEMON_VAR}
set -a
. /etc/courier/imapd
. /etc/courier/imapd-ssl
PATH=/usr/sbin:/usr/bin:/sbin:/bin
IMAP_STARTTLS=YES
IMAP_TLS_REQUIRED=0
COURIERTLS={_COURIERTLS}
TLS_CERTFILE={shlex.quote(os.path.join(self._etc, "server-and-key.pem"))}
TLS_DHPARAMS={shlex.quote(dhparams) if os.path.exists(dhparams) else ""}
TLS_CACHEFILE=
MAILDIRPATH=Maildir
set +a
{_AUTHDAEMOND} &
{tcpd} {self.port} {session} &
IMAP_TLS=1 {tcpd} {self.tlsPort} {_COURIERTLS} -server -tcpd {session} &
trap 'wait; exit 0' TERM INT
wait
"""
        with open(launcher, "w") as f:
            f.write(script)
        os.chmod(launcher, 0o755)
        return ["unshare", "--mount", "--propagation", "private", launcher], None

    def _logPaths(self) -> list[str]:
        return [self._logPath]

    # -- internals ---------------------------------------------------------

    def _writeUsers(self) -> None:
        lines = []
        for user in self.users:
            home = os.path.join(self.baseDir, "home", user.name)
            maildir = os.path.join(home, "Maildir")
            if not os.path.isdir(maildir):
                os.makedirs(home, exist_ok=True)
                _run([_MAILDIRMAKE, maildir])
                chownTree(home, _MAIL_UID, _MAIL_UID)
            hashed = _run(["openssl", "passwd", "-6", "-stdin"], user.password).strip()
            lines.append(
                f"{user.name}\tuid={_MAIL_UID}|gid={_MAIL_UID}|home={home}"
                f"|mail={maildir}|systempw={hashed}\n"
            )
        userdb = os.path.join(self._etc, "userdb")
        with open(userdb, "w") as f:
            f.writelines(lines)
        os.chmod(userdb, 0o600)
        _run([_MAKEUSERDB, "-f", userdb])


def _run(command: list[str], stdin: str = "") -> str:
    completed = subprocess.run(command, input=stdin.encode("utf-8"), capture_output=True)
    if completed.returncode != 0:
        raise ServerStartFailed(
            f"{' '.join(command)} failed: " + completed.stderr.decode("utf-8", "replace")
        )
    return completed.stdout.decode("utf-8", "replace")


def startCourier(
    testCase: unittest.SynchronousTestCase,
    *,
    users: Sequence[IMAPUser] = (IMAPUser("alice", "alice-pw"),),
) -> CourierInstance:
    """
    A running private Courier of one test's own, stopped when the test
    ends; the test skips (fails on CI) when Courier is not installed.

    @param users: the first accounts; add more with
        L{CourierInstance.addUser}.
    """
    requireCourier(testCase)
    instance = CourierInstance(os.path.abspath(testCase.mktemp()), users=users)
    testCase.addCleanup(instance.stop)
    instance.start()
    return instance
