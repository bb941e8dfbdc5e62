# The C extension imapmig/sources/_listing.c, built where a compiler is:
# imapmig.sources.local.sizeAndMtimePython and utcDatetimePython, and
# imapmig.sources.maildir.names.nameFieldsPython, scan.scannedOfPython and
# _listedPython, are the same functions, documented.

from datetime import datetime
from typing import Callable, TypeVar

from imapmig.sources.local import Irregular

_Message = TypeVar("_Message")

def sizeAndMtime(dirFd: int, name: str, /) -> tuple[int, float] | None: ...
def utcDatetime(seconds: float, /) -> datetime: ...
def nameFields(unique: str, /) -> tuple[float | None, int | None]: ...
def listedMessages(
    rows: list[tuple[float, str, tuple[str, ...], int]],
    cls: type[_Message],
    fields: tuple[object, ...],
    /,
) -> list[_Message]: ...
def scannedOf(
    name: str, index: int, irregular: Irregular | None, carry: Callable[[str], str], /
) -> tuple[str, str, int, str, str | None, Irregular | None] | None: ...
