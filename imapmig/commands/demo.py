# -*- test-case-name: tests.test_demo_config, tests.test_demo_end, tests.test_demo_signals, tests.test_demo_verify -*-
"""
The demo behind C{make demo}: a generated sample Maildir migrated into a
private local Dovecot by the real daemon (C{twistd -n imapmig}), with its
status page, then checked message by message.

    python -m imapmig.demo [--messages N] [--directory DIR] [--keep | --exit]

It ends with a short summary and the dashboard's URL, last.  Run from a
terminal (its standard input a tty) it then keeps the daemon serving the
dashboard until Ctrl-C, as C{--keep} does; otherwise (tests, CI, a pipe)
it stops the daemon and exits, as C{--exit} does.

Whatever ends it (its end, an error, C{SIGTERM}, C{SIGINT}, C{SIGHUP}) the
daemon and Dovecot it started are stopped (the daemon first); if it is
killed (C{SIGKILL}), the kernel stops them (C{PR_SET_PDEATHSIG}, see
L{imapmig.testing.children}).  Its directory stays, for a look at the
log and the state database; the next run empties it.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from typing import Callable

from imapmig.testing.children import StopSignals, Stopped, dieWithParent
from imapmig.testing.corpus import Corpus, writeMaildir
from imapmig.testing.dovecot import (
    DovecotInstance,
    DovecotNotFound,
    DovecotStartFailed,
    DovecotUser,
)
from imapmig.testing.localserver import configurationHead, yamlString
from imapmig.testing.ports import listeningPorts, statusPort
from imapmig.units import octets, plural

STOP_TIMEOUT = 30.0
"""
Seconds the daemon has to exit after C{SIGTERM} before it is killed.
"""

LISTEN_TIMEOUT = 60.0
"""
Seconds the demo waits for its daemon to listen before it gives up (and
stops it).
"""


def _status(url: str) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            result: dict[str, object] = json.load(response)
            return result
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    """
    Run the demo; return the process exit status: 0 when every message
    reached Dovecot, 1 when not, 128 + the signal's number when a stop
    signal (C{TERM}, C{INT}, C{HUP}) ended it before its result was known.
    Whatever ends it, the daemon and Dovecot it started are stopped.
    """
    parser = argparse.ArgumentParser(
        prog="python -m imapmig.demo",
        description=(
            "The demo behind `make demo`: a generated sample Maildir migrated into a"
            " private local Dovecot by the real daemon (twistd -n imapmig), with its"
            " dashboard, then checked message by message. SIGTERM, SIGINT (Ctrl-C) or"
            " SIGHUP stop the daemon and Dovecot it started; its directory stays."
        ),
    )
    parser.add_argument("--messages", type=int, default=5000, help="how many (default 5000)")
    parser.add_argument(
        "--directory", default="demo", help="its working directory, emptied first (default demo)"
    )
    ending = parser.add_mutually_exclusive_group()
    ending.add_argument(
        "--keep",
        action="store_true",
        help="keep the daemon (and Dovecot) serving after the check, until Ctrl-C or SIGTERM"
        " (the default from a terminal)",
    )
    ending.add_argument(
        "--exit",
        action="store_true",
        help="stop the daemon and exit after the check (the default when standard input"
        " is not a terminal)",
    )
    args = parser.parse_args(argv)
    keep = args.keep or (not args.exit and _interactive())
    if isinstance(sys.stdout, io.TextIOWrapper):
        # Each line as it is printed, also through a pipe (make, tee).
        sys.stdout.reconfigure(line_buffering=True)
    signals = StopSignals()
    signals.install()
    try:
        return _run(args.messages, os.path.abspath(args.directory), keep, signals)
    except Stopped as e:
        _say(f"== Stopped by {signal.Signals(e.signum).name}")
        return e.exitStatus
    except (DovecotNotFound, DovecotStartFailed) as e:
        _say(f"== Dovecot did not start: {e}")
        return 1
    finally:
        signals.uninstall()


def _run(messages: int, base: str, keep: bool, signals: StopSignals) -> int:
    """
    The demo in C{base}; L{Stopped} when a stop signal comes before its
    result is known.
    """
    if os.path.exists(base):
        subprocess.run(["rm", "-rf", base], check=True)
    os.makedirs(base)
    os.chmod(base, 0o755)
    _say(f"== Generating a sample Maildir of {plural(messages, 'message')} in {base}/Maildir")
    corpus = writeMaildir(os.path.join(base, "Maildir"), messages)
    _say(f"   folders: {', '.join('/'.join(f) for f in corpus.folders)}")

    dovecot = DovecotInstance(
        os.path.join(base, "dovecot"),
        users=(DovecotUser("demo", "demo-password"),),
        dieWithParent=True,
    )
    daemon: subprocess.Popen[bytes] | None = None
    logNamed = False
    try:
        with signals.deferred():
            dovecot.start()
        _say(f"== Dovecot (pid {dovecot.pid}) on 127.0.0.1:{dovecot.port}")
        passwordFile = os.path.join(base, "demo.pw")
        with open(os.open(passwordFile, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("demo-password\n")
        configPath = os.path.join(base, "imapmig.yaml")
        _say(f"== Configuration: {configPath}")
        started = time.monotonic()
        daemon, port = _startListening(configPath, base, dovecot, passwordFile, signals)
        if port is None:
            return 1
        url = f"http://127.0.0.1:{port}/"
        _say(f"== Status page:   {url}   (JSON: {url}status.json)")
        final = _watch(daemon, url + "status.json")
        elapsed = time.monotonic() - started
        if final is None:
            _say(f"== imapmig exited early with status {daemon.returncode}; see {base}/imapmig.log")
            return 1
        job = final["jobs"][0]  # type: ignore[index]
        with open(os.path.join(base, "status.json"), "w") as f:
            json.dump(final, f, indent=2)
        _say(f"== Job {job['state']} after {elapsed:.1f} s")
        _say("== Checking the destination against the source")
        expected, problems = _checkDestination(dovecot, corpus)
        problems += _verify(configPath)
        result = 1 if problems or job["state"] != "done" or job["messages_failed"] else 0
        # The summary names the log: the URL stays the last line.
        logNamed = True
        lines = summary(job, len(expected), elapsed, base)
        return _conclude(result, lines, url, daemon, keep, base)
    finally:
        signals.cleaningUp()
        if daemon is not None:
            _stopProcess(daemon)
            if not logNamed:
                _say(f"   (the daemon's log: {base}/imapmig.log)")
        dovecot.stop()


def _startListening(
    configPath: str, base: str, dovecot: DovecotInstance, passwordFile: str, signals: StopSignals
) -> tuple[subprocess.Popen[bytes], int | None]:
    """
    Write the configuration and start the daemon until it listens: on
    L{statusPort}, or on a port the kernel picks if another process took
    that one between the check and the daemon's listen.

    @return: the daemon and its status port, or C{None} for the port if
        it never listened (said why).
    """
    log = os.path.join(base, "imapmig.log")
    wanted = statusPort()
    while True:
        with open(configPath, "w") as f:
            f.write(
                configurationHead("the demo", "one job", base, dovecot, wanted)
                + demoJob(base, passwordFile)
            )
        daemon = _startDaemon(configPath, log, signals)
        port = _listening(daemon)
        if port is not None:
            return daemon, port
        if daemon.poll() is None:
            _say(f"== imapmig did not listen within {LISTEN_TIMEOUT:g} s; see {log}")
            return daemon, None
        if wanted == 0 or not _lostPort(log):
            _say(f"== imapmig exited early with status {daemon.returncode}; see {log}")
            return daemon, None
        _say(f"== Port {wanted} was taken meanwhile; the daemon listens on another")
        wanted = 0


def _checkDestination(dovecot: DovecotInstance, corpus: Corpus) -> tuple[Counter[str], int]:
    """
    Count each folder's messages in Dovecot against the sample Maildir's,
    a line each.

    @return: the source's count per folder, and how many folders differ.
    """
    fetched = dovecot.fetchAll("demo")
    expected = Counter(("/".join(m.folder) if m.folder != ("INBOX",) else "INBOX") for m in corpus.messages)
    found = {name.replace(".", "/"): len(messages) for name, messages in fetched.items()}
    problems = 0
    for folder, count in sorted(expected.items()):
        have = found.get(folder, 0)
        mark = "ok" if have == count else "MISMATCH"
        problems += have != count
        _say(f"   {folder:20} source {count:>5}  destination {have:>5}  {mark}")
    return expected, problems


def _conclude(
    result: int, lines: list[str], url: str, daemon: subprocess.Popen[bytes], keep: bool, base: str
) -> int:
    """
    Say the check's C{result}, the summary's C{lines} and the dashboard's
    C{url}, last; with C{keep}, serve until a stop signal.

    @return: the demo's exit status: C{result}, or 1 if the daemon exited
        while it kept serving.
    """
    # From here the result is known: a stop signal ends the demo with it.
    try:
        _say("== Demo FAILED" if result else "== Demo passed: every message is in Dovecot.")
        for line in lines:
            _say(line)
        if not keep:
            _say(
                "== Not a terminal: the daemon stops now (--keep keeps it serving);"
                f" its dashboard was {url}"
            )
            return result
        _say("== The daemon keeps serving the dashboard; Ctrl-C (or SIGTERM) stops it:")
        _say(f"   {url}")
        daemon.wait()
        _say(f"== imapmig exited with status {daemon.returncode}; see {base}/imapmig.log")
        return 1
    except Stopped as e:
        _say(f"== Stopped by {signal.Signals(e.signum).name}")
        return result


def summary(job: dict[str, object], folders: int, elapsed: float, base: str) -> list[str]:
    """
    The demo's result in two lines: what was copied, how fast, and where
    its files are.

    @param job: the job's last entry of C{/status.json}.
    @param folders: how many folders the sample Maildir has.
    @param elapsed: seconds from the daemon's start to the job's end.
    @param base: the demo's directory.
    """
    done = int(job["messages_done"])  # type: ignore[call-overload]
    failed = int(job["messages_failed"])  # type: ignore[call-overload]
    average = job.get("average_messages_per_second")
    rate = float(average) if isinstance(average, (int, float)) else done / max(elapsed, 1e-9)
    return [
        f"   {plural(done, 'message')} copied into {plural(folders, 'folder')},"
        f" {failed} failed, {octets(int(job['bytes_done']))}"  # type: ignore[call-overload]
        f" in {elapsed:.1f} s ({rate:,.0f} messages/s)",
        f"   in {base}: the daemon's log imapmig.log, the last status.json,"
        f" the configuration imapmig.yaml",
    ]


def _interactive() -> bool:
    """
    Whether the demo runs from a terminal: its standard input is a tty.
    """
    try:
        return os.isatty(sys.stdin.fileno())
    except (AttributeError, OSError, ValueError):
        return False


def demoJob(base: str, passwordFile: str) -> str:
    """
    The demo's job in YAML: C{base/Maildir} into the account C{demo},
    whose password is in C{passwordFile}; paths quoted (L{yamlString}).
    """
    maildir = yamlString(os.path.join(base, "Maildir"))
    return f"""\
  - name: demo
    source: {{maildir: {maildir}}}
    destination: {{server: local, user: demo, password_file: {yamlString(passwordFile)}}}
