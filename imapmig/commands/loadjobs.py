# -*- test-case-name: tests.test_loadjobs -*-
"""
C{imapmig state load-jobs}: a fleet's job list loaded or replaced without
a daemon.

    imapmig state load-jobs --config FILE [--fleet NAME]

loads the configuration's jobs into its PostgreSQL database as the
fleet's job list, or replaces the list there as a daemon's reload does
(L{imapmig.queue._pgjoblist.replaceJobList}: jobs no longer listed
removed, at once unless claimed; changed jobs changed; new ones added
after the last), and says what changed.  A database holding another
fleet is refused.  Exit status 0, 2 on an invalid configuration, a
refusal or a database that cannot be reached.

New beside L{imapmig.commands.cli}, which declares it: its work is the
queue's, on a connection of its own, and psycopg is imported only when
it runs (the C{imapmig[postgresql]} extra).
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any, TextIO

from imapmig.config import loadConfig
from imapmig.config.model import Config, PostgreSQLState
from imapmig.errors import ConfigError, PermanentError


def addLoadJobs(stateCommands: Any) -> None:
    """
    Declare C{load-jobs} among C{imapmig state}'s subcommands (an
    C{argparse} subparsers action); its C{run} default runs it.
    """
    parser = stateCommands.add_parser(
        "load-jobs", help="load or replace a fleet's job list in its PostgreSQL database"
    )
    parser.add_argument("--config", required=True, metavar="FILE", help="the YAML configuration")
    parser.add_argument(
        "--fleet", metavar="NAME", help="the fleet's name (default: the configuration's fleet.name)"
    )
    parser.set_defaults(run=loadJobs)


def _fleetName(config: Config, given: str | None) -> str | None:
    """
    The fleet's name: C{--fleet}, else the configuration's C{fleet.name}.
    """
    fleet = getattr(config, "fleet", None)
    return given or (None if fleet is None else str(fleet.name))


def loadJobs(args: argparse.Namespace, out: TextIO) -> int:
    """
    Run C{imapmig state load-jobs}; return its exit status.
    """
    try:
        # A user list's rows are read once, as they are loaded (a fleet's
        # daemon digests its lists so too: not a job per row).
        config = loadConfig(args.config, lazyUserLists=True)
    except ConfigError as e:
        for problem in e.shown():
            sys.stderr.write(problem + "\n")
        return 2
    fleet = _fleetName(config, args.fleet)
    if not isinstance(config.state, PostgreSQLState) or fleet is None:
        sys.stderr.write(
            f"{args.config}: state load-jobs needs a PostgreSQL state database and"
            " a fleet's name (fleet: name:, or --fleet NAME)\n"
        )
        return 2
    try:
        said = _load(config.state, fleet, config)
    except PermanentError as e:
        sys.stderr.write(f"{e}\n")
        return 2
    out.write(said + "\n")
    return 0


def _load(state: PostgreSQLState, fleet: str, config: Config) -> str:
    """
    Load C{config}'s jobs as fleet C{fleet}'s list in C{state}'s database.

    @return: what changed, in words.
    @raise PermanentError: refused, or the database cannot be reached.
    """
    import psycopg

    from imapmig.queue._pgjoblist import JobList, readFleet, replaceJobList
    from imapmig.queue._pgschema import migrate

    by = f"{socket.gethostname()} (imapmig state load-jobs)"
    keywords: dict[str, Any] = state.keywords()
    if state.password is not None:
        keywords["password"] = state.password.value
    jobs = JobList.of(config.jobs, config.userLists)
    try:
        with psycopg.connect(
            autocommit=True,
            connect_timeout=5,
            application_name="imapmig state load-jobs",
            **keywords,
        ) as connection:
            with connection.transaction():
                migrate(connection, by)
                change = replaceJobList(connection, fleet, jobs, by)
                row = readFleet(connection)
            if change.loaded:
                # The rows just written vacuumed and their statistics taken
                # now, by the command, not by autovacuum while the daemons
                # start: its ANALYZE of a million new rows holds a snapshot
                # for seconds, and every claim meanwhile reads again the
                # dead versions of the claims before it (docs/fleet-design.md
                # "Claiming a job"; the million row's claims at a thousand
                # and a million jobs: 21.9 against 26.4-26.9 buffers each
                # without, 22.9-23.2 against 26.5-26.9 with).
                connection.execute("VACUUM (ANALYZE) imapmig_queue.jobs")
    except psycopg.Error as e:
        raise PermanentError(f"{state.uri()}: {e}") from None
    except ConfigError as e:
        # A user list's rows, read as they are loaded (nothing written).
        raise PermanentError("\n".join(e.shown())) from None
    if not change.loaded:
        return f"fleet {fleet!r}: the database holds this job list already (generation {change.generation})"
    return (
        f"fleet {fleet!r}: job list loaded (generation {change.generation}, {0 if row is None else row.jobs:,} jobs):"
        f" {change.added:,} added, {change.removed:,} removed, {change.leaving:,} removed when"
        f" their claim ends, {change.changed:,} changed"
    )
