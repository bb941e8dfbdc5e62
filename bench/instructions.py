"""
Count the user-space instructions of one whole imapmig run with
C{valgrind --tool=callgrind}: repeatable to a fraction of a per cent, where
wall-clock times on a shared machine move by tens of per cent.

    .venv/bin/python -m bench.instructions TREE [CORPUS [CONNECTIONS [TLS]]]

TREE is a checkout of imapmig (its C{imapmig} package is what runs);
CORPUS a corpus directory under C{bench/work/corpus} (default
C{small-5000-seed1}; C{empty} for the start-up alone; run C{make bench}
once to build them); CONNECTIONS the job's C{connections} (default 2); TLS
how imapmig reaches Dovecot: C{none} (plain TCP, the default), C{implicit}
(the imaps port) or C{starttls}.  With C{IMAPMIG_CALLGRIND_OUT} set, the
profile is copied there (for C{callgrind_annotate}).  It starts a private
Dovecot on tmpfs, runs C{twistd -n imapmig --exit-when-done} into a fresh
account under callgrind, and prints the instruction count.  C{bench/results/journal.md} used it to count the
journal's cost, with a copy of the tree whose one journal call was replaced
by C{ticket = None}.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

from bench.contenders import endpointKeys
from bench.servers import PASSWORD, BenchServer

_TWISTD = "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()"


def callgrindDaemon(tree: str, config: str, out: str) -> int:
    """
    Run C{twistd -n imapmig --config config --exit-when-done} from C{tree}
    under callgrind, writing its profile to C{out}; return the instructions
    it counted.
    """
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
         "-c", _TWISTD, "-n", "--pidfile=", "imapmig", "--config", config,
         "--exit-when-done"],  # fmt: skip
        cwd=tree,
        env=dict(os.environ, PYTHONPATH=tree),
        check=True,
        capture_output=True,
    )
    with open(out) as f:
        match = re.search(r"^summary: (\d+)$", f.read(), re.MULTILINE)
    assert match is not None, "callgrind wrote no summary"
    return int(match.group(1))


def count(tree: str, corpus: str, work: str, connections: int = 2, tls: str = "none") -> int:
    """
    The instructions of one run of the imapmig in C{tree} on C{corpus}.
    """
    base = tempfile.mkdtemp(prefix="instructions-", dir="/dev/shm")
    server = BenchServer(
        base,
        accounts=1,
        fsync=False,
        mailRoot=os.path.join(base, "mail"),
        capabilities=None,
        compress=False,
        namespace=None,
        address="127.0.0.1",
        inNamespace=None,
    )
    server.start()
    try:
        run = tempfile.mkdtemp(dir=base)
        password = os.path.join(run, "password")
        with open(os.open(password, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(PASSWORD + "\n")
        config = os.path.join(run, "imapmig.yaml")
        endpoint, starttls = endpointKeys(tls, "127.0.0.1", server.port, server.tlsPort)
        trust = "" if tls == "none" else f"    tls_ca: {server.caPath}\n"
        with open(config, "w") as f:
            f.write(
                f"state: {run}/state.sqlite\nstatus: off\nservers:\n  bench:\n"
                f'    endpoint: "{endpoint}"\n    starttls: {starttls}\n{trust}'
                "jobs:\n  - name: bench\n"
                f"    source: {{maildir: {os.path.join(work, 'corpus', corpus, 'Maildir')}}}\n"
                f"    destination: {{server: bench, user: {server.freshAccount()},"
                f" password_file: {password}}}\n"
                f"    connections: {connections}\n"
            )
        out = os.path.join(run, "callgrind.out")
        instructions = callgrindDaemon(tree, config, out)
        if os.environ.get("IMAPMIG_CALLGRIND_OUT"):
            shutil.copyfile(out, os.environ["IMAPMIG_CALLGRIND_OUT"])
        return instructions
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    tree = os.path.abspath(sys.argv[1])
    corpus = sys.argv[2] if len(sys.argv) > 2 else "small-5000-seed1"
    connections = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    tls = sys.argv[4] if len(sys.argv) > 4 else "none"
    work = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work")
    instructions = count(tree, corpus, work, connections, tls)
    print(f"{tree} {corpus} {connections} {tls}: {instructions:,} instructions")


if __name__ == "__main__":
    main()
