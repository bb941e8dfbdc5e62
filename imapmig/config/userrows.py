# -*- test-case-name: tests.test_userrows,tests.test_config_userlist -*-
"""
The rows of a user list (L{imapmig.config.userlist}): a CSV file read
against its job template, each row a job, each problem named C{FILE: row
N: COLUMN: ...} (the header is row 1).  Moved out of
L{imapmig.config.userlist}, which had grown past 800 lines; that module
reads the template and the top-level C{credentials}.
"""

from __future__ import annotations

import csv
import difflib
import os
from hashlib import sha256
from typing import Callable, Iterator, Mapping, TypeVar

from attrs import evolve, field, frozen

from imapmig.config.jobs import _CONNECTIONS
from imapmig.config.model import (
    DestinationConfig,
    ImapSourceConfig,
    JobConfig,
    MaildirSourceConfig,
    MboxSourceConfig,
    ServerConfig,
    SourceConfig,
)
from imapmig.config.reader import _NAME, givenKeys
from imapmig.config.secretkeys import _FROM, SecretsReader, secretKeys
from imapmig.access.secrets import Secret, isPlainFileName
from imapmig.errors import ConfigError, PasswordFileError

_A = TypeVar("_A", DestinationConfig, ImapSourceConfig)

# A row's password comes from a file or a systemd credential, never inline.
_ROW_PASSWORD_KEYS = secretKeys("password")
_SIDES = ("source", "destination")
_OVERRIDES = ("connections", "maildir", "mbox")
_COLUMNS = (
    "name",
    "source_user",
    "destination_user",
    *(f"{side}_{key}" for side in _SIDES for key in _ROW_PASSWORD_KEYS),
    "source_credential",
    "destination_credential",
) + _OVERRIDES
_PLACEHOLDERS = ("source_user", "destination_user")
# The columns of a local source's path, by the kind of source each is for.
_LOCAL_COLUMNS = (("maildir", MaildirSourceConfig), ("mbox", MboxSourceConfig))


@frozen
class _Account:
    """
    What a template gives of one side's account.

    @ivar server: the account's server.
    @ivar user: the template's user, or L{None} when each row gives it.
    @ivar password: the template's password (the admin's with an
        C{admin}), or L{None} when each row gives one.
    @ivar admin: the template's admin login name, if any.
    """

    server: ServerConfig
    user: str | None
    password: Secret | None
    admin: str | None
    credentialKey: str | None = None


@frozen
class _Template:
    """
    A job template, read and checked once.

    @ivar prototype: the job every row's job is made from.
    @ivar source: the IMAP source account, or L{None} for a local source.
    @ivar sourcePattern: a local source's path, absolute, with its
        placeholders, or L{None} for an IMAP source.
    @ivar destination: the destination account.
    """

    prototype: JobConfig
    source: _Account | None
    sourcePattern: str | None
    destination: _Account


