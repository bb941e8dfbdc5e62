# -*- test-case-name: tests.test_credentials -*-
"""
Where a secret comes from.  Each secret setting KEY (C{password},
C{token}, C{client_secret}) may be given as C{KEY_file: FILE} (a file only
its owner may read), as C{KEY_credential: NAME} (a systemd credential,
L{imapmig.access.secrets}) or, for a password only, inline as C{KEY: TEXT}.
Exactly one of them.  A new secret setting is one call of
L{SecretsReader._readSecret} (and its keys, L{secretKeys}, among its
section's); a new way to give one is an entry of L{_FROM}.
"""

from __future__ import annotations

import os
from typing import Callable, Iterator, Mapping

from imapmig.config.reader import ConfigReader, _key, givenKeys
from imapmig.access.secrets import Secret, credentialPath, readCredential, readPasswordFile
from imapmig.errors import PasswordFileError

def _fromFile(reader: SecretsReader, written: str, kind: str) -> tuple[str, str]:
    """
    Read a secret from the file C{written} (relative to the configuration's
    directory).

    @return: the file's absolute path, and the secret.
    """
    path = reader._resolve(written)
    return path, readPasswordFile(path, kind)


def _fromCredential(reader: SecretsReader, written: str, kind: str) -> tuple[str, str]:
    """
    Read a secret from the systemd credential named C{written}.

    @return: the credential's path, and the secret.
    """
    environ = reader._environ()
    return credentialPath(written, environ), readCredential(written, kind, environ)


# The suffixes of the keys that name where a secret is read from, each
# with how: (reader, value written, what the secret is) -> (path read,
# secret), raising PasswordFileError.
_FROM: dict[str, Callable[[SecretsReader, str, str], tuple[str, str]]] = {
    "_file": _fromFile,
    "_credential": _fromCredential,
}


def secretKeys(key: str, inline: bool = False) -> tuple[str, ...]:
    """
    The keys that may give the secret C{key}: C{KEY} itself if it may be
    written inline, then C{KEY_file} and C{KEY_credential}.
    """
    return ((key,) if inline else ()) + tuple(key + suffix for suffix in _FROM)


INLINE_SECRET_KEYS = ("password",)
"""
The keys whose value is a secret written in the configuration itself: a
file holding one must be private (L{SecretsReader._checkInlineSecrets}).
"""


class SecretsReader(ConfigReader):
    """
    Reads secrets given by any of L{secretKeys}.

    @ivar _looseFileMode: the configuration file's mode when group or
        others may read it (L{imapmig.access.secrets.accessibleToOthers}), for the
        check of inline secrets; L{None} when it is private or the document
        was not read from a file.
    @ivar _environment: the environment credentials are found with, or
        L{None} for the process's.
    """

    _looseFileMode: int | None = None
    _environment: Mapping[str, str] | None = None

    def _environ(self) -> Mapping[str, str]:
        """
        The environment credentials are found with: the one given to the
        parser, else the process's.
        """
        return os.environ if self._environment is None else self._environment

    def _readSecret(
        self,
        mapping: Mapping[str, object],
        path: str,
        key: str,
        kind: str,
        inline: bool = False,
        missing: str | None = None,
    ) -> tuple[Secret, str | None] | None:
        """
        Read the secret C{key} of C{mapping} from exactly one of
        L{secretKeys}.  No message shows the secret.

        @param path: the path of C{mapping}.
        @param key: the secret's key, without a suffix (C{"password"}).
        @param kind: what it is, as errors say it (C{"client secret"}).
        @param inline: whether C{KEY: TEXT} is allowed.
        @param missing: the problem when none is given, or L{None} to
            report none (the caller knows what is missing).
        @return: the secret and the path of the file it was read from
            (L{None} when inline), or L{None} after reporting a problem.
        """
        keys = secretKeys(key, inline)
        chosen = self._chosenKey(mapping, path, keys, missing)
        if chosen is None:
            return None
        written = self._readString(mapping[chosen], _key(path, chosen))
        if written is None:
            return None
        if chosen == key:
            return Secret(written), None
        read = _FROM[chosen[len(key):]]
        try:
            filePath, secret = read(self, written, kind)
        except PasswordFileError as e:
            self._problem(_key(path, chosen), str(e))
            return None
        return Secret(secret), filePath

    def _chosenKey(
        self, mapping: Mapping[str, object], path: str, keys: tuple[str, ...], missing: str | None
    ) -> str | None:
        """
        The one of C{keys} that C{mapping} gives; L{None} after reporting
        more than one, or none (with C{missing}, if any).
        """
        given = givenKeys(mapping, keys)
        if len(given) > 1:
            self._problem(
                path,
                f"give exactly one of {', '.join(keys)}, not {' and '.join(given)}",
            )
            return None
        if not given and missing is not None:
            self._problem(path, missing)
        return given[0] if given else None

    def _checkInlineSecrets(self, value: object, path: str = "") -> None:
        """
        Report every inline secret (L{INLINE_SECRET_KEYS}) in the document
        C{value} if the file holding it may be read by group or others,
        as a password file would be refused.
        """
        mode = self._looseFileMode
        if mode is None:
            return
        for where, name, item in _children(value, path):
            if _isInlineSecret(name, item):
                self._problem(
                    where,
                    f"an inline {name} in a file that group or others may read"
                    f" (mode {mode & 0o7777:04o}): run chmod 600 {self._path},"
                    f" or give {name}_file: FILE or {name}_credential: NAME instead",
                )
            else:
                self._checkInlineSecrets(item, where)


def _isInlineSecret(name: object, value: object) -> bool:
    """
    Whether the key C{name} with C{value} is a secret written inline.
    """
    return name in INLINE_SECRET_KEYS and isinstance(value, str)


def _children(value: object, path: str) -> Iterator[tuple[str, object, object]]:
    """
    The items of the list or mapping C{value} at C{path}: each one's path,
    its key (L{None} in a list) and its value.
    """
    if isinstance(value, list):
        for index, item in enumerate(value):
            yield f"{path}[{index}]", None, item
    elif isinstance(value, dict):
        for name, item in value.items():
            yield _key(path, str(name)), name, item
