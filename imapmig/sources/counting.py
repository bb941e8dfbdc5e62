# -*- test-case-name: tests.test_census -*-
"""
Counting a source without copying it, for the census
(L{imapmig.schedule.census}): how many messages and octets its included
folders hold, by the same folder rules the job lists it with.

A local source (Maildir, mbox, eml directory) is counted by listing it, as
the job does (L{countListedSource}: blocking, for a worker thread).  An
IMAP source is counted over one short session: the folders as the job
would list them (NAMESPACE, LIST, the same personal-namespace and label
view rules as L{imapmig.sources.imap.IMAPSource}), then C{STATUS (MESSAGES
SIZE)} per included folder (C{SIZE} only where the server offers
C{STATUS=SIZE}, RFC 8438; otherwise the octets are unknown).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Callable, Sequence, TypeVar

from attrs import frozen
from twisted.internet.defer import CancelledError, Deferred
from twisted.python.failure import Failure

from imapmig.errors import CommandRefused, SourceError
from imapmig.imap.namespace import ServerNamespaces
from imapmig.imap.session import IMAPSession
from imapmig.mail.message import SourceFolder
from imapmig.mail.folders import FolderRules, folderName, isIncluded
from imapmig.sources import IMessageSource
from imapmig.sources.imapfolders import sourceFolders
from imapmig.sources.labelviews import DEDUP, GMAIL_EXTENSION, planLabelViews, resolveLabelViews

__all__ = ["SourceCount", "countIMAPSession", "countListedSource", "statusCounts"]

_T = TypeVar("_T")
_size = attrgetter("size")


@frozen
class SourceCount:
    """
    What a source's included folders hold.

    @ivar messages: their messages.
    @ivar octets: the messages' octets in the source, or L{None} where
        unknown (an IMAP server without C{STATUS=SIZE}).
    @ivar folders: how many folders are included.
    @ivar excluded: the names of the folders the rules leave out.
    """

    messages: int
    octets: int | None
    folders: int
    excluded: tuple[str, ...]


def _split(
    folders: Sequence[SourceFolder], rules: FolderRules
) -> tuple[list[SourceFolder], tuple[str, ...]]:
    """
    The folders the rules include, and the names of those left out.
    """
    included: list[SourceFolder] = []
    excluded: list[str] = []
    for folder in folders:
        if isIncluded(folder.path, rules):
            included.append(folder)
        else:
            excluded.append(folderName(folder.path))
    return included, tuple(excluded)


def _now(d: Deferred[_T]) -> _T:
    """
    The result of a Deferred that has fired (a local source's), raised if
    it is a failure.
    """
    results: list[_T | Failure] = []
    d.addBoth(results.append)
    if not results:
        raise SourceError("the source did not answer at once")
    result = results[0]
    if isinstance(result, Failure):
        result.raiseException()
    return result


def countListedSource(
    source: IMessageSource, rules: FolderRules, stopping: Callable[[], bool]
) -> SourceCount:
    """
    Count a local source by listing it: blocking (it reads directories and
    scans mbox files), so run it in a worker thread.  Its listings
    (L{IMessageSource}) fire at once; nothing here touches the reactor.

    @param stopping: asked between folders; once true, the count gives up
        with L{CancelledError}.
    @raise SourceError: the source or a folder cannot be listed (the job
        will report it).
    """
    included, excluded = _split(_now(source.listFolders()), rules)
    messages = octets = 0
    for folder in included:
        if stopping():
            raise CancelledError()
        listed = _now(source.listMessages(folder))
        messages += len(listed)
        octets += sum(map(_size, listed))
    return SourceCount(messages, octets, len(included), excluded)


def _quoted(name: bytes) -> bytes:
    """
    A mailbox name as it is sent on the wire, as an IMAP quoted string.
    """
    return b'"' + name.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'


def statusCounts(lines: Sequence[bytes]) -> dict[bytes, int]:
    """
    The items of the C{STATUS} response among C{lines} (untagged
    responses, without C{"* "}): C{{b"MESSAGES": 3, b"SIZE": 1234}}.  The
    mailbox name before the list may be anything (a literal, parentheses):
    the list is the last parenthesised part.
    """
    for line in lines:
        if line[:7].upper() == b"STATUS ":
            counts = _statusItems(line.rstrip())
            if counts is not None:
                return counts
    return {}


def _statusItems(line: bytes) -> dict[bytes, int] | None:
    """
    The items of one C{STATUS} response (see L{statusCounts}); L{None}
    if it ends with no parenthesised list.
    """
    start = line.rfind(b"(")
    if start < 0 or not line.endswith(b")"):
        return None
    words = line[start + 1 : -1].split()
    return {
        words[i].upper(): int(words[i + 1])
        for i in range(0, len(words) - 1, 2)
        if words[i + 1].isdigit()
    }


async def countIMAPSession(
    session: IMAPSession,
    rules: FolderRules,
    labelViews: str,
    description: str,
) -> SourceCount:
    """
    Count an IMAP source over C{session}: its folders as
    L{imapmig.sources.imap.IMAPSource} lists them for a job with these
    C{rules} (C{include} names mailboxes outside the personal namespace;
    C{labelViews} de-duplicates Gmail's views), then one C{STATUS} per
    included folder.  A de-duplicated label view is counted whole (its
    listing leaves out what other folders hold): an over-count, corrected
    by the job's own listing.

    @param description: names the account in errors.
    @raise SourceError: the server refused a command.
    """
    folders, wireNames = await _jobFolders(session, rules, labelViews)
    included, excluded = _split(folders, rules)
    sized = b"STATUS=SIZE" in session.capabilities
    items = b"(MESSAGES SIZE)" if sized else b"(MESSAGES)"
    messages = octets = 0
    for folder in included:
        wire = wireNames.get(folder.key, folder.key.encode("utf-8"))
        counts = await _folderStatus(session, folder, _quoted(wire) + b" " + items, description)
        messages += counts[b"MESSAGES"]
        octets += counts.get(b"SIZE", 0)
    return SourceCount(messages, octets if sized else None, len(included), excluded)


async def _jobFolders(
    session: IMAPSession, rules: FolderRules, labelViews: str
) -> tuple[list[SourceFolder], dict[str, bytes]]:
    """
    The folders of an IMAP source as a job lists them (see
    L{countIMAPSession}), and their names on the wire by key.
    """
    capabilities = session.capabilities
    spaces = await session.namespaces() if session.knowsNamespaces else ServerNamespaces()
    listed = await session.listFolders()
    folders, wireNames, _ = sourceFolders(listed, spaces, rules.include)
    if resolveLabelViews(labelViews, capabilities) == DEDUP:
        folders, _, _ = planLabelViews(folders, rules.include, GMAIL_EXTENSION in capabilities)
    return folders, wireNames


async def _folderStatus(
    session: IMAPSession, folder: SourceFolder, arguments: bytes, description: str
) -> dict[bytes, int]:
    """
    The C{STATUS} items of one folder, C{MESSAGES} among them.

    @param arguments: the command's arguments: the folder's name and the
        items asked for.
    @raise SourceError: the server refused the command, or gave no
        C{MESSAGES}.
    """
    try:
        lines, _ = await session.client.sendCollecting(b"STATUS", arguments)
    except CommandRefused as e:
        why = e.text[:80].decode("utf-8", "replace")
        raise SourceError(f"{description}: STATUS {folder.key!r} refused: {why}") from None
    counts = statusCounts(lines)
    if b"MESSAGES" not in counts:
        raise SourceError(f"{description}: no STATUS MESSAGES for {folder.key!r}")
    return counts