class _RowReader(SecretsReader):
    """
    Reads one CSV user list; its problems name the CSV file.
    """

    def __init__(
        self, path: str, credentials: Mapping[str, tuple[str, Secret] | None]
    ) -> None:
        super().__init__(path)
        self._credentials = credentials
        # (suffix, value written) -> the password, or None if unusable.
        self._passwords: dict[tuple[str, str], Secret | None] = {}

    def readAll(self, template: _Template | None, firstUse: dict[str, str]) -> list[JobConfig]:
        """
        Read every row, making a job of each valid one when the template
        is valid (else the rows are still checked against each other).
        """
        jobs: list[JobConfig] = []
        try:
            with open(self._path, encoding="utf-8-sig", newline="") as f:
                self._readRows(self._rows(f), template, firstUse, jobs)
        except UnicodeDecodeError:
            self._problem("", "not UTF-8 text")
        except csv.Error as e:
            self._problem("", f"invalid CSV: {e}")
        except OSError as e:
            self._problem("", f"cannot be read: {e.strerror}")
        return jobs

    def _readRows(
        self,
        rows: Iterator[tuple[int, list[str]]],
        template: _Template | None,
        firstUse: dict[str, str],
        jobs: list[JobConfig],
    ) -> None:
        """
        Read the header, then each row, into C{jobs}.
        """
        columns = self._readFirstRow(rows, template)
        if columns is None:
            return
        count = 0
        for number, fields in rows:
            count += 1
            job = self._readRow(number, fields, columns, template, firstUse)
            if job is not None:
                jobs.append(job)
        if count == 0:
            self._problem("", "no users: the file has a header row but no rows")

    def _readFirstRow(
        self, rows: Iterator[tuple[int, list[str]]], template: _Template | None
    ) -> tuple[str, ...] | None:
        """
        Read the header, the first row, which the file must have.
        """
        header = next(rows, None)
        if header is None:
            self._problem("", "the file is empty: a header row is required")
            return None
        return self._readHeader(header[1], template)

    def _rows(self, f: Iterator[str]) -> Iterator[tuple[int, list[str]]]:
        """
        The rows that are not empty, each with the line it starts on.
        """
        reader = csv.reader(f)
        line = 0
        for fields in reader:
            start = line + 1
            line = reader.line_num
            stripped = [field.strip() for field in fields]
            if any(stripped):
                yield start, stripped

    def _readHeader(
        self, header: list[str], template: _Template | None
    ) -> tuple[str, ...] | None:
        """
        Read the header: known column names, any case, each once, and those
        the template needs.
        """
        columns = tuple(name.lower() for name in header)
        before = len(self._problems)
        for index, name in enumerate(columns):
            self._checkColumn(index, name, columns)
        if template is not None and len(self._problems) == before:
            self._checkTemplateColumns(columns, template)
        return None if len(self._problems) > before else columns

    def _checkColumn(self, index: int, name: str, columns: tuple[str, ...]) -> None:
        """
        Check the header's column C{name}, at C{index}: known, and not
        given twice.
        """
        if name in _COLUMNS:
            if columns.index(name) != index:
                self._problem(f"row 1: {name}", "duplicate column")
            return
        if not name:
            self._problem(f"row 1: column {index + 1}", "empty column name")
            return
        self._problem(f"row 1: {name}", f"unknown column ({_columnHint(name)})")

    def _checkTemplateColumns(self, columns: tuple[str, ...], template: _Template) -> None:
        """
        Check that the header gives what the template leaves to the rows
        (users, passwords), and no column the template's source has no use
        for.
        """
        self._checkSideColumns(columns, "source", template.source)
        self._checkSideColumns(columns, "destination", template.destination)
        for column, why in _unusedColumns(template):
            if column in columns:
                self._problem(f"row 1: {column}", why)

    def _checkSideColumns(
        self, columns: tuple[str, ...], side: str, account: _Account | None
    ) -> None:
        """
        Check that the header gives the user and a password of C{side}'s
        account where the template gives none.
        """
        if account is None:
            return
        if account.user is None and f"{side}_user" not in columns:
            self._problem(
                f"row 1: {side}_user",
                f"missing column: the template's {side} gives no user",
            )
        if account.password is None:
            self._checkLoginColumns(columns, side)

    def _checkLoginColumns(self, columns: tuple[str, ...], side: str) -> None:
        """
        Check that the header gives a password or credential column of
        C{side}, where the template gives no password.
        """
        if not givenKeys(columns, _loginColumns(side)):
            self._problem(
                f"row 1: {side}_password_file",
                f"missing column: the template's {side} gives no password;"
                f" add {side}_password_file, {side}_password_credential"
                f" or {side}_credential",
            )

    def _readRow(
        self,
        number: int,
        fields: list[str],
        columns: tuple[str, ...],
        template: _Template | None,
        firstUse: dict[str, str],
    ) -> JobConfig | None:
        """
        Read one row into a job.
        """
        row = self._readFields(number, fields, columns)
        if row is None:
            return None
        if template is None:
            # Checked against the other rows only.
            self._readName(number, row, None, firstUse)
            self._readRowConnections(number, row)
            return None
        return self._readJobRow(number, row, template, firstUse)

    def _readJobRow(
        self, number: int, row: Mapping[str, str], template: _Template, firstUse: dict[str, str]
    ) -> JobConfig | None:
        """
        Read a row into a job made from C{template}: its accounts, its
        name, its connections.
        """
        sides = self._readSides(number, row, template)
        name = self._readName(number, row, template, firstUse)
        connections = self._readRowConnections(number, row)
        if sides is None or name is None or connections is None:
            return None
        return _rowJob(template.prototype, sides, name, connections)

    def _readFields(
        self, number: int, fields: list[str], columns: tuple[str, ...]
    ) -> dict[str, str] | None:
        """
        A row's fields by column, the empty ones left out; L{None} if it
        has more or fewer fields than the header.
        """
        if len(fields) != len(columns):
            self._problem(
                f"row {number}",
                f"{len(fields)} fields, but the header has {len(columns)}",
            )
            return None
        return {column: value for column, value in zip(columns, fields) if value}

    def _readRowConnections(self, number: int, row: Mapping[str, str]) -> int | None:
        """
        Read a row's C{connections}; 0, the template's, if it gives none (a
        row's connections is at least 1).
        """
        if "connections" not in row:
            return 0
        return self._readConnections(number, row["connections"])

    def _readSides(
        self, number: int, row: Mapping[str, str], template: _Template
    ) -> tuple[SourceConfig, DestinationConfig] | None:
        """
        Read a row's destination account, then its source (an account, or
        a local source).
        """
        destination = self._readRowAccount(
            number, row, "destination", template.destination, DestinationConfig
        )
        source: SourceConfig | None
        if template.source is not None:
            source = self._readRowAccount(
                number, row, "source", template.source, ImapSourceConfig
            )
        else:
            source = self._readLocal(number, row, template)
        if source is None or destination is None:
            return None
        return source, destination

    def _readRowAccount(
        self,
        number: int,
        row: Mapping[str, str],
        side: str,
        account: _Account,
        kind: Callable[..., _A],
    ) -> _A | None:
        """
        Read a row's account on one side, as a C{kind} (L{DestinationConfig}
        or L{ImapSourceConfig}) on the template's server.
        """
        login = self._readAccount(number, row, side, account)
        if login is None:
            return None
        return kind(account.server, *login[:3], credentialKey=login[3])

    def _readAccount(
        self, number: int, row: Mapping[str, str], side: str, account: _Account
    ) -> tuple[str, Secret, str | None, str | None] | None:
        """
        Read a row's account on one side: its user, and its password file,
        systemd credential or named admin credential (or the template's
        password).

        @return: the user, the password to log in with, the admin's
            login name (or L{None}), and where the password was read from
            (the row's column, or the template's key).
        """
        user = row.get(f"{side}_user", account.user)
        if user is None:
            self._problem(f"row {number}: {side}_user", "missing: the mailbox's user")
        login = self._readRowLogin(number, row, side, account)
        if user is None or login is None:
            return None
        return (user, *login)

    def _readRowLogin(
        self, number: int, row: Mapping[str, str], side: str, account: _Account
    ) -> tuple[Secret, str | None, str | None] | None:
        """
        Read how a row's account on C{side} logs in: at most one of its
        password columns and C{credential}, else the template's password.

        @return: the password, the admin's login name (or L{None}), and
            where the password was read from.
        """
        logins = _loginColumns(side)
        columns = logins[:-1]
        given = givenKeys(row, logins)
        if len(given) > 1:
            self._problem(
                f"row {number}: {given[-1]}",
                f"give one of {', '.join(columns)} or {side}_credential,"
                f" not {' and '.join(given)}",
            )
            return None
        if not given:
            return self._templateLogin(number, side, account)
        if given[0] in columns:
            return self._readRowPassword(number, row, side, given[0])
        return self._readRowCredential(number, side, row[given[0]])

    def _templateLogin(
        self, number: int, side: str, account: _Account
    ) -> tuple[Secret, str | None, str | None] | None:
        """
        The template's password for a row that gives none, which it needs.
        """
        if account.password is None:
            self._problem(
                f"row {number}: {side}_password_file",
                f"missing: give {side}_password_file, {side}_password_credential"
                f" or {side}_credential",
            )
            return None
        return account.password, account.admin, account.credentialKey

    def _readRowPassword(
        self, number: int, row: Mapping[str, str], side: str, column: str
    ) -> tuple[Secret, None, str] | None:
        """
        Read the user's password from the row's password C{column}.
        """
        suffix = column[len(f"{side}_password"):]
        password = self._readRowSecret(number, column, suffix, row[column])
        if password is None:
            return None
        return password, None, f"{self._path} row {number}: {column}"

    def _readRowCredential(
        self, number: int, side: str, credential: str
    ) -> tuple[Secret, str, str] | None:
        """
        Read the admin credential the row names (one of C{credentials}).
        """
        if credential not in self._credentials:
            self._problem(
                f"row {number}: {side}_credential",
                f"no credential named {credential!r}"
                f" (credentials: {', '.join(self._credentials) or 'none'})",
            )
            return None
        known = self._credentials[credential]
        if known is None:
            # reported with the credential itself.
            return None
        admin, password = known
        return password, admin, f"{self._path} row {number}: {side}_credential"

    def _readRowSecret(
        self, number: int, column: str, suffix: str, written: str
    ) -> Secret | None:
        """
        Read a row's password from a file or credential (C{suffix} is a key
        of L{_FROM}), once however many rows name it.
        """
        if (suffix, written) not in self._passwords:
            try:
                self._passwords[suffix, written] = Secret(
                    _FROM[suffix](self, written, "password")[1]
                )
            except PasswordFileError as e:
                self._passwords[suffix, written] = None
                self._problem(f"row {number}: {column}", str(e))
                return None
        password = self._passwords[suffix, written]
        if password is None:
            self._problem(f"row {number}: {column}", f"{written} cannot be used")
        return password

    def _readLocal(
        self, number: int, row: Mapping[str, str], template: _Template
    ) -> SourceConfig | None:
        """
        Read a row's local source: the template's path with the row's
        users in its placeholders, or the row's C{maildir} or C{mbox}.
        """
        local = template.prototype.source
        column = "maildir" if isinstance(local, MaildirSourceConfig) else "mbox"
        if column in row:
            return self._checkLocal(f"row {number}: {column}", self._resolve(row[column]), local)
        if template.sourcePattern is None:
            return local
        filled = self._fillPattern(number, row, template.sourcePattern)
        if filled is None:
            return None
        written, column = filled
        return self._checkLocal(f"row {number}: {column}", written, local)

    def _fillPattern(
        self, number: int, row: Mapping[str, str], pattern: str
    ) -> tuple[str, str] | None:
        """
        The template's source C{pattern} with the row's users in its
        placeholders, and the column that names the path in a problem.
        """
        values = {}
        for placeholder in _PLACEHOLDERS:
            value = row.get(placeholder, "")
            if f"{{{placeholder}}}" not in pattern:
                continue
            if _unsafeInPath(value):
                self._problem(
                    f"row {number}: {placeholder}",
                    f"{value!r} cannot be part of the source's path",
                )
                return None
            values[placeholder] = value
        column = "source_user" if "source_user" in values else "destination_user"
        return pattern.format(**values), column

    def _checkLocal(
        self, where: str, written: str, local: SourceConfig
    ) -> SourceConfig | None:
        """
        A row's local source at C{written}, like the template's C{local}:
        an existing mbox, or a Maildir.
        """
        problem = _localProblem(written, local)
        if problem is not None:
            self._problem(where, f"{written} {problem}")
            return None
        if isinstance(local, MboxSourceConfig):
            return MboxSourceConfig(path=written, quoting=local.quoting)
        return MaildirSourceConfig(path=written)

    def _readName(
        self,
        number: int,
        row: Mapping[str, str],
        template: _Template | None,
        firstUse: dict[str, str],
    ) -> str | None:
        """
        Read a row's job name: its C{name}, else the template's name, a
        dash and the row's destination (or source) user.
        """
        named = self._rowJobName(number, row, template)
        if named is None:
            return None
        column, name = named
        if not _NAME.fullmatch(name):
            self._problem(
                f"row {number}: {column}",
                f"invalid job name {name!r}: use letters, digits and . _ @ -"
                + ("" if column == "name" else "; give the row a name"),
            )
            return None
        if name in firstUse:
            self._problem(
                f"row {number}: {column}",
                f"duplicate job name {name!r} (first used by {firstUse[name]})",
            )
            return None
        firstUse[name] = f"{self._path} row {number}"
        return name

    def _rowJobName(
        self, number: int, row: Mapping[str, str], template: _Template | None
    ) -> tuple[str, str] | None:
        """
        A row's job name and the column it comes from: its C{name}, else
        the template's name, a dash and the row's destination (or source)
        user.
        """
        if "name" in row:
            return "name", row["name"]
        if template is None:
            return None
        column = "destination_user" if "destination_user" in row else "source_user"
        if column not in row:
            self._problem(f"row {number}: name", "missing: no user to name the job by")
            return None
        return column, f"{template.prototype.name}-{row[column]}"

    def _readConnections(self, number: int, written: str) -> int | None:
        """
        Read a row's C{connections}.
        """
        try:
            value = int(written)
        except ValueError:
            self._problem(f"row {number}: connections", f"expected an integer, got {written!r}")
            return None
        return self._readInteger(
            value, f"row {number}: connections", _CONNECTIONS.minimum, _CONNECTIONS.maximum
        )


