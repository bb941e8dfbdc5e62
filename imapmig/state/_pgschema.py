# -*- test-case-name: tests.test_state_postgresql -*-
"""
The PostgreSQL state database's schema: its versions, the migration from
each to the next, and the one transaction that applies them under a
transaction-level advisory lock (docs/fleet-design.md, "Versions and
migrations").

Beside L{imapmig.state._schema}, SQLite's: the two databases differ in
types (C{bigint}, C{bytea}, C{boolean}) and in how a migration is
serialized (SQLite's write lock, PostgreSQL's advisory lock), so nothing
of the SQLite module could be shared but the idea.
"""

from __future__ import annotations

import psycopg

from imapmig.errors import StateSchemaTooNew

# 'imapmig schema', one constant for every daemon and command: the key of
# pg_advisory_xact_lock, released by COMMIT or ROLLBACK whatever a pooler
# between us and the database does (a session-level lock is not).
SCHEMA_LOCK = 7146055301937135410

_VERSIONS = """
    CREATE TABLE IF NOT EXISTS imapmig.schema_version (
        version integer NOT NULL,
        migrated_at timestamptz NOT NULL,
        migrated_by text NOT NULL
    )
"""

# Each migration's statements, from version N to N + 1 at index N.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # Version 1: the outcomes, the journal, the folder marks and
    # fallbacks, the job records, the budgets, as SQLite's version 11 has
    # them; keys in code point order (COLLATE "C"), as SQLite orders text (job still by name: the jobs table with its job_id comes with
    # the claims).  fillfactor and the autovacuum factor keep the tables
    # updated or deleted from most (messages replaced, journal rows
    # living for one unit) from bloating.
    (
        """
        CREATE TABLE imapmig.messages (
            job text NOT NULL,
            folder_key text COLLATE "C" NOT NULL,
            message_key text COLLATE "C" NOT NULL,
            mailbox text NOT NULL,
            size bigint NOT NULL,
            uidvalidity bigint,
            uid bigint,
            failure text,
            note text,
            present boolean NOT NULL,
            converted boolean NOT NULL,
            message_id text,
            message_date text,
            message_from text,
            message_subject text,
            updated_at double precision NOT NULL,
            PRIMARY KEY (job, folder_key, message_key)
        ) WITH (fillfactor = 90)
        """,
        # The failure pages and the audit manifest read the messages not
        # copied in key order: this index, as SQLite's messages_not_copied.
        """
        CREATE INDEX messages_not_copied ON imapmig.messages (job, folder_key, message_key)
        WHERE failure IS NOT NULL OR present
        """,
        """
        CREATE TABLE imapmig.journal (
            entry_id bigint PRIMARY KEY,
            job text NOT NULL,
            mailbox text NOT NULL,
            uidvalidity bigint,
            uid_floor bigint,
            messages bytea NOT NULL,
            written_at double precision NOT NULL
        ) WITH (autovacuum_vacuum_scale_factor = 0.01)
        """,
        "CREATE INDEX journal_job ON imapmig.journal (job, entry_id)",
        "CREATE SEQUENCE imapmig.journal_ids",
        """
        CREATE TABLE imapmig.folders (
            job text NOT NULL,
            folder_key text COLLATE "C" NOT NULL,
            uidvalidity bigint NOT NULL,
            uidnext bigint NOT NULL,
            highestmodseq bigint,
            messages bigint NOT NULL,
            deferred bigint[] NOT NULL,
            updated_at double precision NOT NULL,
            PRIMARY KEY (job, folder_key)
        )
        """,
        """
        CREATE TABLE imapmig.folder_fallbacks (
            job text NOT NULL,
            mailbox text COLLATE "C" NOT NULL,
            fallback text NOT NULL,
            reason text NOT NULL,
            updated_at double precision NOT NULL,
            PRIMARY KEY (job, mailbox)
        )
        """,
        """
        CREATE TABLE imapmig.job_failures (
            job text PRIMARY KEY,
            reason text NOT NULL,
            updated_at double precision NOT NULL
        )
        """,
        # Until the jobs table of the claims holds them in its rows'
        # state (docs/fleet-design.md, "The schema").
        """
        CREATE TABLE imapmig.job_holds (
            job text PRIMARY KEY,
            hold text NOT NULL CHECK (hold IN ('paused', 'cancelled')),
            by text,
            updated_at double precision NOT NULL
        )
        """,
        # NaN is refused as SQLite refuses it (it stores NULL in a NOT
        # NULL column).
        """
        CREATE TABLE imapmig.job_transitions (
            job text NOT NULL,
            seq bigint NOT NULL,
            time double precision NOT NULL CHECK (time <> 'NaN'),
            source text NOT NULL,
            target text NOT NULL,
            cause text NOT NULL,
            by text,
            PRIMARY KEY (job, seq)
        )
        """,
        """
        CREATE TABLE imapmig.budget_use (
            server text NOT NULL,
            "user" text NOT NULL,
            direction text NOT NULL,
            day text NOT NULL,
            octets bigint NOT NULL,
            updated_at double precision NOT NULL,
            PRIMARY KEY (server, "user", direction, day)
        )
        """,
    ),
    # Version 2: a transition's id chosen by the writer (the journal's
    # ids, imapmig.state._pgwrites.WriterIds), so that a batch run again
    # after its COMMIT was lost does not record it twice; NULL in the
    # rows of version 1.  The journal's sequence now gives blocks of ids.
    (
        "ALTER TABLE imapmig.job_transitions ADD COLUMN write_id bigint",
        "CREATE UNIQUE INDEX job_transitions_write ON imapmig.job_transitions (write_id)",
    ),
    # Version 3: a local source folder's fingerprint and each marked
    # folder's octets, as SQLite's version 12 (imapmig.state.FolderMark);
    # NULL in older rows.
    (
        "ALTER TABLE imapmig.folders ADD COLUMN fingerprint text, ADD COLUMN octets bigint",
    ),
)

