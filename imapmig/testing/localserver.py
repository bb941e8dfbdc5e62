# -*- test-case-name: tests.test_testing_dovecot -*-
"""
A local IMAP server to try imapmig on, outside the demo: what
C{python -m imapmig.testing.dovecot} runs.

    python -m imapmig.testing.dovecot [--dir DIR] [--users N] [--messages N] [--port P]

It starts a private Dovecot on 127.0.0.1 (as the tests do: L{DovecotInstance}),
with N source accounts (C{source1}, ...) each seeded with generated
messages in several folders and N empty destination accounts (C{dest1},
...), writes an imapmig configuration with one job per pair (passwords in
private files beside it), prints it and the commands that try it, then
serves until C{SIGTERM}, C{SIGINT} (Ctrl-C) or C{SIGHUP}; then Dovecot
stops and a directory it created itself is removed (one given with
C{--dir} is kept).  If it is killed, the kernel stops Dovecot
(L{imapmig.testing.children}).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
from typing import Sequence

from imapmig.errors import DovecotNotFound, DovecotStartFailed, Stopped
from imapmig.testing.children import StopSignals
from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import (
    DovecotInstance,
    DovecotUser,
)
from imapmig.testing.ports import freePort, statusPort
from imapmig.units import plural

def main(argv: Sequence[str] | None = None) -> int:
    """
    Run the server until a stop signal; return the exit status: 0 when
    stopped by a signal (the way it ends), 1 when Dovecot could not start
    or exited by itself.
    """
    args = _arguments(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    signals = StopSignals()
    signals.install()
    base, removeAtEnd = _directory(args.dir)
    try:
        return _serve(base, args.users, args.messages, args.port, removeAtEnd, signals)
    except Stopped as e:
        _say(f"== Stopped by {signal.Signals(e.signum).name}")
        return 0
    except (DovecotNotFound, DovecotStartFailed) as e:
        sys.stderr.write(f"Dovecot did not start: {e}\n")
        return 1
    finally:
        if removeAtEnd:
            shutil.rmtree(base, ignore_errors=True)
        signals.uninstall()


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    """
    The command line's options, checked (an error exits with status 2).
    """
    parser = argparse.ArgumentParser(
        prog="python -m imapmig.testing.dovecot",
        description=(
            "A private Dovecot on 127.0.0.1 with source accounts full of generated"
            " messages and empty destination accounts, and a ready imapmig"
            " configuration to migrate between them. Runs until Ctrl-C or SIGTERM."
        ),
    )
    parser.add_argument(
        "--dir",
        help="where to keep Dovecot's files, the configuration and the state database"
        " (kept at the end; default: a new temporary directory, removed at the end)",
    )
    parser.add_argument(
        "--users", type=int, default=1, help="how many source/destination pairs (default 1)"
    )
    parser.add_argument(
        "--messages", type=int, default=100, help="messages per source account (default 100)"
    )
    parser.add_argument(
        "--port", type=int, default=0, help="the IMAP (STARTTLS) port (default: a free one)"
    )
    args = parser.parse_args(argv)
    if args.users < 1 or args.messages < 0 or not 0 <= args.port < 65536:
        parser.error("--users must be at least 1, --messages at least 0, --port 0 to 65535")
    return args


def _directory(given: str | None) -> tuple[str, bool]:
    """
    The directory to work in, made if missing, and whether to remove it at
    the end: a new temporary one when none is given.
    """
    if given is None:
        return tempfile.mkdtemp(prefix="imapmig-try-"), True
    base = os.path.abspath(given)
    os.makedirs(base, exist_ok=True)
    return base, False


def _serve(
    base: str, users: int, messages: int, port: int, removeAtEnd: bool, signals: StopSignals
) -> int:
    """
    Start and seed Dovecot in C{base}, write and print the configuration,
    and wait for Dovecot to exit (L{Stopped} comes first, normally).
    """
    pairs = [
        (
            DovecotUser(f"source{i}", secrets.token_urlsafe(12)),
            DovecotUser(f"dest{i}", secrets.token_urlsafe(12)),
        )
        for i in range(1, users + 1)
    ]
    dovecot = DovecotInstance(
        os.path.join(base, "dovecot"),
        users=[user for pair in pairs for user in pair],
        port=port,
        dieWithParent=True,
    )
    try:
        with signals.deferred():
            dovecot.start()
        seeded = _seed(dovecot, [source for source, _ in pairs], messages)
        _announce(dovecot, pairs, seeded, messages, writeConfiguration(base, dovecot, pairs))
        _say(
            "== Serving until Ctrl-C or SIGTERM; then Dovecot stops and "
            + (f"{base} is removed." if removeAtEnd else f"{base} stays.")
        )
        status = dovecot.wait()
        _say(f"== Dovecot exited with status {status}; its log: {dovecot.baseDir}/dovecot.log")
        return 1
    finally:
        signals.cleaningUp()
        dovecot.stop()


def _announce(
    dovecot: DovecotInstance,
    pairs: Sequence[tuple[DovecotUser, DovecotUser]],
    seeded: list[str],
    messages: int,
    configPath: str,
) -> None:
    """
    Say where Dovecot listens, which accounts it has, the configuration
    and the commands that try it.
    """
    _say(
        f"== Dovecot (pid {dovecot.pid}) on 127.0.0.1: IMAP with STARTTLS on port"
        f" {dovecot.port}, implicit TLS on {dovecot.tlsPort}; its CA"
        f" certificate: {dovecot.caCertificatePath}"
    )
    seededText = f" ({plural(messages, 'message')})"
    for source, destination in pairs:
        told = seededText if source.name in seeded else " (as before)"
        _say(f"   {source.name}{told} -> {destination.name}")
    _say(f"== Configuration: {configPath}")
    with open(configPath) as f:
        _say(f.read().rstrip("\n"))
    _say("== Try it:")
    for command in _commands(configPath):
        _say("   " + command)


def _seed(dovecot: DovecotInstance, sources: Sequence[DovecotUser], messages: int) -> list[str]:
    """
    Write C{messages} generated messages into each source account that has
    no Maildir yet: a directory given again keeps its accounts (and the
    state database that knows what was copied).

    @return: the names of the accounts seeded now.
    """
    seeded = []
    for number, source in enumerate(sources, start=1):
        if not os.path.isdir(dovecot.maildirPath(source.name)):
            writeMaildir(dovecot.maildirPath(source.name), messages, seed=number)
            dovecot.chownHome(source.name)
            seeded.append(source.name)
    return seeded


def writeConfiguration(
    base: str, dovecot: DovecotInstance, pairs: Sequence[tuple[DovecotUser, DovecotUser]]
) -> str:
    """
    Write an imapmig configuration migrating each pair's source account
    into its destination on C{dovecot}, the passwords in files of
    C{base/secrets} (0600), the state database in C{base}.

    @return: the configuration's path, C{base/imapmig.yaml} (0600).
    """
    secretsDir = os.path.join(base, "secrets")
    os.makedirs(secretsDir, mode=0o700, exist_ok=True)
    jobs = []
    for source, destination in pairs:
        files = []
        for user in (source, destination):
            path = os.path.join(secretsDir, f"{user.name}.pw")
            _writePrivate(path, user.password + "\n")
            files.append(path)
        jobs.append(
            f"  - name: {source.name}\n"
            f"    source: {{server: local, user: {source.name},"
            f" password_file: {yamlString(files[0])}}}\n"
            f"    destination: {{server: local, user: {destination.name},"
            f" password_file: {yamlString(files[1])}}}\n"
        )
    configPath = os.path.join(base, "imapmig.yaml")
    _writePrivate(
        configPath,
        configurationHead(
            "python -m imapmig.testing.dovecot",
            "one job per source account",
            base,
            dovecot,
            statusPort() or freePort(),
        )
        + "".join(jobs),
    )
    return configPath


def configurationHead(
    writtenBy: str, what: str, base: str, dovecot: DovecotInstance, port: int
) -> str:
    """
    The first lines of a configuration for C{dovecot}: its state database
    in C{base}, the status page on loopback C{port} (0: one the kernel
    picks), the server C{local}
    (STARTTLS, Dovecot's private CA), up to C{jobs:}.

    @param writtenBy: what wrote it, for its first comment.
    @param what: what its jobs do, for the same comment.
    """
    return f"""\
# Written by {writtenBy}: a private Dovecot on
# 127.0.0.1:{dovecot.port}, {what}.
state: {yamlString(os.path.join(base, "state.sqlite"))}
status:
  listen: "tcp:{port}:interface=127.0.0.1"
servers:
  local:
    endpoint: "tcp:127.0.0.1:{dovecot.port}"
    starttls: required
    tls_ca: {yamlString(dovecot.caCertificatePath)}
    tls_hostname: localhost
jobs:
"""


def yamlString(text: str) -> str:
    """
    C{text} as a YAML scalar that reads back as exactly C{text}: a JSON
    string (JSON is YAML), so that a path with C{": "}, C{" #"}, a comma
    or a brace (a directory an admin named so) neither breaks the
    configuration nor is cut short.
    """
    return json.dumps(text)


def _commands(configPath: str) -> list[str]:
    """
    The commands that try imapmig on C{configPath}, with this Python's
    scripts when they are installed beside it.
    """

    def script(name: str) -> str:
        path = os.path.join(os.path.dirname(sys.executable), name)
        return path if os.access(path, os.X_OK) else name

    daemon, command = script("imapmig-daemon"), script("imapmig")
    return [
        f"{daemon} --config {configPath} --check-config",
        f"{command} plan --config {configPath}",
        f"{daemon} --config {configPath} --exit-when-done",
        f"{command} report --config {configPath}",
        f"{command} verify --config {configPath}",
    ]


def _writePrivate(path: str, text: str) -> None:
    """
    Write C{text} to a new file C{path} readable by its owner only.
    """
    if os.path.exists(path):
        os.remove(path)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(text)


def _say(line: str) -> None:
    """
    Print a line; once the console is gone (the terminal closed), print
    nothing more, without failing.
    """
    try:
        print(line)
    except OSError:
        sys.stdout = open(os.devnull, "w")
