"""
Measure the scheduler at scale, whole daemon processes against a private
Dovecot on tmpfs (/dev/shm when present):

  many    200 accounts x 20 small messages (200 jobs, max_jobs 8)
  one     one account holding the same 4,000 messages (one job)
  queued  10,000 jobs (a user list) into 10,000 accounts of which the first
          16 exist: seconds from the process start to the first job done
          (its 20 messages in the destination), then SIGTERM

Each daemon runs under /usr/bin/time -v; its wall time and peak RSS are
printed.  IMAPMIG_TREE=/path/to/checkout runs that checkout's daemon
instead (QUEUED_ROWS changes the 10,000; MAX_JOBS sets max_jobs for
"many").

    .venv/bin/python -m bench.sched_scale many one queued
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import yaml

from imapmig.testing.corpus import writeMaildir
from imapmig.testing.dovecot import DovecotInstance, DovecotUser

PASSWORD = "bench-pw"


def _twistd(configPath: str, exitWhenDone: bool = True) -> list[str]:
    command = [
        "/usr/bin/time", "-v", sys.executable, "-c",
        "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()",
        "-n", "--pidfile=", "imapmig", "--config", configPath,
    ]  # fmt: skip
    if exitWhenDone:
        command.append("--exit-when-done")
    return command


def _tree() -> str:
    # IMAPMIG_TREE: another checkout's daemon (e.g. /work/main, for the
    # serial queue before the scheduler), against the same server.
    return os.environ.get("IMAPMIG_TREE") or os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))
    )


def _environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": _tree(), "PYTHONUNBUFFERED": "1"}


def _cpu(stderr: str) -> float:
    """
    User plus system CPU seconds from /usr/bin/time -v's report.
    """
    user = re.search(r"User time \(seconds\): (\S+)", stderr)
    system = re.search(r"System time \(seconds\): (\S+)", stderr)
    assert user is not None and system is not None
    return float(user.group(1)) + float(system.group(1))


def _timeFigures(stderr: str) -> tuple[float, float]:
    """
    Wall seconds and peak RSS (MB) from /usr/bin/time -v's report.
    """
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    assert wall is not None and rss is not None, stderr[-2000:]
    seconds = 0.0
    for part in wall.group(1).split(":"):
        seconds = seconds * 60 + float(part)
    return seconds, int(rss.group(1)) / 1024


def _config(
    directory: str, port: int, jobs: list[dict[str, object]], extra: dict[str, object] | None = None
) -> str:
    document = {
        "state": os.path.join(directory, "state.sqlite"),
        "status": "off",
        "servers": {
            "dovecot": {
                "endpoint": f"tcp:127.0.0.1:{port}",
                "starttls": "off",
                "compress": "off",
            }
        },
        "jobs": jobs,
        **(extra or {}),
    }
    path = os.path.join(directory, "imapmig.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(document, f)
    return path


def _passwordFile(directory: str) -> str:
    path = os.path.join(directory, "pw")
    with open(path, "w") as f:
        f.write(PASSWORD + "\n")
    os.chmod(path, 0o600)
    return path


def runMany(base: str, instance: DovecotInstance, accounts: int, messages: int) -> None:
    directory = tempfile.mkdtemp(dir=base)
    password = _passwordFile(directory)
    jobs: list[dict[str, object]] = []
    for index in range(accounts):
        maildir = os.path.join(directory, f"Maildir{index}")
        writeMaildir(maildir, messages, seed=index, folders=(("INBOX",),), profile="small")
        jobs.append(
            {
                "name": f"m{index:03d}",
                "source": {"maildir": maildir},
                "destination": {"server": "dovecot", "user": f"m{index:03d}", "password_file": password},
            }
        )
    extra: dict[str, object] | None = None
    if "MAX_JOBS" in os.environ:
        extra = {"max_jobs": int(os.environ["MAX_JOBS"])}
    path = _config(directory, instance.port, jobs, extra)
    start = time.perf_counter()
    done = subprocess.run(_twistd(path), env=_environment(), cwd=_tree(), capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    wall, rss = _timeFigures(done.stderr)
    total = accounts * messages
    running = [int(n) for n in re.findall(r"started \((\d+) of at most", done.stdout)]
    print(
        f"{accounts} accounts x {messages} messages: exit {done.returncode}, wall {wall:.2f} s"
        f" ({elapsed:.2f} s measured here), {total / wall:.0f} messages/s, daemon CPU"
        f" {_cpu(done.stderr):.2f} s, peak RSS {rss:.1f} MB; jobs running at once: at most"
        f" {max(running, default=1)}"
    )
    if done.returncode != 0:
        print(done.stdout[-3000:])


def runQueued(base: str, instance: DovecotInstance, rows: int) -> None:
    directory = tempfile.mkdtemp(dir=base)
    password = _passwordFile(directory)
    maildir = os.path.join(directory, "Maildir")
    writeMaildir(maildir, 20, seed=7, folders=(("INBOX",),), profile="small")
    with open(os.path.join(directory, "users.csv"), "w") as f:
        f.write("destination_user,destination_password_file\n")
        for index in range(rows):
            f.write(f"q{index:05d},pw\n")
    path = _config(
        directory,
        instance.port,
        [
            {
                "name": "q",
                "jobs_from": "users.csv",
                "source": {"maildir": maildir},
                "destination": {"server": "dovecot"},
            }
        ],
    )
    start = time.perf_counter()
    process = subprocess.Popen(
        _twistd(path, exitWhenDone=False),
        env=_environment(), cwd=_tree(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    first = None
    started = None
    log = []
    for line in process.stdout:
        log.append(line)
        if started is None and ": started (" in line:
            started = time.perf_counter() - start
        if " done: " in line and "Job q-" in line:
            first = time.perf_counter() - start
            break
    if first is None:
        print("".join(log[-40:]))
    # /usr/bin/time does not pass SIGTERM on: signal the daemon, its child.
    children = open(f"/proc/{process.pid}/task/{process.pid}/children").read().split()
    for child in children:
        os.kill(int(child), signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    wall, rss = _timeFigures(stderr)
    print(
        f"{rows} queued jobs: first job started {started} s, first job done (its 20"
        f" messages in the destination) {first} s after start; exit"
        f" {process.returncode} after SIGTERM, wall {wall:.2f} s, peak RSS {rss:.1f} MB"
    )


def main(which: list[str]) -> None:
    base = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    users = [DovecotUser(f"m{i:03d}", PASSWORD) for i in range(200)]
    users += [DovecotUser("one", PASSWORD)]
    users += [DovecotUser(f"q{i:05d}", PASSWORD) for i in range(16)]
    instance = DovecotInstance(os.path.join(base, "dovecot"), users=users, fsync=False)
    instance.start()
    try:
        for what in which:
            if what == "many":
                runMany(base, instance, 200, 20)
            elif what == "one":
                directory = tempfile.mkdtemp(dir=base)
                password = _passwordFile(directory)
                maildir = os.path.join(directory, "Maildir")
                writeMaildir(maildir, 4000, seed=1, folders=(("INBOX",),), profile="small")
                path = _config(
                    directory,
                    instance.port,
                    [
                        {
                            "name": "one",
                            "source": {"maildir": maildir},
                            "destination": {"server": "dovecot", "user": "one", "password_file": password},
                        }
                    ],
                )
                done = subprocess.run(_twistd(path), env=_environment(), cwd=_tree(), capture_output=True, text=True)
                wall, rss = _timeFigures(done.stderr)
                print(
                    f"1 account x 4000 messages: exit {done.returncode}, wall {wall:.2f} s,"
                    f" {4000 / wall:.0f} messages/s, daemon CPU {_cpu(done.stderr):.2f} s,"
                    f" peak RSS {rss:.1f} MB"
                )
            elif what == "queued":
                runQueued(base, instance, int(os.environ.get("QUEUED_ROWS", "10000")))
    finally:
        instance.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["many", "one", "queued"])
