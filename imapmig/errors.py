# -*- test-case-name: tests.test_errors -*-
"""
One hierarchy of errors, split into what may succeed if tried again later
(L{TransientError}) and what will not (L{PermanentError}).  IMAP replies are
mapped to it once, at the session edge (L{imapmig.imap.session}).
"""

from __future__ import annotations

from typing import Sequence


class ImapmigError(Exception):
    """
    The base of every error imapmig raises on purpose.
    """


class ConfigError(ImapmigError):
    """
    The configuration is invalid.

    @ivar problems: one line per problem, each naming the file and the
        path of the offending key, e.g.
        C{"jobs[1].destination.server: no server named 'nwe'"}.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


class TransientError(ImapmigError):
    """
    May succeed later: a dropped connection, a timeout, a server that says
    C{[UNAVAILABLE]} or C{[INUSE]}.
    """


class ConnectionLost(TransientError):
    """
    The connection to the server closed while commands were outstanding.
    """


class PermanentError(ImapmigError):
    """
    Will not succeed by retrying as is.
    """


class AuthenticationFailed(PermanentError):
    """
    The server refused the credentials.
    """


class TLSRequired(PermanentError):
    """
    C{starttls: required} but the server does not offer STARTTLS.
    """


class TLSFailed(PermanentError):
    """
    The TLS handshake failed: the certificate is not trusted, or does not
    carry the expected host name.
    """


class CommandFailed(ImapmigError):
    """
    The server answered a command with C{NO} or C{BAD}.

    @ivar status: C{"NO"} or C{"BAD"}.
    @ivar code: the response code's atom, upper-cased (C{"TRYCREATE"},
        C{"OVERQUOTA"}), or L{None}.
    @ivar text: the server's text, verbatim, for the record.
    """

    def __init__(self, command: str, status: str, code: str | None, text: str) -> None:
        self.command = command
        self.status = status
        self.code = code
        self.text = text
        super().__init__(f"{command}: {status} {text}")


class SourceError(PermanentError):
    """
    The source cannot be read at all (the Maildir vanished, a permission
    problem on the folder); a single unreadable message is not an error but
    an outcome recorded for that message.
    """


class ServerBusy(TransientError):
    """
    The server asks to wait and try again: a C{NO}/C{BAD} or C{BYE} with
    C{[UNAVAILABLE]}, C{[INUSE]}, C{[SERVERBUG]}, C{[CORRUPTION]}, a
    throttling notice (Microsoft 365's C{Request is throttled. Suggested
    Backoff Time: N milliseconds}), "try again later", too many
    connections.  Nothing is wrong with the messages: they stay unsent
    (or, after a C{BYE}, of unknown outcome, as after any lost
    connection).

    @ivar text: the server's text after the status, a short escaped
        excerpt, for the record.
    @ivar code: the response code's atom, upper-cased, or L{None}.
    @ivar retryAfter: seconds the server asked to wait, or L{None}: wait as
        the retry policy says.
    """

    def __init__(
        self, message: str, text: str, code: str | None = None, retryAfter: float | None = None
    ) -> None:
        super().__init__(message)
        self.text = text
        self.code = code
        self.retryAfter = retryAfter


class QuotaExceeded(TransientError):
    """
    The account is over a quota or limit that only time or an
    administrator lifts: C{[OVERQUOTA]}, C{[CONTACTADMIN]}, Gmail's
    C{Account exceeded command or bandwidth limits}.  Retrying soon is
    pointless: the job pauses (until a configured time) and says why.
    Nothing is wrong with the messages.

    Catch it before L{TransientError}: it is one, so that code unaware of
    pausing still treats it as "not now".

    @ivar text: the server's text after the status, a short escaped
        excerpt, for the record.
    @ivar code: the response code's atom, upper-cased, or L{None}.
    """

    def __init__(self, message: str, text: str, code: str | None = None) -> None:
        super().__init__(message)
        self.text = text
        self.code = code


class MailboxMissing(TransientError):
    """
    The destination mailbox an APPEND went to does not exist
    (C{[TRYCREATE]}, C{[NONEXISTENT]}): someone deleted it during the
    run.  Every message for it would be refused, so none is: they stay
    unsent, and the job creates the mailbox again before it resumes.

    @ivar mailbox: the mailbox's name, decoded.
    @ivar text: the server's text after the status, a short escaped
        excerpt.
    @ivar code: the response code's atom, upper-cased, or L{None}.
    """

    def __init__(self, message: str, mailbox: str, text: str, code: str | None = None) -> None:
        super().__init__(message)
        self.mailbox = mailbox
        self.text = text
        self.code = code
