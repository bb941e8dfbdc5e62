# -*- test-case-name: tests.test_state_copy -*-
"""
C{imapmig state copy}: a migration's whole state moved from a SQLite file
to a PostgreSQL database, or back (docs/fleet-design.md, "C{imapmig
state copy}"; docs/state-copy.md).

Everything a migration has is copied: the outcomes, the journal (its
entries renumbered with ids the target's writers will not reuse, their
packed messages as they are), the folder marks and fallbacks, the holds,
the daily budgets, the jobs' failures and timelines.  The source is read
in one snapshot and the target written in one transaction, in which the
rows of every table are then counted per job (the budgets per account)
and compared with the source's: the transaction commits only if they
agree (else L{StateCopyMismatch}, nothing written).

Neither side may be in use (L{StateCopyRefused}): a SQLite file's
L{StateFileLock} is taken for the copy, which a running daemon holds; a
PostgreSQL side with a live lease in C{imapmig_queue.daemons} is refused,
naming the daemons, and that table is locked against registrations and
heartbeats while the copy runs.  The target is migrated to the current
schema first and must hold no state of the jobs copied, unless the caller
replaces it.

Why a module of its own, and not the stores' methods: each method writes
one role's rows in a transaction of its own, and reads them back a job or
a folder at a time; the copy needs every table in one transaction,
streamed (a million outcomes are not held in memory), counted in the same
transaction, and a journal given new ids.  It is synchronous and blocking
(C{sqlite3}, psycopg's synchronous API): a command runs it, not the
daemon, and nothing else runs meanwhile.  The two databases' sides are in
L{imapmig.state._copysides}.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

from attrs import field, frozen

from imapmig.errors import StateCopyMismatch, StateCopyRefused
from imapmig.state._copysides import (
    HOLDS,
    JOURNAL,
    TABLES,
    Counts,
    PostgreSQLDatabase,
    PostgreSQLSide,
    Row,
    Side,
    SQLiteFile,
    SQLiteSide,
)

__all__ = [
    "CopyResult",
    "Counts",
    "PostgreSQLDatabase",
    "SQLiteFile",
    "TABLES",
    "copyState",
]

Location = SQLiteFile | PostgreSQLDatabase


@frozen
class CopyResult:
    """
    What a copy committed.

    @ivar counts: the rows of each table (by L{Table.title}), per job (the
        budgets per account, C{(server, user)}), equal in the source and
        the target.
    @ivar replaced: whether the target held state of the jobs copied,
        replaced.
    """

    counts: Counts = field(repr=False)
    replaced: bool

    def jobs(self) -> list[str]:
        """
        The jobs copied, in name order.
        """
        return sorted({key[0] for table in TABLES if table.perJob for key in self.counts[table.title]})


def copyState(
    source: Location, target: Location, replace: bool, seconds: Callable[[], float]
) -> CopyResult:
    """
    Copy every table of the state in C{source} into C{target}, in one
    transaction of the target that commits only if the counts agree.

    @param replace: delete the target's state of the jobs (and budgets of
        the accounts) copied first; without it, such state is refused.
    @param seconds: the clock that says since when a SQLite file's lock is
        held (its holder's attribute).
    @raise StateCopyRefused: a side cannot be opened, is in use, or holds
        what it must not; the source holds nothing.  Nothing was written.
    @raise StateCopyMismatch: the counts disagreed; rolled back.
    @raise PermanentError: a write failed; rolled back.
    """
    with _opened(source, "source", seconds) as reading, _opened(target, "target", seconds) as writing:
        with reading.snapshot(), writing.transaction():
            return _copy(reading, writing, replace)


@contextmanager
def _opened(location: Location, role: str, seconds: Callable[[], float]) -> Iterator[Side]:
    """
    C{location} opened as the copy's C{role} (C{"source"}, C{"target"}),
    closed when the block ends.
    """
    side: Side
    if isinstance(location, SQLiteFile):
        side = SQLiteSide(location, role, seconds)
    else:
        side = PostgreSQLSide(location, role)
    try:
        yield side
    except BaseException:
        side.close(failed=True)
        raise
    side.close(failed=False)


def _copy(source: Side, target: Side, replace: bool) -> CopyResult:
    """
    The copy, inside the source's snapshot and the target's transaction.
    """
    holds = source.holds()
    expected = source.counts(None, None)
    expected[HOLDS.title] = _countHolds(holds)
    jobs = sorted({key[0] for table in TABLES if table.perJob for key in expected[table.title]})
    accounts = sorted({key for table in TABLES if not table.perJob for key in expected[table.title]})
    if not jobs and not accounts:
        raise StateCopyRefused(f"{source.name}: holds no state to copy (no job, no budget)")
    replaced = _cleared(target, jobs, accounts, replace)
    for table in TABLES:
        if table is HOLDS:
            _copyHolds(holds, target)
        elif table is JOURNAL:
            entries = sum(expected[JOURNAL.title].values())
            target.write(table, _renumbered(source.rows(table), target.journalIds(entries)))
        else:
            target.write(table, source.rows(table))
    found = target.counts(jobs, accounts)
    if found != expected:
        raise StateCopyMismatch(
            f"{target.name}: the counts differ from the source's ({_differences(expected, found)});"
            " the copy was rolled back, nothing was written",
            expected,
            found,
        )
    return CopyResult(found, replaced)


def _cleared(target: Side, jobs: list[str], accounts: list[tuple[str, ...]], replace: bool) -> bool:
    """
    Make sure C{target} holds nothing of C{jobs} and C{accounts}:
    deleted if C{replace}, else refused.

    @return: whether there was anything to delete.
    @raise StateCopyRefused: there was, and not C{replace}.
    """
    held = _holding(target.counts(jobs, accounts))
    if held and not replace:
        raise StateCopyRefused(
            f"{target.name}: already holds state of {len(held)} of the jobs or accounts copied"
            f" ({_sample(held)}); copy into another database, or give --replace to replace it"
        )
    if held:
        target.delete(jobs, accounts)
    return bool(held)


def _copyHolds(holds: list[Row], target: Side) -> None:
    """
    Write the source's holds (C{job, hold, by, updated_at}, read by
    L{Side.holds}) into the target's C{job_holds} table, and into the
    states of a fleet's jobs' rows where the target has them
    (L{imapmig.state._copysides.PostgreSQLSide.write}).
    """
    target.write(HOLDS, iter(holds))


def _countHolds(holds: list[Row]) -> dict[tuple[str, ...], int]:
    """
    The holds per job.
    """
    counts: dict[tuple[str, ...], int] = {}
    for row in holds:
        key = (str(row[0]),)
        counts[key] = counts.get(key, 0) + 1
    return counts


def _renumbered(entries: Iterable[Row], ids: Iterator[int]) -> Iterator[Row]:
    """
    The journal's rows (C{entry_id} first), in the source's order, each
    with the next of C{ids} for its id.
    """
    for row in entries:
        yield (next(ids), *row[1:])


def _holding(counts: Counts) -> list[str]:
    """
    The jobs and accounts of which C{counts} has a row, named.
    """
    return sorted({" ".join(key) for rows in counts.values() for key, n in rows.items() if n})


def _sample(names: list[str], shown: int = 5) -> str:
    """
    The first C{shown} of C{names}, and how many more.
    """
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def _differences(expected: Counts, found: Counts) -> str:
    """
    Where C{found} differs from C{expected}: a few tables and keys with
    both numbers.
    """
    differences = []
    for table in TABLES:
        wanted, got = expected.get(table.title, {}), found.get(table.title, {})
        for key in sorted(set(wanted) | set(got)):
            if wanted.get(key, 0) != got.get(key, 0):
                differences.append(
                    f"{table.title} of {' '.join(key)}: {wanted.get(key, 0)} in the source,"
                    f" {got.get(key, 0)} in the target"
                )
    return _sample(differences, 3)