def _readEach(
    reader: _RowReader, template: _Template, firstUse: dict[str, str]
) -> Iterator[tuple[int, dict[str, str], JobConfig]]:
    """
    Read the rows one at a time (a lazy user list's load): each valid
    row's line, fields and job; the problems are kept as by
    L{_RowReader.readAll}.
    """
    try:
        with open(reader._path, encoding="utf-8-sig", newline="") as f:
            rows = reader._rows(f)
            columns = reader._readFirstRow(rows, template)
            if columns is None:
                return
            count = 0
            for count, (number, fields) in enumerate(rows, 1):
                row = reader._readFields(number, fields, columns)
                job = None if row is None else reader._readJobRow(number, row, template, firstUse)
                if job is not None and row is not None:
                    yield number, row, job
            if count == 0:
                reader._problem("", "no users: the file has a header row but no rows")
    except UnicodeDecodeError:
        reader._problem("", "not UTF-8 text")
    except csv.Error as e:
        reader._problem("", f"invalid CSV: {e}")
    except OSError as e:
        reader._problem("", f"cannot be read: {e.strerror}")


def fileDigest(path: str) -> str:
    """
    The SHA-256 of the octets of the file at C{path}, hexadecimal (a user
    list of a million rows, 40 MB, in about 0.1 s).

    @raise OSError: it cannot be read.
    """
    digest = sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@frozen(eq=False)
