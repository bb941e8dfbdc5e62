# The C extension imapmig/imap/_append.c, built where a compiler is:
# imapmig.imap.pipeline.appendLiteralsPython,
# imapmig.imap.sendqueue.stampMailboxPython and leadingRunPython,
# imapmig.job.preparation.prepareMessagesPython and
# imapmig.job.recording.appendedColumnsPython and sourceKeysPython are the
# same functions,
# documented.

from datetime import datetime
from typing import Any, Callable, Sequence

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
def sourceKeys(messages: Sequence[Any], /) -> list[str] | None: ...
def sendPieces(fd: int, pieces: Sequence[Piece], /) -> Any: ...
def bindSent(sentClass: type, sourceClass: type, unknown: int, needsBinary: int, /) -> None: ...
def prepareMessages(
    chunk: Sequence[Any],
    bodies: Sequence[Any],
    facts: bytes | bytearray,
    start: int,
    decisions: dict[tuple[str, ...], tuple[str | None, bytes, bytes]],
    binary: bool,
    sizeLimit: int | None,
    target: Any,
    dated: Callable[[bytes, datetime], bytes],
    out: list[Any],
    /,
) -> int: ...
def appendedColumns(
    messages: Sequence[Any], /
) -> tuple[list[str], list[int], list[int], int, int, int] | None: ...
