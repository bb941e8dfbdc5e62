# -*- test-case-name: tests.test_cli -*-
"""
The C{imapmig} command: what the state database says, for admins.

    imapmig report --config FILE [--job NAME] [--json]

prints, per job, how many messages are recorded as appended and as failed,
and every failed message with its reason.  Exit status 0, or 2 on an
invalid configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence, TextIO, TypeVar

from twisted.internet.defer import Deferred

from imapmig.config import loadConfig
from imapmig.errors import ConfigError, PermanentError
from imapmig.state import IStateStore
from imapmig.state.sqlite import SQLiteStateStore

T = TypeVar("T")


def _now(d: Deferred[T]) -> T:
    """
    The result of a Deferred that has already fired (the SQLite store
    answers synchronously).
    """
    results: list[T] = []
    failures: list[object] = []
    d.addCallbacks(results.append, failures.append)
    if failures:
        failures[0].raiseException()  # type: ignore[attr-defined]
    return results[0]


def report(store: IStateStore, jobs: Sequence[str], asJSON: bool, out: TextIO) -> None:
    """
    Write the report of C{jobs} from C{store} to C{out}.
    """
    document = []
    for job in jobs:
        appended, failed = _now(store.summary(job))
        failures = _now(store.failures(job))
        document.append(
            {
                "job": job,
                "appended": appended,
                "failed": failed,
                "failures": [
                    {
                        "folder_key": f.folderKey,
                        "message_key": f.messageKey,
                        "mailbox": f.mailbox,
                        "size": f.size,
                        "reason": f.failure,
                    }
                    for f in failures
                ],
            }
        )
    if asJSON:
        json.dump(document, out, indent=2)
        out.write("\n")
        return
    for entry in document:
        out.write(
            f"{entry['job']}: {entry['appended']} appended, {entry['failed']} failed\n"
        )
        for failure in entry["failures"]:  # type: ignore[attr-defined]
            out.write(
                f"  {failure['mailbox']}\t{failure['folder_key']}/{failure['message_key']}"
                f"\t{failure['reason']}\n"
            )


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    """
    Run the command; return its exit status.
    """
    parser = argparse.ArgumentParser(prog="imapmig", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    reportParser = commands.add_parser(
        "report", help="messages appended and failed, with every failure's reason"
    )
    reportParser.add_argument("--config", required=True, help="the YAML configuration")
    reportParser.add_argument("--job", action="append", help="only this job (repeatable)")
    reportParser.add_argument("--json", action="store_true", help="JSON output")
    args = parser.parse_args(argv)
    try:
        config = loadConfig(args.config)
    except ConfigError as e:
        for problem in e.problems:
            sys.stderr.write(problem + "\n")
        return 2
    names = [job.name for job in config.jobs]
    for name in args.job or ():
        if name not in names:
            sys.stderr.write(f"{args.config}: no job named {name!r} (jobs: {', '.join(names)})\n")
            return 2
    try:
        store = SQLiteStateStore(config.statePath, seconds=lambda: 0.0)
    except PermanentError as e:
        sys.stderr.write(f"{e}\n")
        return 2
    try:
        report(store, args.job or names, args.json, out)
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
