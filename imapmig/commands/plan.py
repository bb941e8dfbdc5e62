# -*- test-case-name: tests.test_commands_plan -*-
"""
A plan before the run: what a job would copy, read without writing
anything anywhere.

The source is listed as the migration lists it (an IMAP source with LIST,
NAMESPACE, EXAMINE and a UID FETCH of UIDs, flags and sizes: read-only,
no SELECT); the destination is read as the migration reads it (NAMESPACE
and LIST only); the folder mapping is the migration's (L{mapFolders},
then the folder-name fallbacks earlier runs recorded,
L{withRecordedFallbacks}); the state store is only read.  No CREATE, no
SUBSCRIBE, no APPEND, no state written.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable, Sequence, TextIO

from attrs import frozen

from imapmig.config import Config, ImapSourceConfig, JobConfig
from imapmig.errors import ConnectFailed, ImapmigError, SourceError
from imapmig.imap.session import IMAPSession
from imapmig.job.view import DestinationView
from imapmig.mail.message import SourceFolder, SourceMessage
from imapmig.mail.folders import (
    FolderMapping,
    FolderRules,
    PersonalNamespace,
    folderName,
    mailboxesToCreate,
)
from imapmig.job.units import pendingMessages
from imapmig.sources import IMessageSource
from imapmig.state import IStateStore, JobReport
from imapmig.units import octets, plural


@frozen
class FolderPlan:
    """
    One source folder: what it holds, where it goes, what is left to copy.

    @ivar folder: its path, levels joined with C{/} (as folder rules write
        it).
    @ivar specialUse: its RFC 6154 use in the source, if any.
    @ivar messages: the messages it holds (0 when it could not be listed).
    @ivar size: their total size in octets, as the source lists them.
    @ivar mailbox: the destination mailbox it goes to, or L{None} when the
        folder rules leave it out.
    @ivar how: why it goes there: C{"name"}, C{"rename"},
        C{"special-use"}, C{"fallback"} (a folder-name fallback an earlier
        run recorded), or C{"excluded"}.
    @ivar mailboxExists: whether the destination has that mailbox now.
    @ivar migrated: its messages the state store records as in the
        destination (appended, or found there already).
    @ivar toCopy: its messages the run would copy (every one not
        recorded; 0 for a folder left out).
    @ivar toCopySize: their total size in octets.
    @ivar failedBefore: of those, how many an earlier run recorded as
        failed (a run tries them again).
    @ivar error: why the folder could not be listed, or L{None}.
    @ivar why: for a folder the source leaves out (a label view, a mailbox
        outside the personal namespace: C{how} is C{"left out"}; its
        C{messages} counted by EXAMINE, its C{size} unknown, 0) or whose
        messages it lists without migrating them (C{how} is C{"not
        migrated"}), why; else L{None}.
    """

    folder: str
    specialUse: str | None
    messages: int
    size: int
    mailbox: str | None
    how: str
    mailboxExists: bool
    migrated: int
    toCopy: int
    toCopySize: int
    failedBefore: int = 0
    error: str | None = None
    why: str | None = None

    def toJSON(self) -> dict[str, object]:
        """
        A JSON-ready view of the folder's plan.
        """
        return {
            "folder": self.folder,
            "special_use": self.specialUse,
            "messages": self.messages,
            "size": self.size,
            "mailbox": self.mailbox,
            "how": self.how,
            "mailbox_exists": self.mailboxExists,
            "migrated": self.migrated,
            "to_copy": self.toCopy,
            "to_copy_size": self.toCopySize,
            "failed_before": self.failedBefore,
            "error": self.error,
            "why": self.why,
        }


@frozen
class JobPlan:
    """
    What a job would do now.

    @ivar job: its name.
    @ivar namespace: the destination's personal namespace, as the job
        would use it.
    @ivar folders: one plan per source folder, in the source's order.
    @ivar create: the mailboxes the run would create, parents first, each
        with the special use it would be created with (or L{None}).
    @ivar subscribe: mailboxes the run would subscribe (their source folder
        is subscribed, the destination's is not, or does not exist yet).
    """

    job: str
    namespace: PersonalNamespace
    folders: tuple[FolderPlan, ...]
    create: tuple[tuple[str, str | None], ...]
    subscribe: tuple[str, ...]

    @property
    def unreadable(self) -> list[FolderPlan]:
        """
        The folders that could not be listed.
        """
        return [f for f in self.folders if f.error is not None]

    def totals(self) -> dict[str, int]:
        """
        The job's totals, over the folders the rules keep.
        """
        kept = [f for f in self.folders if f.mailbox is not None]
        return {
            "folders": len(kept),
            "excluded_folders": len(self.folders) - len(kept),
            "not_migrated": sum(f.messages for f in self.folders if f.how == NOT_MIGRATED),
            "messages": sum(f.messages for f in kept),
            "size": sum(f.size for f in kept),
            "migrated": sum(f.migrated for f in kept),
            "to_copy": sum(f.toCopy for f in kept),
            "to_copy_size": sum(f.toCopySize for f in kept),
            "mailboxes_to_create": len(self.create),
        }

    def toJSON(self) -> dict[str, object]:
        """
        A JSON-ready view of the plan.
        """
        return {
            "job": self.job,
            "namespace": {
                "prefix": self.namespace.prefix,
                "delimiter": self.namespace.delimiter,
            },
            "totals": self.totals(),
            "folders": [f.toJSON() for f in self.folders],
            "create": [{"mailbox": name, "special_use": use} for name, use in self.create],
            "subscribe": list(self.subscribe),
        }


LEFT_OUT = "left out"
NOT_MIGRATED = "not migrated"


def _size(messages: Sequence[SourceMessage]) -> int:
    return sum(m.size for m in messages)


async def _folderPlan(
    job: str,
    source: IMessageSource,
    store: IStateStore,
    folder: SourceFolder,
    mapping: FolderMapping | None,
    existing: frozenset[str],
    failed: frozenset[tuple[str, str]],
) -> FolderPlan:
    """
    List one folder and compare it with the state store's records.
    """
    name = folderName(folder.path)
    mailbox = None if mapping is None else mapping.mailbox
    how = "excluded" if mapping is None else mapping.how
    exists = mailbox is not None and mailbox in existing
    try:
        messages = await source.listMessages(folder)
    except SourceError as e:
        return FolderPlan(
            name, folder.specialUse, 0, 0, mailbox, how, exists, 0, 0, 0, 0, str(e)
        )
    if mapping is None:
        why = folder.notMigrated
        return FolderPlan(
            name, folder.specialUse, len(messages), _size(messages), None,
            how if why is None else NOT_MIGRATED, False, 0, 0, 0, why=why,
        )  # fmt: skip
    recorded = await store.destinationMap(job, folder.key)
    pending = pendingMessages(messages, recorded)
    return FolderPlan(
        name,
        folder.specialUse,
        len(messages),
        _size(messages),
        mailbox,
        how,
        exists,
        len(messages) - len(pending),
        len(pending),
        _size(pending),
        sum(1 for m in pending if (folder.key, m.key) in failed),
    )


async def _leftOut(source: IMessageSource) -> list[FolderPlan]:
    """
    The folders an IMAP source left out of its listing (label views,
    mailboxes outside the personal namespace), each with its message
    count (EXAMINE) and why.
    """
    from imapmig.sources.imap import IMAPSource

    if not isinstance(source, IMAPSource):
        return []
    plans = []
    for folder, why in source.leftOut:
        name = folderName(folder.path)
        try:
            count = await source.countMessages(folder)
        except SourceError as e:
            # Another user's mailbox may not open: the plan still holds.
            why = f"{why} (its messages cannot be counted: {e})"
            count = 0
        plans.append(
            FolderPlan(name, folder.specialUse, count, 0, None, LEFT_OUT, False, 0, 0, 0, why=why)
        )
    return plans


async def previewJob(
    job: str,
    source: IMessageSource,
    rules: FolderRules,
    openDestination: Callable[[], Awaitable[IMAPSession]],
    store: IStateStore,
    nameFallback: bool = True,
    recorded: JobReport | None = None,
) -> JobPlan:
    """
    Plan a job without running it: log in to the destination and read its
    mailboxes, list the source, map the folders as the migration would,
    and count per folder what the state store records as migrated and
    what is left to copy.  Nothing is written on either side, nor in
    C{store}.

    @param job: the job's name (its records in C{store}).
    @param source: the job's source.
    @param rules: the job's folder rules.
    @param openDestination: opens a logged-in session to the destination.
    @param store: the state store, read only.
    @param nameFallback: the job's C{folder_name_fallback}: whether the
        fallbacks earlier runs recorded are followed.
    @param recorded: what C{store} records of the job (its failures and
        folder fallbacks), read with other jobs'; L{None}: read here.
    @return: the plan; a folder that could not be listed carries its
        C{error}.
    @raise imapmig.errors.ImapmigError: the destination or the source
        could not be read at all (a refused login, an unreachable server,
        a source whose folders cannot be listed).
    """
    session = await openDestination()
    try:
        view = await DestinationView.read(session)
    finally:
        await session.logout()
    folders = await source.listFolders()
    if recorded is None:
        [recorded] = await store.jobReports([job])
    fallbacks = {f.mailbox: f.fallback for f in recorded.fallbacks} if nameFallback else {}
    mappings, _ = view.mapped(folders, rules, fallbacks)
    byKey = {m.folder.key: m for m in mappings}
    failed = frozenset((f.folderKey, f.messageKey) for f in recorded.failures)
    plans = [
        await _folderPlan(job, source, store, folder, byKey.get(folder.key), view.existing, failed)
        for folder in folders
    ]
    plans += await _leftOut(source)
    create, subscribe = _creations(mappings, view)
    return JobPlan(job, view.namespace, tuple(plans), create, subscribe)


def _creations(
    mappings: Sequence[FolderMapping], view: DestinationView
) -> tuple[tuple[tuple[str, str | None], ...], tuple[str, ...]]:
    """
    The mailboxes a run would create (parents first, each with its
    special use), and those it would subscribe.
    """
    # As the migration computes it (DestinationPreparation._createMailboxes):
    # a mailbox the destination has needs no parent created.
    missing = mailboxesToCreate(
        [m.path for m in mappings if m.mailbox not in view.existing],
        view.existing,
        view.namespace,
    )
    uses = {m.mailbox: m.specialUse for m in mappings if m.specialUse is not None}
    subscribe = sorted({m.mailbox for m in mappings if m.folder.subscribed} - view.subscribed)
    return tuple((name, uses.get(name)) for name in missing), tuple(subscribe)


def _sourceDescription(job: JobConfig) -> str:
    """
    The job's source, for the admin: the account or the path.
    """
    source = job.source
    if isinstance(source, ImapSourceConfig):
        return f"IMAP {source.user} at {source.server.endpoint}"
    kind = type(source).__name__.replace("SourceConfig", "").lower()
    return f"{kind} {source.path}"


def _planRow(f: FolderPlan) -> tuple[str, str, str, str, str, str, str]:
    """
    One folder's row of a plan's table (L{_writePlan}).
    """
    folder = f.folder + (f" ({f.specialUse})" if f.specialUse else "")
    if f.error is not None:
        return (folder, "-", "-", f.mailbox or "-", "unreadable", "-", "-")
    if f.why is not None:
        return (folder, str(f.messages), "-", "-", f.how, "-", "-")
    if f.mailbox is None:
        return (folder, str(f.messages), octets(f.size), "-", "left out by the folder rules", "-", "-")
    toCopy = f"{f.toCopy} ({octets(f.toCopySize)})" if f.toCopy else "0"
    mailbox = f.mailbox + ("" if f.mailboxExists else " (new)")
    return (folder, str(f.messages), octets(f.size), mailbox, f.how, str(f.migrated), toCopy)


def _writePlan(preview: JobPlan, out: TextIO) -> None:
    """
    Write one job's plan as a table, with a line for each folder that
    could not be listed or is left out and why, each mailbox it would
    create or subscribe, and its total.
    """
    namespace = preview.namespace
    out.write(
        f"  destination namespace: prefix {namespace.prefix!r},"
        f" delimiter {namespace.delimiter!r}\n"
    )
    for line in [*_table(preview), *_notes(preview), _totalLine(preview)]:
        out.write(f"  {line}\n")


def _table(preview: JobPlan) -> list[str]:
    """
    The plan's table: a row per folder, columns as wide as their widest
    cell.
    """
    rows = [("folder", "messages", "size", "mailbox", "how", "migrated", "to copy")]
    rows.extend(_planRow(f) for f in preview.folders)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]


def _notes(preview: JobPlan) -> list[str]:
    """
    The lines after the table: folders that could not be listed, folders
    left out and why, mailboxes to create and to subscribe.
    """
    lines = [f"cannot list {f.folder}: {f.error}" for f in preview.unreadable]
    lines += [
        f"{f.how} {f.folder}: {plural(f.messages, 'message')}: {f.why}"
        for f in preview.folders
        if f.why is not None
    ]
    lines += [f"would create {name}" + (f" ({use})" if use else "") for name, use in preview.create]
    return lines + [f"would subscribe {name}" for name in preview.subscribe]


def _totalLine(preview: JobPlan) -> str:
    """
    The plan's last line: what the job holds, what is migrated, what is
    left to copy and to create.
    """
    totals = preview.totals()
    failedBefore = sum(f.failedBefore for f in preview.folders)
    return (
        f"total: {plural(totals['messages'], 'message')} ({octets(totals['size'])}) in"
        f" {plural(totals['folders'], 'folder')} ({totals['excluded_folders']} left out):"
        f" {totals['migrated']} migrated, {totals['to_copy']} to copy"
        f" ({octets(totals['to_copy_size'])})"
        + (f", {failedBefore} of them failed before" if failedBefore else "")
        + (f", {totals['not_migrated']} not migrated" if totals["not_migrated"] else "")
        + f"; {plural(totals['mailboxes_to_create'], 'mailbox', 'mailboxes')} to create"
    )


def _header(job: JobConfig) -> str:
    """
    The first line of a job's plan: the job, its source and destination.
    """
    destination = job.destination
    return f"{job.name}: {_sourceDescription(job)} -> {destination.user} at {destination.server.endpoint}"


def _cannotPlan(job: JobConfig, error: ImapmigError, out: TextIO | None) -> dict[str, object]:
    """
    Say why C{job} could not be planned (on C{out} as text, unless it is
    C{None}); return its JSON entry.  A server that could not be reached
    is named by its setting.
    """
    why = str(error)
    if isinstance(error, ConnectFailed) and error.setting is not None:
        why = f"{why}; check {error.setting}"
    if out is not None:
        out.write(f"{_header(job)}\n  cannot plan: {why}\n")
    return {"job": job.name, "error": why}


def _planned(job: JobConfig, preview: JobPlan, out: TextIO | None) -> dict[str, object]:
    """
    Write C{job}'s plan to C{out} as text (unless it is C{None}); return
    its JSON entry.
    """
    entry = preview.toJSON()
    entry["source"] = _sourceDescription(job)
    entry["destination"] = f"{job.destination.user} at {job.destination.server.endpoint}"
    if out is not None:
        out.write(_header(job) + "\n")
        _writePlan(preview, out)
    return entry


async def plan(
    config: Config,
    jobs: Sequence[str],
    store: IStateStore,
    reactor: Any,
    asJSON: bool,
    out: TextIO,
) -> int:
    """
    Plan C{jobs} (L{previewJob}) and write each plan to
    C{out}, as text tables or one JSON document.  Nothing is written
    anywhere else.

    @return: the exit status: 0 when every job was planned, 1 otherwise.
    """
    from imapmig.commands.sides import jobSides, selectedPages
    from imapmig.oauth.tokens import TokenSources

    document: list[dict[str, object]] = []
    status = 0
    # One refresh-token cache per file for the whole command.
    tokens = TokenSources(reactor)
    for page in selectedPages(config, jobs):
        # What the store records of a page of jobs, in a few statements.
        records = await store.jobReports([job.name for job in page])
        for job, recorded in zip(page, records):
            try:
                async with jobSides(job, reactor, tokens) as (source, openDestination):
                    preview = await previewJob(
                        job.name, source, job.folders, openDestination, store,
                        job.folderNameFallback, recorded,
                    )  # fmt: skip
            except ImapmigError as e:
                status = 1
                document.append(_cannotPlan(job, e, None if asJSON else out))
                continue
            status = max(status, 1 if preview.unreadable else 0)
            document.append(_planned(job, preview, None if asJSON else out))
    if asJSON:
        json.dump(document, out, indent=2, ensure_ascii=False)
        out.write("\n")
    return status
