# The C extension imapmig/job/_sent.c, built where a compiler is:
# imapmig.job.preparation.prepareMessagesPython and
# imapmig.job.recording.appendedColumnsPython and sourceKeysPython are the
# same functions, documented.

from datetime import datetime
from typing import Any, Callable, Sequence

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
def sourceKeys(messages: Sequence[Any], /) -> list[str] | None: ...