SCHEMA_VERSION = len(MIGRATIONS)
"""
The newest schema this code knows; a database with a newer one is refused.
"""

HOLDS_TO_ROWS = (
    """
UPDATE imapmig_queue.jobs j SET state = h.hold
  FROM imapmig.job_holds h
 WHERE h.job = j.name AND j.state IN ('queued', 'deferred', 'paused', 'cancelled')
   AND j.state <> h.hold
""",
    """
UPDATE imapmig_queue.jobs j
   SET requested = CASE h.hold WHEN 'paused' THEN 'pause' ELSE 'cancel' END, requested_by = h.by
  FROM imapmig.job_holds h
 WHERE h.job = j.name AND j.state = 'claimed' AND j.requested IS DISTINCT FROM 'remove'
""",
    """
DELETE FROM imapmig.job_holds h USING imapmig_queue.jobs j WHERE j.name = h.job RETURNING h.job
""",
)
"""
The holds of C{job_holds} (a state copied from SQLite) moved into a
fleet's jobs' rows, whose states are its holds (the one record of them
in a fleet: a hold lifted on any daemon's page is lifted for good): each
job not claimed nor ended rests as its hold says (a paused deferred job
keeps its C{not_before}); a claim (a dead daemon's, whose lease ended: a
copy refuses live ones) is asked to pause or cancel, which its release
makes the job's state; an ended job stays so.  Then every C{job_holds}
row of a job the list has is deleted, the last statement returning their
jobs.  Run in this order, in one transaction, by C{imapmig state copy}
into a database with a job list, and by the first load of a fleet's list
(L{imapmig.queue._pgjoblist.replaceJobList}).
"""


def migrate(
    connection: psycopg.Connection[tuple[object, ...]], where: str, migratedBy: str
) -> int:
    """
    Bring the database on C{connection} (in autocommit mode) to
    L{SCHEMA_VERSION} in one transaction under L{SCHEMA_LOCK}: whole or
    not at all, and one migrator at a time however many daemons start
    at once.

    @param where: the database, without a password, for the error.
    @param migratedBy: who migrates (recorded with the version).
    @return: the version the database had.
    @raise StateSchemaTooNew: the database's schema is newer than this
        code; nothing was changed.
    """
    with connection.transaction():
        connection.execute("SET LOCAL lock_timeout = '10s'")
        # The writer's 30 s statement_timeout is for its batches, not for
        # a migration rewriting a large table.
        connection.execute("SET LOCAL statement_timeout = '10min'")
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        connection.execute("CREATE SCHEMA IF NOT EXISTS imapmig")
        connection.execute(_VERSIONS)
        row = connection.execute(
            "SELECT coalesce(max(version), 0) FROM imapmig.schema_version"
        ).fetchone()
        version = int(row[0]) if row is not None else 0  # type: ignore[call-overload]
        if version > SCHEMA_VERSION:
            raise StateSchemaTooNew(where, version, SCHEMA_VERSION)
        for statements in MIGRATIONS[version:]:
            for statement in statements:
                connection.execute(statement)
        if version < SCHEMA_VERSION:
            connection.execute(
                "INSERT INTO imapmig.schema_version VALUES (%s, now(), %s)",
                (SCHEMA_VERSION, migratedBy),
            )
    return version
