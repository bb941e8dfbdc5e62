# -*- test-case-name: tests.test_verify, tests.test_cli -*-
"""
Verification: does the destination hold the source, byte for byte?

For each source folder (after the job's folder rules, as the migration maps
it), every message is read on both sides and compared: its SHA-256, its
flags (C{\\Recent} aside, compared without regard to case, as RFC 3501
says flags are) and its INTERNALDATE (the instant: for a Maildir or mbox
source, the one its file name or C{From } line holds, read by
L{imapmig.commands.expected} rather than by the source reader, so that a reader's
mistake shows).  Messages are
paired by the state store's record of where each one went (its UID in the
destination, under the same UIDVALIDITY); messages the store does not place
are paired by content.  What is left over on either side is a difference,
whoever caused it: a message missing or changed in the destination, one
that is there but not in the source, a flag or a date that differs.

Nothing is written on either side: the source is read as the migration
reads it, the destination with C{EXAMINE} and C{BODY.PEEK[]}.  Bodies are
hashed as they arrive, a bounded batch at a time.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections import defaultdict
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Iterable, Sequence, TextIO

from attrs import frozen
from twisted.logger import Logger

from imapmig.config import Config
from imapmig.errors import ImapmigError
from imapmig.commands.expected import fromLineDate, maildirDeliveryDate
from imapmig.imap.mailboxes import ListedMailbox
from imapmig.imap.session import IMAPSession
from imapmig.mail.message import SourceFolder, SourceMessage, StreamedBody, UnreadableMessage
from imapmig.job.view import DestinationView
from imapmig.mail.folders import FolderMapping, FolderRules
from imapmig.job.units import chunks
from imapmig.sources import IMessageSource
from imapmig.sources.maildir import MaildirSource
from imapmig.sources.mbox import MboxSource
from imapmig.state import IStateStore, JobReport, MessageOutcome
from imapmig.units import Count, plural

log = Logger()

def writeReport(path: str, document: object) -> None:
    """
    Write the JSON report C{document} to C{path}, mode 0600 whatever the
    umask (it names every account and folder compared): to
    C{path + ".partial"} first, renamed over C{path}, so that the daemon's
    status page, which reads the report when it changes, never sees half
    of it.

    @raise OSError: the file cannot be written (no partial file is left).
    """
    partial = path + ".partial"
    fd = os.open(
        partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
    )
    try:
        try:
            # A partial file left by an earlier run keeps its mode through O_CREAT.
            os.fchmod(fd, 0o600)
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(document, f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.replace(partial, path)
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
        raise


# Octets of message bodies read (on either side) per batch.
BATCH_BYTES = 8 * 1024 * 1024
BATCH_MESSAGES = 500


@frozen
class MessageFacts:
    """
    What is compared of one message.

    @ivar sha256: the digest of its octets (CRLF line endings, as IMAP
        carries them), hex.
    @ivar flags: its flags and keywords as spelled, C{\\Recent} left out,
        one of each regardless of case, sorted.
    @ivar internalDate: its INTERNALDATE in UTC, or L{None} when the source
        has none (the server then chose it: not compared).
    @ivar size: its size in octets.
    @ivar servedSha256: for a source message with NUL octets, the digest
        with each NUL as C{0x80}, as Dovecot serves it; else L{None}.
    @ivar dateOrigin: for a source message, where L{internalDate} was read
        independently of the source reader (C{"its Maildir name"}, C{"its
        From_ line"}), or L{None} when it is the reader's.
    """

    sha256: str
    flags: tuple[str, ...]
    internalDate: datetime | None
    size: int
    servedSha256: str | None = None
    dateOrigin: str | None = None

    @property
    def flagKey(self) -> frozenset[str]:
        """
        The flags as compared: IMAP flags and keywords are
        case-insensitive (RFC 3501 2.3.2), so C{\\seen} is C{\\Seen}.
        """
        return frozenset(_flagKey(flag) for flag in self.flags)

    def digests(self) -> tuple[str, ...]:
        """
        The digests the destination may show for this message: its own,
        and for a message with NUL octets the one of the octets as IMAP
        servers serve them in C{BODY[]} (RFC 3501 literals carry no NUL:
        Dovecot shows it as C{0x80}).
        """
        if self.servedSha256 is None:
            return (self.sha256,)
        return (self.sha256, self.servedSha256)


@frozen
class Difference:
    """
    One difference between the source and the destination.

    @ivar kind: C{"missing"} (in the source, not in the destination),
        C{"unexpected"} (in the destination, not in the source),
        C{"content"}, C{"flags"} or C{"date"} (a pair that differs),
        C{"unreadable"} (the source could not be read).
    @ivar mailbox: the destination mailbox.
    @ivar folder: the source folder, levels joined with C{/} (L{None} for
        an unexpected message).
    @ivar messageKey: the source message's key, if any.
    @ivar uid: the destination message's UID, if any.
    @ivar detail: what differs, for the admin.
    """

    kind: str
    mailbox: str
    folder: str | None
    messageKey: str | None
    uid: int | None
    detail: str


@frozen
class MailboxReport:
    """
    The comparison of one destination mailbox with the source folders
    mapped to it.

    @ivar mailbox: the destination mailbox.
    @ivar folders: the source folders, levels joined with C{/}.
    @ivar sourceMessages: messages in those folders.
    @ivar destinationMessages: messages in the mailbox.
    @ivar matched: pairs found (equal or not).
    @ivar differences: every difference found.
    """

    mailbox: str
    folders: tuple[str, ...]
    sourceMessages: int
    destinationMessages: int
    matched: int
    differences: tuple[Difference, ...]


@frozen
class VerifyReport:
    """
    The comparison of a job's source and destination.

    @ivar job: the job's name.
    @ivar mailboxes: one report per destination mailbox.
    @ivar excludedFolders: source folders the folder rules leave out (not
        compared).
    """

    job: str
    mailboxes: tuple[MailboxReport, ...]
    excludedFolders: tuple[str, ...]

    @property
    def differences(self) -> list[Difference]:
        """
        Every difference, mailbox by mailbox.
        """
        return [d for mailbox in self.mailboxes for d in mailbox.differences]

    def toJSON(self) -> dict[str, object]:
        """
        A JSON-ready view of the report.
        """
        return {
            "job": self.job,
            "differences": len(self.differences),
            "excluded_folders": list(self.excludedFolders),
            "mailboxes": [
                {
                    "mailbox": m.mailbox,
                    "folders": list(m.folders),
                    "source_messages": m.sourceMessages,
                    "destination_messages": m.destinationMessages,
                    "matched": m.matched,
                    "differences": [
                        {
                            "kind": d.kind,
                            "folder": d.folder,
                            "message_key": d.messageKey,
                            "uid": d.uid,
                            "detail": d.detail,
                        }
                        for d in m.differences
                    ],
                }
                for m in self.mailboxes
            ],
        }


def _flagKey(flag: str) -> str:
    """
    A flag as compared: ASCII letters lower-cased (flags are atoms; a
    non-ASCII keyword, which no server should hold, keeps its other
    characters as they are).
    """
    return flag.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _sortedFlags(flags: Iterable[str]) -> tuple[str, ...]:
    """
    C{flags} without C{\\Recent} (only a server sets it) and with one
    spelling of each flag whatever its case (the first), sorted.
    """
    kept: dict[str, str] = {}
    for flag in flags:
        key = _flagKey(flag)
        if key != "\\recent":
            kept.setdefault(key, flag)
    return tuple(sorted(kept.values(), key=_flagKey))


def _utc(when: datetime | None) -> datetime | None:
    """
    C{when} in UTC, to compare instants and show them alike; as it is when
    UTC cannot hold it (9999-12-31 23:30 -0500 is in the year 10000 there):
    aware datetimes still compare as instants.
    """
    if when is None:
        return None
    try:
        return when.astimezone(timezone.utc)
    except OverflowError:
        return when


def _digests(body: bytes | bytearray | StreamedBody) -> tuple[str, str | None]:
    """
    The SHA-256 of a body, and of the body with NUL octets shown as
    C{0x80} when it has any.
    """
    digest = hashlib.sha256()
    served = None
    if isinstance(body, StreamedBody):
        if body.hasNUL:
            served = hashlib.sha256()
        for piece in body.slices(1024 * 1024):
            digest.update(piece)
            if served is not None:
                served.update(piece.replace(b"\x00", b"\x80"))
    else:
        digest.update(body)
        if b"\x00" in body:
            served = hashlib.sha256(bytes(body).replace(b"\x00", b"\x80"))
    return digest.hexdigest(), None if served is None else served.hexdigest()


def _expectedDate(
    source: IMessageSource, folder: SourceFolder, message: SourceMessage
) -> tuple[datetime | None, str | None]:
    """
    The INTERNALDATE C{message} should have, read by L{imapmig.commands.expected}
    (not by the source's reader) where the format holds one: a Maildir
    name's delivery time, an mbox C{From } line's asctime date; else the
    reader's.

    @return: the date in UTC (or L{None}), and where it was read
        independently (or L{None}: the reader's).
    """
    if isinstance(source, MaildirSource):
        when = maildirDeliveryDate(message.key)
        if when is not None:
            return when, "its Maildir name"
    elif isinstance(source, MboxSource):
        line = source.fromLine(folder, message.key)
        when = None if line is None else fromLineDate(line)
        if when is not None:
            return _utc(when), "its From_ line"
    return _utc(message.internalDate), None


def _folderName(folder: SourceFolder) -> str:
    return "/".join(folder.path)


class _SourceSide:
    """
    The source messages of one mailbox: facts by (folder, key).
    """

    def __init__(self) -> None:
        self.facts: dict[tuple[str, str], MessageFacts] = {}
        self.folderNames: dict[str, str] = {}
        self.unreadable: list[Difference] = []


async def _readSource(
    source: IMessageSource,
    mailbox: str,
    folders: Sequence[SourceFolder],
) -> _SourceSide:
    side = _SourceSide()
    for folder in folders:
        name = _folderName(folder)
        side.folderNames[folder.key] = name
        messages: Sequence[SourceMessage] = await source.listMessages(folder)
        for chunk in chunks(messages, BATCH_MESSAGES, BATCH_BYTES):
            bodies = await source.readBodies(folder, chunk)
            for message, body in zip(chunk, bodies):
                if isinstance(body, UnreadableMessage):
                    side.unreadable.append(
                        Difference(
                            "unreadable", mailbox, name, message.key, None,
                            f"cannot read the source message: {body.reason}",
                        )  # fmt: skip
                    )
                    continue
                digest, served = _digests(body)
                when, origin = _expectedDate(source, folder, message)
                side.facts[folder.key, message.key] = MessageFacts(
                    digest,
                    _sortedFlags(message.flags),
                    when,
                    len(body),
                    served,
                    origin,
                )
    return side


async def _readDestination(
    session: IMAPSession, mailbox: ListedMailbox | None
) -> tuple[int | None, dict[int, MessageFacts]]:
    """
    The messages of a destination mailbox: its UIDVALIDITY and facts by
    UID; nothing when it does not exist.
    """
    if mailbox is None:
        return None, {}
    examined = await session.examine(mailbox.name, mailbox.wireName)
    if examined.exists == 0:
        return examined.uidValidity, {}
    items = await session.fetchMetadata(b"1:*", b"UID FLAGS INTERNALDATE RFC822.SIZE")
    metadata = {item.uid: item for item in items if item.uid is not None}
    facts: dict[int, MessageFacts] = {}
    uids = sorted(metadata)
    batch: list[int] = []
    size = 0

    async def flush() -> None:
        nonlocal batch, size
        if not batch:
            return
        fetched = await session.fetchBodies([batch])
        for uid in batch:
            body = fetched.bodies.get(uid)
            item = metadata[uid]
            if body is None:
                continue
            facts[uid] = MessageFacts(
                hashlib.sha256(body).hexdigest(),
                _sortedFlags(item.flags or ()),
                _utc(item.internalDate),
                len(body),
            )
        batch, size = [], 0

    for uid in uids:
        batch.append(uid)
        size += metadata[uid].size or 0
        if size >= BATCH_BYTES or len(batch) >= BATCH_MESSAGES:
            await flush()
    await flush()
    return examined.uidValidity, facts


def _pairing(digest: str, facts: MessageFacts, exact: bool) -> object:
    if exact:
        return (digest, facts.flagKey, facts.internalDate)
    return digest


def compareMailbox(
    mailbox: str,
    source: _SourceSide,
    uidValidity: int | None,
    destination: dict[int, MessageFacts],
    recorded: dict[str, dict[str, MessageOutcome]],
    failures: dict[tuple[str, str], str],
) -> MailboxReport:
    """
    Pair and compare the messages of one mailbox.

    @param recorded: per folder key, the state store's record of where each
        message went (L{IStateStore.destinationMap}).
    @param failures: the failure the state store records for a message not
        migrated, by (folder key, message key).
    """
    unpairedSource: dict[tuple[str, str], MessageFacts] = dict(source.facts)
    unpairedDestination = dict(destination)
    pairs = _pairRecorded(unpairedSource, unpairedDestination, recorded, uidValidity)
    # The rest by content: the same octets, flags and date first, then the
    # same octets.
    for exact in (True, False):
        pairs += _pairByContent(unpairedSource, unpairedDestination, exact)
    differences: list[Difference] = list(source.unreadable)
    for (folderKey, messageKey), uid in pairs:
        differences += _pairDifferences(
            mailbox, source.folderNames[folderKey], messageKey, uid,
            source.facts[folderKey, messageKey], destination[uid],
        )  # fmt: skip
    for (folderKey, messageKey), facts in sorted(unpairedSource.items()):
        why = failures.get((folderKey, messageKey))
        detail = "not in the destination"
        if why is not None:
            detail += f" (imapmig recorded it as failed: {why})"
        differences.append(
            Difference(
                "missing", mailbox, source.folderNames[folderKey], messageKey, None, detail
            )
        )
    for uid, facts in sorted(unpairedDestination.items()):
        differences.append(
            Difference(
                "unexpected", mailbox, None, None, uid,
                f"in the destination ({facts.size} octets, SHA-256 {facts.sha256[:16]}…)"
                " but in no source folder mapped to it",
            )  # fmt: skip
        )
    return MailboxReport(
        mailbox,
        tuple(sorted(set(source.folderNames.values()))),
        len(source.facts) + len(source.unreadable),
        len(destination),
        len(pairs),
        tuple(differences),
    )


_Pairs = list[tuple[tuple[str, str], int]]


def _pairRecorded(
    unpairedSource: dict[tuple[str, str], MessageFacts],
    unpairedDestination: dict[int, MessageFacts],
    recorded: dict[str, dict[str, MessageOutcome]],
    uidValidity: int | None,
) -> _Pairs:
    """
    Pair the messages the state store knows (its recorded UID, in the
    same UIDVALIDITY, still there); take them out of both unpaired sets.
    """
    pairs: _Pairs = []
    for folderKey, messageKey in list(unpairedSource):
        outcome = recorded.get(folderKey, {}).get(messageKey)
        if outcome is None or outcome.uid is None or outcome.uidValidity != uidValidity:
            continue
        if outcome.uid in unpairedDestination:
            pairs.append(((folderKey, messageKey), outcome.uid))
            del unpairedSource[folderKey, messageKey]
            del unpairedDestination[outcome.uid]
    return pairs


def _pairByContent(
    unpairedSource: dict[tuple[str, str], MessageFacts],
    unpairedDestination: dict[int, MessageFacts],
    exact: bool,
) -> _Pairs:
    """
    Pair the unpaired messages by their octets (and, if C{exact}, flags
    and date too), the lowest destination UID first; take them out of
    both unpaired sets.
    """
    index: dict[object, list[int]] = defaultdict(list)
    for uid, facts in sorted(unpairedDestination.items()):
        index[_pairing(facts.sha256, facts, exact)].append(uid)
    pairs: _Pairs = []
    for key, facts in list(unpairedSource.items()):
        for digest in facts.digests():
            candidates = index.get(_pairing(digest, facts, exact))
            if candidates:
                uid = candidates.pop(0)
                pairs.append((key, uid))
                del unpairedSource[key]
                del unpairedDestination[uid]
                break
    return pairs


def _pairDifferences(
    mailbox: str, folder: str, messageKey: str, uid: int, expected: MessageFacts, actual: MessageFacts
) -> list[Difference]:
    """
    How a paired message differs from its source: its octets, its flags,
    its INTERNALDATE (when both sides have one).
    """
    differences = []
    if actual.sha256 not in expected.digests():
        differences.append(
            Difference(
                "content", mailbox, folder, messageKey, uid,
                f"the octets differ (source {expected.size} octets, SHA-256"
                f" {expected.sha256[:16]}…; destination {actual.size} octets,"
                f" {actual.sha256[:16]}…)",
            )  # fmt: skip
        )
    if expected.flagKey != actual.flagKey:
        differences.append(
            Difference(
                "flags", mailbox, folder, messageKey, uid,
                f"source flags ({' '.join(expected.flags)}), destination flags"
                f" ({' '.join(actual.flags)})",
            )  # fmt: skip
        )
    if (
        expected.internalDate is not None
        and actual.internalDate is not None
        and expected.internalDate != actual.internalDate
    ):
        differences.append(
            Difference(
                "date", mailbox, folder, messageKey, uid,
                f"source INTERNALDATE {expected.internalDate.isoformat()}"
                + (f" (from {expected.dateOrigin})" if expected.dateOrigin else "")
                + f", destination {actual.internalDate.isoformat()}",
            )  # fmt: skip
        )
    return differences


def _inListingOrder(
    byMailbox: dict[str, list[FolderMapping]], folders: Sequence[SourceFolder]
) -> list[tuple[str, list[FolderMapping]]]:
    """
    The mailboxes to compare, each once its last source folder's turn
    comes in the source's listing order: a label view the source
    de-duplicates against the folders listed before it (it lists it last)
    is read after them, with any mailbox it shares.
    """
    position = {f.key: index for index, f in enumerate(folders)}
    return sorted(
        byMailbox.items(), key=lambda item: max(position[m.folder.key] for m in item[1])
    )


async def _notMigrated(source: IMessageSource, folder: SourceFolder) -> list[MailboxReport]:
    """
    For a folder whose messages the source lists without migrating them
    (L{SourceFolder.notMigrated}), a report with each of them as a C{not
    migrated} difference, under the mailbox C{"-"} (no body is read); for
    any other folder, none.
    """
    why = folder.notMigrated
    if why is None:
        return []
    name = _folderName(folder)
    messages = await source.listMessages(folder)
    differences = tuple(
        Difference("not migrated", "-", name, m.key, None, f"not migrated: {why}")
        for m in messages
    )
    return [MailboxReport("-", (name,), len(messages), 0, 0, differences)]


async def _verifyMailbox(
    job: str,
    source: IMessageSource,
    session: IMAPSession,
    store: IStateStore,
    mailbox: str,
    group: Sequence[FolderMapping],
    destination: ListedMailbox | None,
    failures: dict[tuple[str, str], str],
) -> MailboxReport:
    """
    Read and compare one destination mailbox with the source folders
    mapped to it, and log the result.
    """
    groupFolders = [m.folder for m in group]
    sourceSide = await _readSource(source, mailbox, groupFolders)
    recorded = {f.key: await store.destinationMap(job, f.key) for f in groupFolders}
    uidValidity, facts = await _readDestination(session, destination)
    report = compareMailbox(mailbox, sourceSide, uidValidity, facts, recorded, failures)
    log.info(
        "verify {job}: {mailbox}: {sourceMessages}, {destination} in the"
        " destination, {differencesFound}",
        sourceMessages=Count(report.sourceMessages, "source message"),
        differencesFound=Count(len(report.differences), "difference"),
        job=job,
        mailbox=mailbox,
        source=report.sourceMessages,
        destination=report.destinationMessages,
        differences=len(report.differences),
    )
    return report


async def verifyJob(
    job: str,
    source: IMessageSource,
    rules: FolderRules,
    openDestination: Callable[[], Awaitable[IMAPSession]],
    store: IStateStore,
    recorded: JobReport | None = None,
) -> VerifyReport:
    """
    Compare a job's source with its destination account.

    @param job: the job's name (its records in C{store}).
    @param source: the job's L{imapmig.sources.IMessageSource}.
    @param rules: the job's folder rules.
    @param openDestination: opens a logged-in session to the destination.
    @param recorded: what C{store} records of the job (its failures and
        folder fallbacks), read with other jobs'; L{None}: read here.
    @return: the report; its C{differences} are empty when the destination
        holds the source exactly.
    """
    session = await openDestination()
    try:
        view = await DestinationView.read(session)
        byName = {
            ("INBOX" if m.name.upper() == "INBOX" else m.name): m
            for m in view.listed
            if m.selectable
        }
        folders = await source.listFolders()
        if recorded is None:
            [recorded] = await store.jobReports([job])
        # Where the job fell back to a safe spelling, so does verify.
        fallbacks = {f.mailbox: f.fallback for f in recorded.fallbacks}
        mappings, excluded = view.mapped(folders, rules, fallbacks)
        byMailbox: dict[str, list[FolderMapping]] = defaultdict(list)
        for mapping in mappings:
            byMailbox[mapping.mailbox].append(mapping)
        failures = {(f.folderKey, f.messageKey): f.failure or "" for f in recorded.failures}
        reports = []
        for mailbox, group in _inListingOrder(byMailbox, folders):
            destination = byName.get(mailbox)
            reports.append(
                await _verifyMailbox(job, source, session, store, mailbox, group, destination, failures)
            )
        excludedKeys = {f.key for f in excluded}
        for folder in folders:
            if folder.key not in excludedKeys:
                reports += await _notMigrated(source, folder)
    finally:
        await session.logout()
    return VerifyReport(job, tuple(reports), tuple(_folderName(f) for f in excluded))


async def verify(
    config: Config,
    jobs: Sequence[str],
    store: IStateStore,
    reactor: Any,
    reportPath: str,
    out: TextIO,
    besideState: bool = False,
) -> int:
    """
    Verify C{jobs}: print a summary and every difference to C{out}, write
    the JSON report to C{reportPath}.

    @param besideState: C{reportPath} is the default one, beside the state
        database (not given with C{--report}).
    @return: the exit status: 0 without differences, 1 otherwise (also
        when the report cannot be written: L{reportNotWritten} says why).
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
                    result = await verifyJob(
                        job.name, source, job.folders, openDestination, store, recorded
                    )
            except ImapmigError as e:
                out.write(f"{job.name}: cannot verify: {e}\n")
                document.append({"job": job.name, "error": str(e)})
                status = 1
                continue
            if _writeVerified(job.name, result, out):
                status = 1
            document.append(result.toJSON())
    try:
        writeReport(reportPath, document)
    except OSError as e:
        out.write(reportNotWritten(reportPath, e, besideState))
        return 1
    out.write(f"report written to {reportPath}\n")
    return status


def _writeVerified(job: str, result: VerifyReport, out: TextIO) -> bool:
    """
    Write a verified job's summary line and a line per difference to
    C{out}; return whether there was any difference.
    """
    differences = result.differences
    sourceCount = sum(m.sourceMessages for m in result.mailboxes)
    destinationCount = sum(m.destinationMessages for m in result.mailboxes)
    out.write(
        f"{job}: {plural(len(result.mailboxes), 'mailbox', 'mailboxes')},"
        f" {plural(sourceCount, 'source message')}, {destinationCount} in the"
        f" destination: {plural(len(differences), 'difference')}\n"
    )
    for d in differences:
        where = d.folder or "-"
        what = d.messageKey or (f"UID {d.uid}" if d.uid is not None else "-")
        out.write(f"  {d.kind}\t{d.mailbox}\t{where}\t{what}\t{d.detail}\n")
    return bool(differences)


def reportNotWritten(path: str, error: OSError, besideState: bool) -> str:
    """
    The line saying that C{imapmig verify} could not write its report.

    @param path: where it tried.
    @param error: why not.
    @param besideState: C{path} is the default, beside the state database.
    @return: the line, with what to do about it.
    """
    why = error.strerror or str(error)
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        why = f"the directory {os.path.dirname(os.path.abspath(path))} is not writable ({why})"
    if besideState:
        return (
            f"cannot write the report {path} beside the state database: {why};"
            " give --report FILE to write it elsewhere\n"
        )
    return f"cannot write the report {path}: {why}\n"
