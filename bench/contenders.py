# -*- test-case-name: tests.test_bench -*-
"""
The clients the benchmark compares, each described by how to run it as one
process: L{Contender.argv} turns an L{Invocation} (server, account, Maildir,
a private directory) into a command line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Callable

from attrs import frozen

from bench.servers import PASSWORD, ServerVariant

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPOSITORY = os.path.dirname(BENCH_DIR)
RAW_SOURCE = os.path.join(BENCH_DIR, "rawappend.c")
TIMED_SOURCE = os.path.join(BENCH_DIR, "timed.c")
# twistd, run by the interpreter running the benchmark (no shell wrapper).
_TWISTD = "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()"


@frozen
class Invocation:
    """
    Everything a client's command line needs for one run.

    @ivar host: the server's address.
    @ivar port: its plain IMAP port.
    @ivar user: a fresh account.
    @ivar maildir: the Maildir to append.
    @ivar runDir: an empty directory private to this run (configuration,
        state, a copy of the Maildir).
    @ivar server: what the server advertises.
    @ivar rawBinary: the compiled raw writer.
    @ivar source: for a server-to-server run (part C{s2s}), the account
        read from; L{None} for a run from the Maildir.
    @ivar tls: how the client reaches the destination: L{TLS_MODES}.
    @ivar tlsPort: the destination's implicit-TLS port (C{tls} implicit).
    @ivar caPath: the PEM of the CA that signed the servers' certificates
        (C{tls} other than C{none}).
    """

    host: str
    port: int
    user: str
    maildir: str
    runDir: str
    server: ServerVariant
    rawBinary: str
    source: SourceAccount | None = None
    tls: str = "none"
    tlsPort: int = 0
    caPath: str = ""

    def tlsEndpoint(self) -> tuple[str, str]:
        """
        imapmig's C{endpoint} and C{starttls} keys for the destination.
        """
        return endpointKeys(self.tls, self.host, self.port, self.tlsPort)


@frozen
class SourceAccount:
    """
    The IMAP account a server-to-server run reads (part C{s2s}).

    @ivar host: the source server's address.
    @ivar port: its plain IMAP port.
    @ivar user: the account (its password is L{PASSWORD}).
    @ivar destinationConfig: the destination Dovecot's configuration file,
        for C{doveadm}.
    @ivar tls: how the source is read: L{TLS_MODES}.
    @ivar tlsPort: the source's implicit-TLS port.
    @ivar caPath: the PEM of the CA that signed the source's certificate.
    """

    host: str
    port: int
    user: str
    destinationConfig: str
    tls: str = "none"
    tlsPort: int = 0
    caPath: str = ""


# How a client reaches a server (C{--tls}): plain TCP, implicit TLS (the
# imaps port) or STARTTLS on the plain port.
TLS_MODES = ("none", "implicit", "starttls")


def endpointKeys(tls: str, host: str, port: int, tlsPort: int) -> tuple[str, str]:
    """
    imapmig's C{endpoint} and C{starttls} for a server reached by C{tls}.
    """
    if tls == "implicit":
        return f"tls:{host}:{tlsPort}", "off"
    return f"tcp:{host}:{port}", "required" if tls == "starttls" else "off"


def _serverKeys(tls: str, host: str, port: int, tlsPort: int, caPath: str) -> str:
    """
    The keys of one C{servers:} entry, as a YAML flow mapping's body.
    """
    endpoint, starttls = endpointKeys(tls, host, port, tlsPort)
    keys = f'endpoint: "{endpoint}", starttls: "{starttls}"'
    if tls == "none":
        return keys + ", allow_plaintext: true"
    return keys + f", tls_ca: {caPath}"


@frozen
class Contender:
    """
    One client of the comparison.

    @ivar name: its key for C{--clients}.
    @ivar label: its name in the table and the chart.
    @ivar slow: it sends one command at a time and waits for the reply, so
        at a round-trip time above zero it runs a capped number of messages.
    @ivar raw: a variant of the raw writer on one connection, whose best
        rate in a setting is that setting's ceiling.
    @ivar build: makes its command line.
    @ivar applies: whether it can run against a server variant.
    @ivar note: a footnote for the table, or C{""}.
    @ivar python: a Python program run from this checkout (its bytecode
        cached between runs: L{bench.run.Bench.warmUp}).
    """

    name: str
    label: str
    slow: bool
    raw: bool
    build: Callable[[Invocation], list[str]]
    applies: Callable[[ServerVariant], bool] = lambda server: True
    note: str = ""
    python: bool = False

    def argv(self, invocation: Invocation) -> list[str]:
        """
        The command line of one run.

        @param invocation: the run's parameters.
        """
        return self.build(invocation)


def _python(module: str, invocation: Invocation, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        module,
        "--host",
        invocation.host,
        "--port",
        str(invocation.port),
        "--user",
        invocation.user,
        "--password",
        PASSWORD,
        "--maildir",
        invocation.maildir,
        *extra,
    ]


def _raw(
    *,
    select: bool,
    batch: int,
    syncWait: bool = False,
    connections: int = 1,
    mailboxPerConnection: bool = False,
) -> Callable[[Invocation], list[str]]:
    def build(invocation: Invocation) -> list[str]:
        argv = [
            invocation.rawBinary,
            "--host",
            invocation.host,
            "--port",
            str(invocation.port),
            "--user",
            invocation.user,
            "--password",
            PASSWORD,
            "--maildir",
            invocation.maildir,
            "--literal",
            invocation.server.literal,
            "--batch",
            str(batch),
        ]
        if syncWait:
            argv.append("--sync-wait")
        if connections > 1:
            argv += ["--connections", str(connections)]
        if mailboxPerConnection:
            argv.append("--mailbox-per-connection")
        if invocation.tls != "none":
            port = invocation.tlsPort if invocation.tls == "implicit" else invocation.port
            argv[argv.index("--port") + 1] = str(port)
            argv += ["--tls", invocation.tls, "--ca", invocation.caPath]
        return argv + (["--select"] if select else [])

    return build


def _rawMulti(batch: int, oneNote: str, twoNote: str) -> tuple[Contender, Contender]:
    """
    The raw writer sending MULTIAPPEND batches of C{batch} after SELECT:
    on one connection (C{raw-multiN}, the ceiling when C{batch} is 50,
    issue 3's), and on two, one mailbox each (C{raw-multiN-2}: issue 17's and
    31's reference for imapmig's default 2 connections).
    """
    return (
        Contender(f"raw-multi{batch}", f"raw MULTIAPPEND {batch}", slow=False, raw=batch == 50,
                  build=_raw(select=True, batch=batch), applies=_multiappend,
                  note=f"into INBOX only, after SELECT{oneNote}"),
        Contender(f"raw-multi{batch}-2", f"raw MULTIAPPEND {batch}, 2 connections", slow=False,
                  raw=False,
                  build=_raw(select=True, batch=batch, connections=2, mailboxPerConnection=True),
                  applies=_multiappend,
                  note="one mailbox per connection (INBOX, INBOX-1), after SELECT; imapmig's"
                  f" default {twoNote}"),
    )  # fmt: skip


def _mbsync(invocation: Invocation) -> list[str]:
    # mbsync renames the Maildir's files (it writes UIDs into their names)
    # and keeps its state: give it a copy made of hard links.
    copy = os.path.join(invocation.runDir, "Maildir")
    subprocess.run(["cp", "-al", invocation.maildir, copy], check=True)
    state = os.path.join(invocation.runDir, "mbsync-state")
    os.makedirs(state)
    config = os.path.join(invocation.runDir, "mbsyncrc")
    with open(config, "w") as f:
        f.write(
            f"""\
