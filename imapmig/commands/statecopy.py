# -*- test-case-name: tests.test_state_copy -*-
"""
C{imapmig state copy}, for admins: a migration's state moved from one
daemon's SQLite file to a fleet's PostgreSQL database, or back.

    imapmig state copy --from FILE|URI --to URI|FILE [--config FILE] [--replace]

copies every table of the state (L{imapmig.state.copying}) in one
transaction of the target, which commits only if the rows of every table
agree per job with the source's; it prints them.  The PostgreSQL password
comes from C{--config}'s C{state_password_file} (or credential), whose
C{state} must name the same database, or from libpq (C{PGPASSFILE},
C{~/.pgpass}, C{PGPASSWORD}); never from the command line.  Exit status 0
when copied, 1 when the counts disagreed or a write failed (nothing was
copied), 2 on bad input or a refusal (a missing file, a URI with a
password, a database it cannot reach, a source with nothing in it, a
daemon using either side, a target already holding the jobs without
C{--replace}).

New: no command copied state before, and the other commands' module
(L{imapmig.commands.cli}) reads one configuration's state, read-only.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Mapping, TextIO

from imapmig.config import PostgreSQLState, loadConfig
from imapmig.config.statelocation import parsePostgreSQLURI
from imapmig.errors import (
    ConfigError,
    PermanentError,
    StateCopyMismatch,
    StateCopyRefused,
    StateURIProblem,
)

if TYPE_CHECKING:
    from imapmig.state.copying import CopyResult, PostgreSQLDatabase, SQLiteFile

_SCHEMES = ("postgresql://", "postgres://")


def addCopyParser(stateCommands: Any) -> None:
    """
    Declare C{copy} among the C{imapmig state} commands.

    @param stateCommands: the C{state} parser's subparsers.
    """
    parser = stateCommands.add_parser(
        "copy", help="copy a migration's state between a SQLite file and PostgreSQL"
    )
    parser.add_argument(
        "--from", dest="source", required=True, metavar="FILE|URI", help="the state copied"
    )
    parser.add_argument(
        "--to", dest="target", required=True, metavar="URI|FILE", help="where it is copied"
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="a configuration whose state is the PostgreSQL side: its state_password_file"
        " gives the password",
    )
    parser.add_argument(
        "--replace", action="store_true", help="replace the target's state of the jobs copied"
    )
    parser.set_defaults(run=stateCopy)


def stateCopy(args: argparse.Namespace, out: TextIO, err: TextIO | None = None) -> int:
    """
    Run C{imapmig state copy}; return its exit status.
    """
    err = sys.stderr if err is None else err
    try:
        # Here, not above: psycopg comes with the imapmig[postgresql]
        # extra, which the other commands do without.
        from imapmig.state.copying import copyState
    except ImportError as e:
        err.write(f"imapmig state copy needs psycopg (pip install imapmig[postgresql]): {e}\n")
        return 2
    try:
        source, target = _locations(args)
    except ConfigError as e:
        for problem in e.shown():
            err.write(problem + "\n")
        return 2
    except StateCopyRefused as e:
        err.write(f"{e}\n")
        return 2
    started = time.monotonic()
    try:
        result = copyState(source, target, args.replace, time.time)
    except StateCopyRefused as e:
        err.write(f"{e}\n")
        return 2
    except StateCopyMismatch as e:
        err.write(f"{e}\n")
        out.write("in the source:\n")
        _printCounts(e.source, out)
        out.write("in the target:\n")
        _printCounts(e.target, out)
        return 1
    except PermanentError as e:
        err.write(f"{e}\n")
        return 1
    _printResult(source, target, result, time.monotonic() - started, out)
    return 0


def _locations(args: argparse.Namespace) -> tuple[SQLiteFile | PostgreSQLDatabase, SQLiteFile | PostgreSQLDatabase]:
    """
    The source and the target the arguments name, the PostgreSQL one
    with the password of C{--config}.

    @raise StateCopyRefused: an argument is wrong.
    @raise ConfigError: C{--config} is.
    """
    states = {label: _state(label, value) for label, value in (("--from", args.source), ("--to", args.target))}
    databases = [label for label, state in states.items() if isinstance(state, PostgreSQLState)]
    if len(databases) != 1:
        raise StateCopyRefused(
            "--from and --to: one must be a SQLite file and the other a postgresql:// URI"
        )
    (label,) = databases
    state = states[label]
    assert isinstance(state, PostgreSQLState)
    from psycopg.conninfo import make_conninfo

    from imapmig.state.copying import PostgreSQLDatabase, SQLiteFile

    password = None if args.config is None else _password(args.config, label, state)
    conninfo = make_conninfo("", **state.keywords())
    locations = {
        key: PostgreSQLDatabase(conninfo, key, password) if key == label else SQLiteFile(str(value), key)
        for key, value in states.items()
    }
    return locations["--from"], locations["--to"]


def _state(label: str, value: str) -> PostgreSQLState | str:
    """
    The PostgreSQL database C{value} names, or the SQLite file's
    absolute path.

    @raise StateCopyRefused: a URI that cannot be used (one with a
        password among them), or an empty path.
    """
    if value.startswith(_SCHEMES):
        try:
            return parsePostgreSQLURI(value, os.path.abspath)
        except StateURIProblem as e:
            raise StateCopyRefused(
                f"{label}: {e} (the password comes from --config's state_password_file,"
                " PGPASSFILE or PGPASSWORD)" if "password" in str(e) else f"{label}: {e}"
            ) from None
    if not value or "://" in value:
        raise StateCopyRefused(f"{label}: give a SQLite file or postgresql://USER@HOST:PORT/DBNAME")
    return os.path.abspath(value)


def _password(path: str, label: str, state: PostgreSQLState) -> str | None:
    """
    The password the configuration at C{path} gives its state, which must
    be the database C{state} (another's password is not sent to it).

    @raise ConfigError: the file is invalid, or names another state.
    """
    config = loadConfig(path)
    given = config.state
    if not isinstance(given, PostgreSQLState):
        raise ConfigError([f"{path}: state: a SQLite file; the password of {label}'s database comes from a PostgreSQL state"])
    where = (given.host, given.port, given.user, given.dbname)
    if where != (state.host, state.port, state.user, state.dbname):
        raise ConfigError(
            [f"{path}: state: {given.uri()} is not {label}'s database {state.uri()}; its password is not sent there"]
        )
    return None if given.password is None else given.password.value


def _printResult(
    source: SQLiteFile | PostgreSQLDatabase,
    target: SQLiteFile | PostgreSQLDatabase,
    result: CopyResult,
    seconds: float,
    out: TextIO,
) -> None:
    """
    Say what was copied, and the counts.
    """
    replaced = " (their state there replaced)" if result.replaced else ""
    out.write(
        f"copied {len(result.jobs())} jobs from {source.where()} to {target.where()}"
        f" in {seconds:.1f} s{replaced}; the rows of every table agree:\n"
    )
    _printCounts(result.counts, out)


Tables = Mapping[str, Mapping[tuple[str, ...], int]]


def _printCounts(counts: Tables, out: TextIO) -> None:
    """
    The rows of each table per job, with their total, then the budgets'
    per account.
    """
    budgets = counts.get("budgets", {})
    lines = [*_jobLines(counts), ["account", "budgets"]]
    lines.extend([" ".join(key), str(n)] for key, n in sorted(budgets.items()))
    width = max(len(line[0]) for line in lines)
    for line in lines:
        out.write("  ".join([line[0].ljust(width), *(cell.rjust(9) for cell in line[1:])]).rstrip() + "\n")


def _jobLines(counts: Tables) -> list[list[str]]:
    """
    The lines of the jobs' counts: a heading, a line per job, the total.
    """
    from imapmig.state.copying import TABLES

    perJob = [counts.get(table.title, {}) for table in TABLES if table.perJob]
    jobs = sorted({key for rows in perJob for key in rows})
    lines = [["job", *(table.title for table in TABLES if table.perJob)]]
    lines.extend([key[0], *(str(rows.get(key, 0)) for rows in perJob)] for key in jobs)
    lines.append(["total", *(str(sum(rows.values())) for rows in perJob)])
    return lines
