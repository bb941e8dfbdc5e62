"""
How long the daemon takes to start, run one job with nothing to do and exit.

    python bench/startup.py [--runs N] [--launcher twistd|daemon|both]
                            [--against TREE] [--profile FILE] [--importtime FILE]

Starts a private Dovecot on loopback (L{imapmig.testing.dovecot}), writes
two configurations with one job each, an empty Maildir into an empty
account over plain IMAP (C{starttls: off}), one with C{status: off} and one
with the status page listening on a free loopback port, then runs the whole
process

    python -c "...twistd run()" -n --pidfile= imapmig --config FILE --exit-when-done

and the same with the launcher without twistd (L{imapmig.daemon})

    python -m imapmig.daemon --config FILE --exit-when-done

C{--runs} times for each configuration and launcher (interleaved, after
one unmeasured warm-up run of each), from the source tree this script sits
in, and prints the median, minimum and maximum wall-clock time from
C{fork} to exit, one line per launcher and configuration, the twistd
lines first:

    twistd          status off  median S  min S  max S  cpu S  (10 runs)
    imapmig-daemon  status off  median S  min S  max S  cpu S  (10 runs)

(C{cpu}: the median of the process's user and system time.)
C{--launcher} measures one of them only.  C{--against TREE} runs
another source tree's imapmig (a checkout, its C extensions built) in
the same way, each of its runs right after the same run of this tree, and
prints its lines after this tree's, named C{against}: before and after
side by side, under the same load.  Every run must
exit with status 0.  The runs keep their bytecode in a private cache
(C{PYTHONPYCACHEPREFIX} in the temporary directory, filled by the warm-up
run), as an installed daemon has it (pip compiles the C{.pyc} files at
install); C{--no-bytecode-cache} compiles every module from source in
every run instead (C{PYTHONDONTWRITEBYTECODE=1}, this development
environment's setting).  The state database is removed before each run so that
every run opens and creates it afresh, as a first run does.

C{--profile FILE} also runs the C{status: off} configuration once under
C{cProfile} and writes the statistics to C{FILE} (read them with
C{python -m pstats FILE}); C{--importtime FILE} runs it once with
C{python -X importtime} and writes the import log (stderr) to C{FILE}.
Both do so for each launcher measured: twistd's to C{FILE}, the other's
to C{FILE.daemon} (to C{FILE} when it is the only one measured).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SOURCE_TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, SOURCE_TREE)

from imapmig.testing.dovecot import DovecotInstance, DovecotUser  # noqa: E402

_RUN_TWISTD = "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()\n"


def _runnerScript(directory: str) -> str:
    # twisted.scripts.twistd has no __main__ block: "python -m" would do nothing.
    path = os.path.join(directory, "twistd-run.py")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write(_RUN_TWISTD)
    return path


def _freePort() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def writeConfig(directory: str, port: int, status: str) -> str:
    """
    Write a configuration of one job, an empty Maildir into C{user}'s
    account on 127.0.0.1:C{port}, with C{status} as its C{status} setting.

    @return: the configuration file's path.
    """
    os.makedirs(directory, exist_ok=True)
    maildir = os.path.join(directory, "Maildir")
    for sub in ("cur", "new", "tmp"):
        os.makedirs(os.path.join(maildir, sub), exist_ok=True)
    passwordFile = os.path.join(directory, "password")
    with open(os.open(passwordFile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write("user-pw\n")
    path = os.path.join(directory, "imapmig.yaml")
    with open(path, "w") as f:
        f.write(
            f"""\
state: {directory}/state.sqlite
status: {status}
servers:
  dovecot:
    endpoint: "tcp:127.0.0.1:{port}"
    starttls: "off"
jobs:
  - name: job
    source: {{maildir: {maildir}}}
    destination: {{server: dovecot, user: user, password_file: {passwordFile}}}
