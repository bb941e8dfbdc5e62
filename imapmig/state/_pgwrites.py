# -*- test-case-name: tests.test_state_pgbatch,tests.test_state_contract -*-
"""
The writes of the PostgreSQL state store as values, and the one
transaction that makes a batch of them (L{commitBatch}), run in a thread
of the pool on the writer's connection for L{imapmig.state._pgbatch}.

A batch begins with the fence (docs/fleet-design.md, "Every write checks
owner, generation and lease"): one statement over the claims its writes
were made under, reading the queue's tables C{imapmig_queue.jobs} and
C{imapmig_queue.daemons} (named here: the state layer does not import
the queue's) and locking each current job's row C{FOR KEY SHARE} until
the commit, so that a takeover, which takes the row C{FOR UPDATE}, either
committed before (and the check fails) or waits for (or skips past) our
commit.  The writes of claims it does not return are not made.  Then
each table is written once for the whole batch, by arrays (C{unnest}), in
an order that keeps what one caller wrote before another: the journal,
the outcomes, the settled entries, the names, the folder marks, the
fallbacks, the failures, the timeline.

Every statement is idempotent, so that a batch whose C{COMMIT} was lost
with its connection can run again whole: the journal's ids and the
timeline's write ids are chosen here once, before the first attempt
(L{WriterIds}: a block drawn from the sequence C{imapmig.journal_ids} in
the high bits, a counter in the low 32), and inserted C{ON CONFLICT DO
NOTHING} or not at all if present; upserts write the same values again;
deletions find nothing the second time.

What it replaces: a transaction per call, each role module's own
statements for one row (L{imapmig.state._pgoutcomes} and its siblings
now make L{Write}s).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import attrs
from twisted.internet.defer import Deferred

from imapmig.state._pgbase import Connection
from imapmig.state.jobrecords import TIMELINE_FIRST, TIMELINE_LATEST
from imapmig.state.outcomes import OUTCOME_UPSERT

Row = tuple[Any, ...]

JOURNAL = "journal"
OUTCOMES = "outcomes"
NAMES = "names"
FOLDER = "folder"
FALLBACK = "fallback"
FAILURE = "failure"
TRANSITION = "transition"


@attrs.frozen
class Claim:
    """
    The claim a fenced write is made under.

    @ivar job: the job's name (C{imapmig_queue.jobs.name}).
    @ivar owner: the daemon id holding it.
    @ivar generation: the claim's generation.
    """

    job: str
    owner: str
    generation: int


@attrs.define(eq=False)
class Write:
    """
    One caller's write, queued with its Deferred.

    @ivar kind: which table it writes (L{JOURNAL}, L{OUTCOMES}, ...).
    @ivar job: the job it writes for.
    @ivar payload: its values, as the kind's writer takes them.
    @ivar rows: how many rows it writes, for the batch's bounds.
    @ivar claim: the claim it is fenced by, or L{None} (the store itself,
        not a view of a claim).
    @ivar deferred: fired after its commit.
    @ivar settled: of an L{OUTCOMES} write, the journal entries it
        settles (deleted).
    @ivar writeId: its id (a journal entry's, a transition's), chosen
        once before the first attempt.
    @ivar queuedAt: when it was queued, on the batcher's clock.
    """

    kind: str
    job: str
    payload: Any
    rows: int
    claim: Claim | None
    settled: Sequence[int] = ()
    deferred: Deferred[Any] = attrs.field(factory=Deferred)
    writeId: int | None = None
    queuedAt: float = 0.0

    def result(self) -> object:
        """
        What its caller gets: a journal entry's id, else L{None}.
        """
        return self.writeId if self.kind == JOURNAL else None


_BLOCK = 1 << 32


class WriterIds:
    """
    Ids chosen by the writer: a block drawn from the sequence
    C{imapmig.journal_ids} (once per store open, and again every 2**32
    ids) in the high bits, a counter in the low 32.  Used by one thread
    at a time (the batches run one after the other).
    """

    def __init__(self) -> None:
        self._next = 0
        self._end = 0

    def draw(self, connection: Connection) -> None:
        """
        Draw a new block from the sequence.
        """
        row = connection.execute("SELECT nextval('imapmig.journal_ids')").fetchone()
        assert row is not None
        self._next = int(row[0]) * _BLOCK + 1
        self._end = (int(row[0]) + 1) * _BLOCK

    def assign(self, connection: Connection, writes: Iterable[Write]) -> None:
        """
        Give each write that needs one and has none its id.
        """
        for write in writes:
            if write.writeId is None and write.kind in (JOURNAL, TRANSITION):
                if self._next >= self._end:
                    self.draw(connection)
                write.writeId = self._next
                self._next += 1


_FENCE = """
    SELECT j.name, f.owner, j.generation
      FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS f(name, owner, generation)
      JOIN imapmig_queue.jobs j ON j.name = f.name
      JOIN imapmig_queue.daemons d ON d.daemon_id = j.owner
     WHERE j.owner = f.owner::uuid AND j.generation = f.generation AND j.state = 'claimed'
       AND d.lease_until > now()
       FOR KEY SHARE OF j
