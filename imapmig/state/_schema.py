# -*- test-case-name: tests.test_state -*-
"""
The SQLite state database's schema: its versions, the upgrade from each to
the next, and the checks made when the file is opened.
"""

from __future__ import annotations

import sqlite3

from imapmig.errors import PermanentError, StateSchemaTooNew

SCHEMA_VERSION = 12
"""
The newest schema this code knows; a database with a newer one is refused.
"""

_MIGRATIONS: dict[int, tuple[str, ...]] = {
    # Each entry upgrades a database from the previous version to its key;
    # version 1 creates the schema in an empty database.
    1: (
        """
        CREATE TABLE messages (
            job TEXT NOT NULL,
            folder_key TEXT NOT NULL,
            message_key TEXT NOT NULL,
            mailbox TEXT NOT NULL,
            size INTEGER NOT NULL,
            uidvalidity INTEGER,
            uid INTEGER,
            failure TEXT,
            updated_at REAL NOT NULL,
            PRIMARY KEY (job, folder_key, message_key)
        ) WITHOUT ROWID
        """,
    ),
    # Version 2: what a message's copy lost or changed, whether it was
    # found already in the destination, and each folder's mark for delta
    # passes.
    2: (
        "ALTER TABLE messages ADD COLUMN note TEXT",
        "ALTER TABLE messages ADD COLUMN present INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE messages ADD COLUMN converted INTEGER NOT NULL DEFAULT 0",
        """
        CREATE TABLE folders (
            job TEXT NOT NULL,
            folder_key TEXT NOT NULL,
            uidvalidity INTEGER NOT NULL,
            uidnext INTEGER NOT NULL,
            highestmodseq INTEGER,
            messages INTEGER NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (job, folder_key)
        ) WITHOUT ROWID
        """,
    ),
    # Version 3: the journal of batches in flight, one row per batch, its
    # messages packed in one BLOB (imapmig.state._packing).  The store
    # numbers the entries itself (not AUTOINCREMENT, which costs a write of
    # sqlite_sequence per batch).  No index on job: the table holds a few
    # rows at a time.
    3: (
        """
        CREATE TABLE journal (
            entry_id INTEGER PRIMARY KEY,
            job TEXT NOT NULL,
            mailbox TEXT NOT NULL,
            uidvalidity INTEGER,
            uid_floor INTEGER,
            messages BLOB NOT NULL,
            written_at REAL NOT NULL
        )
        """,
    ),
    # Version 4: destination folders created under a safe spelling because
    # the server refused their names (imapmig.job.foldernames).
    4: (
        """
        CREATE TABLE folder_fallbacks (
            job TEXT NOT NULL,
            mailbox TEXT NOT NULL,
            fallback TEXT NOT NULL,
            reason TEXT NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (job, mailbox)
        ) WITHOUT ROWID
        """,
    ),
    # Version 5: the octets moved per account, direction and UTC day, for
    # the daily budgets (imapmig.throttle).  Per account, not per
    # job: every job into or out of an account spends the same budget.
    5: (
        """
        CREATE TABLE budget_use (
            server TEXT NOT NULL,
            user TEXT NOT NULL,
            direction TEXT NOT NULL,
            day TEXT NOT NULL,
            octets INTEGER NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (server, user, direction, day)
        ) WITHOUT ROWID
        """,
    ),
    # Version 6: the UIDs below a folder mark's UIDNEXT that the next pass
    # lists again (FolderMark.deferred), as ascending decimal numbers
    # joined by commas; NULL for none.
    6: ("ALTER TABLE folders ADD COLUMN deferred TEXT",),
    # Version 7: why a job's latest run failed (a refused login, TLS
    # refused, retries given up), for imapmig report; no row once a run
    # of the job completes.
    7: (
        """
        CREATE TABLE job_failures (
            job TEXT NOT NULL PRIMARY KEY,
            reason TEXT NOT NULL,
            updated_at REAL NOT NULL
        ) WITHOUT ROWID
        """,
    ),
    # Version 8: the Message-ID of a message that failed or was already
    # present (NULL for appended ones and older rows), for the audit
    # manifest; and an index of exactly those messages, so that a page of
    # failures or of the manifest reads them alone, not every message of
    # the job.  A partial index: an appended message (nearly every row)
    # adds nothing to it.
    8: (
        "ALTER TABLE messages ADD COLUMN message_id TEXT",
        """
        CREATE INDEX messages_not_copied ON messages (job, folder_key, message_key)
        WHERE failure IS NOT NULL OR present != 0
        """,
    ),
    # Version 9: the admin's holds on jobs (paused, cancelled), so that
    # they outlast a restart of the daemon; no row for a job under none.
    9: (
        """
        CREATE TABLE job_holds (
            job TEXT NOT NULL PRIMARY KEY,
            hold TEXT NOT NULL CHECK (hold IN ('paused', 'cancelled')),
            by TEXT,
            updated_at REAL NOT NULL
        ) WITHOUT ROWID
        """,
    ),
    # Version 10: what the owner of a message not migrated knows it by
    # (imapmig.mail.messagenames): its Date, From and Subject, beside its
    # Message-ID; NULL for appended messages and older rows.
    10: (
        "ALTER TABLE messages ADD COLUMN message_date TEXT",
        "ALTER TABLE messages ADD COLUMN message_from TEXT",
        "ALTER TABLE messages ADD COLUMN message_subject TEXT",
    ),
    # Version 11: each job's timeline, the changes of its state
    # (imapmig.state.Transition), numbered per job from 1 in the order
    # recorded; the first and the latest are kept, the numbers between
    # deleted (imapmig.state._timeline).  "from" and "to" are SQL words,
    # hence source and target.
    11: (
        """
        CREATE TABLE job_transitions (
            job TEXT NOT NULL,
            seq INTEGER NOT NULL,
            time REAL NOT NULL,
            source TEXT NOT NULL,
            target TEXT NOT NULL,
            cause TEXT NOT NULL,
            by TEXT,
            PRIMARY KEY (job, seq)
        ) WITHOUT ROWID
        """,
    ),
    # Version 12: a local source folder's fingerprint (FolderMark.fingerprint:
    # its directories' state when last listed whole and all copied) and each
    # marked folder's octets, so that a delta pass skips an unchanged folder
    # without listing it or reading its messages' records; NULL in older
    # rows.
    12: (
        "ALTER TABLE folders ADD COLUMN fingerprint TEXT",
        "ALTER TABLE folders ADD COLUMN octets INTEGER",
    ),
}


