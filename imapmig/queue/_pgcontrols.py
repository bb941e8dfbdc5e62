# -*- test-case-name: tests.test_queue_postgresql,tests.test_schedule_fleet -*-
"""
The admin's controls of a fleet's jobs' rows (L{imapmig.queue.postgresql}):
what each control sets, the rows it applies to and the state it answers
(L{CONTROLS}), as the statement of one job's control (L{controlOne}) or
of a bulk control's part (L{controlMany}), and how a bulk control is cut
into parts (L{BULK_PART}) and run part after part, synchronously
(L{controlAll}) or each part a call of its own (L{controlAllAsync}), so
that the heartbeats, which share the control connection, go on between.

A module of its own: the queue's module was at its size bound, and the
per-job statements were inline in its methods (one statement per job of
a bulk control, which had none of its own).
"""

from __future__ import annotations

from typing import Callable, Sequence

from twisted.internet.defer import Deferred

from imapmig.errors import ImapmigError
from imapmig.queue._pgstatements import KNOWN

__all__ = ["BULK_PART", "CONTROLS", "controlAll", "controlAllAsync", "controlMany", "controlOne"]

# The admin's controls of jobs' rows (imapmig.queue.postgresql), each as
# what it sets, the rows it applies to, and the state it answers: a job's
# own control is one row (CONTROL_ONE: a row it does not apply to is its
# refusal), a bulk control the rows of its names, or of every job of the
# list, but those skipped, a part at a time (controlMany: the next
# %(limit)s jobs by position after %(after)s, of which it answers the last
# position and how many it changed).  A claimed job is asked (requested,
# with who asked), for its owner's heartbeat; any other changes state at
# once.
CONTROLS = {
    "pause": (
        "state = CASE state WHEN 'claimed' THEN 'claimed' ELSE 'paused' END,"
        " requested = CASE state WHEN 'claimed' THEN 'pause' END,"
        " requested_by = CASE state WHEN 'claimed' THEN %(by)s END",
        "state IN ('queued', 'deferred') OR (state = 'claimed' AND requested IS DISTINCT FROM 'cancel')",
        "state",
    ),
    "resume": (
        "state = CASE state WHEN 'claimed' THEN 'claimed'"
        "   WHEN 'paused' THEN CASE WHEN not_before IS NULL THEN 'queued' ELSE 'deferred' END"
        "   ELSE 'queued' END,"
        " requested = NULL, requested_by = NULL",
        "state IN ('paused', 'cancelled') OR (state = 'claimed' AND requested = 'pause')",
        "CASE state WHEN 'deferred' THEN 'queued' ELSE state END",
    ),
    "cancel": (
        "state = CASE state WHEN 'claimed' THEN 'claimed' ELSE 'cancelled' END,"
        " requested = CASE state WHEN 'claimed' THEN 'cancel' END,"
        " requested_by = CASE state WHEN 'claimed' THEN %(by)s END,"
        " not_before = CASE state WHEN 'claimed' THEN not_before END",
        "state IN ('queued', 'deferred', 'paused', 'claimed')",
        "state",
    ),
    "requeue": (
        "state = CASE WHEN state IN ('done', 'failed') THEN 'queued' ELSE state END,"
        " requested_by = CASE WHEN state = 'claimed' AND requested IS NULL THEN %(by)s"
        "   ELSE requested_by END,"
        " requested = CASE state WHEN 'claimed' THEN coalesce(requested, 'rerun') END",
        "state <> 'cancelled'",
        "CASE state WHEN 'deferred' THEN 'queued' ELSE state END",
    ),
}


def controlOne(control: str) -> str:
    """
    The statement of C{control} (a key of L{CONTROLS}) of job C{%(name)s}
    asked by C{%(by)s}: its new state, or no row if it does not apply.
    """
    sets, applies, answer = CONTROLS[control]
    return (
        f"UPDATE imapmig_queue.jobs SET {sets} WHERE {KNOWN} AND ({applies}) RETURNING {answer}"
    )


def controlMany(control: str, chosen: bool) -> str:
    """
    The statement of C{control} of the next C{%(limit)s} jobs by position
    after C{%(after)s} (of the names C{%(names)s} with C{chosen}, else of
    every job of the list) but those of C{%(skip)s}, asked by C{%(by)s}:
    its one row is the last position of those jobs (L{None}: there were
    none) and how many of them it changed.
    """
    sets, applies, _ = CONTROLS[control]
    among = " AND name = ANY(%(names)s::text[])" if chosen else ""
    return f"""
WITH part AS (
  SELECT name AS part_name, position FROM imapmig_queue.jobs
   WHERE position > %(after)s AND requested IS DISTINCT FROM 'remove'{among}
     AND NOT (name = ANY(%(skip)s::text[]))
   ORDER BY position LIMIT %(limit)s),
changed AS (
  UPDATE imapmig_queue.jobs SET {sets}
    FROM part WHERE imapmig_queue.jobs.name = part.part_name AND ({applies})
  RETURNING 1)
SELECT (SELECT max(position) FROM part), (SELECT count(*) FROM changed)
"""


BULK_PART = 10_000
"""
The most jobs one transaction of a bulk control looks at: 0.3 to 0.7 s of
the control connection, which the heartbeats share (100,000 in one took
3.4 to 6.8 s on the loaded development machine, beyond its 5 s bound).
"""

Part = tuple["int | None", int]


def _parts(names: Sequence[str] | None) -> list[Sequence[str] | None]:
    """
    The parts of a bulk control of C{names}: L{BULK_PART} names each, or
    (L{None}) the whole list, by positions.
    """
    if names is None:
        return [None]
    return [names[i : i + BULK_PART] for i in range(0, len(names), BULK_PART)]


def controlAll(part: Callable[[Sequence[str] | None, int], Part], names: Sequence[str] | None) -> int:
    """
    A bulk control of C{names} (L{None}: every job), C{part} after
    C{part} (given a part's names, or L{None}, and the position after
    which it looks, it answers the last position it looked at and how
    many jobs it changed).

    @return: how many jobs it changed.
    """
    changed = 0
    for names in _parts(names):
        after: int | None = -1
        while after is not None:
            after, count = part(names, after)
            changed += count
            after = None if names is not None else after
    return changed


async def controlAllAsync(
    part: Callable[[Sequence[str] | None, int], Deferred[Part]], names: Sequence[str] | None
) -> int:
    """
    L{controlAll} with each C{part} answered later; a part that fails ends
    it, its error naming how many jobs the parts before changed.
    """
    changed = 0
    for names in _parts(names):
        after: int | None = -1
        while after is not None:
            try:
                after, count = await part(names, after)
            except ImapmigError as e:
                if changed:
                    raise type(e)(f"{e} (after {changed} jobs changed)") from None
                raise
            changed += count
            after = None if names is not None else after
    return changed
