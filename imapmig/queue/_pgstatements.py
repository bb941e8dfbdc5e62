# -*- test-case-name: tests.test_queue_postgresql,tests.test_queue_pgjoblist -*-
"""
The statements of the PostgreSQL job queue (L{imapmig.queue.postgresql}),
split from that module for size (it held them at 960 lines once the
fleet's job list and the hardened queue met): the registration, the
heartbeat, the claim and what runs before it (the releases, the due
jobs, the pruning, the counts folded), the finish and renewal of a
claim, and the counts.  The tables are L{imapmig.queue._pgschema}'s.
"""

from __future__ import annotations

from typing import Sequence

from psycopg import sql

from imapmig.queue._pgjoblist import CLAIMABLE

REGISTER = """
INSERT INTO imapmig_queue.daemons
  (daemon_id, incarnation, host, pid, version, started_at, heartbeat_at, lease_until)
VALUES (%(me)s, nextval('imapmig_queue.incarnations'), %(host)s, %(pid)s, %(version)s,
        now(), now(), now() + make_interval(secs => %(lease)s))
"""

# A claim renews its daemon's lease, and only a live one.
RENEW = """
UPDATE imapmig_queue.daemons
   SET lease_until = now() + make_interval(secs => %(lease)s), heartbeat_at = now()
 WHERE daemon_id = %(me)s AND lease_until > now()
RETURNING extract(epoch FROM lease_until)::float8
"""

# One statement, one row written (the daemon's) however many jobs it holds:
# the controls asked read through jobs_asked (only a claimed job has one;
# a test of the state would let jobs_claimed, all the jobs held, be read),
# the live daemons from their small table, this one's row as the UPDATE
# left it (the snapshot holds it as before), the job list's generation
# from the fleet's one row (imapmig.queue._pgjoblist), and the state store's
# schema version where its table exists (through query_to_xml: a statement
# naming a table that does not exist fails even in a CASE not taken).
HEARTBEAT = """
WITH beat AS (
  UPDATE imapmig_queue.daemons
     SET lease_until = now() + make_interval(secs => %(lease)s), heartbeat_at = now(),
         connections = coalesce(%(connections)s::jsonb, connections),
         rate = coalesce(%(rate)s::real, rate)
   WHERE daemon_id = %(me)s AND lease_until > now()
  RETURNING lease_until, connections)
SELECT extract(epoch FROM beat.lease_until)::float8,
       (SELECT jsonb_agg(jsonb_build_array(name, requested, requested_by))
          FROM imapmig_queue.jobs
         WHERE owner = %(me)s AND requested IN ('pause', 'cancel', 'rerun')),
       (SELECT max(version) FROM imapmig_queue.schema_version),
       (SELECT jobs_generation FROM imapmig_queue.fleet),
       (SELECT jsonb_agg(jsonb_build_array(daemon_id, connections)) FROM imapmig_queue.daemons
         WHERE lease_until > now() AND daemon_id <> %(me)s),
       beat.connections,
       CASE WHEN to_regclass('imapmig.schema_version') IS NOT NULL
            THEN (xpath('/row/v/text()', query_to_xml(
                    'SELECT max(version) AS v FROM imapmig.schema_version',
                    false, true, '')))[1]::text::int
       END
  FROM beat
"""

# The jobs of daemons whose lease ran out go back to the queue (or to the
# hold asked of them), found by those daemons' ids in jobs_claimed (the ids
# an InitPlan: as a join, the planner read every claimed job instead).  A
# job whose daemon has no row (deleted by hand): ORPHANS, at registration.
RELEASE = """
UPDATE imapmig_queue.jobs j
   SET state = CASE j.requested WHEN 'pause' THEN 'paused' WHEN 'cancel' THEN 'cancelled'
                    ELSE 'queued' END,
       owner = NULL, requested = NULL, requested_by = NULL,
       taken_from = x.owner, taken_lease_until = x.lease_until
  FROM (SELECT c.name, c.owner, d.lease_until
          FROM imapmig_queue.jobs c JOIN imapmig_queue.daemons d ON d.daemon_id = c.owner
         WHERE c.state = 'claimed' AND c.owner = ANY (ARRAY(
                 SELECT daemon_id FROM imapmig_queue.daemons WHERE lease_until < now()))
           FOR UPDATE OF c SKIP LOCKED) x
 WHERE j.name = x.name
"""

ORPHANS = """
UPDATE imapmig_queue.jobs j
   SET state = CASE j.requested WHEN 'pause' THEN 'paused' WHEN 'cancel' THEN 'cancelled'
                    ELSE 'queued' END,
       owner = NULL, requested = NULL, requested_by = NULL, taken_from = j.owner
 WHERE j.state = 'claimed'
   AND NOT EXISTS (SELECT 1 FROM imapmig_queue.daemons d WHERE d.daemon_id = j.owner)
"""

