# -*- test-case-name: tests.test_cli -*-
"""
The imapmig command, for admins.

    imapmig report --config FILE [--job NAME] [--json | --csv] [--failures]

prints what the state database says, per job: how many messages were
copied, found already present and failed, how many had their line endings
converted, why the job's latest run failed (a refused login, TLS refused,
retries given up) if it did, every failed message with its reason and
every message with a note (something not carried over exactly), and the
admin's hold on the job if any (paused or cancelled, by whom, when), and
for a held job or one whose run failed its last change of state with its
cause;
then a summary of the run (jobs done, done with failures, failed, held,
not run; messages, octets, duration, rate).  C{--json} carries each job's
timeline too (every change of state kept); C{--csv} writes one row per
job instead (no summary); C{--failures} lists every failed message of
every job with its Message-ID, Date, From and Subject (with C{--csv}, as
the status site's C{/manifest.csv}).
Exit status 0 when no job and no message is recorded as failed, 1 when
any is (a last line names them), 2 on an invalid configuration or usage.
A cancelled job counts as failed (it did not complete); a paused one
does not (it is listed on a "paused:" line), unless something of it
failed.

    imapmig verify --config FILE [--job NAME] [--report FILE]

compares each job's source with its destination, folder by folder: every
message's SHA-256, flags and INTERNALDATE.  It prints a summary and every
difference, writes the whole report as JSON (default
C{imapmig-verify.json} in the state database's directory, or with a
PostgreSQL state in the working directory, where the daemon's status
shows its result as C{run.verify}), and exits 0 when
there is no difference, 1 when there is any (or a job could not be
verified, or the report could not be written), 2 on an invalid
configuration.

    imapmig plan --config FILE [--job NAME] [--json]

shows, per job, what a run would do now, writing nothing anywhere: the
source's folders with their message counts and sizes, the destination
mailbox each goes to (and why), the messages the state database records
as migrated and those left to copy, and the mailboxes the run would
create.  Exit status 0, 1 when a job could not be planned (each says
why), 2 on an invalid configuration.

    imapmig state load-jobs --config FILE [--fleet NAME]

loads or replaces a fleet's job list in its PostgreSQL database
(L{imapmig.commands.loadjobs}).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Coroutine, Sequence, TextIO

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

import imapmig
from imapmig.commands.loadjobs import addLoadJobs
from imapmig.commands.plan import plan
from imapmig.commands.report import report
from imapmig.commands.statecopy import addCopyParser
from imapmig.commands.verify import verify
from imapmig.config import Config, PostgreSQLState, loadConfig
from imapmig.errors import ConfigError, PermanentError
from imapmig.state import IStateStore, JobHold
from imapmig.state.memory import MemoryStateStore
from imapmig.state.sqlite import SQLiteStateStore


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    """
    Run the command; return its exit status.
    """
    parser = argparse.ArgumentParser(prog="imapmig", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--version", action="version", version=f"imapmig {imapmig.__version__}"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    reportParser = commands.add_parser(
        "report", help="messages appended and failed, with every failure's reason"
    )
    reportParser.add_argument("--config", required=True, help="the YAML configuration")
    reportParser.add_argument("--job", action="append", help="only this job (repeatable)")
    reportForm = reportParser.add_mutually_exclusive_group()
    reportForm.add_argument("--json", action="store_true", help="JSON output")
    reportForm.add_argument(
        "--csv", action="store_true", help="CSV output: one row per job, or per failure"
    )
    reportParser.add_argument(
        "--failures",
        action="store_true",
        help="every failed message of every job, with its Message-ID, Date, From and Subject",
    )
    verifyParser = commands.add_parser(
        "verify", help="compare each job's source and destination, message by message"
    )
    verifyParser.add_argument("--config", required=True, help="the YAML configuration")
    verifyParser.add_argument("--job", action="append", help="only this job (repeatable)")
    verifyParser.add_argument(
        "--report",
        default=None,
        help="where to write the JSON report (default: imapmig-verify.json beside the state"
        " database, or in the working directory with PostgreSQL, where the daemon's status"
        " page shows its result)",
    )
    planParser = commands.add_parser(
        "plan", help="what a run would copy and create, writing nothing"
    )
    planParser.add_argument("--config", required=True, help="the YAML configuration")
    planParser.add_argument("--job", action="append", help="only this job (repeatable)")
    planParser.add_argument("--json", action="store_true", help="JSON output")
    stateCommands = commands.add_parser("state", help="the state database itself").add_subparsers(
        dest="stateCommand", metavar="COMMAND", required=True
    )
    addCopyParser(stateCommands)
    addLoadJobs(stateCommands)
    args = parser.parse_args(argv)
    if args.command == "state":
        return int(args.run(args, out))
    try:
        config = loadConfig(args.config)
        jobs = _selectedJobs(config, args)
        store = _openStore(config, args.command)
    except ConfigError as e:
        for problem in e.shown():
            sys.stderr.write(problem + "\n")
        return 2
    except PermanentError as e:
        sys.stderr.write(f"{e}\n")
        return 2
    try:
        return _COMMANDS[args.command](args, config, jobs, store, out)
    finally:
        store.close()


def _selectedJobs(config: Config, args: argparse.Namespace) -> list[str]:
    """
    The jobs C{--job} names (every job without it).

    @raise ConfigError: one is not in the configuration.
    """
    names = [job.name for job in config.jobs]
    for name in args.job or ():
        if name not in names:
            raise ConfigError([f"{args.config}: no job named {name!r} (jobs: {', '.join(names)})"])
    return list(args.job or names)


def _openStore(config: Config, command: str) -> IStateStore:
    """
    The state database, read-only; for C{plan} without one yet (nothing
    was copied, and plan creates none), an empty store in memory.  A
    PostgreSQL one is checked first, and read in place
    (L{imapmig.daemon.pgstate.openCommandStore}).

    @raise PermanentError: it cannot be read.
    @raise ConfigError: a PostgreSQL state cannot be read (one line).
    """
    if isinstance(config.state, PostgreSQLState):
        # Imported here: only a PostgreSQL state needs psycopg.
        from imapmig.daemon.pgstate import openCommandStore

        return openCommandStore(config, empty=command == "plan")
    if command == "plan" and not os.path.exists(config.statePath):
        return MemoryStateStore()
    return SQLiteStateStore(config.statePath, seconds=lambda: 0.0, readOnly=True)


def _report(args: argparse.Namespace, config: Config, jobs: list[str], store: IStateStore, out: TextIO) -> int:
    """
    C{imapmig report}; a fleet's holds are its queue's rows.
    """
    holds = _queueHolds(store) if isinstance(config.state, PostgreSQLState) else None
    return report(store, jobs, args.json, out, asCSV=args.csv, failures=args.failures, holds=holds)


# The jobs a fleet's queue holds paused or cancelled (the admin's holds are
# the rows' states there, not rows of imapmig.job_holds), who asked and
# when as each job's last change of state says.
_QUEUE_HOLDS = """
SELECT j.name, j.state, t.by, t.time FROM imapmig_queue.jobs AS j
  LEFT JOIN LATERAL (SELECT by, time FROM imapmig.job_transitions AS t
                      WHERE t.job = j.name ORDER BY t.seq DESC LIMIT 1) AS t ON true
 WHERE j.state IN ('paused', 'cancelled')
