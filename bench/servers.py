# -*- test-case-name: tests.test_bench -*-
"""
The benchmark's private Dovecot: L{imapmig.testing.dovecot.DovecotInstance}
with a pool of accounts (a fresh, never-used one for every run) and, when a
delay line is in use, running inside the server's network namespace and
listening on the server's address there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Any, Callable, Sequence

from attrs import frozen

from imapmig.testing.dovecot import DovecotInstance, DovecotUser

PASSWORD = "bench-password"
# The LD_PRELOAD shim that makes Dovecot leave Nagle's algorithm on.
NAGLE_SHIM_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "naglekeep.c")

# The post-login capabilities Dovecot 2.3 advertises are read from the
# server itself (see L{capabilitiesWithout}); these are what the variants
# remove or add.


def reusingSettings(processes: int) -> list[str]:
    """
    Dovecot's "high-performance mode" (its C{LoginProcess} and
    C{PerformanceTuning} pages): C{imap-login} and C{imap} processes serve
    connection after connection (C{service_count = 0}) instead of one each,
    and C{processes} of each are started ahead (C{process_min_avail}).

    By default (C{service_count = 1}, "high-security mode") Dovecot forks
    an C{imap-login} and an C{imap} process for every connection: ~19 ms of
    its ~32 ms of CPU per small account here (C{bench/results/
    scale-analysis.md} section 2), more than the client's own cost per
    account.  A row that measures the client's scaling on a 2-core machine
    runs the server this way so the server is not the limit.

    @param processes: how many of each to keep started.
    """
    return [
        "service imap-login {", "  service_count = 0", f"  process_min_avail = {processes}", "}",
        "service imap {", "  service_count = 0", f"  process_min_avail = {processes}", "}",
    ]  # fmt: skip


class _ReusingDovecot(DovecotInstance):
    """
    A L{DovecotInstance} in Dovecot's high-performance mode
    (L{reusingSettings}), or with more settings at the end.
    """

    def __init__(self, baseDir: str, *, processes: int, more: list[str], **kwargs: Any) -> None:
        super().__init__(baseDir, **kwargs)
        self._processes = processes
        self._more = more

    def _optionalSettings(self) -> list[str]:
        reusing = reusingSettings(self._processes) if self._processes > 0 else []
        return super()._optionalSettings() + reusing + self._more


@frozen
class ServerVariant:
    """
    What the server advertises.

    @ivar name: C{"default"}, C{"no-multiappend"}, C{"literal-minus"} or
        C{"sync-only"}.
    @ivar description: for the table.
    @ivar multiappend: MULTIAPPEND is offered.
    @ivar literal: C{"plus"} (LITERAL+), C{"minus"} (LITERAL- only) or
        C{"sync"} (neither: every literal synchronizing).
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
        ServerVariant(
            "sync-only",
            "Dovecot, synchronizing literals only (no LITERAL+/-, no MULTIAPPEND)",
            False,
            "sync",
            remove=("MULTIAPPEND", "LITERAL+", "LITERAL-"),
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


def buildNagleShim(workDir: str) -> str:
    """
    Compile C{bench/naglekeep.c}, the shim that makes a server leave
    Nagle's algorithm on, with C{gcc -O2 -shared} (again when the source is
    newer than the library).

    @param workDir: where the library goes.
    @return: the path of C{naglekeep.so}.
    """
    os.makedirs(workDir, exist_ok=True)
    library = os.path.join(workDir, "naglekeep.so")
    if not os.path.exists(library) or os.path.getmtime(library) < os.path.getmtime(
        NAGLE_SHIM_SOURCE
    ):
        subprocess.run(
            ["gcc", "-O2", "-Wall", "-shared", "-fPIC", "-o", library, NAGLE_SHIM_SOURCE, "-ldl"],
            check=True,
        )
    return library


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
        preload: str | None = None,
        reuseProcesses: int = 0,
        imapMemory: str | None = None,
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
        @param preload: a shared object Dovecot's processes load first
            (C{LD_PRELOAD}), e.g. L{buildNagleShim}'s, or L{None}.
        @param reuseProcesses: when positive, Dovecot in its
            high-performance mode (L{reusingSettings}) with this many
            C{imap-login} and C{imap} processes kept started; 0 (Dovecot's
            default): a process of each per connection.
        @param imapMemory: the C{imap} processes' C{vsz_limit} (Dovecot's
            default, 256 MB, is too small for a mailbox of 500,000
            messages read over IMAP: the process dies "Out of memory"),
            or L{None} for the default.
        """
        self._names = [f"b{i:05d}" for i in range(accounts)]
        self._next = 0
        users = [DovecotUser(name, PASSWORD) for name in self._names]
        self.host = address
        self._mailRoot = mailRoot
        prefix: list[str] = []
        if namespace is not None:
            assert inNamespace is not None
            prefix = inNamespace(namespace, [])
        options: dict[str, Any] = dict(
            users=users, fsync=fsync, mailRoot=mailRoot, capabilities=capabilities,
            compress=compress, address=address, commandPrefix=prefix, preload=preload,
        )  # fmt: skip
        self.reuseProcesses = reuseProcesses
        more = [] if imapMemory is None else ["service imap {", f"  vsz_limit = {imapMemory}", "}"]
        self._instance: DovecotInstance = (
            DovecotInstance(baseDir, **options) if reuseProcesses <= 0 and not more
            else _ReusingDovecot(baseDir, processes=reuseProcesses, more=more, **options)
        )  # fmt: skip

    @property
    def port(self) -> int:
        """
        The plain IMAP port.
        """
        return self._instance.port

    @property
    def tlsPort(self) -> int:
        """
        The implicit-TLS (imaps) port.
        """
        return self._instance.tlsPort

    @property
    def caPath(self) -> str:
        """
        The PEM file of the private CA that signed the server's certificate
        (for C{127.0.0.1} and C{localhost}).
        """
        return self._instance.caCertificatePath

    @property
    def pid(self) -> int | None:
        """
        The master process's id while running (its tree holds every
        Dovecot process of the instance), else L{None}.
        """
        return self._instance.pid

    @property
    def configPath(self) -> str:
        """
        The instance's C{dovecot.conf} (for C{doveadm -c}).
        """
        path: str = self._instance._configPath
        return path

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