class LazyUserList:
    """
    A C{jobs_from} entry kept as written, its rows read only when asked
    (L{imapmig.config.model.UserList}): a fleet's daemon holds the
    template once and builds the job of a row it claims from that row's
    C{params}, not a million jobs at each start.

    @ivar template: the template, read and checked at parse.
    @ivar credentials: the configuration's C{credentials}.
    @ivar environment: the environment systemd credentials are found
        with (L{None}: the process's).
    """

    name: str
    entry: str
    path: str
    fileDigest: str
    template: _Template
    credentials: Mapping[str, tuple[str, Secret] | None] = field(repr=False)
    environment: Mapping[str, str] | None = field(default=None, repr=False)

    @property
    def settings(self) -> object:
        """
        What every row's job shares: the template, the users of the
        credentials (their passwords are secrets, left out of a digest),
        and the file's path (which each row's job names).
        """
        users = tuple(
            sorted((name, None if each is None else each[0]) for name, each in self.credentials.items())
        )
        return (self.path, self.template, users)

    def _reader(self) -> _RowReader:
        reader = _RowReader(self.path, self.credentials)
        reader._environment = self.environment
        return reader

    def rows(self, taken: Mapping[str, str]) -> Iterator[tuple[JobConfig, dict[str, object]]]:
        """
        See L{imapmig.config.model.UserList.rows}: C{params} are the row's
        line and its fields, C{{"row": N, "fields": {COLUMN: VALUE}}}.
        """
        reader = self._reader()
        for number, fields, job in _readEach(reader, self.template, dict(taken)):
            yield job, {"row": number, "fields": fields}
        if reader._problems:
            raise ConfigError(reader._problems)

    def job(self, params: Mapping[str, object]) -> JobConfig:
        """
        See L{imapmig.config.model.UserList.job}.
        """
        reader = self._reader()
        number, fields = params["row"], params["fields"]
        assert isinstance(number, int) and isinstance(fields, dict)
        job = reader._readJobRow(number, fields, self.template, {})
        if job is None:
            raise ConfigError(reader._problems)
        return job


