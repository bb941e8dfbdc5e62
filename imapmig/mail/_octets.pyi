# The C extension imapmig/mail/_octets.c, built where a compiler is:
# imapmig.mail.octets.crlfAndFactsPython is the same function, documented.

from datetime import datetime
from typing import Any, Callable, Mapping, Sequence

def crlfAndFacts(data: bytes, afterCR: bool = False, last: bool = True, /) -> tuple[bytes, int]: ...
def crlfAndFactsBaseline(data: bytes, afterCR: bool = False, last: bool = True, /) -> tuple[bytes, int]: ...

AVX2: int

# imapmig.sources.messagefile.readListedFilesPython is the same function.
def readListed(
    messages: Sequence[Any],
    locate: Callable[[str], tuple[int, str, object] | None]
    | tuple[tuple[dict[str, str], ...], Mapping[str, object]],
    descriptors: list[int | None],
    largest: int,
    flags: int,
    notRead: Any,
    bodies: list[Any],
    facts: bytearray,
    /,
) -> int: ...

# imapmig.mail.message.withInternalDatePython is the same function.
def withInternalDate(prefix: bytes, when: datetime, /) -> bytes: ...
