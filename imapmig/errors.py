# -*- test-case-name: tests.test_errors -*-
"""
One hierarchy of errors, split into what may succeed if tried again later
(L{TransientError}) and what will not (L{PermanentError}).  IMAP replies are
mapped to it once, at the session edge (L{imapmig.imap.session}).
"""

from __future__ import annotations

from typing import Sequence

# Where twisted.mail.imap4 takes it from: 2 ms to import, against imap4's 13
# (every process imports this module, the CLI's included).
from twisted.mail._except import IMAP4Exception


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

    def shown(self) -> list[str]:
        """
        The problems to show: the first L{SHOWN_PROBLEMS}, then one line
        counting the others.  A file of 400,000 unknown keys (within the
        reader's bounds) wrote 400,000 lines, 113 MB, to the daemon's log
        on a reload, and held its reactor for 8 s doing so.
        """
        shown = list(self.problems[:SHOWN_PROBLEMS])
        more = len(self.problems) - len(shown)
        if more:
            shown.append(
                f"... and {more} more problems, not shown: fix the first {SHOWN_PROBLEMS} first"
            )
        return shown


SHOWN_PROBLEMS = 100
"""
The most problems of one configuration shown, by C{--check-config}, at
start and on a reload; the count of the rest follows.
"""


class TransientError(ImapmigError):
    """
    May succeed later: a dropped connection, a timeout, a server that says
    C{[UNAVAILABLE]} or C{[INUSE]}.
    """


class ConnectionLost(TransientError):
    """
    The connection to the server closed while commands were outstanding.
    """


class ConnectFailed(TransientError):
    """
    No connection could be made to the server: refused, timed out, host
    not found.  Transient (a server down for minutes is normal), but on a
    job's first connection more often a wrong endpoint.

    @ivar why: what went wrong, in a few words (C{"connection refused"}).
    @ivar setting: the configuration key holding the endpoint
        (C{"servers.NAME.endpoint"}), or L{None} when not known.
    """

    def __init__(self, message: str, why: str, setting: str | None = None) -> None:
        super().__init__(message)
        self.why = why
        self.setting = setting


class PermanentError(ImapmigError):
    """
    Will not succeed by retrying as is.
    """


class AuthenticationFailed(PermanentError):
    """
    The server refused the credentials.
    """


class CredentialsRefused(AuthenticationFailed):
    """
    The server answered C{NO} to the login itself (as opposed to offering
    no mechanism that could carry the credentials): for a token, the cue
    to obtain another one.
    """


class TLSRequired(PermanentError):
    """
    C{starttls: required} but the server does not offer STARTTLS.
    """


class TLSFailed(PermanentError):
    """
    The server's TLS is unusable as configured: its certificate is not
    trusted or does not carry the expected host name, it refused the
    handshake with a TLS alert, or it ended the handshake with a
    C{close_notify}.  Permanent, so the job fails at once (no retry
    storm): the server answered, at the TLS layer, and will answer the
    same until someone changes its configuration or imapmig's.
    """


class NotTLS(TLSFailed):
    """
    TLS was expected (an implicit-TLS port, or the handshake after
    STARTTLS) but what the server sent is not a TLS record: it speaks
    plain IMAP (or something else) on that port.  Permanent: a
    configuration mistake, which retrying does not fix.

    @ivar excerpt: the start of what the server sent, escaped (see
        L{escapedExcerpt}).
    """

    def __init__(self, message: str, excerpt: str) -> None:
        super().__init__(message)
        self.excerpt = excerpt


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


def escapedExcerpt(data: bytes, limit: int = 80) -> str:
    """
    At most C{limit} octets of peer data, fit for a log line or an error
    text: printable ASCII as is, a backslash doubled, everything else
    escaped (C{\\r}, C{\\n}, C{\\t}, C{\\xNN}), and C{...} when it was
    cut.

    @param data: octets a peer sent; only the first C{limit} are looked at.
    """
    head = data[:limit]
    text = head.decode("latin-1")
    if not (head.isascii() and text.isprintable() and "\\" not in text):
        text = "".join(_ESCAPES[octet] for octet in head)
    if len(data) > limit:
        text += "..."
    return text