# A daemon's row goes a day after its lease ended, once no job names it
# (a job names its owner while claimed only): a few rows of a small table.
PRUNE = """
DELETE FROM imapmig_queue.daemons d
 WHERE d.lease_until < now() - interval '1 day'
   AND NOT EXISTS (SELECT 1 FROM imapmig_queue.jobs j
                    WHERE j.owner = d.daemon_id AND j.state = 'claimed')
"""

DUE = """
UPDATE imapmig_queue.jobs SET state = 'queued', not_before = NULL
 WHERE state = 'deferred' AND not_before <= to_timestamp(%(now)s)
"""

CLAIM_LOCK = 7146055301937135412
"""
The advisory lock a claim's last statement runs under: claims one at a
time, so that the account test of each sees every claim committed before
it (two claims racing would each miss the other's).
"""

# The first queued job none of whose accounts another daemon's claimed
# job has (docs/fleet-design.md "Claiming a job": one daemon per account),
# while the claiming daemon's list (its digest, %(list)s) is the fleet's;
# none of its servers (its accounts' 'server/' part) is one of
# %(skip)s (the claiming daemon's servers without its share); the
# claimed row's digest comes back for the caller's checkClaimed
# (imapmig.queue._pgjoblist); for a takeover, the seconds since the old
# owner's lease ended and whether its retirement cut it short.
CLAIM = (
    """
WITH next AS (
  SELECT name, taken_from, taken_lease_until FROM imapmig_queue.jobs q
   WHERE state = 'queued' AND """
    + CLAIMABLE
    + """
     AND NOT EXISTS (SELECT 1 FROM imapmig_queue.jobs c
                      WHERE c.state = 'claimed' AND c.owner <> %(me)s
                        AND c.accounts && q.accounts)
     AND NOT EXISTS (SELECT 1 FROM unnest(q.accounts) a
                      WHERE split_part(a, '/', 1) = ANY (%(skip)s::text[]))
   ORDER BY position LIMIT 1
   FOR UPDATE SKIP LOCKED)
UPDATE imapmig_queue.jobs j
   SET state = 'claimed', owner = %(me)s, generation = j.generation + 1,
       requested = NULL, requested_by = NULL, taken_from = NULL, taken_lease_until = NULL
  FROM next WHERE j.name = next.name
RETURNING j.name, j.position, j.generation, next.taken_from, j.digest, j.template_id, j.params,
          extract(epoch FROM now() - next.taken_lease_until)::float8,
          EXISTS (SELECT 1 FROM imapmig_queue.daemons d WHERE d.daemon_id = next.taken_from
                     AND d.retired_at <= next.taken_lease_until)
"""
)

# A claimed row whose job cannot be built (imapmig.queue.postgresql):
# failed, in the claim's transaction.
UNBUILT = """
UPDATE imapmig_queue.jobs SET state = 'failed', owner = NULL, requested = NULL, requested_by = NULL
 WHERE name = %(name)s
"""


def beforeClaim(now: float) -> sql.Composed:
    """
    What a claim runs before its own statement (L{CLAIM}), in one round
    trip: a script of the claim's parameterless statements, in the order
    they ran one by one (the removed jobs of expired daemons gone, expired
    daemons' jobs released, the jobs due at C{now} queued, old daemons
    pruned, the claim lock taken, the counts folded).  Sent without
    parameters, psycopg sends it as one simple query; one by one they were
    five more round trips of each claim's ten (bench/results/fleet.md "A
    fleet daemon's statements per job").

    @param now: the claiming daemon's clock, in seconds since the epoch.
    """
    due = sql.SQL(DUE.replace("%(now)s", "{now}")).format(now=sql.Literal(float(now)))
    lock = sql.SQL("SELECT pg_advisory_xact_lock({lock})").format(lock=sql.Literal(CLAIM_LOCK))
    parts = [sql.SQL(LEAVE_EXPIRED), sql.SQL(RELEASE), due, sql.SQL(PRUNE), lock]
    return sql.SQL(";").join([*parts, sql.SQL(FOLD_COUNTS)])


# The counts by state are the sum of job_counts' rows, which the jobs'
# triggers add to (imapmig.queue._pgschema); this folds them into one row
# per state, so that they stay a handful.
FOLD_COUNTS = """
WITH gone AS (DELETE FROM imapmig_queue.job_counts RETURNING state, n)
INSERT INTO imapmig_queue.job_counts
SELECT state, sum(n) FROM gone GROUP BY state HAVING sum(n) <> 0
"""