"""
        )
    return path


LAUNCHERS = {
    "twistd": "twistd -n imapmig",
    "daemon": "python -m imapmig.daemon",
}
"""
The launchers measured, by C{--launcher} name, with what they run.
"""

LABELS = {"twistd": "twistd", "daemon": "imapmig-daemon"}
"""
How each launcher's lines of output begin.
"""


def command(
    configPath: str, pythonOptions: tuple[str, ...] = (), launcher: str = "twistd"
) -> list[str]:
    """
    The command line that runs C{configPath} to completion with
    C{launcher} (a key of L{LAUNCHERS}).
    """
    if launcher == "daemon":
        return [
            sys.executable,
            *pythonOptions,
            "-m",
            "imapmig.daemon",
            "--config",
            configPath,
            "--exit-when-done",
        ]
    return [
        sys.executable,
        *pythonOptions,
        # A script rather than -c, so that cProfile can run it too.
        _runnerScript(os.path.dirname(configPath)),
        "-n",
        "--pidfile=",
        "imapmig",
        "--config",
        configPath,
        "--exit-when-done",
    ]


_pycachePrefix: str | None = None
"""
Where the runs keep their bytecode (L{None}: they compile every module
from source, as with C{PYTHONDONTWRITEBYTECODE=1}).
"""


def _environment(tree: str = SOURCE_TREE) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = tree
    env.pop("PYTHONPYCACHEPREFIX", None)
    if _pycachePrefix is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = _pycachePrefix
    return env


def _childrenCPU() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def runOnce(
    configPath: str,
    pythonOptions: tuple[str, ...] = (),
    launcher: str = "twistd",
    tree: str = SOURCE_TREE,
) -> tuple[float, bytes, bytes]:
    """
    Run the daemon of C{tree} on C{configPath} once with C{launcher}, its
    state database removed first.

    @return: the wall-clock seconds from start to exit, stdout and stderr.
    @raise RuntimeError: the daemon did not exit with status 0.
    """
    elapsed, _, stdout, stderr = _runOnce(configPath, pythonOptions, launcher, tree)
    return elapsed, stdout, stderr


def _runOnce(
    configPath: str, pythonOptions: tuple[str, ...], launcher: str, tree: str
) -> tuple[float, float, bytes, bytes]:
    """
    L{runOnce}, and the CPU seconds the run used (user and system).
    """
    state = os.path.join(os.path.dirname(configPath), "state.sqlite")
    for suffix in ("", "-wal", "-shm", "-journal"):
        if os.path.exists(state + suffix):
            os.remove(state + suffix)
    cpu = _childrenCPU()
    started = time.perf_counter()
    done = subprocess.run(
        command(configPath, pythonOptions, launcher),
        capture_output=True,
        env=_environment(tree),
        cwd=os.path.dirname(configPath),
    )
    elapsed = time.perf_counter() - started
    cpu = _childrenCPU() - cpu
    if done.returncode != 0:
        raise RuntimeError(
            f"exit status {done.returncode}:\n{done.stdout.decode(errors='replace')}"
            f"{done.stderr.decode(errors='replace')}"
        )
    return elapsed, cpu, done.stdout, done.stderr


def addRunOptions(parser: argparse.ArgumentParser) -> None:
    """
    Add the options this benchmark shares with L{bench.ready}: C{--runs}
    and C{--launcher}.
    """
    parser.add_argument("--runs", type=int, default=10, help="measured runs of each (10)")
    parser.add_argument(
        "--launcher",
        choices=("twistd", "daemon", "both"),
        default="both",
        help="twistd -n imapmig, python -m imapmig.daemon, or both (the default)",
    )


Times = dict[tuple[str, str, str], list[tuple[float, float]]]
"""
Each run's wall-clock and CPU seconds, by source tree, launcher and
configuration name.
"""


def measure(configs: dict[str, str], launchers: list[str], trees: list[str], runs: int) -> Times:
    """
    Run every configuration of C{configs} with every launcher of
    C{launchers} from every tree of C{trees}, once unmeasured and then
    C{runs} times, the trees' runs of each interleaved.
    """
    times: Times = {
        (tree, launcher, name): [] for tree in trees for launcher in launchers for name in configs
    }
    for tree, launcher, name in times:
        runOnce(configs[name], launcher=launcher, tree=tree)
    for _ in range(runs):
        for launcher in launchers:
            for name in configs:
                for tree in trees:
                    elapsed, cpu, _, _ = _runOnce(configs[name], (), launcher, tree)
                    times[tree, launcher, name].append((elapsed, cpu))
    return times


def printTimes(times: Times) -> None:
    """
    Print one line of L{measure}'s C{times} per tree, launcher and
    configuration.
    """
    for (tree, launcher, name), samples in times.items():
        walls = [wall for wall, _ in samples]
        label = LABELS[launcher] if tree == SOURCE_TREE else f"{LABELS[launcher]} against"
        print(
            f"{label:23} {name:11} median {statistics.median(walls):.3f} s"
            f"  min {min(walls):.3f}  max {max(walls):.3f}"
            f"  cpu {statistics.median(cpu for _, cpu in samples):.3f}  ({len(walls)} runs)"
        )


def _profile(
    configPath: str, launcher: str, profile: str | None, importtime: str | None, suffix: str
) -> None:
    """
    C{--profile} and C{--importtime}: one more run of C{configPath} with
    C{launcher} for each, its output written to the file named plus
    C{suffix}.
    """
    if profile:
        path = os.path.abspath(profile + suffix)
        runOnce(configPath, ("-m", "cProfile", "-o", path), launcher)
        print(f"cProfile statistics ({LAUNCHERS[launcher]}): {path}")
    if importtime:
        _, _, stderr = runOnce(configPath, ("-X", "importtime"), launcher)
        with open(importtime + suffix, "wb") as f:
            f.write(stderr)
        print(f"import times ({LAUNCHERS[launcher]}): {importtime + suffix}")


def main(argv: list[str] | None = None) -> int:
    """
    Measure; print one line per configuration.  Return the exit status.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    addRunOptions(parser)
    parser.add_argument(
        "--against",
        metavar="TREE",
        help="also run this other source tree's imapmig, interleaved run by run",
    )
    parser.add_argument("--profile", help="write cProfile statistics of one run here")
    parser.add_argument("--importtime", help="write -X importtime output of one run here")
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="compile every module from source in every run (PYTHONDONTWRITEBYTECODE=1)",
    )
    args = parser.parse_args(argv)

    base = tempfile.mkdtemp(prefix="imapmig-startup-")
    global _pycachePrefix
    _pycachePrefix = None if args.no_bytecode_cache else os.path.join(base, "pycache")
    dovecot = DovecotInstance(
        os.path.join(base, "dovecot"), users=(DovecotUser("user", "user-pw"),)
    )
    dovecot.start()
    try:
        configs = {
            "status off": writeConfig(os.path.join(base, "off"), dovecot.port, "off"),
            "status on": writeConfig(
                os.path.join(base, "on"),
                dovecot.port,
                f'{{listen: "tcp:{_freePort()}:interface=127.0.0.1"}}',
            ),
        }
        launchers = list(LAUNCHERS) if args.launcher == "both" else [args.launcher]
        trees = [SOURCE_TREE] + ([os.path.abspath(args.against)] if args.against else [])
        printTimes(measure(configs, launchers, trees, args.runs))
        for launcher in launchers:
            suffix = "" if launcher == "twistd" or len(launchers) == 1 else "." + launcher
            _profile(configs["status off"], launcher, args.profile, args.importtime, suffix)
    finally:
        dovecot.stop()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
