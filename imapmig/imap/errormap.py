# -*- test-case-name: tests.test_imap_session,tests.test_imap_client,tests.test_cleartext,tests.test_job_retry -*-
"""
The session edge's error mapping: Twisted's IMAP, TLS and connection
errors become L{imapmig.errors} exceptions here, once; and the awaiting of
pipelined commands whose refusals the caller judges one by one.

Split from imapmig/imap/session.py, which uses it beside
L{imapmig.imap.login} and L{imapmig.imap.opening}.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectError, ConnectionDone
from twisted.mail.imap4 import IMAP4Exception

from imapmig.access.cleartext import openSSLLoaded
from imapmig.errors import (
    CommandFailed,
    ConnectionLost,
    ImapmigError,
    TLSFailed,
    TLSInterrupted,
)
from imapmig.imap.client import describeConnectionLoss
from imapmig.errors import CommandRefused

T = TypeVar("T")
K = TypeVar("K")


def parseResponseCode(text: str) -> str | None:
    """
    The response code atom of a reply text (C{"[TRYCREATE] No such
    mailbox"} gives C{"TRYCREATE"}), or L{None}.
    """
    if not text.startswith("["):
        return None
    end = text.find("]")
    if end == -1:
        return None
    atom = text[1:end].split(" ", 1)[0]
    return atom.upper() or None


async def refusalsOf(
    commands: Sequence[Deferred[bytes]],
) -> tuple[list[CommandFailed | None], BaseException | None]:
    """
    Await every one of C{commands} (already sent, pipelined), in order.

    @return: per command its refusal (L{CommandFailed}) or L{None}; and the
        first other error, to raise once every command has ended.
    """
    refusals: list[CommandFailed | None] = []
    error: BaseException | None = None
    for command in commands:
        refusal: CommandFailed | None = None
        failure: BaseException | None = None
        try:
            await command
        except CommandFailed as e:
            refusal = e
        except Exception as e:
            failure = e
        refusals.append(refusal)
        error = error or failure
    return refusals, error


@contextmanager
def abandonedOnError(commands: Iterable[Deferred[Any]]) -> Iterator[None]:
    """
    Around the awaiting of a pipelined batch of C{commands}, in order:
    when it ends with an error (not a refusal, which the loop handles: the
    connection ended, a BYE, a protocol error), the commands not yet
    awaited fail with that same end, which is raised once; their failures
    are consumed here, or each would be logged as "Unhandled error in
    Deferred" (a critical traceback naming no job) when collected.
    """
    commands = list(commands)
    try:
        yield
    except BaseException:
        for d in commands:
            d.addErrback(lambda _: None)
        raise


async def eachSettled(
    command: str,
    pending: Sequence[tuple[K, Deferred[Any]]],
    refused: Callable[[K, CommandFailed], None],
) -> int:
    """
    Await each of the pipelined commands C{pending} in order, each with its
    key, its errors mapped as C{command}'s; a refusal goes to C{refused}
    with the key, any other error ends the wait (L{abandonedOnError}).

    @return: how many were not refused.
    """
    accepted = 0
    with abandonedOnError(d for _, d in pending):
        for key, d in pending:
            try:
                await mapped(command, d)
            except CommandFailed as e:
                refused(key, e)
            else:
                accepted += 1
    return accepted


async def mapped(command: str, d: Deferred[T]) -> T:
    """
    Await C{d}, mapping Twisted's IMAP, TLS and connection errors to ours.

    A lost connection keeps its class (L{ReplyTimeout}, L{ProtocolError},
    L{ServerBye} and the other L{ConnectionLost}s) and its attributes, its
    text saying which command it interrupted and who ended it.
    """
    try:
        return await d
    except IMAP4Exception as e:
        raise _refusal(command, e) from None
    except TLSInterrupted:
        # The handshake, not the command waiting for it, was interrupted.
        raise
    except ConnectionLost as e:
        raise retold(e, f"{command}: {describeConnectionLoss(e)}") from None
    except Exception as e:
        ours = _lostOrTLS(command, e)
        if ours is None:
            raise
        # The traceback this raise left on Twisted's error would keep this
        # frame, the error raised from it and every frame that error
        # passes through (a job's listing among their locals) alive as
        # long as the connection that holds it, or, for Twisted's shared
        # endings (see imapmig.imap.connection._ownReason), for good.
        e.__traceback__ = None
        raise ours from None


def _refusal(command: str, error: IMAP4Exception) -> CommandFailed:
    """
    The L{CommandFailed} of Twisted's C{error} answering C{command}: its
    status (C{NO} unless our client saw C{BAD}), response code and text.
    """
    text = error.args[0] if error.args else ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = str(text)
    status = error.status if isinstance(error, CommandRefused) else "NO"
    return CommandFailed(command, status, parseResponseCode(text), text)


def _lostOrTLS(command: str, error: Exception) -> ImapmigError | None:
    """
    A failed TLS handshake (L{TLSFailed}) or a lost connection
    (L{ConnectionLost}) as Twisted raised it while C{command} waited, or
    L{None} for any other error.
    """
    tls = _describeTLSError(error)
    if tls is not None:
        return TLSFailed(f"TLS handshake failed: {tls}")
    if isinstance(error, (ConnectionDone, ConnectError)) or type(error).__module__.startswith(
        "twisted.internet"
    ):
        return ConnectionLost(f"{command}: connection lost: {describeConnectionLoss(error)}")
    return None


def _describeTLSError(error: BaseException) -> str | None:
    """
    L{imapmig.imap.tls.describeTLSError}, without importing OpenSSL where it
    is not loaded (L{imapmig.access.cleartext}): no error is a TLS error there.
    """
    if not openSSLLoaded():
        return None
    from imapmig.imap.tls import describeTLSError

    return describeTLSError(error)


E = TypeVar("E", bound=ImapmigError)


def retold(error: E, text: str) -> E:
    """
    C{error}, same class and attributes, with C{text} as its message.
    """
    # Not copy.copy: these errors' constructors take more than a message.
    retold = type(error).__new__(type(error))
    retold.__dict__.update(error.__dict__)
    retold.args = (text,)
    return retold
