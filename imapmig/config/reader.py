# -*- test-case-name: tests.test_config_reader,tests.test_config -*-
"""
What every section of the configuration is read with: a collector of
problems, each named by its file and key path, readers of plain values
(strings, integers, seconds, directories, choices), and the declared key
tables (L{Key}, L{Check}) that L{ConfigReader._readKeys} walks.

Each C{_read*} method returns the value it read, or L{None} after
recording why it could not.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence, TypeVar, Union

from attrs import Factory, field as attrsField, frozen

from imapmig.access.secrets import readPasswordFile
from imapmig.errors import SHOWN_PROBLEMS, PasswordFileError

# What a job or server name may be.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]*")


# The YAML type of a value, by its Python type: bool before int, which it
# is a subclass of.
_YAML_TYPES = (
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a number"),
    (str, "a string"),
    (list, "a list"),
    (dict, "a mapping"),
)


def _describe(value: object) -> str:
    """
    Name the YAML type of C{value}, for an error message.  Never the value
    itself: it may be a password.
    """
    if value is None:
        return "null"
    return next(
        (name for kind, name in _YAML_TYPES if isinstance(value, kind)),
        f"a {type(value).__name__}",
    )


def _within(value: int, minimum: int, maximum: int | None) -> bool:
    """
    Whether C{value} is at least C{minimum} and at most C{maximum} (if
    any).
    """
    return minimum <= value and (maximum is None or value <= maximum)


def _bounds(minimum: int, maximum: int | None) -> str:
    """
    The bounds of an integer, in words.
    """
    if maximum is None:
        return f"at least {minimum}"
    return f"between {minimum} and {maximum}"


def _directoryProblem(resolved: str) -> str | None:
    """
    Why C{resolved} is not an existing, readable directory, or L{None}.
    """
    if not os.path.exists(resolved):
        return f"no such directory: {resolved}"
    if not os.path.isdir(resolved):
        return f"not a directory: {resolved}"
    if not os.access(resolved, os.R_OK | os.X_OK):
        return f"{resolved} cannot be read (permission denied)"
    return None


def _key(path: str, key: str) -> str:
    """
    The path of C{key} inside the mapping at C{path}.
    """
    return f"{path}.{key}" if path else key


_NO_DEFAULT: Any = object()


@frozen
class Key:
    """
    One key of a section, declared once: how its value is read, and what
    an absent key means.

    @ivar name: the key, as written in the file.
    @ivar read: reads a value: C{read(reader, value, path)} returns what it
        read, or L{None} after recording a problem.
    @ivar field: the name its value is kept under (the frozen object's
        field); the key itself by default.
    @ivar default: the value read when the key is absent; absent keys
        without one read as L{None}.
    @ivar missing: if set, the key is required and this is the problem
        recorded when it is absent.
    @ivar nullIsAbsent: whether C{null} is read as if the key were absent.
    @ivar stops: whether a problem with this key ends the section's
        reading (the keys after it are not read).
    """

    name: str
    read: Callable[[Any, object, str], object]
    field: str = attrsField(default=Factory(lambda key: key.name, takes_self=True))
    default: object = _NO_DEFAULT
    missing: str | None = None
    nullIsAbsent: bool = False
    stops: bool = False

    def apply(
        self, reader: ConfigReader, mapping: Mapping[str, object], path: str, values: dict[str, Any]
    ) -> bool:
        """
        Read this key of C{mapping} (at C{path}) into C{values}.

        @return: whether it is valid (an absent optional key is).
        """
        where = _key(path, self.name)
        value = self._written(mapping)
        if value is _NO_DEFAULT:
            value = self._absent(reader, where)
        if value is _NO_DEFAULT:
            values[self.field] = None
            return self.missing is None
        values[self.field] = read = self.read(reader, value, where)
        return read is not None

    def _written(self, mapping: Mapping[str, object]) -> object:
        """
        The key's value in C{mapping}, or C{_NO_DEFAULT} if it is absent
        (or null, where null means absent).
        """
        value = mapping.get(self.name, _NO_DEFAULT)
        return _NO_DEFAULT if value is None and self.nullIsAbsent else value

    def _absent(self, reader: ConfigReader, where: str) -> object:
        """
        The value an absent key reads as, or C{_NO_DEFAULT} for none (a
        problem is recorded if the key is required).
        """
        if self.missing is not None:
            reader._problem(where, self.missing)
        return self.default


@frozen
class Check:
    """
    A step of a key table that looks at several keys at once (one may
    rule another out), or derives a value from them: C{check(reader,
    mapping, path, values)} records its problems and returns whether all
    is well.
    """

    check: Callable[[Any, Mapping[str, object], str, dict[str, Any]], bool]
    stops = False

    def apply(
        self, reader: ConfigReader, mapping: Mapping[str, object], path: str, values: dict[str, Any]
    ) -> bool:
        """
        Run the check.
        """
        return self.check(reader, mapping, path, values)


Step = Union[Key, Check]


_T = TypeVar("_T")


def everyOne(items: Iterable[_T | None]) -> tuple[_T, ...] | None:
    """
    The items read, or L{None} if any could not be (its problem is
    recorded).
    """
    read = tuple(items)
    return None if None in read else read  # type: ignore[return-value]


def isOff(value: object) -> bool:
    """
    Whether C{value} is C{off}: YAML reads it unquoted as C{false}.
    """
    return value is False or value == "off"


def givenKeys(mapping: Collection[object], keys: Iterable[str]) -> list[str]:
    """
    The keys of C{keys} that C{mapping} gives, in the order of C{keys}.
    """
    return [key for key in keys if key in mapping]


def notThese(given: Sequence[str]) -> str:
    """
    The end of a problem that asks for one of several keys, naming those
    given, if any: C{", not maildir and mbox"}.
    """
    return f", not {' and '.join(given)}" if given else ""


def keyNames(table: Sequence[Step]) -> tuple[str, ...]:
    """
    The keys a table declares, in its order (the order the problem of an
    unknown key lists them in).
    """
    return tuple(step.name for step in table if isinstance(step, Key))


class ConfigReader:
    """
    The base of the configuration's section readers: one file's problems.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._directory = os.path.dirname(os.path.abspath(path))
        self._problems: list[str] = []

    def _problem(self, path: str, message: str) -> None:
        """
        Record a problem with the key at C{path} (the whole document if
        empty).
        """
        where = f"{path}: " if path else ""
        self._problems.append(f"{self._path}: {where}{message}")

    def _resolve(self, path: str) -> str:
        """
        The absolute form of a path written in the file: relative paths are
        relative to the file's directory.
        """
        return os.path.abspath(os.path.join(self._directory, path))

    def _readMapping(
        self, value: object, path: str, keys: Collection[str]
    ) -> dict[str, object] | None:
        """
        Read a mapping whose keys must be among C{keys}.  Unknown keys are
        problems, with a hint when one is close to a known key; the known
        keys are returned even then, so their values are checked too.
        """
        if not isinstance(value, dict):
            self._problem(path, f"expected a mapping, got {_describe(value)}")
            return None
        return {key: item for key, item in value.items() if self._isKnown(key, path, keys)}

    def _isKnown(self, key: object, path: str, keys: Collection[str]) -> bool:
        """
        Whether C{key} of the mapping at C{path} is a string among C{keys};
        if not, that is a problem, with a hint when it is close to a known
        key.
        """
        if not isinstance(key, str):
            self._problem(path, f"key {key!r} is {_describe(key)}, not a string")
            return False
        if key not in keys:
            self._problem(_key(path, key), f"unknown key {key!r}{self._hint(key, keys)}")
            return False
        return True

    def _readKeys(
        self, mapping: Mapping[str, object], path: str, table: Sequence[Step]
    ) -> dict[str, Any] | None:
        """
        Walk a key table over C{mapping} (at C{path}): read each key and
        run each check, in order, recording every problem.

        @return: the values read, by field, or L{None} if any is invalid.
        """
        ok = True
        values: dict[str, Any] = {}
        for step in table:
            valid = step.apply(self, mapping, path, values)
            if not valid and step.stops:
                return None
            ok = valid and ok
        return values if ok else None

    def _readSection(
        self, value: object, path: str, table: Sequence[Step]
    ) -> dict[str, Any] | None:
        """
        Read the mapping C{value} (at C{path}) whose keys are those of
        C{table}, walking the table.
        """
        mapping = self._readMapping(value, path, keyNames(table))
        return None if mapping is None else self._readKeys(mapping, path, table)

    def _hint(self, key: str, keys: Collection[str]) -> str:
        """
        What to say after the unknown C{key}: the known key it is close to,
        or the known keys; nothing past the problems shown
        (L{ConfigError.shown}): 400,000 unknown keys took 15 s of difflib
        in a reload's thread, for lines no one sees.
        """
        if len(self._problems) >= SHOWN_PROBLEMS:
            return ""
        close = difflib.get_close_matches(key, keys, n=1)
        return f" (did you mean {close[0]!r}?)" if close else f" (known keys: {', '.join(keys)})"

    def _readString(self, value: object, path: str) -> str | None:
        """
        Read a non-empty string.
        """
        if not isinstance(value, str):
            hint = (
                " (quote it to make YAML read it as text)"
                if isinstance(value, (bool, int, float))
                else ""
            )
            self._problem(path, f"expected a string, got {_describe(value)}{hint}")
            return None
        if not value:
            self._problem(path, "must not be empty")
            return None
        return value

    def _readInteger(
        self, value: object, path: str, minimum: int, maximum: int | None
    ) -> int | None:
        """
        Read an integer within bounds.  YAML's C{true} and C{false} are
        booleans, not integers, whatever Python thinks.
        """
        if isinstance(value, bool) or not isinstance(value, int):
            self._problem(path, f"expected an integer, got {_describe(value)}")
            return None
        if not _within(value, minimum, maximum):
            self._problem(path, f"must be {_bounds(minimum, maximum)}, not {value}")
            return None
        return value

    def _accepted(
        self, value: _T | None, path: str, problemOf: Callable[[_T], str | None]
    ) -> _T | None:
        """
        C{value} (read at C{path}, or L{None} after a problem) if
        C{problemOf} finds no problem with it; else record that one.
        """
        problem = None if value is None else problemOf(value)
        if problem is not None:
            self._problem(path, problem)
            return None
        return value

    def _readPath(self, value: object, path: str) -> str | None:
        """
        Read a path: a non-empty string, made absolute (relative paths are
        relative to the file's directory).
        """
        written = self._readString(value, path)
        return None if written is None else self._resolve(written)

    def _readEach(
        self, items: list[object], path: str, read: Callable[[object, str], _T | None]
    ) -> tuple[_T, ...] | None:
        """
        Read each of the list C{items} (at C{path}) with C{read}, until one
        cannot be.
        """
        values = []
        for index, item in enumerate(items):
            value = read(item, f"{path}[{index}]")
            if value is None:
                return None
            values.append(value)
        return tuple(values)

    def _readBoolean(self, value: object, path: str) -> bool | None:
        """
        Read C{true} or C{false}.
        """
        if isinstance(value, bool):
            return value
        self._problem(path, f"must be true or false, not {_describe(value)}")
        return None

    def _readSeconds(self, value: object, path: str) -> float | None:
        """
        Read a finite, positive number of seconds.
        """
        return self._readPositive(value, path, "a number of seconds", " seconds")

    def _readPositive(self, value: object, path: str, what: str, unit: str) -> float | None:
        """
        Read a finite, positive number of C{what} (in problems: C{"a
        number of seconds"}, its C{unit} C{" seconds"}).
        """
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self._problem(path, f"expected {what}, got {_describe(value)}")
            return None
        if not (math.isfinite(value) and value > 0):
            self._problem(path, f"must be greater than 0{unit}, not {value}")
            return None
        return float(value)

    def _readDirectory(self, value: object, path: str) -> str | None:
        """
        Read the path of an existing, readable directory.
        """
        return self._accepted(self._readPath(value, path), path, _directoryProblem)

    def _readSecretFile(self, resolved: str | None, path: str, kind: str) -> str | None:
        """
        The first line of the secret file C{resolved} (the path read at
        C{path}, or L{None} after a problem), stripped, if it passes the
        checks of a password file (L{readPasswordFile}).
        """
        if resolved is None:
            return None
        try:
            return readPasswordFile(resolved, kind).strip()
        except PasswordFileError as e:
            self._problem(path, str(e))
            return None

    def _readChoice(
        self, value: object, path: str, choices: Sequence[str], what: str
    ) -> str | None:
        """
        Read one of C{choices} (the first being the default).
        """
        written = self._readString(value, path)
        if written is None:
            return None
        if written not in choices:
            self._problem(
                path,
                f"unknown {what} {written!r}: use {choices[0]} (the default)"
                f" or {', '.join(choices[1:])}",
            )
            return None
        return written
