# -*- test-case-name: tests.test_imap_client -*-
"""
The entries of the client's command table: one per tagged command sent
and not yet answered, saying what the command is called, whether it
takes the untagged responses that arrive meanwhile, and how its tagged
reply completes it.

The APPEND pipeline keeps its own commands (L{AppendPipeline.ownsTag});
every other command the client sends has an entry here.
"""

from __future__ import annotations

from typing import Any, Callable, cast

from twisted.internet.defer import Deferred
from twisted.mail.imap4 import Command
from twisted.python.failure import Failure

from imapmig.errors import CommandRefused
from imapmig.imap.fetcheditem import FetchedItem

MAX_COLLECTED_RESPONSES = 100_000
"""
Untagged responses one command may collect (a LIST of every mailbox, the
responses to SELECT); C{EXISTS} and C{RECENT} count once, however often
they come, and C{EXPUNGE} not at all.  More is a flood: a protocol error.
"""

MAX_COLLECTED_OCTETS = 16 * 1024 * 1024
"""
The octets of the untagged responses one command may collect.
"""


FetchSink = Callable[[FetchedItem], object]
"""
Takes each untagged FETCH response read while a fetch command is in
flight.
"""


class CollectingCommand(Command):
    """
    A command of the stock queue whose untagged responses are handed over
    as the server sent them (the text after C{* }, any literal inline),
    not parsed.
    """


def commandName(command: bytes) -> bytes:
    """
    The name of a command line without its tag, for a log line:
    C{b"SELECT"}, C{b"UID FETCH"}.
    """
    head, _, tail = command.partition(b" ")
    head = head.upper()
    if head == b"UID":
        head += b" " + tail.partition(b" ")[0].upper()
    return head


def _refusal(status: bytes, text: bytes) -> CommandRefused:
    return CommandRefused(status.decode("ascii"), text)


class PendingCommand:
    """
    A command awaiting its tagged reply.

    @ivar tag: its tag.
    @ivar name: what it is called (L{commandName}).
    @ivar deferred: fires with its outcome.
    @ivar collects: whether the untagged responses that arrive while it is
        the oldest such command are its own.
    """

    __slots__ = ("tag", "name", "deferred", "collects")

    def __init__(
        self, tag: bytes, name: bytes, deferred: Deferred[Any], collects: bool = False
    ) -> None:
        self.tag = tag
        self.name = name
        self.deferred = deferred
        self.collects = collects

    def complete(self, status: bytes, text: bytes, rest: bytes) -> None:
        """
        Its tagged reply came.

        @param status: C{b"OK"}, C{b"NO"} or C{b"BAD"}.
        @param text: the reply after the status.
        @param rest: the reply after the tag.
        """
        if status == b"OK":
            self.deferred.callback(text)
        else:
            self.deferred.errback(_refusal(status, text))

    def fail(self, reason: Failure) -> None:
        """
        It will never be answered: the connection is gone.
        """
        if not self.deferred.called:
            self.deferred.errback(Failure(reason.value, reason.type, reason.tb))


class FetchCommand(PendingCommand):
    """
    A command whose FETCH responses go to a sink (L{fetchInto}).
    """

    __slots__ = ("sink",)

    def __init__(self, tag: bytes, name: bytes, deferred: Deferred[Any], sink: FetchSink) -> None:
        PendingCommand.__init__(self, tag, name, deferred)
        self.sink = sink


class CollectedCommand(PendingCommand):
    """
    A command that collects untagged responses, unparsed, within
    L{MAX_COLLECTED_RESPONSES} and L{MAX_COLLECTED_OCTETS}.

    @ivar lines: what it collected.
    @ivar whole: complete with the reply after the tag (C{b"OK ..."}), not
        the text after the status.
    """

    __slots__ = ("lines", "octets", "_latest", "whole")

    def __init__(
        self,
        tag: bytes,
        name: bytes,
        deferred: Deferred[Any],
        lines: list[bytes],
        whole: bool = False,
        collects: bool = True,
    ) -> None:
        PendingCommand.__init__(self, tag, name, deferred, collects)
        self.lines = lines
        self.octets = 0
        self.whole = whole
        self._latest: dict[bytes, int] | None = None

    def collect(self, response: bytes) -> bool:
        """
        Keep an untagged response.

        @return: whether the command is still within its limits.
        """
        self.lines.append(response)
        self.octets += len(response)
        return len(self.lines) <= MAX_COLLECTED_RESPONSES and self.octets <= MAX_COLLECTED_OCTETS

    def replace(self, kind: bytes, response: bytes) -> None:
        """
        Keep C{response} as the one response of its C{kind} (C{EXISTS},
        C{RECENT}): only the latest count matters.
        """
        latest = self._latest
        if latest is None:
            latest = self._latest = {}
        index = latest.get(kind)
        if index is None:
            latest[kind] = len(self.lines)
            self.lines.append(response)
        else:
            self.lines[index] = response

    def complete(self, status: bytes, text: bytes, rest: bytes) -> None:
        if status == b"OK":
            self.deferred.callback((self.lines, rest if self.whole else text))
        else:
            self.deferred.errback(_refusal(status, text))


class StockCommand(CollectedCommand):
    """
    A command of Twisted's stock queue (L{IMAP4Client.sendCommand}): its
    untagged responses are collected (status responses without their
    free text) and parsed by Twisted's parser when it completes.
    """

    __slots__ = ("command",)

    def __init__(self, tag: bytes, command: Command) -> None:
        CollectedCommand.__init__(
            self,
            tag,
            commandName(command.command),
            cast(Deferred[Any], command.defer),
            command.lines,
        )
        self.command = command

    def collect(self, response: bytes) -> bool:
        # Twisted's parser takes the free text of a status response for
        # atoms and parentheses ("* OK Hello :-(" would not parse): keep
        # the status and its response code only, which is all it reads.
        head = response[:4].upper()
        if head.startswith((b"OK ", b"NO ", b"BAD ")):
            status, _, text = response.partition(b" ")
            end = text.find(b"]") if text[:1] == b"[" else -1
            response = status + b" " + text[: end + 1] if end > 0 else status
        return CollectedCommand.collect(self, response)

    def complete(self, status: bytes, text: bytes, rest: bytes) -> None:
        command = self.command
        if status != b"OK":
            command.defer = None
            self.deferred.errback(_refusal(status, text))
        else:
            # Parses the collected responses (Twisted's parser): may raise
            # on a malformed one, before the Deferred fires.
            command.finish(rest, _unused)


def _unused(responses: object) -> None:
    """
    Parsed responses a stock command collected and did not want: nothing
    uses them (the stock client would only log them).
    """