"""


def _queueHolds(store: IStateStore) -> dict[str, JobHold] | None:
    """
    The holds of a fleet's queue on C{store}'s database; L{None} for a
    database without a queue (a state copied, no list loaded yet: the
    store's own holds), or a store in memory (an empty database).
    """
    from imapmig.state.postgresql import PostgreSQLStateStore

    if not isinstance(store, PostgreSQLStateStore):
        return None

    def read(connection: Any) -> dict[str, JobHold] | None:
        if connection.execute("SELECT to_regclass('imapmig_queue.jobs')").fetchone()[0] is None:
            return None
        return {
            name: JobHold(state, by, 0.0 if at is None else float(at))
            for name, state, by, at in connection.execute(_QUEUE_HOLDS).fetchall()
        }

    results: list[dict[str, JobHold] | None] = []
    failures: list[Failure] = []
    store.readOnReader(read, "read the fleet's holds").addCallbacks(results.append, failures.append)
    if failures:
        failures[0].raiseException()
    return results[0]


def _plan(args: argparse.Namespace, config: Config, jobs: list[str], store: IStateStore, out: TextIO) -> int:
    """
    C{imapmig plan}, on the global reactor.
    """
    return _runReactor(lambda reactor: plan(config, jobs, store, reactor, args.json, out))


def _verify(args: argparse.Namespace, config: Config, jobs: list[str], store: IStateStore, out: TextIO) -> int:
    """
    C{imapmig verify}, on the global reactor; its report beside the state
    database (with PostgreSQL, in the working directory:
    L{Config.localDirectory}) unless C{--report} says where.
    """
    from imapmig.status.verifyreport import REPORT_NAME

    reportPath = args.report or os.path.join(config.localDirectory, REPORT_NAME)
    return _runReactor(
        lambda reactor: verify(config, jobs, store, reactor, reportPath, out, args.report is None)
    )


_COMMANDS = {"report": _report, "plan": _plan, "verify": _verify}


def _runReactor(main: Callable[[Any], Coroutine[Any, Any, int]]) -> int:
    """
    Run C{main(reactor)} on the global reactor until it ends; return its
    result.
    """
    from twisted.internet import reactor

    results: list[int] = []

    def done(result: object) -> None:
        if isinstance(result, Failure):
            sys.stderr.write(result.getTraceback())
            results.append(1)
        else:
            results.append(int(result))  # type: ignore[call-overload]
        reactor.stop()

    def start() -> None:
        Deferred.fromCoroutine(main(reactor)).addBoth(done)

    reactor.callWhenRunning(start)
    reactor.run()
    return results[0] if results else 1


if __name__ == "__main__":
    raise SystemExit(main())