_ESCAPES = tuple(
    "\\\\"
    if octet == 0x5C
    else {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}.get(octet)
    or (chr(octet) if 0x20 <= octet < 0x7F else f"\\x{octet:02x}")
    for octet in range(256)
)


class ConnectionDropped(ConnectionLost):
    """
    imapmig itself ended the connection (with C{abortConnection}) because
    the server broke the protocol or stopped answering; every command
    outstanding on it fails with this error.

    @ivar reason: why, for the record: C{"no reply to APPEND within
        120 s"}.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class ReplyTimeout(ConnectionDropped):
    """
    Something owed by the server (its greeting, the reply to a command,
    reading what imapmig sent, closing after LOGOUT) did not come within
    the server's C{timeout}, counting from the last real progress.

    @ivar awaited: what was owed: C{"the greeting"}, C{"APPEND"}.
    @ivar seconds: the timeout.
    """

    def __init__(self, reason: str, awaited: str, seconds: float) -> None:
        self.awaited = awaited
        self.seconds = seconds
        super().__init__(reason)


class ProtocolError(ConnectionDropped):
    """
    The server sent something the IMAP protocol does not allow at that
    point (an unparseable line, a reply with a tag imapmig never sent, a
    continuation request nobody asked for, a line or literal beyond
    imapmig's limits, an untagged flood): nothing after it can be trusted.

    @ivar what: what was wrong, in words: C{"a reply with an unknown
        tag"}.
    @ivar excerpt: the start of what the server sent, escaped (see
        L{escapedExcerpt}), or C{""}.
    """

    def __init__(self, what: str, data: bytes = b"") -> None:
        self.what = what
        self.excerpt = escapedExcerpt(data)
        super().__init__(f"{what}: {self.excerpt}" if data else what)


class TLSInterrupted(ConnectionLost):
    """
    The connection ended during the TLS handshake without any answer from
    the server's TLS layer: reset, or closed with no TLS alert.  Transient,
    like any lost connection: a server restarting or a middlebox dropping
    connections looks like this, and the job's bounded retries (with
    backoff) decide; a server whose TLS never answers fails the job once
    they are spent.

    @ivar closed: C{True} if the server closed the connection (FIN),
        C{False} if it was reset.
    """

    def __init__(self, message: str, closed: bool) -> None:
        super().__init__(message)
        self.closed = closed


class ServerBye(ConnectionLost):
    """
    The server said C{BYE} (outside LOGOUT) and closed the connection:
    shutting down, too many connections, a bandwidth or session limit.

    @ivar text: what it said after C{BYE}, escaped and cut to a few
        hundred characters.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__(f"the server said BYE: {text}")


# imap/ (the wire: imapmig.imap.client, commands, fetch).  One more error of
# the wire, imapmig.imap.tls.HandshakeClosed (a TLSFailed that is also
# OpenSSL's SSL.Error), stays beside the OpenSSL connection that raises it:
# this module must not import OpenSSL, which a configuration without TLS
# never loads (imapmig.access.cleartext).


class CommandRefused(ImapmigError, IMAP4Exception):
    """
    The tagged C{NO} or C{BAD} reply to a command, as the IMAP client
    (L{imapmig.imap.client}) reports it; the session maps it to what it
    means (L{CommandFailed}, L{imapmig.imap.signals}).

    @ivar status: C{"NO"} or C{"BAD"}.
    @ivar text: the reply's text after the status, response code included.
    """

    def __init__(self, status: str, text: bytes) -> None:
        IMAP4Exception.__init__(self, text)
        self.status = status
        self.text = text


class FetchParseError(ImapmigError, ValueError):
    """
    The server sent a FETCH response the parser
    (L{imapmig.imap.fetch.FetchResponseParser}) cannot read, or one beyond
    its L{imapmig.imap.fetch.FetchLimits}.
    """


class FetchSpoolError(FetchParseError):
    """
    A literal could not be written to its temporary file (a full disk, a
    spool directory that is missing or not writable).  Not the server's
    fault, but the response cannot be read either: the client treats it as
    any L{FetchParseError} and drops the connection.
    """