MaildirStore near
Inbox {copy}
SubFolders Maildir++

IMAPAccount far
Host {invocation.host}
Port {invocation.port}
User {invocation.user}
Pass {PASSWORD}
SSLType None
AuthMechs LOGIN

IMAPStore far
Account far

Channel bench
Far :far:
Near :near:
Patterns *
Create Far
Sync Push
CopyArrivalDate yes
SyncState {state}/
"""
        )
    return [shutil.which("mbsync") or "mbsync", "-q", "-c", config, "bench"]


def imapmigConfig(
    invocation: Invocation, *, connections: int | None = None, compress: str | None = None
) -> str:
    """
    Write an imapmig configuration for one run and return its path: the
    state database in the run's directory, no status listener, plain TCP
    (no STARTTLS) to the benchmark's server.

    @param invocation: the run's parameters.
    @param connections: C{defaults: connections}, or L{None} for imapmig's
        default.
    @param compress: the server's C{compress} key (C{on}, C{off}), or
        L{None} to leave it out.
    """
    passwordFile = os.path.join(invocation.runDir, "password")
    with open(os.open(passwordFile, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(PASSWORD + "\n")
    endpoint, starttls = invocation.tlsEndpoint()
    lines = [
        f"state: {os.path.join(invocation.runDir, 'state.sqlite')}",
        "status: off",
        "servers:",
        "  bench:",
        f'    endpoint: "{endpoint}"',
        f"    starttls: {starttls}",
    ]
    if invocation.tls == "none":
        # The netns benchmarks reach the server at 10.77.0.1, not loopback.
        lines.append("    allow_plaintext: true")
    else:
        lines.append(f"    tls_ca: {invocation.caPath}")
    if compress is not None:
        lines.append(f'    compress: "{compress}"')
    if connections is not None:
        lines += ["defaults:", f"  connections: {connections}"]
    lines += [
        "jobs:",
        "  - name: bench",
        f"    source: {{maildir: {invocation.maildir}}}",
        f"    destination: {{server: bench, user: {invocation.user}, "
        f"password_file: {passwordFile}}}",
    ]
    path = os.path.join(invocation.runDir, "imapmig.yaml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def imapmigArgv(config: str, *extra: str) -> list[str]:
    """
    The command line of C{twistd -n imapmig} on C{config}, run by this
    interpreter from this checkout.

    @param config: the configuration file.
    @param extra: more imapmig options (C{--exit-when-done} is given).
    """
    return [sys.executable, "-c", _TWISTD, "-n", "--pidfile=", "imapmig", "--config", config,
            "--exit-when-done", *extra]  # fmt: skip


def imapmigServerToServerConfig(invocation: Invocation) -> str:
    """
    Write an imapmig configuration that copies C{invocation.source} into
    the fresh account, each reached as its C{tls} says, and return its
    path.
    """
    source = invocation.source
    assert source is not None, "a server-to-server run needs a source account"
    passwordFile = os.path.join(invocation.runDir, "password")
    with open(os.open(passwordFile, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(PASSWORD + "\n")
    sourceKeys = _serverKeys(source.tls, source.host, source.port, source.tlsPort, source.caPath)
    destinationKeys = _serverKeys(invocation.tls, invocation.host, invocation.port,
                                  invocation.tlsPort, invocation.caPath)  # fmt: skip
    path = os.path.join(invocation.runDir, "imapmig.yaml")
    with open(path, "w") as f:
        f.write(
            f"state: {os.path.join(invocation.runDir, 'state.sqlite')}\n"
            "status: off\n"
            "servers:\n"
            f"  source: {{{sourceKeys}}}\n"
            f"  bench: {{{destinationKeys}}}\n"
            "jobs:\n"
            "  - name: bench\n"
            f"    source: {{server: source, user: {source.user}, password_file: {passwordFile}}}\n"
            f"    destination: {{server: bench, user: {invocation.user},"
            f" password_file: {passwordFile}}}\n"
        )
    return path


def _imapmigServerToServer(invocation: Invocation) -> list[str]:
    return imapmigArgv(imapmigServerToServerConfig(invocation))


def _dsync(invocation: Invocation) -> list[str]:
    # Dovecot's migration recipe: the destination's doveadm pulls from the
    # source through imapc (-R: backup from the remote into the user).
    source = invocation.source
    assert source is not None, "a server-to-server run needs a source account"
    settings = {
        "imapc_host": source.host,
        "imapc_port": str(source.tlsPort if source.tls == "implicit" else source.port),
        "imapc_user": source.user,
        "imapc_password": PASSWORD,
        "imapc_ssl": {"none": "no", "implicit": "imaps", "starttls": "starttls"}[source.tls],
        "imapc_features": "rfc822.size",
        "mail_prefetch_count": "20",
    }
    if source.tls != "none":
        settings["imapc_ssl_verify"] = "yes"
        settings["ssl_client_ca_file"] = source.caPath
    overrides = [arg for key, value in settings.items() for arg in ("-o", f"{key}={value}")]
    return [shutil.which("doveadm") or "/usr/bin/doveadm", "-c", source.destinationConfig,
            *overrides, "backup", "-R", "-u", invocation.user, "imapc:"]  # fmt: skip


def _rawServerToServer(invocation: Invocation) -> list[str]:
    source = invocation.source
    assert source is not None, "a server-to-server run needs a source account"
    return [sys.executable, "-m", "bench.clients.s2s_raw", "--source-host", source.host,
            "--source-port", str(source.port), "--source-user", source.user,
            "--host", invocation.host, "--port", str(invocation.port),
            "--user", invocation.user, "--password", PASSWORD]  # fmt: skip


def _imapmig(
    *, connections: int | None = None, compress: str | None = None
) -> Callable[[Invocation], list[str]]:
    def build(invocation: Invocation) -> list[str]:
        return imapmigArgv(
            imapmigConfig(invocation, connections=connections, compress=compress)
        )

    return build


def _multiappend(server: ServerVariant) -> bool:
    return server.multiappend


CONTENDERS: dict[str, Contender] = {
    c.name: c
    for c in (
        Contender(
            "imaplib",
            "imaplib loop",
            slow=True,
            raw=False,
            build=lambda i: _python("bench.clients.imaplib_loop", i),
            python=True,
        ),
        Contender(
            "imaplib-nodelay",
            "imaplib loop + TCP_NODELAY",
            slow=True,
            raw=False,
            build=lambda i: _python("bench.clients.imaplib_loop", i, "--nodelay"),
            python=True,
        ),
        Contender(
            "twisted",
            "Twisted IMAP4Client",
            slow=True,
            raw=False,
            build=lambda i: _python("bench.clients.twisted_stock", i),
            python=True,
        ),
        Contender("mbsync", "mbsync", slow=False, raw=False, build=_mbsync),
        Contender("imapmig-1", "imapmig, 1 connection", slow=False, raw=False,
                  build=_imapmig(connections=1), python=True),  # fmt: skip
        Contender("imapmig", "imapmig, defaults", slow=False, raw=False, build=_imapmig(),
                  python=True),  # fmt: skip
        Contender("imapmig-4", "imapmig, 4 connections", slow=False, raw=False,
                  build=_imapmig(connections=4), python=True),  # fmt: skip
        Contender("imapmig-compress-off", "imapmig, compress off", slow=False, raw=False,
                  build=_imapmig(compress="off"), python=True),  # fmt: skip
        Contender("imapmig-compress-on", "imapmig, compress on", slow=False, raw=False,
                  build=_imapmig(compress="on"), python=True),  # fmt: skip
        Contender(
            "raw",
            "raw 1/APPEND",
            slow=False,
            raw=True,
            build=_raw(select=False, batch=1),
            note="into INBOX only",
        ),
        Contender(
            "raw-select",
            "raw 1/APPEND after SELECT",
            slow=False,
            raw=True,
            build=_raw(select=True, batch=1),
            note="into INBOX only",
        ),
        *_rawMulti(50, "", "number of connections"),
        *_rawMulti(200, "; imapmig's default batch (batch_messages)", "batch and number of connections"),
        Contender(
            "raw-wait",
            "raw 1/APPEND, waits before a sync literal",
            slow=False,
            raw=True,
            build=_raw(select=False, batch=1, syncWait=True),
            note="into INBOX only",
        ),
        Contender(
            "raw-wait-2",
            "raw 1/APPEND, waits before a sync literal, 2 connections",
            slow=False,
            raw=True,
            build=_raw(select=False, batch=1, syncWait=True, connections=2),
            note="into INBOX only",
        ),
        Contender("imapmig-s2s", "imapmig, IMAP to IMAP", slow=False, raw=False,
                  build=_imapmigServerToServer, python=True),  # fmt: skip
        Contender("dsync", "doveadm backup -R imapc:", slow=False, raw=False, build=_dsync,
                  note="Dovecot's own migration; writes the store directly"),  # fmt: skip
        Contender("raw-s2s", "raw fetch, then MULTIAPPEND 50", slow=False, raw=True,
                  build=_rawServerToServer, python=True,
                  note="one connection each side; a folder fetched whole, then appended"),  # fmt: skip
    )
}

# What each part of the matrix runs by default.
MAIN_CLIENTS = ("imaplib", "imaplib-nodelay", "twisted", "mbsync", "imapmig-1", "imapmig",
                "raw", "raw-select", "raw-multi50", "raw-multi50-2", "raw-multi200",
                "raw-multi200-2")  # fmt: skip
SERVER_CLIENTS = ("imapmig-1", "imapmig", "imapmig-4", "raw", "raw-select", "raw-multi50")
COMPRESS_CLIENTS = ("imapmig-compress-off", "imapmig-compress-on", "raw-multi50")
# imapmig's default is 2 connections: each is compared with the raw writer
# on as many.
NAGLE_CLIENTS = ("imaplib-nodelay", "imapmig-1", "imapmig", "raw", "raw-wait", "raw-wait-2")

# Under LITERAL- the raw writer has no mode of its own to compare with.
NAGLE_MINUS_CLIENTS = ("imaplib-nodelay", "imapmig-1", "imapmig")

# Server to server (part s2s): an IMAP account into another.
S2S_CLIENTS = ("imapmig-s2s", "dsync", "raw-s2s")


def buildTools(workDir: str) -> tuple[str, str]:
    """
    Compile the raw writer C{bench/rawappend.c} and the process timer
    C{bench/timed.c} with C{gcc -O2} (again when a source is newer than its
    binary).

    @param workDir: where the binaries go.
    @return: the paths of the raw writer and of the timer.
    """
    os.makedirs(workDir, exist_ok=True)
    binaries = []
    for source in (RAW_SOURCE, TIMED_SOURCE):
        binary = os.path.join(workDir, os.path.splitext(os.path.basename(source))[0])
        if not os.path.exists(binary) or os.path.getmtime(binary) < os.path.getmtime(source):
            libraries = ["-lssl", "-lcrypto"] if source == RAW_SOURCE else []
            subprocess.run(["gcc", "-O2", "-Wall", "-o", binary, source, *libraries], check=True)
        binaries.append(binary)
    return binaries[0], binaries[1]
