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

    @ivar collectors: the commands that take the untagged responses
        arriving meanwhile, by tag, oldest first.  Only the table writes
        it (and L{fetches}).
    @ivar fetches: the commands whose FETCH responses go to a sink, by
        tag, oldest first.
    """

    __slots__ = ("_commands", "_sentAt", "collectors", "fetches")

    def __init__(self) -> None:
        self._commands: dict[bytes, PendingCommand] = {}
        self._sentAt: dict[bytes, float] = {}
        self.collectors: dict[bytes, CollectedCommand] = {}
        self.fetches: dict[bytes, FetchCommand] = {}

    def __bool__(self) -> bool:
        """
        Whether a command of the table awaits its reply.
        """
        return bool(self._commands)

    def sent(self, tag: bytes, when: float) -> None:
        """
        A command was sent with C{tag} at C{when}: any command, the APPEND
        pipeline's included.
        """
        self._sentAt[tag] = when

    def oldestSent(self) -> float | None:
        """
        When the oldest command still unanswered was sent, or L{None} if
        no sending is recorded.
        """
        return next(iter(self._sentAt.values()), None)

    def add(self, entry: PendingCommand) -> None:
        """
        Keep C{entry} until its tagged reply comes.
        """
        tag = entry.tag
        self._commands[tag] = entry
        if isinstance(entry, CollectedCommand) and entry.collects:
            self.collectors[tag] = entry
        elif isinstance(entry, FetchCommand):
            self.fetches[tag] = entry

    def answered(self, tag: bytes) -> PendingCommand | None:
        """
        The tagged reply with C{tag} came: forget when it was sent, and take
        its command out of the table.

        @return: the command, or L{None} if the table holds none with that
            tag (the APPEND pipeline's, or nobody's).
        """
        self._sentAt.pop(tag, None)
        command = self._commands.pop(tag, None)
        if command is not None:
            self.collectors.pop(tag, None)
            self.fetches.pop(tag, None)
        return command

    def oldest(self) -> PendingCommand | None:
        """
        The oldest command awaiting its reply, or L{None}.
        """
        return next(iter(self._commands.values()), None)

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
        commands = list(self._commands.values())
        self._commands = {}
        self.collectors = {}
        self.fetches = {}
        return commands
