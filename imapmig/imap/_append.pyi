# The C extension imapmig/imap/_append.c, built where a compiler is:
# imapmig.imap.pipeline.appendLiteralsPython,
# imapmig.imap.sendqueue.stampMailboxPython and leadingRunPython and
# imapmig.imap.gather's _sendmsg are the same functions, documented.

from typing import Any, Sequence

from imapmig.imap.gather import Piece
from imapmig.imap.outgoing import OutgoingMessage

def bindOutgoing(cls: type[OutgoingMessage], /) -> None: ...
def appendLiterals(
    messages: list[OutgoingMessage], start: int, limit: int, budget: int, out: list[Piece], /
) -> tuple[int, bool]: ...
def stampMailbox(messages: list[OutgoingMessage], mailbox: bytes, /) -> int: ...
def leadingRun(
    batch: list[OutgoingMessage], mailbox: bytes, limit: int, /
) -> tuple[int, int]: ...
def sendPieces(fd: int, pieces: Sequence[Piece], /) -> Any: ...
