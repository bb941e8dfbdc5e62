# -*- test-case-name: tests.test_bench -*-
"""
The benchmark's private Dovecot: L{imapmig.testing.dovecot.DovecotInstance}
with a pool of accounts (a fresh, never-used one for every run) and, when a
delay line is in use, running inside the server's network namespace and
listening on the server's address there.

L{DovecotInstance} listens on 127.0.0.1 only and runs C{dovecot} itself.
Until it takes a listening address and a command prefix, L{NamespacedDovecot}
adapts it from the outside: it rewrites the addresses in the configuration
the instance wrote, launches C{dovecot} through C{ip netns exec}, and probes
the greeting from inside the namespace.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from typing import Callable, Sequence

from attrs import frozen

from imapmig.testing.dovecot import DovecotInstance, DovecotStartFailed, DovecotUser

PASSWORD = "bench-password"

# The post-login capabilities Dovecot 2.3 advertises are read from the
# server itself (see L{capabilitiesWithout}); these are what the variants
# remove or add.
_START_TIMEOUT = 15.0


@frozen
class ServerVariant:
    """
    What the server advertises.

    @ivar name: C{"default"}, C{"no-multiappend"} or C{"literal-minus"}.
    @ivar description: for the table.
    @ivar multiappend: MULTIAPPEND is offered.
    @ivar literal: C{"plus"} (LITERAL+) or C{"minus"} (LITERAL- only).
    @ivar remove: capabilities hidden from the default list.
    @ivar add: capabilities added to it.
    """

    name: str
    description: str
    multiappend: bool
    literal: str
    remove: tuple[str, ...] = ()
    add: tuple[str, ...] = ()


VARIANTS = {
    v.name: v
    for v in (
        ServerVariant("default", "Dovecot 2.3 (LITERAL+, MULTIAPPEND)", True, "plus"),
        ServerVariant(
            "no-multiappend",
            "Dovecot, MULTIAPPEND hidden",
            False,
            "plus",
            remove=("MULTIAPPEND",),
        ),
        ServerVariant(
            "literal-minus",
            "Dovecot, LITERAL- only, no MULTIAPPEND (like Gmail)",
            False,
            "minus",
            remove=("MULTIAPPEND", "LITERAL+"),
            add=("LITERAL-",),
        ),
    )
}


def capabilitiesWithout(default: Sequence[str], variant: ServerVariant) -> str | None:
    """
    The C{imap_capability} value for C{variant}: the server's default
    post-login list with C{variant.remove} taken out and C{variant.add} put
    in; L{None} for the default variant (no override).

    @param default: the default capabilities, as the server lists them.
    @param variant: the variant.
    """
    if not variant.remove and not variant.add:
        return None
    kept = [c for c in default if c.upper() not in {r.upper() for r in variant.remove}]
    return " ".join(kept + [a for a in variant.add if a not in kept])


def defaultCapabilities(workDir: str) -> list[str]:
    """
    Start a throw-away Dovecot on loopback and read what it advertises after
    login.

    @param workDir: the benchmark's work directory.
    @return: the capability names, in the server's order.
    """
    import imaplib

    base = tempfile.mkdtemp(prefix="capabilities-", dir=workDir)
    instance = DovecotInstance(base, users=(DovecotUser("probe", PASSWORD),))
    instance.start()
    try:
        imap = imaplib.IMAP4("127.0.0.1", instance.port)
        imap.login("probe", PASSWORD)
        typ, data = imap.capability()
        imap.logout()
        raw = data[0]
        assert isinstance(raw, bytes)
        return raw.decode("ascii").split()
    finally:
        instance.stop()
        shutil.rmtree(base, ignore_errors=True)


class BenchServer:
    """
    A private Dovecot for one setting: its mail store, its capabilities, the
    namespace and address it listens on, and a pool of accounts handed out
    once each.

    @ivar host: the address clients connect to.
    @ivar port: the plain IMAP port.
    """

    def __init__(
        self,
        baseDir: str,
        *,
        accounts: int,
        fsync: bool,
        mailRoot: str | None,
        capabilities: str | None,
        compress: bool,
        namespace: str | None,
        address: str,
        inNamespace: Callable[[str, list[str]], list[str]] | None,
    ) -> None:
        """
        @param baseDir: the instance's directory.
        @param accounts: how many accounts to create.
        @param fsync: C{mail_fsync = optimized} (disk) rather than C{never}.
        @param mailRoot: where the homes go (a tmpfs directory) or L{None}
            for C{baseDir/home}.
        @param capabilities: the C{imap_capability} override, if any.
        @param compress: load C{imap_zlib} (COMPRESS=DEFLATE).
        @param namespace: the server's network namespace, L{None} on
            loopback.
        @param address: the address to listen on.
        @param inNamespace: L{bench.netns.inNamespace} when C{namespace} is
            given.
        """
        self._names = [f"b{i:05d}" for i in range(accounts)]
        self._next = 0
        users = [DovecotUser(name, PASSWORD) for name in self._names]
        self.host = address
        self._mailRoot = mailRoot
        if namespace is None:
            self._instance: DovecotInstance = DovecotInstance(
                baseDir,
                users=users,
                fsync=fsync,
                mailRoot=mailRoot,
                capabilities=capabilities,
                compress=compress,
            )
        else:
            assert inNamespace is not None
            self._instance = NamespacedDovecot(
                baseDir,
                namespace=namespace,
                address=address,
                inNamespace=inNamespace,
                users=users,
                fsync=fsync,
                mailRoot=mailRoot,
                capabilities=capabilities,
                compress=compress,
            )

    @property
    def port(self) -> int:
        """
        The plain IMAP port.
        """
        return self._instance.port

    def start(self) -> None:
        """
        Start Dovecot.
        """
        self._instance.start()

    def stop(self) -> None:
        """
        Stop Dovecot and remove the tmpfs mail root, if any.
        """
        self._instance.stop()
        if self._mailRoot is not None:
            shutil.rmtree(self._mailRoot, ignore_errors=True)

    def freshAccount(self) -> str:
        """
        An account never used before: its mailboxes are empty.

        @raise RuntimeError: the pool is exhausted.
        """
        if self._next == len(self._names):
            raise RuntimeError("the benchmark's account pool is exhausted")
        name = self._names[self._next]
        self._next += 1
        return name

    def loadMaildir(self, account: str, maildir: str) -> None:
        """
        Give C{account} a copy of C{maildir} as its mail, for an IMAP
        source.

        @param account: an account from L{freshAccount}.
        @param maildir: a Maildir with Maildir++ folders.
        """
        target = self._instance.maildirPath(account)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(maildir, target)
        self._instance.chownHome(account)

    def discard(self, account: str) -> None:
        """
        Delete what an account holds, once its run is verified, so the mail
        store (a tmpfs, maybe) does not fill up.

        @param account: the account.
        """
        shutil.rmtree(self._instance.maildirPath(account), ignore_errors=True)

    def logTail(self) -> str:
        """
        The end of Dovecot's log.
        """
        return self._instance.logTail()


class NamespacedDovecot(DovecotInstance):
    """
    A L{DovecotInstance} running in a network namespace and listening on an
    address there (adapted from the outside; see the module docstring).
    """

    def __init__(
        self,
        baseDir: str,
        *,
        namespace: str,
        address: str,
        inNamespace: Callable[[str, list[str]], list[str]],
        users: Sequence[DovecotUser],
        fsync: bool,
        mailRoot: str | None,
        capabilities: str | None,
        compress: bool,
    ) -> None:
        DovecotInstance.__init__(
            self,
            baseDir,
            users=users,
            fsync=fsync,
            mailRoot=mailRoot,
            capabilities=capabilities,
            compress=compress,
        )
        self._namespace = namespace
        self._address = address
        self._inNamespace = inNamespace

    def _writeConfig(self) -> None:
        DovecotInstance._writeConfig(self)
        path = os.path.join(self.baseDir, "dovecot.conf")
        with open(path) as f:
            text = f.read()
        text = text.replace("listen = 127.0.0.1", f"listen = {self._address}")
        text = text.replace("address = 127.0.0.1", f"address = {self._address}")
        with open(path, "w") as f:
            f.write(text)

    def _launch(self, binary: str) -> None:
        wrapper = os.path.join(self.baseDir, "dovecot-in-namespace")
        with open(wrapper, "w") as f:
            command = " ".join(_shellQuote(a) for a in self._inNamespace(self._namespace, [binary]))
            f.write(f'#!/bin/sh\nexec {command} "$@"\n')
        os.chmod(wrapper, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
        DovecotInstance._launch(self, wrapper)

    def _waitUntilReady(self) -> None:
        probe = (
            "import socket,sys\n"
            "s=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=2)\n"
            "sys.exit(0 if s.recv(100).startswith(b'* OK') else 1)\n"
        )
        argv = self._inNamespace(
            self._namespace, [sys.executable, "-c", probe, self._address, str(self.port)]
        )
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            process = self._process
            if process is not None and process.poll() is not None:
                raise DovecotStartFailed(
                    f"dovecot exited with status {process.returncode}\n" + self.logTail()
                )
            if subprocess.run(argv, capture_output=True).returncode == 0:
                return
            if time.monotonic() > deadline:
                raise DovecotStartFailed(
                    f"dovecot did not greet on {self._address}:{self.port} in "
                    f"namespace {self._namespace}\n" + self.logTail()
                )
            time.sleep(0.05)


def _shellQuote(argument: str) -> str:
    import shlex

    return shlex.quote(argument)
