# -*- test-case-name: tests.test_integration -*-
"""
Helpers shared by the tests that run against a real, private Dovecot.

Starting and stopping a Dovecot costs about 1.3 s, so the instances are
shared: L{sharedDovecot} starts one per distinct configuration the first time
a test asks for it and stops them all, in parallel, when the test process
exits.  Tests keep out of each other's way by taking a fresh account each
(L{freshUser}): an account's mailboxes are only ever touched by the one test
that took it.

Everything here that talks to Dovecot directly (starting, L{fetchAll}) is
synchronous; it runs between reactor turns, before and after the code under
test.
"""

from __future__ import annotations

import atexit
import hashlib
import imaplib
import os
import re
import shutil
import tempfile
import threading
from collections import Counter
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

import twisted.mail.imap4  # noqa: F401  (registers the 'imap4-utf-7' codec)
from twisted.trial.unittest import SynchronousTestCase

from imapmig.testing.corpus import CorpusMessage
from imapmig.testing.dovecot import DovecotInstance, DovecotUser, FetchedMessage

USERS_PER_INSTANCE = 24
"""
Accounts each shared instance is started with; one per test that uses it.
"""

_instances: dict[str | None, DovecotInstance] = {}
_usersTaken: dict[str | None, int] = {}
_root: str | None = None


def _rootDirectory() -> str:
    """
    The directory holding every shared instance, created on first use.  It
    lives under the system's temporary directory, not trial's, so its Unix
    socket paths stay short and it outlives any one test.
    """
    global _root
    if _root is None:
        _root = tempfile.mkdtemp(prefix="imapmig-it-")
        os.chmod(_root, 0o755)
        atexit.register(_stopAll)
    return _root


def _stopAll() -> None:
    """
    Stop every shared instance (in parallel: each takes about 1.1 s) and
    remove their files.
    """
    stoppers = [threading.Thread(target=i.stop) for i in _instances.values()]
    for thread in stoppers:
        thread.start()
    for thread in stoppers:
        thread.join()
    _instances.clear()
    if _root is not None:
        shutil.rmtree(_root, ignore_errors=True)


def sharedDovecot(capabilities: str | None = None) -> DovecotInstance:
    """
    A running private Dovecot advertising C{capabilities} after login (its
    full default list when L{None}), started on first use and stopped when
    the process exits.

    @param capabilities: see L{DovecotInstance}'s parameter of that name.
    """
    instance = _instances.get(capabilities)
    if instance is None:
        name = f"dovecot{len(_instances)}"
        instance = DovecotInstance(
            os.path.join(_rootDirectory(), name),
            users=[
                DovecotUser(f"user{n:02d}", f"password-{n:02d}")
                for n in range(1, USERS_PER_INSTANCE + 1)
            ],
            capabilities=capabilities,
        )
        _instances[capabilities] = instance
        _usersTaken[capabilities] = 0
        instance.start()
    return instance


def freshUser(instance: DovecotInstance) -> DovecotUser:
    """
    An account of C{instance} (from L{sharedDovecot}) no other test has
    taken.

    @raise RuntimeError: every account is taken; raise
        L{USERS_PER_INSTANCE}.
    """
    for capabilities, each in _instances.items():
        if each is instance:
            taken = _usersTaken[capabilities]
            if taken >= len(instance.users):
                raise RuntimeError(f"all {taken} accounts of {instance!r} are taken")
            _usersTaken[capabilities] = taken + 1
            return instance.users[taken]
    raise ValueError(f"{instance!r} is not a shared instance")


