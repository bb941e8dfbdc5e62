# -*- test-case-name: tests.test_config_userlist -*-
"""
User lists: a job template with C{jobs_from: users.csv} makes one job per
row of a CSV file, and the top-level C{credentials} map names the admin
credentials rows may use.

The template is read once, into a prototype job whose settings every
row's job shares; a row gives only its users, passwords or credential,
name, and the few overrides of its columns; the rows are read by
L{imapmig.config.userrows}.  Every row is checked, each
problem named C{FILE: row N: COLUMN: ...} (the header is row 1), and
reported with the YAML's problems.  Each password file (or systemd
credential, C{*_password_credential}) is read once, however many rows
name it.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from imapmig.config.jobs import _JOB_KEYS, JobsReader
from imapmig.config.model import (
    AccountConfig,
    ImapSourceConfig,
    JobConfig,
    MaildirSourceConfig,
    MboxSourceConfig,
    ServerConfig,
    SourceConfig,
)
from imapmig.config.reader import _NAME, Check, Key, Step, _describe, _key, givenKeys
from imapmig.config.secretkeys import secretKeys
from imapmig.config.sources import _QUOTINGS, _SOURCE_KEYS
from imapmig.config.userrows import (
    _PLACEHOLDERS,
    _ROW_PASSWORD_KEYS,
    LazyUserList,
    _Account,
    _RowReader,
    _Template,
    fileDigest,
)
from imapmig.access.secrets import Secret

_TEMPLATE_KEYS = _JOB_KEYS + ("jobs_from",)
_CREDENTIAL_KEYS = ("user", *_ROW_PASSWORD_KEYS)
# What gives a template's account its password.
_GIVES_PASSWORD = {*secretKeys("password", inline=True), "admin"}
# A placeholder's dummy value for the template's check.
_PROBE = "probe"


class UserListReader(JobsReader):
    """
    Reads C{credentials} and job templates with C{jobs_from}.
    """

    _credentials: Mapping[str, tuple[str, Secret] | None] = {}
    _lazyUserLists: bool | None = False
    # The user lists kept as written, with _lazyUserLists.
    _userLists: list[LazyUserList]

    def _readCredentials(self, top: Mapping[str, object]) -> None:
        """
        Read C{credentials}: a map of names to C{{user, password_file}} (or
        C{password_credential} instead of C{password_file}), each password
        read once, here.  An invalid credential maps to
        L{None}, so the rows using it are not reported again.
        """
        credentials: dict[str, tuple[str, Secret] | None] = {}
        self._credentials = credentials
        if "credentials" not in top:
            return
        value = top["credentials"]
        if not isinstance(value, dict):
            self._problem(
                "credentials",
                "expected a mapping of names to {user: NAME, password_file: FILE},"
                f" got {_describe(value)}",
            )
            return
        for name, entry in value.items():
            self._readCredential(name, entry, credentials)

    def _readCredential(
        self, name: object, entry: object, credentials: dict[str, tuple[str, Secret] | None]
    ) -> None:
        """
        Read the credential C{name} into C{credentials}: its user and
        password (L{_CREDENTIAL_TABLE}), or L{None} when invalid.
        """
        path = _key("credentials", str(name))
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            self._problem(path, f"invalid credential name {name!r}")
            return
        credentials[name] = None
        mapping = self._readMapping(entry, path, _CREDENTIAL_KEYS)
        values = None if mapping is None else self._readKeys(mapping, path, _CREDENTIAL_TABLE)
        if values is not None:
            credentials[name] = (values["user"], values["password"])

    def _readCredentialPassword(
        self, credential: Mapping[str, object], path: str, values: dict[str, Any]
    ) -> bool:
        """
        Read a credential's password: exactly one of its password keys.
        """
        read = self._readSecret(
            credential,
            path,
            "password",
            "password",
            missing="missing password: give password_file: FILE"
            " or password_credential: NAME",
        )
        values["password"] = None if read is None else read[0]
        return read is not None

    def _readUserList(
        self,
        template: dict[str, object],
        path: str,
        servers: Mapping[str, ServerConfig | None] | None,
        defaults: Mapping[str, int],
        firstUse: dict[str, str],
    ) -> list[JobConfig]:
        """
        Read a job template with C{jobs_from}: one job per row of its CSV.
        """
        read = self._readTemplate(template, path, servers, defaults)
        written = self._readString(template["jobs_from"], _key(path, "jobs_from"))
        if written is None:
            return []
        csvPath = self._resolve(written)
        if not os.path.isfile(csvPath):
            what = "not a file" if os.path.exists(csvPath) else "no such file"
            self._problem(_key(path, "jobs_from"), f"{what}: {csvPath}")
            return []
        if self._lazyUserLists:
            self._keepUserList(read, path, csvPath)
            return []
        rows = _RowReader(csvPath, self._credentials)
        rows._environment = self._environment
        jobs = rows.readAll(read, firstUse)
        self._problems.extend(rows._problems)
        return jobs

    def _keepUserList(self, template: _Template | None, path: str, csvPath: str) -> None:
        """
        Keep a valid template's user list as written (L{LazyUserList}),
        its file's digest taken; its rows are checked when loaded.
        """
        try:
            digest = fileDigest(csvPath)
        except OSError as e:
            self._problem(_key(path, "jobs_from"), f"cannot be read: {csvPath}: {e.strerror}")
            return
        if template is not None:
            self._userLists.append(
                LazyUserList(
                    template.prototype.name, path, csvPath, digest, template,
                    self._credentials, self._environment,
                )
            )  # fmt: skip

    def _readTemplate(
        self,
        template: dict[str, object],
        path: str,
        servers: Mapping[str, ServerConfig | None] | None,
        defaults: Mapping[str, int],
    ) -> _Template | None:
        """
        Check a template once, as a job whose missing users and passwords
        are stand-ins, and whose local source path may hold placeholders.
        """
        probe = dict(template)
        sourceValue = template.get("source")
        destinationValue = template.get("destination")
        if isinstance(destinationValue, dict):
            probe["destination"] = _standIns(destinationValue)
        local = isinstance(sourceValue, dict) and "server" not in sourceValue
        read = self._readLocalPrototype if local else self._readIMAPPrototype
        sourcePattern, prototype = read(probe, path, servers, defaults)
        if prototype is None:
            return None
        return _template(prototype, sourcePattern, sourceValue, destinationValue)

    def _readLocalPrototype(
        self,
        probe: dict[str, object],
        path: str,
        servers: Mapping[str, ServerConfig | None] | None,
        defaults: Mapping[str, int],
    ) -> tuple[str | None, JobConfig | None]:
        """
        Read the prototype job of a template with a local source, and the
        source's path pattern (if it has placeholders).
        """
        source = probe["source"]
        assert isinstance(source, dict)
        sourcePattern, local = self._readLocalTemplate(source, _key(path, "source"))
        # A stand-in source when it is invalid: the rest is checked too.
        prototype = self._readJob(
            probe,
            path,
            servers,
            defaults,
            {},
            keys=_TEMPLATE_KEYS,
            source=local or MaildirSourceConfig(path=_PROBE),
        )
        return sourcePattern, None if local is None else prototype

    def _readIMAPPrototype(
        self,
        probe: dict[str, object],
        path: str,
        servers: Mapping[str, ServerConfig | None] | None,
        defaults: Mapping[str, int],
    ) -> tuple[str | None, JobConfig | None]:
        """
        Read the prototype job of a template with an IMAP source (or none),
        with stand-ins for what the rows give.
        """
        source = probe.get("source")
        if isinstance(source, dict):
            probe["source"] = _standIns(source)
        return None, self._readJob(probe, path, servers, defaults, {}, keys=_TEMPLATE_KEYS)

    def _readLocalTemplate(
        self, value: dict[str, object], path: str
    ) -> tuple[str | None, SourceConfig | None]:
        """
        Read a template's local source (C{maildir} or C{mbox}): its path
        may hold C{{source_user}} and C{{destination_user}}, filled in by
        each row.

        @return: the path pattern (absolute) when it has placeholders,
            else L{None} and the source read as a job's.
        """
        source = self._readMapping(value, path, _SOURCE_KEYS)
        if source is None:
            return None, None
        kind = self._localTemplateKind(source, path)
        if kind is None:
            return None, None
        written = self._readString(source[kind], _key(path, kind))
        if written is None:
            return None, None
        if "{" not in written:
            return None, self._readSource(value, path, None)
        return self._readSourcePattern(source, path, kind, written)

    def _localTemplateKind(self, source: Mapping[str, object], path: str) -> str | None:
        """
        The kind of a template's local source: C{maildir}, or C{mbox} with
        its C{quoting}, and nothing else.
        """
        kinds = givenKeys(source, ("maildir", "mbox"))
        if not _isLocalTemplate(source, kinds):
            self._problem(
                path,
                "a template's source is {server: NAME, ...}, {maildir: DIR}"
                " or {mbox: PATH, quoting: ...}",
            )
            return None
        return kinds[0]

    def _readSourcePattern(
        self, source: Mapping[str, object], path: str, kind: str, written: str
    ) -> tuple[str | None, SourceConfig | None]:
        """
        Read a template's local source path C{written}, which holds
        placeholders, and its quoting.
        """
        try:
            written.format(**{p: _PROBE for p in _PLACEHOLDERS})
        except (KeyError, IndexError, ValueError) as e:
            self._problem(
                _key(path, kind),
                f"invalid placeholder ({e}): use {{source_user}} or {{destination_user}}",
            )
            return None, None
        quoting = self._readChoice(
            source.get("quoting", "mboxrd"), _key(path, "quoting"), _QUOTINGS, "mbox quoting"
        )
        if quoting is None:
            return None, None
        pattern = os.path.join(self._directory, written)
        if kind == "maildir":
            return pattern, MaildirSourceConfig(path=pattern)
        return pattern, MboxSourceConfig(path=pattern, quoting=quoting)

def _standIns(account: dict[str, object]) -> dict[str, object]:
    """
    A template's account with stand-ins for the user and password each
    row gives, so that it can be checked as a job's.
    """
    probe = dict(account)
    probe.setdefault("user", _PROBE)
    if not _GIVES_PASSWORD & set(account):
        probe["password"] = _PROBE
    return probe


def _isLocalTemplate(source: Mapping[str, object], kinds: list[str]) -> bool:
    """
    Whether a template's C{source}, which gives the local C{kinds}, is a
    template's local source: one C{maildir} or C{mbox}, C{quoting} with an
    mbox only, nothing else.
    """
    extra = set(source) - {"maildir", "mbox", "quoting"}
    return len(kinds) == 1 and not extra and ("quoting" not in source or kinds == ["mbox"])


def _template(
    prototype: JobConfig, sourcePattern: str | None, source: object, destination: object
) -> _Template:
    """
    A valid template: its C{prototype} job, and what it gives of its
    accounts as written (C{source} and C{destination}).
    """
    imap = None
    if isinstance(prototype.source, ImapSourceConfig):
        assert isinstance(source, dict)
        imap = _account(prototype.source, source)
    assert isinstance(destination, dict)
    return _Template(
        prototype=prototype,
        source=imap,
        sourcePattern=sourcePattern,
        destination=_account(prototype.destination, destination),
    )


def _account(read: AccountConfig, written: Mapping[str, object]) -> _Account:
    """
    What the template gives of an account: L{read} less its stand-ins.
    """
    given = _GIVES_PASSWORD & set(written)
    return _Account(
        server=read.server,
        user=read.user if "user" in written else None,
        password=read.password if given else None,
        admin=read.admin,
        credentialKey=read.credentialKey if given else None,
    )


# A credential of credentials: its user and its password.
_CREDENTIAL_TABLE: tuple[Step, ...] = (
    Key("user", UserListReader._readString, missing="missing: the login name"),
    Check(UserListReader._readCredentialPassword),
)
