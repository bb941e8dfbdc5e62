# -*- test-case-name: tests.test_testing_cyrus -*-
"""
A private Cyrus IMAP on loopback for the integration tests.

L{CyrusInstance} runs Debian's Cyrus 3.6 as C{.ci/install-servers}
unpacked it (C{/opt/imapmig-servers/tree}, see
L{imapmig.testing.privateserver.SERVERS_ROOT}) with C{master -C imapd.conf
-M cyrus.conf}: a standalone configuration, configuration directory,
partition, run directory and SASL database (C{sasldb}, written with
C{saslpasswd2 -f}) all under its own C{baseDir}, nothing of C{/etc} or
C{/var/lib/cyrus}.  Its processes run as the C{cyrus} user (root starts the
master, which switches), so the instance directory belongs to C{cyrus};
starting one needs root.  Several instances run at once (each test may
start its own: about 0.3 s).  Cyrus logs only to syslog, which may not
exist on a test machine: a failed start shows the master's output only.

Observed with Debian's 3.6.1 (bookworm):

  - C{altNamespace=True} (upstream's default: C{altnamespace: yes},
    C{unixhierarchysep: yes}): NAMESPACE C{(("" "/")) (("Other Users/"
    "/")) (("Shared Folders/" "/"))}, folders at the top level beside
    C{INBOX}, separator C{/}.  C{altNamespace=False} (Debian's packaged
    C{imapd.conf}: both C{no}): NAMESPACE C{(("INBOX." ".")) (("user."
    ".")) (("" "."))}, separator C{.}, every folder under C{INBOX.}; a
    folder outside it (C{CREATE Sent}) is refused with C{NO Permission
    denied}.
  - The greeting's capability code is short (C{IMAP4rev1 LITERAL+ ID
    ENABLE AUTH=PLAIN AUTH=LOGIN SASL-IR} and C{STARTTLS} on the plain
    port); CAPABILITY before login already gives the full list, and the
    tagged OK of LOGIN repeats it: C{LITERAL+} (no C{LITERAL-}),
    C{MULTIAPPEND}, C{UIDPLUS}, C{NAMESPACE}, C{SPECIAL-USE},
    C{CREATE-SPECIAL-USE}, C{BINARY}, C{CATENATE}, C{CONDSTORE},
    C{QRESYNC}, C{MOVE}, C{COMPRESS=DEFLATE}, C{IDLE},
    C{APPENDLIMIT=4294967295} and more.
  - C{INBOX} is created at the first login (C{autocreate_quota: 0});
    nothing else is pre-created.
  - TLS: STARTTLS on the plain port and implicit TLS on L{tlsPort}, both
    with the private CA's server certificate.
  - Cyrus sets no C{TCP_NODELAY} either: the master sets only
    C{SO_REUSEADDR} and C{IP_TOS} on its listening sockets and C{imapd}
    sets nothing (C{strace -f -e trace=setsockopt} on the master from its
    start through a login), so Nagle stays on; with C{LITERAL+} a client
    need not wait for a C{+}, which is what stalls behind Nagle.
  - A failed login is answered at once (C{failedloginpause: 0}; Cyrus's
    default waits 3 s): C{NO Login failed: authentication failure}.
  - Starting takes about 0.4 s, stopping (TERM to every process of the
    instance) about 0.05 s.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from typing import Mapping, Sequence

from twisted.trial import unittest

from imapmig.errors import ServerStartFailed
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
    "CyrusInstance",
    "IMAPUser",
    "findCyrus",
    "requireCyrus",
    "startCyrus",
]

_SASLPASSWD = "/usr/sbin/saslpasswd2"


def findCyrus() -> str:
    """
    Locate Cyrus's C{master} in the unpacked tree, checking what a private
    instance needs besides: root, the C{cyrus} user and C{saslpasswd2}.

    @return: the directory of Cyrus's programs.
    @raise ServerNotFound: something is missing.
    """
    binDir = os.path.join(tree(), "usr", "lib", "cyrus", "bin")
    needExecutable(os.path.join(binDir, "master"), f"no Cyrus master in {binDir}")
    needExecutable(_SASLPASSWD, f"no {_SASLPASSWD} (package sasl2-bin)")
    needUser("cyrus", "no user cyrus")
    needRoot("a private Cyrus is started by root")
    return binDir


def requireCyrus(testCase: unittest.SynchronousTestCase | None = None) -> str:
    """
    The directory of Cyrus's programs for a test that needs a real Cyrus;
    skip loudly when it is missing, or fail on CI (C{CI=true}).
    """
    requireServer(testCase, "Cyrus", findCyrus)
    return findCyrus()


class CyrusInstance(PrivateServer):
    """
    A private Cyrus IMAP on 127.0.0.1.

    @ivar altNamespace: whether folders live at the top level with C{/}
        (C{True}) or under C{INBOX.} with C{.} (C{False}).
    """

    name = "Cyrus"

    def __init__(
        self,
        baseDir: str,
        *,
        users: Sequence[IMAPUser] = (IMAPUser("alice", "alice-pw"), IMAPUser("bob", "bob-pw")),
        altNamespace: bool = True,
        address: str = "127.0.0.1",
        munge8bit: bool = True,
    ) -> None:
        """
        Describe an instance; nothing happens on disk until L{start}.

        @param baseDir: the instance's directory, created if missing.
        @param users: the first accounts (more with L{addUser}).
        @param altNamespace: C{altnamespace} and C{unixhierarchysep} both
            C{yes} (upstream's default) when true, both C{no} (Debian's
            packaged configuration) when false.
        @param address: the IPv4 address to listen on.
        @param munge8bit: Cyrus's C{munge8bit} (its default C{yes} rewrites
            8-bit octets in headers as C{X}).
        """
        super().__init__(baseDir, users, address)
        self.altNamespace = altNamespace
        self._munge8bit = munge8bit
        self._configPath = os.path.join(self.baseDir, "imapd.conf")
        self._masterConfigPath = os.path.join(self.baseDir, "cyrus.conf")
        self._saslPath = os.path.join(self.baseDir, "sasldb2")

    @property
    def separator(self) -> str:
        """
        The hierarchy separator: C{/} or C{.}.
        """
        return "/" if self.altNamespace else "."

    @property
    def personalPrefix(self) -> str:
        """
        The personal namespace's prefix: C{""} or C{"INBOX."}.
        """
        return "" if self.altNamespace else "INBOX."

    def mailboxName(self, folder: Sequence[str]) -> str:
        """
        The full name of a folder given as its hierarchy levels, e.g.
        C{("Archive", "2019")}: C{"Archive/2019"} or
        C{"INBOX.Archive.2019"}; C{("INBOX",)} is C{"INBOX"}.
        """
        if tuple(folder) == ("INBOX",):
            return "INBOX"
        return self.personalPrefix + self.separator.join(folder)

    def addUser(self, user: IMAPUser) -> None:
        """
        Add an account, at once when running; its INBOX appears at its first
        login.
        """
        if any(each.name == user.name for each in self.users):
            raise ValueError(f"user {user.name!r} exists already")
        self.checkUser(user)
        self.users.append(user)
        if os.path.exists(self._saslPath):
            self._setPassword(user)

    # -- PrivateServer -------------------------------------------------------

    def _check(self) -> None:
        findCyrus()

    def _prepare(self) -> None:
        for name in ("conf", "partition", "run/proc", "run/lock", "run/socket"):
            os.makedirs(os.path.join(self.baseDir, name), exist_ok=True)
        for user in self.users:
            self._setPassword(user)
        cyrus = pwd.getpwnam("cyrus")
        chownTree(self.baseDir, cyrus.pw_uid, cyrus.pw_gid)

    def _configure(self) -> tuple[list[str], Mapping[str, str] | None]:
        binDir = findCyrus()
        flag = "yes" if self.altNamespace else "no"
        run = os.path.join(self.baseDir, "run")
        settings = {
            "configdirectory": os.path.join(self.baseDir, "conf"),
            "defaultpartition": "default",
            "partition-default": os.path.join(self.baseDir, "partition"),
            "proc_path": os.path.join(run, "proc"),
            "mboxname_lockpath": os.path.join(run, "lock"),
            "idlesocket": os.path.join(run, "socket", "idle"),
            "notifysocket": os.path.join(run, "socket", "notify"),
            "lmtpsocket": os.path.join(run, "socket", "lmtp"),
            "altnamespace": flag,
            "unixhierarchysep": flag,
            "munge8bit": "yes" if self._munge8bit else "no",
            "allowplaintext": "yes",
            # A failed login is answered at once (default: after 3 s).
            "failedloginpause": "0",
            "sasl_pwcheck_method": "auxprop",
            "sasl_auxprop_plugin": "sasldb",
            "sasl_sasldb_path": self._saslPath,
            "sasl_mech_list": "PLAIN LOGIN",
            "autocreate_quota": "0",
            "hashimapspool": "true",
            "servername": "localhost",
            "tls_server_cert": os.path.join(self.tlsDir, "server.pem"),
            "tls_server_key": os.path.join(self.tlsDir, "server.key"),
            "syslog_prefix": f"imapmig-cyrus-{os.getpid()}",
        }
        with open(self._configPath, "w") as f:
            f.write("# Written by imapmig.testing.cyrus: a private test instance.\n")
            for key, value in settings.items():
                f.write(f"{key}: {value}\n")
        imapd = f"{binDir}/imapd -C {self._configPath}"
        with open(self._masterConfigPath, "w") as f:
            f.write(
                "START {\n"
                f'  recover cmd="{binDir}/ctl_cyrusdb -C {self._configPath} -r"\n'
                "}\n"
                "SERVICES {\n"
                f'  imap cmd="{imapd}" listen="{self.address}:{self.port}" prefork=0\n'
                f'  imaps cmd="{imapd} -s" listen="{self.address}:{self.tlsPort}" prefork=0\n'
                "}\n"
                "EVENTS {\n"
                "}\n"
            )
        for path in (self._configPath, self._masterConfigPath):
            os.chmod(path, 0o644)
        environment = dict(os.environ)
        environment["LD_LIBRARY_PATH"] = os.path.join(tree(), "usr", "lib", "x86_64-linux-gnu")
        command = [
            os.path.join(binDir, "master"),
            "-D",
            "-C",
            self._configPath,
            "-M",
            self._masterConfigPath,
            "-p",
            os.path.join(run, "master.pid"),
        ]
        return command, environment

    # -- internals ---------------------------------------------------------

    def _setPassword(self, user: IMAPUser) -> None:
        # The realm must be the one imapd asks for: its servername.
        completed = subprocess.run(
            [_SASLPASSWD, "-p", "-c", "-f", self._saslPath, "-u", "localhost", user.name],
            input=user.password.encode("utf-8"),
            capture_output=True,
        )
        if completed.returncode != 0:
            raise ServerStartFailed(
                f"saslpasswd2 failed for {user.name!r}: "
                + completed.stderr.decode("utf-8", "replace")
            )
        cyrus = pwd.getpwnam("cyrus")
        os.chown(self._saslPath, cyrus.pw_uid, cyrus.pw_gid)
        os.chmod(self._saslPath, 0o600)


def startCyrus(
    testCase: unittest.SynchronousTestCase,
    *,
    altNamespace: bool = True,
    users: Sequence[IMAPUser] = (IMAPUser("alice", "alice-pw"),),
    munge8bit: bool = True,
) -> CyrusInstance:
    """
    A running private Cyrus of one test's own, stopped when the test ends;
    the test skips (fails on CI) when Cyrus is not installed.

    @param altNamespace: see L{CyrusInstance.__init__}.
    @param users: the first accounts; add more with L{CyrusInstance.addUser}.
    """
    requireCyrus(testCase)
    instance = CyrusInstance(
        os.path.abspath(testCase.mktemp()),
        users=users,
        altNamespace=altNamespace,
        munge8bit=munge8bit,
    )
    testCase.addCleanup(instance.stop)
    instance.start()
    return instance

