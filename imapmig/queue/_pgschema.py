# -*- test-case-name: tests.test_queue_postgresql -*-
"""
The PostgreSQL tables of the job queue and of the daemons that claim from
it (L{imapmig.queue.postgresql}), with their own schema version.

They live in a PostgreSQL schema of their own, C{imapmig_queue}
(C{imapmig_queue.jobs}, C{imapmig_queue.daemons},
C{imapmig_queue.schema_version}, the sequence
C{imapmig_queue.incarnations}), so that they cannot clash with the state
store's tables (C{imapmig/state/}, built beside, in schema C{imapmig}),
and are migrated under an advisory lock of their own.  The columns are
those of docs/fleet-design.md "The schema" that the claims and leases
need: in step 1 the fleet's row with its job list's digest and each
job's digest (L{imapmig.queue._pgjoblist}); in step 2 the accounts of one
daemon per account, who asked a control, the daemons' connections, and
C{job_counts}, the counts by state kept by the jobs' triggers; in step 3
the templates of the user lists, and each of their rows' template and
params; in step 4 each daemon's rate; in step 5 the claim's cost made
the same at a million jobs as at a thousand (no C{job_id}: a job's key
is its name; C{jobs_queued} packed full).  The servers are not here yet.  Nothing existed to replace: the
in-memory queue keeps its state in the process.
"""

from __future__ import annotations

import psycopg

from imapmig.errors import QueueSchemaTooNew

SCHEMA_VERSION = 5
"""
The version of the queue's tables this code reads and writes.
"""

_LOCK = 7146055301937135411
"""
The advisory lock taken by a migration of the queue's tables: one
constant, beside (not equal to) the state store's.
"""

_STEPS: dict[int, str] = {
    1: """
CREATE SEQUENCE imapmig_queue.incarnations;
CREATE TABLE imapmig_queue.daemons (
  daemon_id uuid PRIMARY KEY, incarnation bigint NOT NULL UNIQUE,
  host text NOT NULL, pid integer NOT NULL, version text NOT NULL,
  started_at timestamptz NOT NULL, heartbeat_at timestamptz NOT NULL,
  lease_until timestamptz NOT NULL, retired_at timestamptz
) WITH (fillfactor = 50);
CREATE TABLE imapmig_queue.jobs (
  job_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name text NOT NULL UNIQUE, position bigint NOT NULL,
  state text NOT NULL DEFAULT 'queued'
    CHECK (state IN ('queued','deferred','claimed','paused','done','failed','cancelled')),
  owner uuid, generation bigint NOT NULL DEFAULT 0, not_before timestamptz,
  requested text CHECK (requested IN ('pause','cancel','rerun','remove')),
  taken_from uuid, taken_lease_until timestamptz,
  -- the job's configuration's digest (imapmig.queue._pgjoblist)
  digest bytea NOT NULL
) WITH (fillfactor = 70);
CREATE INDEX jobs_queued  ON imapmig_queue.jobs (position)   WHERE state = 'queued';
CREATE INDEX jobs_due     ON imapmig_queue.jobs (not_before) WHERE state = 'deferred';
CREATE INDEX jobs_claimed ON imapmig_queue.jobs (owner)      WHERE state = 'claimed';
-- The heartbeat's controls asked: read by owner among the few rows asked,
-- never among all the jobs it holds.
CREATE INDEX jobs_asked   ON imapmig_queue.jobs (owner)      WHERE requested IS NOT NULL;
-- The fleet and its job list (imapmig.queue._pgjoblist): one row.
CREATE TABLE imapmig_queue.fleet (
  name text PRIMARY KEY, jobs_digest text NOT NULL, jobs_generation bigint NOT NULL,
  jobs bigint NOT NULL, loaded_by text NOT NULL, loaded_at timestamptz NOT NULL);
CREATE UNIQUE INDEX fleet_one ON imapmig_queue.fleet ((true));
""",
    # The heartbeat's connections, the accounts of one daemon per account,
    # who asked a control, max(position) by an index (add), and the counts
    # kept by the triggers (counts: a handful of rows, not a scan).
    2: """
ALTER TABLE imapmig_queue.daemons ADD COLUMN connections jsonb NOT NULL DEFAULT '{}';
ALTER TABLE imapmig_queue.jobs ADD COLUMN accounts text[] NOT NULL DEFAULT '{}',
  ADD COLUMN requested_by text;
CREATE INDEX jobs_position ON imapmig_queue.jobs (position);
CREATE TABLE imapmig_queue.job_counts (state text NOT NULL, n bigint NOT NULL);
INSERT INTO imapmig_queue.job_counts SELECT state, count(*) FROM imapmig_queue.jobs GROUP BY state;
CREATE FUNCTION imapmig_queue.count_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO imapmig_queue.job_counts SELECT state, count(*) FROM added GROUP BY state;
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO imapmig_queue.job_counts SELECT state, -count(*) FROM gone GROUP BY state;
  ELSIF TG_OP = 'UPDATE' THEN
    INSERT INTO imapmig_queue.job_counts
    SELECT state, sum(n) FROM (SELECT state, 1 AS n FROM added
                               UNION ALL SELECT state, -1 FROM gone) changed
     GROUP BY state HAVING sum(n) <> 0;
  ELSE
    DELETE FROM imapmig_queue.job_counts;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER jobs_counted_insert AFTER INSERT ON imapmig_queue.jobs
  REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION imapmig_queue.count_jobs();
CREATE TRIGGER jobs_counted_update AFTER UPDATE ON imapmig_queue.jobs
  REFERENCING OLD TABLE AS gone NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION imapmig_queue.count_jobs();
CREATE TRIGGER jobs_counted_delete AFTER DELETE ON imapmig_queue.jobs
  REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION imapmig_queue.count_jobs();
CREATE TRIGGER jobs_counted_truncate AFTER TRUNCATE ON imapmig_queue.jobs
  FOR EACH STATEMENT EXECUTE FUNCTION imapmig_queue.count_jobs();
""",
    # A user list's jobs are its template (stored once: its settings'
    # digest, its file's, its canonical JSON) and each row's params
    # (imapmig.queue._pgjoblist), not a configuration per row.
    3: """
CREATE TABLE imapmig_queue.templates (
  template_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  digest bytea NOT NULL UNIQUE, name text NOT NULL, path text NOT NULL,
  file_digest text NOT NULL, config jsonb NOT NULL);
ALTER TABLE imapmig_queue.jobs ADD COLUMN template_id bigint REFERENCES imapmig_queue.templates,
  ADD COLUMN params jsonb;
""",
    # Each daemon's rate (messages per second over the last minute), as
    # its heartbeat reported it: the fleet's pages show every daemon's.
    4: """
ALTER TABLE imapmig_queue.daemons ADD COLUMN rate real NOT NULL DEFAULT 0;
""",
    # A claim's cost the same at a million jobs as at a thousand
    # (docs/fleet-design.md "Claiming a job"): its UPDATE changes the
    # state, so it writes an entry in every index of all the jobs, and each
    # such index is one B-tree level deeper at a million.  The job_id key
    # (and its index) went: the claim and the release find a row by its
    # name, already unique, now the key.  jobs_queued is made again packed
    # full (the queue is added to at its end and taken from its head):
    # smaller than jobs_position, the claim's head is read through it
    # whatever the statistics say (on a fresh list the two tied, and the
    # claim read jobs_position, walking past every job finished).
    5: """
ALTER TABLE imapmig_queue.jobs DROP COLUMN job_id, DROP CONSTRAINT jobs_name_key,
  ADD CONSTRAINT jobs_pkey PRIMARY KEY (name);
DROP INDEX imapmig_queue.jobs_queued;
CREATE INDEX jobs_queued ON imapmig_queue.jobs (position) WITH (fillfactor = 100)
  WHERE state = 'queued';
""",
}


