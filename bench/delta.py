# -*- test-case-name: tests.test_bench -*-
"""
The delta-pass check of issue 4: how long the final pass before cutover
takes on an unchanged large account, server to server.

    .venv/bin/python -m bench.run --delta [--delta-messages N]

A private Dovecot (mail store on tmpfs) holds a source account of N small
messages (default 100,000) in five folders, written as a Maildir into its
home.  imapmig migrates it into a second account of the same Dovecot (the
first pass), then runs again with nothing changed (the second pass), then
once more after 10 new messages arrived in the source (the third pass).
Each pass runs as a whole process (C{twistd -n imapmig --exit-when-done});
its wall-clock time and the messages it appended are reported in
C{bench/results/delta.md}.
"""

from __future__ import annotations

import datetime
import imaplib
import os
import shutil
import subprocess
import tempfile
import time

from bench.contenders import REPOSITORY, imapmigArgv
from bench.servers import PASSWORD, BenchServer
from imapmig.testing.corpus import writeMaildir

_NEW_MESSAGES = 10


def singleJobConfig(runDir: str, port: int, name: str, source: str, destination: str) -> str:
    """
    An imapmig configuration of one job C{name} over plain TCP to the
    bench server on C{port}: C{source} as a YAML flow mapping, into the
    account C{destination}; the state database in C{runDir}, no status
    listener, the bench password in a file of mode 0600.
    """
    passwordFile = os.path.join(runDir, "password")
    with open(os.open(passwordFile, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(PASSWORD + "\n")
    path = os.path.join(runDir, "imapmig.yaml")
    with open(path, "w") as f:
        f.write(
            f"state: {os.path.join(runDir, 'state.sqlite')}\n"
            "status: off\n"
            "servers:\n"
            f'  bench: {{endpoint: "tcp:127.0.0.1:{port}", starttls: "off"}}\n'
            "jobs:\n"
            f"  - name: {name}\n"
            f"    source: {source.format(password=passwordFile)}\n"
            f"    destination: {{server: bench, user: {destination},"
            f" password_file: {passwordFile}}}\n"
        )
    return path


def _count(port: int, user: str) -> int:
    """
    How many messages every selectable mailbox of C{user} holds.
    """
    client = imaplib.IMAP4("127.0.0.1", port)
    try:
        client.login(user, PASSWORD)
        total = 0
        _, rows = client.list()
        for row in rows:
            assert isinstance(row, bytes)
            if b"\\Noselect" in row:
                continue
            if row.endswith(b'"'):
                name = row[: -1].rsplit(b' "', 1)[-1]
            else:
                name = row.rsplit(b" ", 1)[-1]
            _, data = client.status('"' + name.decode("ascii") + '"', "(MESSAGES)")
            assert isinstance(data[0], bytes)
            total += int(data[0].rsplit(b" ", 1)[-1].rstrip(b")"))
        client.logout()
        return total
    except Exception:
        client.shutdown()
        raise


def _pass(config: str) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    started = time.monotonic()
    completed = subprocess.run(imapmigArgv(config), capture_output=True, cwd=REPOSITORY)
    return time.monotonic() - started, completed


def deltaCheck(workDir: str, resultsDir: str, messages: int, versions: dict[str, str]) -> int:
    """
    Run the three passes and write C{delta.md}.

    @return: 0 when every pass completed with the expected counts.
    """
    corpusDir = os.path.join(workDir, "corpus", f"delta-{messages}")
    maildir = os.path.join(corpusDir, "Maildir")
    if not os.path.isdir(maildir):
        shutil.rmtree(corpusDir, ignore_errors=True)
        print(f"== Delta check: writing a {messages}-message Maildir", flush=True)
        writeMaildir(maildir, messages, seed=3, profile="small")
    base = tempfile.mkdtemp(prefix="dovecot-delta-", dir=workDir)
    mailRoot = tempfile.mkdtemp(prefix="imapmig-delta-", dir="/dev/shm")
    server = BenchServer(base, accounts=2, fsync=False, mailRoot=mailRoot, capabilities=None,
                         compress=False, namespace=None, address="127.0.0.1",
                         inNamespace=None)  # fmt: skip
    runDir = tempfile.mkdtemp(prefix="delta-run-", dir=workDir)
    rows: list[str] = []
    ok = True
    server.start()
    try:
        source, destination = server.freshAccount(), server.freshAccount()
        server.loadMaildir(source, maildir)
        config = singleJobConfig(runDir, server.port, "delta", "{{server: bench, user: %s,"
                                 " password_file: {password}}}" % source, destination)
        expected = messages
        for label, added in (("first pass", 0), ("second pass, nothing changed", 0),
                             ("third pass, 10 new messages", _NEW_MESSAGES)):  # fmt: skip
            if added:
                client = imaplib.IMAP4("127.0.0.1", server.port)
                client.login(source, PASSWORD)
                for n in range(added):
                    client.append(
                        "INBOX", None, None,
                        b"Subject: new %d\r\nMessage-ID: <new.%d@delta>\r\n\r\nnew\r\n" % (n, n),
                    )  # fmt: skip
                client.logout()
                expected += added
            print(f"== Delta check: {label}", flush=True)
            before = _count(server.port, destination)
            seconds, completed = _pass(config)
            after = _count(server.port, destination)
            passed = completed.returncode == 0 and after == expected
            ok = ok and passed
            rows.append(
                f"| {label} | {seconds:.2f} | {after - before:,} | {after:,} |"
                f" {'OK' if passed else 'FAILED (exit ' + str(completed.returncode) + ')'} |"
            )
            print(rows[-1], flush=True)
            if not passed:
                print(completed.stderr.decode("utf-8", "replace")[-3000:])
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(runDir, ignore_errors=True)
    text = "\n".join(
        [
            "# imapmig delta-pass check",
            "",
            f"Written by `python -m bench.run --delta` on {datetime.datetime.now():%Y-%m-%d %H:%M}.",
            "",
            f"Server to server on one private Dovecot (tmpfs, loopback): a source account of"
            f" {messages:,} small messages in five folders into a fresh account. Each pass is"
            " a whole `twistd -n imapmig --exit-when-done` process (start-up included).",
            "",
            "| pass | seconds | appended | destination holds | |",
            "|---|---|---|---|---|",
            *rows,
            "",
            "| tool | version |",
            "|---|---|",
            *[f"| {k} | {v} |" for k, v in versions.items()],
            "",
        ]
    )
    with open(os.path.join(resultsDir, "delta.md"), "w") as f:
        f.write(text)
    print(text)
    return 0 if ok else 1
