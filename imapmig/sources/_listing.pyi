# The C extension imapmig/sources/_listing.c, built where a compiler is:
# imapmig.sources.local.utcDatetimePython, and
# imapmig.sources.maildir.names.nameFieldsPython, scan.scannedOfPython,
# scan.DirectoryPython, _rowsPython and _listedPython, are the same
# functions and class, documented.

from datetime import datetime
from typing import Callable, TypeVar

from imapmig.sources.local import Irregular

_Message = TypeVar("_Message")

def utcDatetime(seconds: float, /) -> datetime: ...
def nameFields(unique: str, /) -> tuple[float | None, int | None]: ...
def listedMessages(
    rows: list[tuple[float, str, tuple[str, ...], int]],
    cls: type[_Message],
    fields: tuple[object, ...],
    /,
) -> list[_Message]: ...
_Scanned = tuple[str, str, int, str, str | None, Irregular | None, float | None, int | None]

def scannedOf(
    name: str, index: int, irregular: Irregular | None, carry: Callable[[str], str], /
) -> _Scanned | None: ...
def rowsOf(
    scanned: list[_Scanned],
    flags: dict[str | None, tuple[str, ...]],
    flagsOf: Callable[[str | None, dict[str, str]], tuple[str, ...]],
    keywords: dict[str, str],
    /,
) -> list[tuple[float, str, tuple[str, ...], int]]: ...

class Directory:
    def __init__(self, fd: int, /) -> None: ...
    def __enter__(self) -> Directory: ...
    def __exit__(self, *excInfo: object) -> None: ...
    def close(self) -> None: ...
    def scan(
        self,
        index: int,
        turn: int,
        carry: Callable[[str], str],
        classify: Callable[[str, bool | None], _Scanned | None],
        first: dict[str, _Scanned],
        duplicates: dict[str, list[_Scanned]],
        status: bool,
        /,
    ) -> int: ...
def addFiles(
    scanned: list[_Scanned], names: tuple[dict[str, str], ...], irregulars: dict[str, Irregular], /
) -> None: ...
def datesRepeat(rows: list[tuple[float, str, tuple[str, ...], int]], /) -> bool: ...