"""


def _startDaemon(configPath: str, logPath: str, signals: StopSignals) -> subprocess.Popen[bytes]:
    """
    Start the daemon (C{twistd -n imapmig}, from the same code as this
    demo, installed or not) on C{configPath}, its output to C{logPath}.
    """
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    # The level filter (info by default) that imapmig-daemon applies.
    command = [
        twistd, "-n", "--pidfile=", "--logger=imapmig.log.loglevels.twistdLogObserver",
        "imapmig", "--config", configPath,
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    with open(logPath, "wb") as log, signals.deferred():
        # A session of its own: the terminal's Ctrl-C and hangup reach
        # the demo alone, which stops the daemon before Dovecot.
        daemon = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=dieWithParent(),
        )
    _say(f"== Running (pid {daemon.pid}):", " ".join(command))
    return daemon


def _listening(
    daemon: subprocess.Popen[bytes],
    timeout: float = LISTEN_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    ports: Callable[[int], list[int]] = listeningPorts,
) -> int | None:
    """
    Wait until C{daemon} listens (its status page, its only listener).

    The port is read from what this very process holds (C{/proc}), so the
    demo never watches another daemon that answers on the same port.

    @param timeout: the longest wait, in seconds: a daemon that runs on
        without a listener the demo can see (hung before it listens, or a
        C{/proc} that shows no sockets) is not waited for forever.
    @return: its port, or L{None} if it exited first or did not listen
        within C{timeout} (then it still runs).
    """
    deadline = clock() + timeout
    while daemon.poll() is None:
        found = ports(daemon.pid)
        if found:
            return found[0]
        if clock() >= deadline:
            return None
        sleep(0.05)
    return None


def _verify(configPath: str) -> int:
    """
    Run C{imapmig verify} on the demo's configuration: message by message,
    and its report lands where the daemon's status page shows it (the
    page said "Verify: not run" after a check of the demo's own).

    @return: 0 when it found no difference, 1 otherwise.
    """
    _say("== imapmig verify --config " + configPath)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    verify = subprocess.run(
        [sys.executable, "-c", "from imapmig.commands.cli import main; raise SystemExit(main())",
         "verify", "--config", configPath],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    for line in verify.stdout.decode("utf-8", "replace").splitlines():
        _say("   " + line)
    return 0 if verify.returncode == 0 else 1


def _lostPort(logPath: str) -> bool:
    """
    Whether the daemon's log says its status listener could not listen.
    """
    with open(logPath, "rb") as f:
        return b"The status listener could not listen on" in f.read()


def _watch(daemon: subprocess.Popen[bytes], url: str) -> dict[str, object] | None:
    """
    Print the job's progress from C{url} until it is done or failed.

    @return: the last status, or L{None} when the daemon exited first.
    """
    while daemon.poll() is None:
        time.sleep(0.5)
        snapshot = _status(url)
        if snapshot is None:
            continue
        job = snapshot["jobs"][0]  # type: ignore[index]
        total = job["messages_total"]
        _say(
            f"   {job['state']:8} {job['messages_done']:>6}/"
            f"{'(not yet counted)' if total is None else total}"
            f" messages, {job['messages_failed']} failed,"
            f" {octets(int(job['bytes_done']))}"
        )
        if job["state"] in ("done", "done_with_failures", "failed"):
            return snapshot
    return None


def _stopProcess(process: subprocess.Popen[bytes]) -> None:
    """
    Stop C{process}: C{SIGTERM}, then C{SIGKILL} if it has not exited
    within L{STOP_TIMEOUT} seconds.
    """
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _say(*parts: str) -> None:
    """
    Print a line of the demo's console; once the console is gone (the
    terminal closed: C{SIGHUP}), print nothing more, without failing.
    """
    try:
        print(*parts)
    except OSError:
        # Python flushes stdout at exit and would fail there again.
        sys.stdout = open(os.devnull, "w")


if __name__ == "__main__":
    raise SystemExit(main())
