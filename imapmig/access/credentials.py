# -*- test-case-name: tests.test_credentials -*-
"""
systemd credentials: secrets that the service manager hands the daemon in
the directory named by C{$CREDENTIALS_DIRECTORY} (C{LoadCredential=},
C{LoadCredentialEncrypted=}, C{SetCredential=}).

A configuration names a credential by its name alone
(C{password_credential: alice}); L{readCredential} finds it and reads it
with the checks of a password file (L{imapmig.access.secrets.readPasswordFile}).
systemd writes each credential C{0400} in a read-only directory that only
the service may enter, owned by the service's user or granted to it by
an ACL: both pass those checks.
"""

from __future__ import annotations

import os
from typing import Mapping

from imapmig.access.secrets import readPasswordFile
from imapmig.errors import CredentialError

CREDENTIALS_DIRECTORY = "CREDENTIALS_DIRECTORY"
"""
The environment variable in which systemd names the service's
credentials directory (C{/run/credentials/UNIT}).
"""



def credentialPath(name: str, environ: Mapping[str, str]) -> str:
    """
    The path of the credential C{name}.

    @param name: the credential's name, as in C{LoadCredential=NAME:...}.
    @param environ: the process's environment.
    @return: C{$CREDENTIALS_DIRECTORY/NAME}.
    @raise CredentialError: C{name} is not a plain file name (it has a
        C{/}, is C{.} or C{..}, or holds a NUL), the variable is not set
        (the daemon does not run under a unit with C{LoadCredential=}), or
        the credential does not exist.
    """
    if "/" in name or name in (".", "..") or "\0" in name:
        raise CredentialError(
            f"invalid credential name {name!r}: give the NAME of"
            " LoadCredential=NAME:FILE, a file name in $CREDENTIALS_DIRECTORY"
            " without '/' (not '.' or '..')"
        )
    directory = environ.get(CREDENTIALS_DIRECTORY)
    if not directory:
        raise CredentialError(
            f"{CREDENTIALS_DIRECTORY} is not set: imapmig is run outside"
            f" systemd's LoadCredential= (credential {name!r}); run it from"
            f" its unit with LoadCredential={name}:/etc/imapmig/credentials/{name}, or give"
            " a _file key instead of the _credential key"
        )
    path = os.path.join(directory, name)
    if not os.path.lexists(path):
        raise CredentialError(
            f"no credential {name!r} in {directory} ({CREDENTIALS_DIRECTORY}):"
            f" add LoadCredential={name}:FILE (or LoadCredentialEncrypted="
            f"{name}:FILE.cred) to the unit's [Service] section"
        )
    return path


def readCredential(name: str, kind: str, environ: Mapping[str, str]) -> str:
    """
    Read the secret held by the credential C{name}: its first line, with
    the checks of L{readPasswordFile}.

    @param name: the credential's name.
    @param kind: what it holds, as errors say it (C{"password"}).
    @param environ: the process's environment.
    @return: the secret.
    @raise PasswordFileError: the credential cannot be found
        (L{CredentialError}, from L{credentialPath}) or read.
    """
    return readPasswordFile(credentialPath(name, environ), f"{kind} credential")
