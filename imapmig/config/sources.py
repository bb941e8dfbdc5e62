# -*- test-case-name: tests.test_config -*-
"""
A job's C{source} (a Maildir, a directory of .eml files, an mbox, an IMAP
account) and its C{folders} rules.  A new kind of source is a key in
L{_SOURCE_KINDS}, its keys in L{_SOURCE_KEYS}, and one C{_read*} method.
"""

from __future__ import annotations

import os
from typing import Mapping

from imapmig.config.accounts import AccountsReader, credentialKey
from imapmig.config.model import (
    EmlSourceConfig,
    ImapSourceConfig,
    MaildirSourceConfig,
    MboxSourceConfig,
    ServerConfig,
    SourceConfig,
)
from imapmig.config.reader import _describe, _key
from imapmig.mail.folders import FolderRules


_DEFAULT_FOLDER = "INBOX"

_SOURCE_KEYS = (
    "maildir", "eml_dir", "folder", "mbox", "quoting",
    "server", "user", "password", "password_file", "password_credential", "admin",
    "oauth2",
)  # fmt: skip

_SOURCE_KINDS = ("maildir", "eml_dir", "mbox", "server")

_FOLDERS_KEYS = ("include", "exclude", "rename")

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
        kinds = [kind for kind in _SOURCE_KINDS if kind in source]
        if len(kinds) != 1:
            self._problem(
                path,
                "give exactly one of maildir: DIR, eml_dir: DIR, mbox: PATH"
                " or server: NAME" + (f", not {' and '.join(kinds)}" if kinds else ""),
            )
            return None
        (kind,) = kinds
        allowed = {
            "maildir": {"maildir"},
            "eml_dir": {"eml_dir", "folder"},
            "mbox": {"mbox", "quoting"},
            "server": {
                "server", "user", "password", "password_file", "password_credential",
                "admin", "oauth2",
            },  # fmt: skip
        }[kind]
        extra = sorted(set(source) - allowed)
        if extra:
            for key in extra:
                self._problem(
                    _key(path, key),
                    f"does not apply to a {kind} source (it takes: {', '.join(sorted(allowed))})",
                )
            return None
        if kind == "maildir":
            return self._readMaildir(source["maildir"], _key(path, "maildir"))
        if kind == "mbox":
            return self._readMbox(source, path)
        if kind == "server":
            account = self._readAccount(source, path, servers)
            if account is None:
                return None
            return ImapSourceConfig(*account, credentialKey=credentialKey(source, path))
        directory = self._readDirectory(source["eml_dir"], _key(path, "eml_dir"))
        folder = self._readFolder(
            source.get("folder", _DEFAULT_FOLDER), _key(path, "folder")
        )
        if directory is None or folder is None:
            return None
        return EmlSourceConfig(path=directory, folder=folder)

    def _readMbox(self, source: Mapping[str, object], path: str) -> MboxSourceConfig | None:
        """
        Read an mbox source: an existing file or directory, and its quoting.
        """
        written = self._readString(source["mbox"], _key(path, "mbox"))
        quoting = "mboxrd"
        ok = written is not None
        if "quoting" in source:
            chosen = self._readChoice(
                source["quoting"], _key(path, "quoting"), _QUOTINGS, "mbox quoting"
            )
            if chosen is None:
                ok = False
            else:
                quoting = chosen
        if written is None or not ok:
            return None
        resolved = self._resolve(written)
        if not os.path.exists(resolved):
            self._problem(_key(path, "mbox"), f"{resolved} does not exist")
            return None
        if not (os.path.isfile(resolved) or os.path.isdir(resolved)):
            self._problem(
                _key(path, "mbox"), f"{resolved} is neither an mbox file nor a directory"
            )
            return None
        if not os.access(resolved, os.R_OK):
            self._problem(_key(path, "mbox"), f"{resolved} is not readable")
            return None
        return MboxSourceConfig(path=resolved, quoting=quoting)

    def _readMaildir(self, value: object, path: str) -> MaildirSourceConfig | None:
        """
        Read a Maildir's path: a directory with C{cur} and C{new} in it.
        """
        directory = self._readDirectory(value, path)
        if directory is None:
            return None
        missing = [
            sub
            for sub in ("cur", "new")
            if not os.path.isdir(os.path.join(directory, sub))
        ]
        if missing:
            self._problem(
                path,
                f"{directory} is not a Maildir: it has no"
                f" {' or '.join(m + '/' for m in missing)} subdirectory",
            )
            return None
        return MaildirSourceConfig(path=directory)

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
        rules = self._readMapping(value, path, _FOLDERS_KEYS)
        if rules is None:
            return None
        ok = True
        patterns: dict[str, tuple[str, ...]] = {}
        for key in ("include", "exclude"):
            if key not in rules:
                patterns[key] = ()
                continue
            items = rules[key]
            if isinstance(items, str):
                items = [items]
            if not isinstance(items, list):
                self._problem(
                    _key(path, key), f"expected a list of folder patterns, not {_describe(items)}"
                )
                ok = False
                continue
            read = []
            for index, item in enumerate(items):
                pattern = self._readString(item, f"{_key(path, key)}[{index}]")
                if pattern is None:
                    ok = False
                elif not pattern.strip("/"):
                    self._problem(f"{_key(path, key)}[{index}]", "an empty folder pattern")
                    ok = False
                else:
                    read.append(pattern.strip("/"))
            patterns[key] = tuple(read)
        renames: list[tuple[str, str]] = []
        if "rename" in rules:
            mapping = rules["rename"]
            if not isinstance(mapping, dict):
                self._problem(
                    _key(path, "rename"),
                    "expected a mapping of source folder to destination folder"
                    f" (e.g. {{Sent Items: Sent}}), not {_describe(mapping)}",
                )
                ok = False
            else:
                for source, target in mapping.items():
                    where = f"{_key(path, 'rename')}[{source!r}]"
                    sourcePath = self._readFolder(source, where)
                    targetPath = self._readFolder(target, where)
                    if sourcePath is None or targetPath is None:
                        ok = False
                    else:
                        renames.append(("/".join(sourcePath), "/".join(targetPath)))
        if not ok:
            return None
        return FolderRules(
            include=patterns["include"], exclude=patterns["exclude"], rename=tuple(renames)
        )