def migrate(connection: psycopg.Connection[tuple[object, ...]], by: str) -> int:
    """
    Bring the queue's tables to L{SCHEMA_VERSION} in one transaction under
    the queue's advisory lock (two daemons starting at once make one
    schema).

    @param by: who migrates (a daemon id), recorded with the version.
    @return: the version found before.
    @raise QueueSchemaTooNew: the database's tables are newer than this
        code; nothing is changed.
    """
    with connection.transaction():
        # A migration waits for a lock 10 s at most (then fails, to be
        # tried again), and is not cut by the connection's statement
        # timeout (a step on a million rows).
        connection.execute("SET LOCAL lock_timeout = '10s'")
        connection.execute("SET LOCAL statement_timeout = '10min'")
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
        connection.execute("CREATE SCHEMA IF NOT EXISTS imapmig_queue")
        connection.execute(
            "CREATE TABLE IF NOT EXISTS imapmig_queue.schema_version ("
            " version integer NOT NULL, migrated_at timestamptz NOT NULL, migrated_by text NOT NULL)"
        )
        row = connection.execute(
            "SELECT coalesce(max(version), 0) FROM imapmig_queue.schema_version"
        ).fetchone()
        found = int(row[0]) if row is not None else 0  # type: ignore[call-overload]
        if found > SCHEMA_VERSION:
            raise QueueSchemaTooNew(
                f"the job queue's tables have schema version {found}, newer than this"
                f" imapmig knows ({SCHEMA_VERSION}); upgrade imapmig"
            )
        for version in range(found + 1, SCHEMA_VERSION + 1):
            connection.execute(_STEPS[version])
            connection.execute(
                "INSERT INTO imapmig_queue.schema_version VALUES (%s, now(), %s)", (version, by)
            )
    return found
