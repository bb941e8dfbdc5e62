# -*- test-case-name: tests.test_state_timeline -*-
"""
Each job's timeline (L{imapmig.state.Transition}s) as the stores keep it:
its SQL for L{imapmig.state.sqlite}, bounded to the first
L{TIMELINE_FIRST} and latest L{TIMELINE_LATEST} transitions.
"""

from __future__ import annotations

import sqlite3

from imapmig.state.jobrecords import TIMELINE_FIRST, TIMELINE_LATEST, Transition


def writeTransition(connection: sqlite3.Connection, job: str, transition: Transition) -> None:
    """
    Insert C{transition} after the last of C{job}'s transitions, numbered
    one more, and delete the numbers past the first L{TIMELINE_FIRST} that
    are no longer among the latest L{TIMELINE_LATEST}; inside the caller's
    transaction.  Each statement is a seek in the table's primary key: the
    cost does not grow with the job's history, nor does the table.
    """
    (last,) = connection.execute(
        "SELECT coalesce(max(seq), 0) FROM job_transitions WHERE job = ?", (job,)
    ).fetchone()
    seq = int(last) + 1
    connection.execute(
        "INSERT INTO job_transitions (job, seq, time, source, target, cause, by)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            job,
            seq,
            transition.time,
            transition.source,
            transition.target,
            transition.cause,
            transition.by,
        ),
    )
    if seq > TIMELINE_FIRST + TIMELINE_LATEST:
        connection.execute(
            "DELETE FROM job_transitions WHERE job = ? AND seq > ? AND seq <= ?",
            (job, TIMELINE_FIRST, seq - TIMELINE_LATEST),
        )


def transitionOf(row: tuple[float, str, str, str, str | None]) -> Transition:
    """
    The L{Transition} of a row of a job's timeline (time, source, target,
    cause, by), as L{imapmig.state._sqlrecords.JobRecords} reads it.
    """
    time, source, target, cause, by = row
    return Transition(float(time), str(source), str(target), str(cause), by)
