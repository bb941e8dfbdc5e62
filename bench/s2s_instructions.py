"""
Count the user-space instructions of one whole server-to-server imapmig run
(an IMAP source into an IMAP destination, as C{--parts s2s} runs it) with
C{valgrind --tool=callgrind}: repeatable to a fraction of a per cent, where
wall-clock times on a shared machine move by tens of per cent.

    .venv/bin/python -m bench.s2s_instructions TREE [CORPUS] [--keep DIR] [--tls MODE]

TREE is a checkout of imapmig (its C{imapmig} package is what runs);
CORPUS a corpus directory under C{bench/work/corpus} (default
C{realistic-5000-seed1}; run C{make bench} once to build them).  It starts
two private Dovecots on tmpfs (the source holding CORPUS in one account and
an empty Maildir in another, the destination with fresh accounts), reads
the source once (Dovecot builds its indexes), then runs C{twistd -n imapmig
--exit-when-done} with the benchmark's server-to-server configuration
(L{bench.contenders.imapmigServerToServerConfig}: imapmig's defaults)
under callgrind, once from the full account and once from the empty one,
each into a fresh destination account whose message count is checked, and
prints both counts and the difference per message.  With C{--keep DIR} the
two C{callgrind.out} files are kept there (for C{callgrind_annotate}); with
C{--cprofile} the runs are made under cProfile instead, their statistics
kept as C{cprofile.full} and C{cprofile.empty} (for L{pstats}).  With
C{--tls implicit} or C{--tls starttls} imapmig reaches both servers so
(as the C{tls} part's server-to-server row does), so that what each TLS
mode costs imapmig is counted apart from the machine's load.
"""

from __future__ import annotations

import argparse
import imaplib
import os
import re
import shutil
import subprocess
import sys
import tempfile

from bench.contenders import TLS_MODES, Invocation, SourceAccount, imapmigServerToServerConfig
from bench.instructions import callgrindDaemon
from bench.servers import PASSWORD, VARIANTS, BenchServer

# The same under cProfile, its statistics written to the file named by the
# environment's S2S_PROFILE.
_PROFILED = (
    "import cProfile, os, sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; "
    "cProfile.run('run()', os.environ['S2S_PROFILE'])"
)


def _server(base: str, name: str, accounts: int) -> BenchServer:
    return BenchServer(os.path.join(base, name), accounts=accounts, fsync=False,
                       mailRoot=os.path.join(base, name + "-mail"), capabilities=None,
                       compress=False, namespace=None, address="127.0.0.1",
                       inNamespace=None)  # fmt: skip


def _messages(server: BenchServer, user: str) -> int:
    """
    How many messages C{user} holds over all its folders.
    """
    client = imaplib.IMAP4(server.host, server.port)
    try:
        client.login(user, PASSWORD)
        _, listed = client.list()
        total = 0
        for line in listed:
            assert isinstance(line, bytes)
            name = line.rsplit(b' "." ', 1)[-1].decode()
            _, status = client.status(name, "(MESSAGES)")
            found = re.search(rb"MESSAGES (\d+)", status[0] or b"")
            total += int(found.group(1)) if found else 0
        return total
    finally:
        client.logout()


def _warm(server: BenchServer, user: str) -> None:
    """
    Read every message of C{user} once, so the source's indexes are built
    before the counted runs.
    """
    client = imaplib.IMAP4(server.host, server.port)
    try:
        client.login(user, PASSWORD)
        _, listed = client.list()
        for line in listed:
            assert isinstance(line, bytes)
            name = line.rsplit(b' "." ', 1)[-1].decode()
            typ, _ = client.select(name, readonly=True)
            if typ == "OK":
                client.uid("FETCH", "1:*", "(UID FLAGS INTERNALDATE RFC822.SIZE BODY.PEEK[])")
    finally:
        client.logout()


def _run(tree: str, source: BenchServer, sourceUser: str, destination: BenchServer,
         base: str, out: str, profile: bool, tls: str = "none") -> tuple[int, str]:  # fmt: skip
    """
    One imapmig run under callgrind (or cProfile) from C{sourceUser}, both
    servers reached as C{tls} says (L{TLS_MODES}).

    @return: its instruction count (0 under cProfile) and the destination
        account written.
    """
    run = tempfile.mkdtemp(dir=base)
    user = destination.freshAccount()
    invocation = Invocation(
        host=destination.host, port=destination.port, user=user, maildir="", runDir=run,
        server=VARIANTS["default"], rawBinary="",
        source=SourceAccount(source.host, source.port, sourceUser, destination.configPath,
                             tls=tls, tlsPort=source.tlsPort, caPath=source.caPath),
        tls=tls, tlsPort=destination.tlsPort, caPath=destination.caPath,
    )  # fmt: skip
    config = imapmigServerToServerConfig(invocation)
    if profile:
        subprocess.run(
            [sys.executable, "-c", _PROFILED, "-n", "--pidfile=", "imapmig", "--config", config,
             "--exit-when-done"],  # fmt: skip
            cwd=tree,
            env=dict(os.environ, PYTHONPATH=tree, S2S_PROFILE=out),
            check=True,
            capture_output=True,
        )
        return 0, user
    return callgrindDaemon(tree, config, out), user


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree")
    parser.add_argument("corpus", nargs="?", default="realistic-5000-seed1")
    parser.add_argument("--keep", help="a directory to keep the callgrind.out files in")
    parser.add_argument("--cprofile", action="store_true",
                        help="run under cProfile instead (statistics kept as KEEP/cprofile.*)")
    parser.add_argument("--tls", choices=TLS_MODES, default="none",
                        help="how imapmig reaches both servers (default: plain TCP)")
    args = parser.parse_args()
    tree = os.path.abspath(args.tree)
    work = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work")
    corpus = os.path.join(work, "corpus", args.corpus, "Maildir")
    empty = os.path.join(work, "corpus", "empty", "Maildir")
    base = tempfile.mkdtemp(prefix="s2s-instructions-", dir="/dev/shm")
    source = _server(base, "source", 2)
    destination = _server(base, "destination", 3)
    try:
        source.start()
        destination.start()
        full, nothing = source.freshAccount(), source.freshAccount()
        source.loadMaildir(full, corpus)
        source.loadMaildir(nothing, empty)
        _warm(source, full)
        expected = _messages(source, full)
        keep = args.keep or base
        os.makedirs(keep, exist_ok=True)
        counts = {}
        for kind, user in (("full", full), ("empty", nothing)):
            out = os.path.join(keep, f"{'cprofile' if args.cprofile else 'callgrind.out'}.{kind}")
            counts[kind], written = _run(tree, source, user, destination, base, out, args.cprofile,
                                         args.tls)
            copied = _messages(destination, written)
            wanted = expected if kind == "full" else 0
            assert copied == wanted, f"{kind}: {copied} messages copied, {wanted} expected"
        net = counts["full"] - counts["empty"]
        print(f"{tree} {args.corpus} ({args.tls}): full {counts['full']:,}, empty {counts['empty']:,}, "
              f"net {net:,} instructions, {net / expected / 1000:.1f}k per message "
              f"({expected} messages)")  # fmt: skip
    finally:
        source.stop()
        destination.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