def checkIntegrity(connection: sqlite3.Connection, path: str) -> None:
    """
    Check the structure of every page of the database on C{connection}
    (C{PRAGMA quick_check}: about 0.4 s per million recorded messages), so
    that a corrupt database is refused at start rather than found by a job
    halfway.

    @raise PermanentError: it is corrupt; the message gives SQLite's first
        finding.
    @raise sqlite3.Error: SQLite cannot even read it that far.
    """
    # (1): stop at the first problem; one is enough to refuse the file.
    problems = connection.execute("PRAGMA quick_check(1)").fetchall()
    if problems != [("ok",)]:
        # SQLite's finding may span lines; the error is one.
        finding = " ".join(str(problems[0][0]).split()) if problems else "no answer"
        raise PermanentError(
            f"{path}: cannot open the state database: the state database is corrupt"
            f" (quick_check: {finding})"
        )


def readVersion(connection: sqlite3.Connection, path: str) -> int:
    """
    The schema version of the database on C{connection}, which must be
    one this code can read.

    @raise PermanentError: it is newer than L{SCHEMA_VERSION}, or the file
        has no imapmig schema.
    """
    (hasVersion,) = connection.execute(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if not hasVersion:
        raise PermanentError(f"{path}: not an imapmig state database (no schema_version)")
    (version,) = connection.execute(
        "SELECT coalesce(max(version), 0) FROM schema_version"
    ).fetchone()
    if version > SCHEMA_VERSION:
        raise StateSchemaTooNew(path, version, SCHEMA_VERSION)
    return int(version)


def migrate(connection: sqlite3.Connection, path: str) -> None:
    """
    Bring the schema of the database on C{connection} to L{SCHEMA_VERSION},
    in one transaction, which writes even when there is nothing to upgrade:
    a database that cannot be written (read-only, full) is refused at
    open, before any message is sent.

    @raise PermanentError: the database's schema is newer than this code.
    """
    connection.execute("BEGIN IMMEDIATE")
    try:
        (hasVersion,) = connection.execute(
            "SELECT count(*) FROM sqlite_master"
            " WHERE type = 'table' AND name = 'schema_version'"
        ).fetchone()
        if hasVersion:
            version = readVersion(connection, path)
        else:
            connection.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            version = 0
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[target]:
                connection.execute(statement)
        connection.execute("DELETE FROM schema_version")
        connection.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        connection.execute("COMMIT")
    except BaseException:
        rollback(connection)
        raise


def rollback(connection: sqlite3.Connection) -> None:
    """
    Roll back the transaction open on C{connection}, if SQLite has not
    already done so itself (as it does after some errors).  A failure to
    roll back is left unsaid: the error that led here is the one to report,
    and SQLite rolls back a hot journal at the next open.
    """
    if connection.in_transaction:
        try:
            connection.execute("ROLLBACK")
        except sqlite3.Error:
            pass