"""


def fence(connection: Connection, writes: Sequence[Write]) -> set[Claim]:
    """
    Check the claims of C{writes} and lock the current ones' rows until
    the transaction ends.

    @return: the claims that are not current (their writes are not to
        be made).
    """
    claims = {w.claim for w in writes if w.claim is not None}
    if not claims:
        return set()
    asked = sorted(claims, key=lambda c: (c.job, c.owner, c.generation))
    columns = [list(column) for column in zip(*((c.job, c.owner, c.generation) for c in asked))]
    rows = connection.execute(_FENCE, columns).fetchall()
    return claims - {Claim(name, str(owner), int(generation)) for name, owner, generation in rows}


_JOURNAL = """
    INSERT INTO imapmig.journal (entry_id, job, mailbox, uidvalidity, uid_floor, messages, written_at)
    SELECT * FROM unnest(
        %s::bigint[], %s::text[], %s::text[], %s::bigint[], %s::bigint[], %s::bytea[],
        %s::double precision[])
    ON CONFLICT (entry_id) DO NOTHING
"""

# One statement for every outcome of the batch: the column arrays, each
# message once (its latest outcome: ON CONFLICT DO UPDATE may not touch a
# row twice in one statement).
_UPSERT = (
    """
    INSERT INTO imapmig.messages (
        job, folder_key, message_key, mailbox, size, uidvalidity, uid, failure, note,
        present, converted, message_id, message_date, message_from, message_subject, updated_at)
    SELECT * FROM unnest(
        %s::text[], %s::text[], %s::text[], %s::text[], %s::bigint[], %s::bigint[], %s::bigint[],
        %s::text[], %s::text[], %s::boolean[], %s::boolean[],
        %s::text[], %s::text[], %s::text[], %s::text[], %s::double precision[]
    )
    """
    + OUTCOME_UPSERT
)

_SETTLE = """
    DELETE FROM imapmig.journal j USING unnest(%s::text[], %s::bigint[]) AS s(job, entry_id)
     WHERE j.entry_id = s.entry_id AND j.job = s.job
"""

_NAME = """
    UPDATE imapmig.messages AS m SET
        message_id = u.message_id, message_date = u.message_date,
        message_from = u.message_from, message_subject = u.message_subject
    FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
                %s::text[])
        AS u (job, folder_key, message_key, message_id, message_date, message_from, message_subject)
    WHERE m.job = u.job AND m.folder_key = u.folder_key AND m.message_key = u.message_key
        AND m.failure IS NOT NULL
"""

_FORGET = """
    DELETE FROM imapmig.folders f USING unnest(%s::text[], %s::text[]) AS u(job, folder_key)
     WHERE f.job = u.job AND f.folder_key = u.folder_key
