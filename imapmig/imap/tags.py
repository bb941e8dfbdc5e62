# -*- test-case-name: tests.test_imap_tags -*-
"""
The client's tag table: every command the client sent that the server has
not answered yet, by tag, oldest first, and when each was sent; the tagged
reply to each is matched to its command here, in one place.

The APPEND pipeline keeps its own commands (L{AppendPipeline.ownsTag});
only when each of them was sent is recorded here, since the reply
deadline counts from the oldest command still unanswered, whoever sent it.

Taken out of L{imapmig.imap.client.MigrationIMAP4Client}, which kept it in
four dictionaries beside its other concerns.
"""

from __future__ import annotations

from imapmig.imap.commands import CollectedCommand, FetchCommand, PendingCommand

__all__ = ["TagTable"]


class TagTable:
    """
    The commands awaiting their tagged replies.

    Its dictionaries are read (and L{sentAt} written, L{commands} popped)
    by the client directly where a method call per message would show in
    the CPU a message costs: making a tag, and matching a tagged reply
    (L{answered} then takes the command out of the views).

    @ivar commands: the commands, by tag, oldest first.
    @ivar sentAt: when each command still unanswered was sent, by tag,
        oldest first: any command, the APPEND pipeline's included.
    @ivar collectors: the commands that take the untagged responses
        arriving meanwhile, by tag, oldest first.  Only the table writes
        it (and L{fetches}).
    @ivar fetches: the commands whose FETCH responses go to a sink, by
        tag, oldest first.
    """

    __slots__ = ("commands", "sentAt", "collectors", "fetches")

    def __init__(self) -> None:
        self.commands: dict[bytes, PendingCommand] = {}
        self.sentAt: dict[bytes, float] = {}
        self.collectors: dict[bytes, CollectedCommand] = {}
        self.fetches: dict[bytes, FetchCommand] = {}

    def add(self, entry: PendingCommand) -> None:
        """
        Keep C{entry} until its tagged reply comes.
        """
        tag = entry.tag
        self.commands[tag] = entry
        if isinstance(entry, CollectedCommand) and entry.collects:
            self.collectors[tag] = entry
        elif isinstance(entry, FetchCommand):
            self.fetches[tag] = entry

    def answered(self, command: PendingCommand) -> None:
        """
        The tagged reply to C{command} came, and the client took it out of
        L{commands} (and forgot when it was sent): take it out of the
        views too.
        """
        tag = command.tag
        self.collectors.pop(tag, None)
        self.fetches.pop(tag, None)

    def oldest(self) -> PendingCommand | None:
        """
        The oldest command awaiting its reply, or L{None}.
        """
        return next(iter(self.commands.values()), None)

    def collector(self) -> CollectedCommand | None:
        """
        The oldest command that takes untagged responses, or L{None}.
        """
        return next(iter(self.collectors.values()), None)

    def clear(self) -> list[PendingCommand]:
        """
        Empty the table: no command in it will be answered.

        @return: the commands it held, oldest first.
        """
        commands = list(self.commands.values())
        self.commands = {}
        self.collectors = {}
        self.fetches = {}
        return commands