def _columnHint(name: str) -> str:
    """
    What to say of the unknown column C{name}: the known column it is
    close to, or the known columns.
    """
    close = difflib.get_close_matches(name, _COLUMNS, n=1)
    return f"did you mean {close[0]!r}?" if close else f"known columns: {', '.join(_COLUMNS)}"


def _rowJob(
    prototype: JobConfig,
    sides: tuple[SourceConfig, DestinationConfig],
    name: str,
    connections: int,
) -> JobConfig:
    """
    A row's job: the template's C{prototype} with the row's name, source
    and destination, and its connections (0: the prototype's).
    """
    return evolve(
        prototype,
        name=name,
        source=sides[0],
        destination=sides[1],
        connections=connections or prototype.connections,
    )


def _unusedColumns(template: _Template) -> list[tuple[str, str]]:
    """
    The columns a template's source has no use for, each with why: a
    local source's other kind, and an IMAP login's without an IMAP
    source.
    """
    local = template.prototype.source
    unused = [
        (column, f"the template's source is not {column}")
        for column, kind in _LOCAL_COLUMNS
        if not isinstance(local, kind)
    ]
    if template.source is None:
        unused += [
            (column, "the template's source is not an IMAP server")
            for column in _loginColumns("source")
        ]
    return unused


def _loginColumns(side: str) -> tuple[str, ...]:
    """
    The columns that give the login of C{side}'s account: its password
    file or credential, or a named admin credential.
    """
    return (*(f"{side}_{key}" for key in _ROW_PASSWORD_KEYS), f"{side}_credential")


def _localProblem(written: str, local: SourceConfig) -> str | None:
    """
    What is wrong with a row's local source at C{written}, of the kind of
    the template's C{local}, or L{None}: an mbox exists, a Maildir has
    C{cur} and C{new}.
    """
    if isinstance(local, MboxSourceConfig):
        return None if os.path.exists(written) else "does not exist"
    if _isMaildir(written):
        return None
    return "is not a Maildir" if os.path.isdir(written) else "does not exist"


def _isMaildir(path: str) -> bool:
    """
    Whether C{path} is a Maildir: a directory with C{cur} and C{new}.
    """
    return all(os.path.isdir(os.path.join(path, sub)) for sub in ("cur", "new"))


def _unsafeInPath(value: str) -> bool:
    """
    Whether a row's user C{value} cannot be part of a path: empty, C{.},
    C{..}, or holding a C{/} or NUL.
    """
    return not value or not isPlainFileName(value)