"""

# A mark's deferred UIDs travel as the text of an array ('{1,2}'): arrays
# of arrays of different lengths cannot be one parameter.
_MARK = """
    INSERT INTO imapmig.folders (
        job, folder_key, uidvalidity, uidnext, highestmodseq, messages, deferred, fingerprint,
        octets, updated_at)
    SELECT u.job, u.folder_key, u.uidvalidity, u.uidnext, u.highestmodseq, u.messages,
           u.deferred::bigint[], u.fingerprint, u.octets, u.updated_at
      FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[],
                  %s::text[], %s::text[], %s::bigint[], %s::double precision[])
        AS u (job, folder_key, uidvalidity, uidnext, highestmodseq, messages, deferred,
              fingerprint, octets, updated_at)
    ON CONFLICT (job, folder_key) DO UPDATE SET
        uidvalidity = excluded.uidvalidity,
        uidnext = excluded.uidnext,
        highestmodseq = excluded.highestmodseq,
        messages = excluded.messages,
        deferred = excluded.deferred,
        fingerprint = excluded.fingerprint,
        octets = excluded.octets,
        updated_at = excluded.updated_at
"""

_FALLBACK = """
    INSERT INTO imapmig.folder_fallbacks (job, mailbox, fallback, reason, updated_at)
    SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::double precision[])
    ON CONFLICT (job, mailbox) DO UPDATE SET
        fallback = excluded.fallback,
        reason = excluded.reason,
        updated_at = excluded.updated_at
"""

_CLEAR_FAILURE = "DELETE FROM imapmig.job_failures WHERE job = ANY(%s::text[])"

_FAILURE = """
    INSERT INTO imapmig.job_failures (job, reason, updated_at)
    SELECT * FROM unnest(%s::text[], %s::text[], %s::double precision[])
    ON CONFLICT (job) DO UPDATE SET reason = excluded.reason, updated_at = excluded.updated_at
"""

# The key (with each job's hashtext) of the lock that numbers a job's
# transitions: 'imtl'.
TIMELINE_LOCK = 0x696D746C

# Taken before the numbering, in one order (by key) for every writer so that
# two batches wait for each other rather than deadlock: a job's numbers are
# the count of its transitions (SQLite's, and what a copy carries), and two
# transactions reading the same max(seq) from their snapshots (two daemons
# of a fleet writing one job's transitions: a job given up by one and
# claimed by another, a daemon stopping beside its successor, a control
# beside the claim) inserted the same number: the second failed with
# job_transitions_pkey, its transitions lost (issue 30).  The lock is held
# until the commit, and the next statement's snapshot (READ COMMITTED)
# sees what the lock's previous holder committed.
_LOCK_TIMELINES = """
    SELECT pg_advisory_xact_lock(%s, k.h)
      FROM (SELECT DISTINCT hashtext(job) AS h FROM unnest(%s::text[]) AS job ORDER BY 1) AS k
"""

# The transitions not already written (a batch run again), numbered after
# each job's latest in the order given, under the job's L{TIMELINE_LOCK};
# each job's newest number back.
_TRANSITIONS = """
    WITH given AS (
        SELECT * FROM unnest(%s::bigint[], %s::text[], %s::double precision[], %s::text[],
                             %s::text[], %s::text[], %s::text[])
            WITH ORDINALITY AS g(write_id, job, time, source, target, cause, by, n)
         WHERE NOT EXISTS (SELECT 1 FROM imapmig.job_transitions x WHERE x.write_id = g.write_id)),
    top AS (
        SELECT job, max(seq) AS seq FROM imapmig.job_transitions
         WHERE job IN (SELECT job FROM given) GROUP BY job)
    INSERT INTO imapmig.job_transitions (job, seq, time, source, target, cause, by, write_id)
    SELECT g.job, coalesce(top.seq, 0) + row_number() OVER (PARTITION BY g.job ORDER BY g.n),
           g.time, g.source, g.target, g.cause, g.by, g.write_id
      FROM given g LEFT JOIN top USING (job)
    RETURNING job, seq
"""

_TRIM = """
    DELETE FROM imapmig.job_transitions t USING unnest(%s::text[], %s::bigint[]) AS u(job, seq)
     WHERE t.job = u.job AND t.seq > %s AND t.seq <= u.seq - %s
