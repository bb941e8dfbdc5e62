"""
How long the daemon takes from C{fork} to telling systemd it is ready.

    python bench/ready.py [--runs N] [--launcher twistd|daemon|both]

Issue 19's target: C{READY=1} within a second of start on a valid
configuration.  Starts a private Dovecot on loopback
(L{imapmig.testing.dovecot}), writes the configuration C{bench/startup.py}
uses with the status page on (one job, an empty Maildir into an empty
account, the status page on a free loopback port), binds a datagram socket
as systemd's C{$NOTIFY_SOCKET} would be, and starts the daemon on it
C{--runs} times for each launcher (interleaved, after one unmeasured
warm-up run each, with the bytecode cached as an installed daemon has it),
timing from C{fork} to the datagram that holds C{READY=1}; each run is
then stopped with C{SIGTERM} and must exit with status 0 after sending
C{STOPPING=1}.  Prints one line per launcher:

    imapmig-daemon  READY median S  min S  max S  (10 runs, load L)

READY is sent once the configuration is read, the state database open, the
status page's port bound and the reactor running (L{imapmig.daemon.notifyservice}).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import startup  # noqa: E402
from imapmig.testing.dovecot import DovecotInstance, DovecotUser  # noqa: E402

# Seconds a run may take to send READY, or to stop, before the bench gives up.
DEADLINE = 60.0


def _messages(sock: socket.socket, deadline: float) -> list[bytes]:
    """
    Read datagrams from C{sock} until one holds C{READY=1} or C{STOPPING=1}.

    @return: the datagrams read, the last one the one looked for.
    """
    got: list[bytes] = []
    sock.settimeout(deadline)
    while True:
        datagram = sock.recv(65536)
        got.append(datagram)
        lines = datagram.split(b"\n")
        if b"READY=1" in lines or b"STOPPING=1" in lines:
            return got


def runOnce(configPath: str, notifyPath: str, sock: socket.socket, launcher: str) -> float:
    """
    Start the daemon on C{configPath} with C{launcher}, wait for READY, stop
    it with C{SIGTERM}, wait for STOPPING and its exit.

    @return: seconds from C{fork} to the READY datagram.
    @raise RuntimeError: the daemon did not stop with status 0.
    """
    state = os.path.join(os.path.dirname(configPath), "state.sqlite")
    for suffix in ("", "-wal", "-shm", "-journal", ".lock"):
        if os.path.exists(state + suffix):
            os.remove(state + suffix)
    argv = [a for a in startup.command(configPath, launcher=launcher) if a != "--exit-when-done"]
    env = startup._environment()
    env["NOTIFY_SOCKET"] = notifyPath
    started = time.perf_counter()
    process = subprocess.Popen(
        argv,
        env=env,
        cwd=os.path.dirname(configPath),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _messages(sock, DEADLINE)
        elapsed = time.perf_counter() - started
        process.send_signal(signal.SIGTERM)
        _messages(sock, DEADLINE)
        _, stderr = process.communicate(timeout=DEADLINE)
    except BaseException:
        process.kill()
        process.wait()
        raise
    if process.returncode != 0:
        raise RuntimeError(
            f"exit status {process.returncode}:\n{stderr.decode(errors='replace')}"
        )
    return elapsed


def main(argv: list[str] | None = None) -> int:
    """
    Measure; print one line per launcher.  Return the exit status.
    """
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    startup.addRunOptions(parser)
    args = parser.parse_args(argv)
    base = tempfile.mkdtemp(prefix="imapmig-ready-")
    startup._pycachePrefix = os.path.join(base, "pycache")
    dovecot = DovecotInstance(os.path.join(base, "dovecot"), users=(DovecotUser("user", "user-pw"),))
    dovecot.start()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        notifyPath = os.path.join(base, "notify")
        sock.bind(notifyPath)
        config = startup.writeConfig(
            os.path.join(base, "on"),
            dovecot.port,
            f'{{listen: "tcp:{startup._freePort()}:interface=127.0.0.1"}}',
        )
        launchers = list(startup.LAUNCHERS) if args.launcher == "both" else [args.launcher]
        times: dict[str, list[float]] = {launcher: [] for launcher in launchers}
        for launcher in launchers:
            runOnce(config, notifyPath, sock, launcher)
        for _ in range(args.runs):
            for launcher in launchers:
                times[launcher].append(runOnce(config, notifyPath, sock, launcher))
        load = os.getloadavg()[0]
        for launcher, samples in times.items():
            print(
                f"{startup.LABELS[launcher]:15} READY median {statistics.median(samples):.3f} s"
                f"  min {min(samples):.3f}  max {max(samples):.3f}"
                f"  ({len(samples)} runs, load {load:.2f})"
            )
    finally:
        sock.close()
        dovecot.stop()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