COUNTS = "SELECT state, sum(n)::bigint FROM imapmig_queue.job_counts GROUP BY state"

# A claim's own row, while current: its owner and generation, its owner's
# lease live (with imapmig_queue.daemons d in the statement).
CURRENT = """
 j.name = %(name)s AND j.owner = %(me)s AND j.generation = %(generation)s
   AND j.state = 'claimed' AND d.daemon_id = j.owner AND d.lease_until > now()
"""

# A claimed job removed by a reload leaves when its claim ends.
LEAVE = "DELETE FROM imapmig_queue.jobs j USING imapmig_queue.daemons d WHERE j.requested = 'remove' AND"

LEAVE_EXPIRED = """
DELETE FROM imapmig_queue.jobs j
 WHERE j.state = 'claimed' AND j.requested = 'remove' AND NOT EXISTS (
   SELECT 1 FROM imapmig_queue.daemons d WHERE d.daemon_id = j.owner AND d.lease_until >= now())
"""

FINISH = (
    """
UPDATE imapmig_queue.jobs j
   SET state = CASE
         WHEN j.requested = 'rerun' THEN 'queued'
         WHEN %(outcome)s = 'completed' THEN 'done'
         WHEN %(outcome)s = 'failed' THEN 'failed'
         WHEN j.requested = 'cancel' THEN 'cancelled'
         WHEN j.requested = 'pause' THEN 'paused'
         WHEN %(outcome)s = 'stopped' THEN 'queued'
         ELSE 'deferred' END,
       not_before = CASE WHEN %(outcome)s = 'deferred' AND j.requested IS NULL
                         THEN to_timestamp(%(notBefore)s) END,
       owner = NULL, requested = NULL, requested_by = NULL
  FROM imapmig_queue.daemons d WHERE"""
    + CURRENT
)

# A claim's end in one statement, so without a transaction of its own: a
# job a reload removed while claimed leaves (LEAVE), any other is
# finished (FINISH); they were two statements and four round trips.
FINISHED = (
    "WITH gone AS (" + LEAVE + CURRENT + " RETURNING j.name)"
    + FINISH + " AND NOT EXISTS (SELECT 1 FROM gone)"
)

# A claim its daemon does not know of (its COMMIT's answer lost): given
# back as FINISH with 'stopped' does, and marked taken over from that
# daemon now, so that the next claim waits the quiet period and reconciles
# the journal as a takeover (the claim erased any earlier taken_from).
GIVE_BACK = FINISH.replace(
    "owner = NULL,", "taken_from = j.owner, taken_lease_until = now(), owner = NULL,", 1
)

# The jobs the database says a daemon holds (the index jobs_claimed).
HELD = "SELECT name, generation FROM imapmig_queue.jobs WHERE owner = %(me)s AND state = 'claimed'"

RENEWED = (
    "SELECT nullif(j.requested, 'remove') FROM imapmig_queue.jobs j, imapmig_queue.daemons d"
    " WHERE" + CURRENT
)

# Rows a reload removed while claimed are unknown to the controls.
KNOWN = "name = %(name)s AND requested IS DISTINCT FROM 'remove'"


__all__: Sequence[str] = (
    "CLAIM",
    "CLAIM_LOCK",
    "COUNTS",
    "CURRENT",
    "DUE",
    "FINISH",
    "FINISHED",
    "FOLD_COUNTS",
    "GIVE_BACK",
    "HELD",
    "HEARTBEAT",
    "KNOWN",
    "LEAVE",
    "LEAVE_EXPIRED",
    "ORPHANS",
    "PRUNE",
    "beforeClaim",
    "REGISTER",
    "RELEASE",
    "RENEW",
    "RENEWED",
)

# A reload's add of one job (imapmig.queue.postgresql's add): a claimed job
# being removed under that name is kept, with the new job's digest and
# accounts; else a new row after the last position.
ADD_KEPT = """
UPDATE imapmig_queue.jobs SET requested = NULL, digest = %(digest)s, accounts = %(accounts)s
 WHERE name = %(name)s AND requested = 'remove'
"""
ADD_NEW = """
INSERT INTO imapmig_queue.jobs (name, position, digest, accounts)
SELECT %(name)s, coalesce(max(position) + 1, 0), %(digest)s, %(accounts)s
  FROM imapmig_queue.jobs ON CONFLICT (name) DO NOTHING
"""

# Which of some jobs a reload removed while claimed are still so (their
# claim not ended), by the unique index on the name.
LEAVING = """
SELECT name FROM imapmig_queue.jobs WHERE name = ANY(%(names)s::text[]) AND requested = 'remove'
"""