"""


def _columns(rows: Iterable[Row], width: int) -> list[list[Any]]:
    """
    C{rows} as C{width} column lists (empty ones if there are none).
    """
    columns = [list(column) for column in zip(*rows)]
    return columns or [[] for _ in range(width)]


def _latest(writes: Sequence[Write], kind: str) -> dict[Any, Row]:
    """
    Of the rows of the C{kind} writes, keyed by their first element (a
    tuple key), the latest given.
    """
    latest: dict[Any, Row] = {}
    for write in writes:
        if write.kind == kind:
            for key, row in write.payload:
                latest[key] = row
    return latest


def _writeJournal(connection: Connection, writes: Sequence[Write]) -> None:
    rows = [(w.writeId, w.job, *w.payload) for w in writes if w.kind == JOURNAL]
    if rows:
        connection.execute(_JOURNAL, _columns(rows, 7))


def _writeOutcomes(connection: Connection, writes: Sequence[Write]) -> None:
    latest = _latest(writes, OUTCOMES)
    if latest:
        connection.execute(_UPSERT, _columns(latest.values(), 16))
    settled = [
        (w.job, entryId) for w in writes if w.kind == OUTCOMES for entryId in w.settled
    ]
    if settled:
        connection.execute(_SETTLE, _columns(settled, 2))


def _writeNames(connection: Connection, writes: Sequence[Write]) -> None:
    latest = _latest(writes, NAMES)
    if latest:
        connection.execute(_NAME, _columns(latest.values(), 7))


def _writeFolders(connection: Connection, writes: Sequence[Write]) -> None:
    latest = _latest(writes, FOLDER)
    forget = [key for key, row in latest.items() if len(row) == 2]
    if forget:
        connection.execute(_FORGET, _columns(forget, 2))
    marks = [row for row in latest.values() if len(row) > 2]
    if marks:
        connection.execute(_MARK, _columns(marks, 10))
    latestFallbacks = _latest(writes, FALLBACK)
    if latestFallbacks:
        connection.execute(_FALLBACK, _columns(latestFallbacks.values(), 5))


def _writeFailures(connection: Connection, writes: Sequence[Write]) -> None:
    latest = _latest(writes, FAILURE)
    cleared = [job for job, (_, reason, _) in latest.items() if reason is None]
    if cleared:
        connection.execute(_CLEAR_FAILURE, (cleared,))
    failed = [row for row in latest.values() if row[1] is not None]
    if failed:
        connection.execute(_FAILURE, _columns(failed, 3))


def _writeTimeline(connection: Connection, writes: Sequence[Write]) -> None:
    rows = [(w.writeId, w.job, *w.payload) for w in writes if w.kind == TRANSITION]
    if not rows:
        return
    connection.execute(_LOCK_TIMELINES, (TIMELINE_LOCK, sorted({row[1] for row in rows})))
    newest: dict[str, int] = {}
    for job, seq in connection.execute(_TRANSITIONS, _columns(rows, 7)).fetchall():
        newest[job] = max(seq, newest.get(job, 0))
    trimmed = [(job, seq) for job, seq in newest.items() if seq > TIMELINE_FIRST + TIMELINE_LATEST]
    if trimmed:
        connection.execute(_TRIM, (*_columns(trimmed, 2), TIMELINE_FIRST, TIMELINE_LATEST))


_WRITERS: tuple[Callable[[Connection, Sequence[Write]], None], ...] = (
    _writeJournal,
    _writeOutcomes,
    _writeNames,
    _writeFolders,
    _writeFailures,
    _writeTimeline,
)


def commitBatch(connection: Connection, ids: WriterIds, writes: Sequence[Write]) -> set[Claim]:
    """
    Make C{writes} in one transaction on C{connection} (in autocommit
    mode): the fence first, then each table once.

    @return: the claims found not current, whose writes were not made.
    """
    ids.assign(connection, writes)
    with connection.transaction():
        stale = fence(connection, writes)
        live = [w for w in writes if w.claim is None or w.claim not in stale]
        for writer in _WRITERS:
            writer(connection, live)
    return stale
