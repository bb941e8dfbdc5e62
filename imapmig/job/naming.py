# -*- test-case-name: tests.test_job_naming -*-
"""
Naming the messages that failed before their header was read (listed
larger than the destination accepts, their mailbox uncreatable or full,
given up after too many strikes, unreadable): once an attempt's copying
is over, while the source is still open, their headers are read (an IMAP
source fetches only C{BODY.PEEK[HEADER.FIELDS (...)]}; a local one reads
each file's start) and their Message-ID, Date, From and Subject recorded
beside the failure (L{imapmig.state.IStateStore.nameMessages}).

Nothing here runs for a message that is appended: the hot path is
untouched.  A module of its own: the recorder (L{imapmig.job.recording})
is synchronous and never reads the source, and the migration module is at
its size limit.
"""

from __future__ import annotations

from typing import Sequence

from twisted.logger import Logger

from imapmig.errors import ImapmigError
from imapmig.job.listing import Listed
from imapmig.job.recording import OutcomeRecorder
from imapmig.mail.message import SourceFolder, SourceMessage, StreamedBody, UnreadableMessage
from imapmig.mail.messagenames import namesOfBody, namesOfHeader
from imapmig.sources import IMessageSource
from imapmig.sources.imap import IMAPSource
from imapmig.state import IStateStore, MessageNames

log = Logger()

NAMES_PER_RUN = 10_000
"""
The most failed messages a run names: beyond them (a job whose every
message fails), the headers are not read and the failures show their
keys alone.
"""

NAMES_PER_READ = 200
"""
How many messages' headers are read at a time (one C{UID FETCH} of an
IMAP source).
"""


async def _readNames(
    source: IMessageSource, folder: SourceFolder, messages: Sequence[SourceMessage]
) -> list[MessageNames | None]:
    """
    The names of C{messages} of C{folder}, in order; L{None} for one whose
    header cannot be read.
    """
    if isinstance(source, IMAPSource):
        headers = await source.readHeaders(folder, messages)
        return [None if header is None else namesOfHeader(header) for header in headers]
    # A local source reads a message from its file: a large one is a
    # StreamedBody, of which only the start is read.
    bodies = await source.readBodies(folder, messages)
    names: list[MessageNames | None] = []
    for body in bodies:
        if isinstance(body, UnreadableMessage):
            names.append(None)
            continue
        names.append(namesOfBody(body))
        if isinstance(body, StreamedBody):
            body.close()
    return names


async def _addNames(
    source: IMessageSource,
    folder: SourceFolder,
    messages: Sequence[SourceMessage],
    rows: list[tuple[str, str, MessageNames]],
) -> None:
    """
    Add to C{rows}, as the store takes them, the names in the headers of
    C{messages} of C{folder}, read L{NAMES_PER_READ} at a time: those read
    stay in C{rows} if a later read fails.  A message whose header cannot
    be read, or names nothing, has none.
    """
    for start in range(0, len(messages), NAMES_PER_READ):
        chunk = messages[start : start + NAMES_PER_READ]
        for message, names in zip(chunk, await _readNames(source, folder, chunk)):
            if names:
                rows.append((folder.key, message.key, names))


async def nameFailures(
    job: str,
    source: IMessageSource,
    store: IStateStore,
    recorder: OutcomeRecorder,
    listed: Sequence[Listed],
) -> None:
    """
    Name the messages C{recorder} noted as failed without their names
    (L{OutcomeRecorder.unnamed}), reading their headers from C{source} as
    C{listed}.  A header that cannot be read leaves its message unnamed; a
    source or store that fails is logged, never raised: the failure is
    recorded already, its names are a courtesy.
    """
    unnamed, recorder.unnamed = recorder.unnamed, []
    if not unnamed:
        return
    byFolder = {folder.key: (folder, {m.key: m for m in messages}) for folder, messages, _ in listed}
    wanted: dict[str, list[SourceMessage]] = {}
    for folderKey, messageKey in unnamed[:NAMES_PER_RUN]:
        known = byFolder.get(folderKey)
        if known is not None and messageKey in known[1]:
            wanted.setdefault(folderKey, []).append(known[1][messageKey])
    rows: list[tuple[str, str, MessageNames]] = []
    try:
        for folderKey, messages in wanted.items():
            await _addNames(source, byFolder[folderKey][0], messages, rows)
    except ImapmigError as e:
        log.warn(
            "Job {job}: cannot read the headers of {count} failed messages to name them: {why}",
            job=job,
            count=len(unnamed),
            why=str(e),
        )
    if not rows:
        return
    try:
        # The failures must be rows before their names are.
        await recorder.flush()
        await store.nameMessages(job, rows)
    except ImapmigError as e:
        log.warn(
            "Job {job}: cannot record the names of {count} failed messages: {why}",
            job=job,
            count=len(rows),
            why=str(e),
        )
