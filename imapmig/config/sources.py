# -*- test-case-name: tests.test_config -*-
"""
A job's C{source} (a Maildir, a directory of .eml files, an mbox, an IMAP
account) and its C{folders} rules.  A new kind of source is a key in
L{_SOURCE_KINDS}, its keys in L{_SOURCE_KEYS}, and one C{_read*} method.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from imapmig.config.accounts import AccountsReader, credentialKey
from imapmig.config.model import (
    EmlSourceConfig,
    ImapSourceConfig,
    MaildirSourceConfig,
    MboxSourceConfig,
    ServerConfig,
    SourceConfig,
)
from imapmig.config.reader import (
    Check,
    Key,
    Step,
    _describe,
    _key,
    everyOne,
    givenKeys,
    notThese,
)
from imapmig.mail.folders import FolderRules


_DEFAULT_FOLDER = "INBOX"

_SOURCE_KEYS = (
    "maildir", "eml_dir", "folder", "mbox", "quoting",
    "server", "user", "password", "password_file", "password_credential", "admin",
    "oauth2",
)  # fmt: skip

# Each kind of source, by the key that names it, with the keys it takes.
_SOURCE_KINDS = {
    "maildir": {"maildir"},
    "eml_dir": {"eml_dir", "folder"},
    "mbox": {"mbox", "quoting"},
    "server": {
        "server", "user", "password", "password_file", "password_credential",
        "admin", "oauth2",
    },
}  # fmt: skip

_QUOTINGS = ("mboxrd", "mboxo")


class SourcesReader(AccountsReader):
    """
    Reads a job's source and folder rules.
    """

    def _readSource(
        self,
        value: object,
        path: str,
        servers: Mapping[str, ServerConfig | None] | None,
    ) -> SourceConfig | None:
        """
        Read a job's C{source}: exactly one of C{maildir}, C{eml_dir},
        C{mbox} and C{server}, with the keys that kind takes.
        """
        source = self._readMapping(value, path, _SOURCE_KEYS)
        if source is None:
            return None
        kind = self._sourceKind(source, path)
        if kind is None:
            return None
        if kind == "server":
            return self._readImapSource(source, path, servers)
        values = self._readKeys(source, path, _SOURCE_TABLES[kind])
        return None if values is None else _LOCAL_SOURCES[kind](**values)

    def _sourceKind(self, source: Mapping[str, object], path: str) -> str | None:
        """
        The kind of C{source}: exactly one of the keys of L{_SOURCE_KINDS},
        with only the keys that kind takes.
        """
        kinds = givenKeys(source, _SOURCE_KINDS)
        if len(kinds) != 1:
            self._problem(
                path,
                "give exactly one of maildir: DIR, eml_dir: DIR, mbox: PATH"
                " or server: NAME" + notThese(kinds),
            )
            return None
        (kind,) = kinds
        allowed = _SOURCE_KINDS[kind]
        extra = sorted(set(source) - allowed)
        for key in extra:
            self._problem(
                _key(path, key),
                f"does not apply to a {kind} source (it takes: {', '.join(sorted(allowed))})",
            )
        return None if extra else kind

    def _readImapSource(
        self,
        source: Mapping[str, object],
        path: str,
        servers: Mapping[str, ServerConfig | None] | None,
    ) -> ImapSourceConfig | None:
        """
        Read an IMAP source: an account on one of C{servers}.
        """
        account = self._readAccount(source, path, servers)
        if account is None:
            return None
        return ImapSourceConfig(*account, credentialKey=credentialKey(source, path))

    def _readQuoting(self, value: object, path: str) -> str | None:
        """
        Read an mbox's C{quoting}: one of L{_QUOTINGS}.
        """
        return self._readChoice(value, path, _QUOTINGS, "mbox quoting")

    def _checkMbox(
        self, source: Mapping[str, object], path: str, values: dict[str, Any]
    ) -> bool:
        """
        Check that a valid mbox source's path is an existing, readable file
        or directory, and make it absolute.
        """
        if values["path"] is None or values["quoting"] is None:
            return True
        where = _key(path, "mbox")
        resolved = values["path"] = self._resolve(values["path"])
        problem = _mboxProblem(resolved)
        if problem is not None:
            self._problem(where, problem)
        return problem is None

    def _readMaildir(self, value: object, path: str) -> str | None:
        """
        Read a Maildir's path: a directory with C{cur} and C{new} in it.
        """
        return self._accepted(self._readDirectory(value, path), path, _maildirProblem)

    def _readFolder(self, value: object, path: str) -> tuple[str, ...] | None:
        """
        Read a folder name, its hierarchy written with C{/}.
        """
        written = self._readString(value, path)
        if written is None:
            return None
        components = tuple(written.split("/"))
        if not all(components):
            self._problem(
                path,
                f"invalid folder {written!r}: an empty name between slashes"
                " (write the hierarchy as e.g. Archive/2019)",
            )
            return None
        return components

    def _readFolderRules(self, value: object, path: str) -> FolderRules | None:
        """
        Read a job's C{folders}: C{include} and C{exclude} lists of
        patterns, and a C{rename} mapping, all with C{/} between levels.
        """
        values = self._readSection(value, path, _FOLDERS_TABLE)
        return None if values is None else FolderRules(**values)

    def _readPatterns(self, value: object, path: str) -> tuple[str, ...] | None:
        """
        Read C{include} or C{exclude}: a folder pattern, or a list of them.
        """
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list):
            self._problem(path, f"expected a list of folder patterns, not {_describe(items)}")
            return None
        return everyOne(
            [self._readPattern(item, f"{path}[{index}]") for index, item in enumerate(items)]
        )

    def _readPattern(self, value: object, path: str) -> str | None:
        """
        Read a folder pattern, without the slashes around it.
        """
        pattern = self._readString(value, path)
        if pattern is not None and not pattern.strip("/"):
            self._problem(path, "an empty folder pattern")
            return None
        return None if pattern is None else pattern.strip("/")

    def _readRenames(self, value: object, path: str) -> tuple[tuple[str, str], ...] | None:
        """
        Read C{rename}: a mapping of source folder to destination folder.
        """
        if not isinstance(value, dict):
            self._problem(
                path,
                "expected a mapping of source folder to destination folder"
                f" (e.g. {{Sent Items: Sent}}), not {_describe(value)}",
            )
            return None
        return everyOne(
            [self._readRename(source, target, path) for source, target in value.items()]
        )

    def _readRename(self, source: object, target: object, path: str) -> tuple[str, str] | None:
        """
        Read one rename: both folders, with C{/} between levels.
        """
        where = f"{path}[{source!r}]"
        sourcePath = self._readFolder(source, where)
        targetPath = self._readFolder(target, where)
        if sourcePath is None or targetPath is None:
            return None
        return "/".join(sourcePath), "/".join(targetPath)


def _maildirProblem(directory: str) -> str | None:
    """
    Why the directory C{directory} is not a Maildir, or L{None}: it has
    C{cur} and C{new} in it.
    """
    missing = [sub for sub in ("cur", "new") if not os.path.isdir(os.path.join(directory, sub))]
    if missing:
        return (
            f"{directory} is not a Maildir: it has no"
            f" {' or '.join(m + '/' for m in missing)} subdirectory"
        )
    return None


def _mboxProblem(resolved: str) -> str | None:
    """
    Why the mbox at C{resolved} cannot be read, or L{None}.
    """
    if not os.path.exists(resolved):
        return f"{resolved} does not exist"
    if not (os.path.isfile(resolved) or os.path.isdir(resolved)):
        return f"{resolved} is neither an mbox file nor a directory"
    if not os.access(resolved, os.R_OK):
        return f"{resolved} is not readable"
    return None


# The keys of each kind of local source, each a field of its SourceConfig.
_SOURCE_TABLES: dict[str, tuple[Step, ...]] = {
    "maildir": (Key("maildir", SourcesReader._readMaildir, "path"),),
    "eml_dir": (
        Key("eml_dir", SourcesReader._readDirectory, "path"),
        Key("folder", SourcesReader._readFolder, default=_DEFAULT_FOLDER),
    ),
    "mbox": (
        Key("mbox", SourcesReader._readString, "path"),
        Key("quoting", SourcesReader._readQuoting, default="mboxrd"),
        Check(SourcesReader._checkMbox),
    ),
}
_LOCAL_SOURCES: dict[str, Callable[..., SourceConfig]] = {
    "maildir": MaildirSourceConfig,
    "eml_dir": EmlSourceConfig,
    "mbox": MboxSourceConfig,
}

# The keys of a job's folders, each a field of FolderRules.
_FOLDERS_TABLE: tuple[Step, ...] = (
    Key("include", SourcesReader._readPatterns, default=[]),
    Key("exclude", SourcesReader._readPatterns, default=[]),
    Key("rename", SourcesReader._readRenames, default={}),
)