def writePasswordFile(path: str, password: str) -> str:
    """
    Write C{password} into a new file at C{path} only its owner may read, as
    the configuration requires.

    @return: C{path}.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    return path


def mailboxName(folder: tuple[str, ...], delimiter: str = ".") -> str:
    """
    The name a source folder gets on a server with hierarchy C{delimiter}.
    """
    if folder == ("INBOX",):
        return "INBOX"
    return delimiter.join(folder)


MessageView = tuple[str, tuple[str, ...], datetime]
"""
What a test compares of one message: the SHA-256 of its CRLF form, its
flags sorted (C{\\Recent} left out), and its INTERNALDATE in UTC.
"""


def corpusView(
    messages: Iterable[CorpusMessage], delimiter: str = "."
) -> dict[str, Counter[MessageView]]:
    """
    Per destination mailbox, the multiset of L{MessageView}s the source
    messages should become.
    """
    result: dict[str, Counter[MessageView]] = {}
    for message in messages:
        view = (
            message.sha256,
            tuple(sorted(message.flags)),
            message.internalDate.astimezone(timezone.utc),
        )
        result.setdefault(mailboxName(message.folder, delimiter), Counter())[view] += 1
    return result


def fetchedView(
    fetched: Mapping[str, list[FetchedMessage]],
) -> dict[str, Counter[MessageView]]:
    """
    Per mailbox holding any message, the multiset of L{MessageView}s that
    Dovecot holds.  Empty mailboxes (parents created for a hierarchy, an
    untouched INBOX) are left out.
    """
    result: dict[str, Counter[MessageView]] = {}
    for name, messages in fetched.items():
        if not messages:
            continue
        result[name] = Counter(
            (
                hashlib.sha256(message.body).hexdigest(),
                tuple(sorted(f for f in message.flags if f.lower() != "\\recent")),
                message.internalDate.astimezone(timezone.utc),
            )
            for message in messages
        )
    return result


_UID_AND_LITERAL = re.compile(rb"\bUID (\d+)")


def digestsByUID(
    instance: DovecotInstance, user: DovecotUser, mailbox: str
) -> tuple[int, dict[int, str]]:
    """
    Read C{mailbox} of C{user} with an independent client (L{imaplib}).

    @return: the mailbox's UIDVALIDITY, and the hex SHA-256 of every
        message's full body by UID.
    """
    client = imaplib.IMAP4("127.0.0.1", instance.port, timeout=60)
    try:
        client.login(user.name, user.password)
        encoded = mailbox.encode("imap4-utf-7").decode("ascii")
        typ, _ = client.select('"' + encoded + '"', readonly=True)
        if typ != "OK":
            raise imaplib.IMAP4.error(f"cannot select {mailbox!r}")
        typ, data = client.response("UIDVALIDITY")
        uidValidity = int(data[0])
        typ, data = client.uid("FETCH", "1:*", "(UID BODY.PEEK[])")
        digests: dict[int, str] = {}
        for item in data:
            if isinstance(item, tuple):
                match = _UID_AND_LITERAL.search(item[0])
                if match is None:
                    raise imaplib.IMAP4.error(f"no UID in {item[0][:100]!r}")
                digests[int(match.group(1))] = hashlib.sha256(item[1]).hexdigest()
    finally:
        client.logout()
    return uidValidity, digests


def denyAccess(testCase: SynchronousTestCase, path: str) -> None:
    """
    Make C{path} (a file or a directory) unreadable for the rest of the
    test: by its mode where that suffices, and, for root (whom modes do
    not stop), by making C{open}, C{os.open} and C{os.scandir} raise the
    C{PermissionError} the kernel would raise for anyone else.  Either way
    the code under test meets a real C{PermissionError} from the same
    calls.
    """
    import builtins
    import errno

    mode = os.stat(path).st_mode & 0o7777
    os.chmod(path, 0)
    testCase.addCleanup(os.chmod, path, mode)
    if os.geteuid() != 0:
        return

    def denied(name: object) -> bool:
        return isinstance(name, str) and os.path.abspath(name) == os.path.abspath(path)

    def refuse(name: str) -> PermissionError:
        return PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)

    realOpen, realOsOpen, realScandir = builtins.open, os.open, os.scandir

    def guardedOpen(file: Any, *args: Any, **kwargs: Any) -> Any:
        if denied(file):
            raise refuse(file)
        return realOpen(file, *args, **kwargs)

    def guardedOsOpen(file: Any, *args: Any, **kwargs: Any) -> int:
        if denied(file):
            raise refuse(file)
        return realOsOpen(file, *args, **kwargs)

    def guardedScandir(directory: Any = ".") -> Any:
        if denied(directory):
            raise refuse(directory)
        return realScandir(directory)

    testCase.patch(builtins, "open", guardedOpen)
    testCase.patch(os, "open", guardedOsOpen)
    testCase.patch(os, "scandir", guardedScandir)


def newDirectory(testCase: SynchronousTestCase) -> str:
    """
    A new directory for one test's files.
    """
    path = os.path.abspath(str(testCase.mktemp()))
    os.makedirs(path)
    return path


def plainServer(instance: DovecotInstance) -> dict[str, object]:
    """
    The C{servers} entry of C{instance}'s plain port, without STARTTLS.
    """
    return {"endpoint": f"tcp:127.0.0.1:{instance.port}", "starttls": "off"}
