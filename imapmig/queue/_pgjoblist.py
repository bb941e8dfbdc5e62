# -*- test-case-name: tests.test_queue_pgjoblist,tests.test_queue_postgresql -*-
"""
A fleet's job list in PostgreSQL: loaded once, refused to another fleet
or another list, replaced as a whole by a reload (docs/fleet-design.md
"Fleet membership: one job list per database").

B{Digests.}  A job's digest (L{JobList}) is the SHA-256 of a canonical
JSON encoding of its L{JobConfig} as parsed: each value object named by
its class, with every field its equality compares, sorted by name, but
the fields at their default (a later imapmig with a new setting at its
default keeps every digest).  A secret (L{Secret}) is written
C{"<secret>"}: its value goes into nothing stored, nor does its source,
which the parsed configuration does not keep (a rotated password, or one
moved to another file, leaves the job as it was).  The list's digest is
the SHA-256 of its jobs' digests in the order of their names: a reload
adds its new jobs after the last position wherever the file has them, so
the file's order is not the rows', and a file that only reorders its
jobs is the same list.  Each row of C{imapmig_queue.jobs} keeps its job's
digest and accounts (L{accountsOf}); the one row of C{imapmig_queue.fleet} keeps the fleet's name, its
list's digest, generation and count, and who loaded it, when.

B{At a daemon's start} (L{joinFleet}, in the transaction of the queue's
migration, under its advisory lock, so two daemons starting at once on
an empty database load one list): no fleet row, the list is loaded by
C{COPY}; the same name and digest, nothing is written (a start costs one
row read whatever the jobs); another name, or another digest, is
refused with L{FleetMismatch}, which names the first job that differs
and how to change the list on purpose.

B{A reload} (L{replaceJobList}: a daemon's C{replaceList}, or C{imapmig
state load-jobs}) copies the new list into a temporary table and applies
the difference in one transaction under the same lock: jobs no longer
listed are deleted unless claimed, a claimed one gets C{requested =
'remove'} (it leaves when its claim ends); a job listed again while
leaving stays; changed jobs get their new digest; new jobs are added
after the last position, in the file's order; the holds a state copy
left in C{imapmig.job_holds} for jobs now listed are moved into their
rows (L{HOLDS_TO_ROWS}: a fleet's holds are its rows' states, the one
record of them); then the fleet's row takes the new digest and a raised
C{jobs_generation}.  The queue's C{add},
C{remove} and C{replace} of one job change the list the same way, each
with the fleet's row in the same transaction, and only while the
daemon's list is the fleet's (L{changeList}, else L{JobListStale}).

B{Claims.}  A daemon runs a job with its own file's configuration (the
rows hold no configuration yet): a job another daemon's reload added is
unknown to it, and a changed one would run as it was.  So a daemon claims
only while its list is the fleet's (L{CLAIMABLE}, in the claim's
statement: one row compared, no cost per job), and only a row whose
digest is its own configuration's for that job, checked on the claimed
row (a reload committed during the claim): otherwise it claims nothing
until a reload gives it the fleet's list.  The jobs it holds run on
(a claim runs with the configuration it was claimed with).

New: L{imapmig.queue.postgresql} is the claims and leases of the jobs'
rows; what a list is and how it changes is shared by that queue and the
command, which has no queue, and nothing held it before (the queue
inserted the names of each starting daemon's jobs).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from enum import Enum
from hashlib import sha256
from json.encoder import encode_basestring_ascii
from typing import Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import quote

import attrs
import psycopg
from attrs import frozen

from imapmig.access.secrets import Secret
from imapmig.config.model import ImapSourceConfig, JobConfig, UserList
from imapmig.errors import FleetMismatch, JobListStale
from imapmig.queue import ListChange
from imapmig.queue._pgschema import _LOCK
from imapmig.state._pgschema import HOLDS_TO_ROWS

Connection = psycopg.Connection[tuple[Any, ...]]

_SECRET = '"<secret>"'

CLAIMABLE = "EXISTS (SELECT 1 FROM imapmig_queue.fleet WHERE jobs_digest = %(list)s)"
"""
The claim's condition that the claiming daemon's list is the fleet's
(its digest given as C{list}).
"""

CHANGE_HINT = (
    "to change the fleet's list on purpose, reload a running daemon"
    " (systemctl reload imapmig) or run: imapmig state load-jobs --config FILE"
)


def accountsOf(job: JobConfig) -> list[str]:
    """
    The accounts job C{job} connects to, as C{'server/user'} keys (its
    destination's, and its source's when that is an IMAP account): no two
    daemons run jobs sharing one at once (the claim's test, in
    L{imapmig.queue._pgstatements}).
    """
    accounts = {f"{job.destination.server.name}/{job.destination.user}"}
    if isinstance(job.source, ImapSourceConfig):
        accounts.add(f"{job.source.server.name}/{job.source.user}")
    return sorted(accounts)


def _shape(cls: Any) -> tuple[str, tuple[tuple[str, str, object], ...]]:
    """
    How a value of the attrs class C{cls} is written: its class's name as
    JSON, and each field its equality compares (by name) with its key as
    JSON and its default (C{attrs.NOTHING} for none).
    """
    shown = []
    for field in attrs.fields(cls):
        if not field.eq:
            continue
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            default = attrs.NOTHING if default.takes_self else default.factory()
        shown.append((field.name, json.dumps(field.name) + ":", default))
    return json.dumps(cls.__name__), tuple(sorted(shown, key=lambda each: each[0]))


# The scalars, by their exact type (a subclass, an IntEnum, is not one).
_SCALARS: dict[type, Callable[[Any], str]] = {
    str: encode_basestring_ascii,
    int: int.__repr__,
    float: float.__repr__,
    bool: lambda value: "true" if value else "false",
    type(None): lambda value: "null",
}


class _Encoder:
    """
    The canonical JSON of configuration values; a value object met again
    (a server shared by every job) is written once.
    """

    def __init__(self) -> None:
        # By id, with the object itself, so that no id is reused.
        self._seen: dict[int, tuple[object, str]] = {}

    def encode(self, value: object) -> str:
        """
        C{value} as canonical JSON.

        @raise TypeError: a value of a type not known here.
        """
        scalar = _SCALARS.get(type(value))
        if scalar is not None:
            return scalar(value)
        if isinstance(value, Secret):
            # Before the value objects: a Secret is one too.
            return _SECRET
        seen = self._seen.get(id(value))
        if seen is not None and seen[0] is value:
            return seen[1]
        return self._compound(value)

    def _compound(self, value: object) -> str:
        kind = type(value)
        if kind is tuple or kind is list:
            return "[" + ",".join([self.encode(item) for item in value]) + "]"  # type: ignore[attr-defined]
        shape = _SHAPES.get(kind)
        if shape is None and attrs.has(kind):
            shape = _SHAPES[kind] = _shape(kind)
        if shape is not None:
            return self._object(value, shape)
        return self._other(value)

    def _other(self, value: object) -> str:
        if isinstance(value, Enum):
            return self.encode(value.value)
        if isinstance(value, (frozenset, set)):
            return "[" + ",".join(sorted(self.encode(item) for item in value)) + "]"
        if isinstance(value, Mapping):
            items = sorted((str(key), self.encode(item)) for key, item in value.items())
            return "{" + ",".join(json.dumps(key) + ":" + item for key, item in items) + "}"
        raise TypeError(f"a job's configuration holds a {type(value).__name__}")

    def _object(self, value: object, shape: tuple[str, tuple[tuple[str, str, object], ...]]) -> str:
        name, fields = shape
        parts = ['{"@":' + name]
        for field, key, default in fields:
            item = getattr(value, field)
            if item is default or (
                default is not attrs.NOTHING and type(item) is type(default) and item == default
            ):
                continue
            parts.append(key + self.encode(item))
        written = ",".join(parts) + "}"
        if len(self._seen) >= _SEEN_MOST:
            # Bounded: the objects of each job are met once, the shared
            # ones come back at once.
            self._seen.clear()
        self._seen[id(value)] = (value, written)
        return written


_SEEN_MOST = 4096
"""
The most value objects an encoder remembers.
"""

_SHAPES: dict[type, tuple[str, tuple[tuple[str, str, object], ...]]] = {}


def _listDigest(digests: Mapping[str, bytes], lists: Sequence[tuple[str, bytes, str]] = ()) -> str:
    """
    The digest of a list of jobs (C{digests}, by name) and of user lists
    (each its name, its settings' digest and its file's).
    """
    hashed = sha256(b"".join(digest for _, digest in sorted(digests.items())))
    for name, settings, file in lists:
        hashed.update(b"\0" + name.encode() + b"\0" + settings + file.encode())
    return hashed.hexdigest()


def _paramsText(params: Mapping[str, object]) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def rowDigest(template: bytes, params: Mapping[str, object] | str) -> bytes:
    """
    The digest of a user list's row: its template's (L{JobList.templates})
    and its C{params}' canonical JSON (or that JSON).
    """
    text = params if isinstance(params, str) else _paramsText(params)
    return sha256(template + text.encode()).digest()


class JobList:
    """
    A configuration's jobs with their digests, and its user lists kept as
    written (L{UserList}), each digested once: its settings and its file,
    never its rows (docs/fleet-design.md "A million jobs").

    @ivar byName: each job by name, in the configuration's order (not
        those of C{userLists}).
    @ivar digests: each job's digest (32 octets), by name, in the same
        order.
    @ivar userLists: the user lists, in the configuration's order.
    @ivar templates: each user list's settings' digest (32 octets), by
        its name; its rows' digests are L{rowDigest}s of it.
    @ivar templateIds: each user list by its template's id in the
        database, once L{bindTemplates} read them.
    @ivar digest: the list's digest, hexadecimal.
    """

    def __init__(
        self,
        byName: dict[str, JobConfig],
        digests: dict[str, bytes],
        userLists: Sequence[UserList] = (),
        templates: Mapping[str, bytes] | None = None,
    ) -> None:
        self.byName = byName
        self.digests = digests
        self.userLists = tuple(userLists)
        if templates is None:
            encoder = _Encoder()
            templates = {each.name: sha256(encoder.encode(each.settings).encode()).digest() for each in userLists}
        self.templates = dict(templates)
        self.templateIds: dict[int, UserList] = {}
        self.digest = _listDigest(
            digests, [(each.name, self.templates[each.name], each.fileDigest) for each in self.userLists]
        )

    @classmethod
    def of(cls, jobs: Iterable[JobConfig], userLists: Sequence[UserList] = ()) -> JobList:
        """
        The list of C{jobs} and C{userLists}, their digests computed
        (nothing per row of a user list).
        """
        encoder = _Encoder()
        byName = {job.name: job for job in jobs}
        digests = {name: sha256(encoder.encode(job).encode()).digest() for name, job in byName.items()}
        return cls(byName, digests, userLists)

    def _evolve(self, byName: dict[str, JobConfig], digests: dict[str, bytes]) -> JobList:
        changed = JobList(byName, digests, self.userLists, self.templates)
        changed.templateIds = self.templateIds
        return changed

    def withJob(self, job: JobConfig) -> JobList:
        """
        This list with C{job} added (last), or replacing its namesake.
        """
        digest = sha256(_Encoder().encode(job).encode()).digest()
        return self._evolve(self.byName | {job.name: job}, self.digests | {job.name: digest})

    def without(self, name: str) -> JobList:
        """
        This list without job C{name}.
        """
        byName, digests = dict(self.byName), dict(self.digests)
        byName.pop(name, None)
        digests.pop(name, None)
        return self._evolve(byName, digests)

    def rows(self, taken: dict[str, str]) -> Iterable[tuple[str, bytes, list[str], int | None, Any]]:
        """
        The rows of this list, in its order: each job's name, digest,
        accounts, template id (L{None} but for a user list's row) and
        params (their JSON, or L{None}); the user lists' rows read and
        checked here (L{bindTemplates} first).

        @param taken: the names used so far (updated).
        @raise ConfigError: a user list's problems.
        """
        for name, digest in self.digests.items():
            taken.setdefault(name, "jobs")
            yield name, digest, accountsOf(self.byName[name]), None, None
        ids = {each.name: templateId for templateId, each in self.templateIds.items()}
        for each in self.userLists:
            template = self.templates[each.name]
            for job, params in each.rows(taken):
                taken[job.name] = each.entry
                # Encoded once: the digest's text is the column's.
                text = _paramsText(params)
                yield job.name, rowDigest(template, text), accountsOf(job), ids[each.name], text

    def bindTemplates(self, connection: Connection, write: bool = False) -> None:
        """
        Read the ids of this list's templates (one row each), and with
        C{write} store those missing first (C{imapmig_queue.templates}).
        """
        encoder = _Encoder()
        for each in self.userLists:
            if write:
                connection.execute(
                    "INSERT INTO imapmig_queue.templates (digest, name, path, file_digest, config)"
                    " VALUES (%s, %s, %s, %s, %s::jsonb)"
                    " ON CONFLICT (digest) DO UPDATE SET file_digest = EXCLUDED.file_digest",
                    (self.templates[each.name], each.name, each.path, each.fileDigest,
                     encoder.encode(each.settings)),
                )  # fmt: skip
        byDigest = {self.templates[each.name]: each for each in self.userLists}
        self.templateIds = {
            templateId: byDigest[digest]
            for templateId, digest in connection.execute(
                "SELECT template_id, digest FROM imapmig_queue.templates"
            ).fetchall()
            if digest in byDigest
        }

    def claimed(self, name: str, digest: bytes, templateId: int | None, params: Any) -> JobConfig:
        """
        The configuration of the claimed row of job C{name}: one of this
        list's jobs, or a user list's row rebuilt from its C{params}.

        @raise JobListStale: the row is not a job of this list (the claim
            must be rolled back).
        """
        if templateId is None:
            checkClaimed(self, name, digest)
            return self.byName[name]
        each = self.templateIds.get(templateId)
        if each is None or rowDigest(self.templates[each.name], params) != digest:
            raise JobListStale(f"job {name!r} of the fleet's list is configured otherwise here")
        return each.job(params)


@frozen
class FleetRow:
    """
    The C{imapmig_queue.fleet} row: the fleet and its job list.
    """

    name: str
    digest: str
    generation: int
    jobs: int
    loadedBy: str
    loadedAt: datetime

    def loaded(self) -> str:
        """
        Its jobs and who loaded them when, as the refusals say it.
        """
        at = self.loadedAt.astimezone(timezone.utc)
        return f"{self.jobs:,} jobs, loaded by {self.loadedBy} at {at:%Y-%m-%d %H:%M} UTC"


def databaseName(connection: Connection) -> str:
    """
    The database of C{connection} as a URI, without its password.
    """
    info = connection.info
    host = info.host if not info.host.startswith("/") else quote(info.host, safe="")
    return f"postgresql://{quote(info.user, safe='')}@{host}:{info.port}/{quote(info.dbname, safe='')}"


def _lock(connection: Connection) -> None:
    connection.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))


def readFleet(connection: Connection, lock: bool = False) -> FleetRow | None:
    """
    The fleet's row, or L{None}: no list was loaded.

    @param lock: whether to lock it until the transaction ends.
    """
    row = connection.execute(
        "SELECT name, jobs_digest, jobs_generation, jobs, loaded_by, loaded_at"
        " FROM imapmig_queue.fleet" + (" FOR UPDATE" if lock else "")
    ).fetchone()
    return None if row is None else FleetRow(*row)


def _refuseOther(connection: Connection, row: FleetRow, fleet: str) -> None:
    if row.name != fleet:
        raise FleetMismatch(
            f"{databaseName(connection)}: this database holds fleet {row.name!r}"
            f" ({row.loaded()}); this configuration is fleet {fleet!r}:"
            " give it a database of its own"
        )


def joinFleet(connection: Connection, fleet: str, jobs: JobList, by: str) -> FleetRow:
    """
    A daemon's start: load C{jobs} if the database has no list, else check
    that it holds this fleet's, with this list.  Call it in a transaction.

    @param by: who loads (a host name), as the refusals show it.
    @return: the fleet's row.
    @raise FleetMismatch: the database holds another fleet, or another
        list (nothing is written).
    """
    _lock(connection)
    row = readFleet(connection)
    if row is None:
        replaceJobList(connection, fleet, jobs, by)
        row = readFleet(connection)
        assert row is not None
        return row
    _refuseOther(connection, row, fleet)
    if row.digest != jobs.digest:
        raise FleetMismatch(
            f"{databaseName(connection)}: fleet {fleet!r} has another job list"
            f" ({row.loaded()}; digest {row.digest}) than this configuration"
            f" (digest {jobs.digest}): {_firstDifference(connection, jobs)}; {CHANGE_HINT}"
        )
    jobs.bindTemplates(connection)
    return row


def _firstDifference(connection: Connection, jobs: JobList) -> str:
    """
    The first job of C{jobs}, by position in it, whose row differs, or
    else the first row (by position) of a job not in C{jobs}.
    """
    stored: dict[str, bytes] = dict(
        connection.execute(
            "SELECT name, digest FROM imapmig_queue.jobs"
            " WHERE requested IS DISTINCT FROM 'remove' AND template_id IS NULL ORDER BY position"
        ).fetchall()
    )
    for position, (name, digest) in enumerate(jobs.digests.items()):
        if name not in stored:
            return f"job {name!r} (position {position} here) is not in the fleet's list"
        if stored[name] != digest:
            return f"job {name!r} (position {position} here) is configured otherwise in the fleet's list"
    extra = next((name for name in stored if name not in jobs.digests), None)
    if extra is not None:
        return f"job {extra!r} of the fleet's list is not in this configuration"
    storedLists = set(
        connection.execute("SELECT digest, file_digest FROM imapmig_queue.templates").fetchall()
    )
    for each in jobs.userLists:
        if (jobs.templates[each.name], each.fileDigest) not in storedLists:
            return (
                f"the user list of {each.entry} ({each.path}, file digest {each.fileDigest})"
                " is not the fleet's: its file or its settings differ"
            )
    return "the jobs' rows match this configuration, the fleet's digest does not"


def replaceJobList(connection: Connection, fleet: str, jobs: JobList, by: str) -> ListChange:
    """
    Make C{jobs} the fleet's list (a reload), or load it if the database
    has none.  Call it in a transaction.

    @raise FleetMismatch: the database holds another fleet.
    """
    _lock(connection)
    row = readFleet(connection, lock=True)
    if row is not None:
        _refuseOther(connection, row, fleet)
        if row.digest == jobs.digest:
            jobs.bindTemplates(connection)
            return ListChange(row.generation, loaded=False)
    jobs.bindTemplates(connection, write=True)
    if row is None and connection.execute("SELECT 1 FROM imapmig_queue.jobs LIMIT 1").fetchone() is None:
        change = ListChange(0, added=_copy(connection, "imapmig_queue.jobs", jobs))
    else:
        change = _applyDifference(connection, jobs)
    if connection.execute("SELECT to_regclass('imapmig.job_holds')").fetchone() != (None,):
        # The holds of a state copied from one daemon's SQLite file, moved
        # into the rows: all at the first load, then those of the jobs
        # listed anew (the others' were moved already).
        for statement in HOLDS_TO_ROWS:
            connection.execute(statement)
    generation = _writeFleet(connection, fleet, jobs, by)
    return attrs.evolve(change, generation=generation)


def _copy(connection: Connection, table: str, jobs: JobList) -> int:
    """
    Copy the rows of C{jobs} (L{JobList.rows}: name, position in the
    list, digest, accounts, template, params) into C{table}.

    @return: how many.
    """
    columns = "(name, position, digest, accounts, template_id, params)"
    position = 0
    with connection.cursor().copy(f"COPY {table} {columns} FROM STDIN") as copy:
        # The params as their JSON text, which the column reads as jsonb.
        copy.set_types(["text", "int8", "bytea", "text[]", "int8", "text"])
        for position, row in enumerate(jobs.rows({}), 1):
            copy.write_row((row[0], position - 1, *row[1:]))
    return position


# Each step of a reload's difference, against the new list in
# imapmig_new_jobs, in this order: (what it counts, statement).
_NOT_LISTED = "NOT EXISTS (SELECT 1 FROM imapmig_new_jobs n WHERE n.name = j.name)"
_DIFFERENCE = (
    (
        "added",
        "UPDATE imapmig_queue.jobs j SET requested = NULL, digest = n.digest, accounts = n.accounts,"
        " template_id = n.template_id, params = n.params"
        " FROM imapmig_new_jobs n WHERE n.name = j.name AND j.requested = 'remove'",
    ),
    (
        "removed",
        "DELETE FROM imapmig_queue.jobs j WHERE j.state <> 'claimed' AND " + _NOT_LISTED,
    ),
    (
        "leaving",
        "UPDATE imapmig_queue.jobs j SET requested = 'remove'"
        " WHERE j.state = 'claimed' AND j.requested IS DISTINCT FROM 'remove' AND " + _NOT_LISTED,
    ),
    (
        "changed",
        "UPDATE imapmig_queue.jobs j SET digest = n.digest, accounts = n.accounts,"
        " template_id = n.template_id, params = n.params"
        " FROM imapmig_new_jobs n WHERE n.name = j.name AND j.digest <> n.digest",
    ),
    (
        "added",
        "INSERT INTO imapmig_queue.jobs (name, position, digest, accounts, template_id, params)"
        " SELECT n.name, (SELECT coalesce(max(position), -1) FROM imapmig_queue.jobs)"
        "  + row_number() OVER (ORDER BY n.position), n.digest, n.accounts, n.template_id, n.params"
        " FROM imapmig_new_jobs n"
        " WHERE NOT EXISTS (SELECT 1 FROM imapmig_queue.jobs j WHERE j.name = n.name)"
        " ORDER BY n.position",
    ),
)


def _applyDifference(connection: Connection, jobs: JobList) -> ListChange:
    """
    Change the jobs' rows into C{jobs}: the new list copied into a
    temporary table, then each step of L{_DIFFERENCE}.
    """
    connection.execute(
        "CREATE TEMPORARY TABLE imapmig_new_jobs"
        " (name text PRIMARY KEY, position bigint NOT NULL, digest bytea NOT NULL,"
        "  accounts text[] NOT NULL, template_id bigint, params jsonb) ON COMMIT DROP"
    )
    _copy(connection, "imapmig_new_jobs", jobs)
    connection.execute("ANALYZE imapmig_new_jobs")
    counts = {"added": 0, "removed": 0, "leaving": 0, "changed": 0}
    for counted, statement in _DIFFERENCE:
        counts[counted] += connection.execute(statement).rowcount
    connection.execute(
        "DELETE FROM imapmig_queue.templates t WHERE NOT EXISTS"
        " (SELECT 1 FROM imapmig_queue.jobs j WHERE j.template_id = t.template_id)"
    )
    return ListChange(
        0, counts["added"], counts["removed"], counts["leaving"], counts["changed"]
    )


def _writeFleet(connection: Connection, fleet: str, jobs: JobList, by: str) -> int:
    """
    Write the fleet's row for the list C{jobs} just loaded: its first
    generation, or the next.

    @return: the generation.
    """
    count = len(jobs.digests)
    if jobs.userLists:
        row = connection.execute("SELECT sum(n)::bigint FROM imapmig_queue.job_counts").fetchone()
        count = int(row[0] or 0) if row is not None else 0
    row = connection.execute(
        "INSERT INTO imapmig_queue.fleet AS f"
        " (name, jobs_digest, jobs_generation, jobs, loaded_by, loaded_at)"
        " VALUES (%(fleet)s, %(digest)s, 1, %(count)s, %(by)s, now())"
        " ON CONFLICT (name) DO UPDATE SET jobs_digest = EXCLUDED.jobs_digest,"
        "  jobs_generation = f.jobs_generation + 1, jobs = EXCLUDED.jobs,"
        "  loaded_by = EXCLUDED.loaded_by, loaded_at = EXCLUDED.loaded_at"
        " RETURNING jobs_generation",
        {"fleet": fleet, "digest": jobs.digest, "count": count, "by": by},
    ).fetchone()
    assert row is not None
    return int(row[0])


def changeList(connection: Connection, fleet: str, old: JobList, new: JobList, by: str) -> None:
    """
    Record in the fleet's row that its list goes from C{old} to C{new} (one
    job added, removed or replaced, in the same transaction), if C{old} is
    still the fleet's.  Call it before changing the job's row (the fleet's
    row is locked first, as by a reload).

    @raise JobListStale: the fleet's list is no longer C{old}.
    """
    if new.digest == old.digest:
        return
    changed = connection.execute(
        "UPDATE imapmig_queue.fleet SET jobs_digest = %(new)s,"
        " jobs_generation = jobs_generation + 1, jobs = jobs + %(count)s, loaded_by = %(by)s,"
        " loaded_at = now() WHERE name = %(fleet)s AND jobs_digest = %(old)s",
        {
            "new": new.digest, "old": old.digest, "count": len(new.digests) - len(old.digests),
            "by": by, "fleet": fleet,
        },  # fmt: skip
    ).rowcount
    if not changed:
        raise JobListStale(
            f"{databaseName(connection)}: fleet {fleet!r}'s job list is no longer this"
            f" daemon's (digest {old.digest}): another reload replaced it; {CHANGE_HINT}"
        )


def staleList(row: FleetRow | None, jobs: JobList) -> str | None:
    """
    Why a daemon of list C{jobs} claims nothing, when the fleet's row
    C{row} has another list; else L{None}.
    """
    if row is None or row.digest == jobs.digest:
        return None
    return (
        f"this daemon's job list (digest {jobs.digest}) is not the one of fleet {row.name!r}"
        f" (generation {row.generation}, {row.loaded()}, digest {row.digest}):"
        " it claims no job until reloaded with the fleet's configuration"
    )


def checkClaimed(jobs: JobList, name: str, digest: bytes) -> None:
    """
    Check that the claimed row of job C{name}, of digest C{digest}, is
    the job C{jobs} configures.

    @raise JobListStale: it is not (the claim must be rolled back).
    """
    if jobs.digests.get(name) != digest:
        raise JobListStale(f"job {name!r} of the fleet's list is configured otherwise here")


__all__: Sequence[str] = (
    "CLAIMABLE",
    "FleetRow",
    "JobList",
    "ListChange",
    "accountsOf",
    "changeList",
    "checkClaimed",
    "databaseName",
    "joinFleet",
    "readFleet",
    "replaceJobList",
    "staleList",
)
