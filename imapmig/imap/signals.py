# -*- test-case-name: tests.test_imap_signals -*-
"""
What a server's refusal or goodbye means for the job: a pure classifier of
C{NO}, C{BAD} and C{BYE} reply texts into a L{ServerSignal}, and the error
each signal raises.

A server says "not now" in many ways, few of them standard.  The response
codes of RFC 5530 (and RFC 3501, 4469, 7889) come first; where a server
sends none, a few well-known wordings are recognised in the first octets
of the text (Microsoft 365's throttling notice, Gmail's bandwidth limit,
"try again later").  What each signal asks of the job:

  - L{SignalAction.RETRY}: wait and try again (L{ServerBusy}), as long as
    the server says where it says (L{ServerSignal.retryAfter}), else as
    long as the retry policy says: C{[UNAVAILABLE]}, C{[INUSE]},
    C{[SERVERBUG]}, C{[CORRUPTION]}, Gmail's C{[THROTTLED]}, throttling
    notices, too many connections.
  - L{SignalAction.PAUSE}: stop the job until a configured time and show
    why (L{QuotaExceeded}): C{[OVERQUOTA]}, C{[CONTACTADMIN]}, Gmail's
    bandwidth limit, "over quota".
  - L{SignalAction.RECREATE_MAILBOX}: the destination mailbox vanished
    (L{MailboxMissing}): C{[TRYCREATE]}, C{[NONEXISTENT]}.
  - L{SignalAction.RECONNECT}: the session is over, connect again
    (L{ConnectionLost}): every C{BYE} that says nothing more specific, and
    a mid-session C{[EXPIRED]}, C{[AUTHENTICATIONFAILED]},
    C{[AUTHORIZATIONFAILED]} or C{[PRIVACYREQUIRED]} (logging in again
    either works or fails the job once, as any failed login does).
  - L{SignalAction.REFUSE}: the command failed for what it carried: the
    message alone is refused and recorded with the server's text, the job
    goes on: C{[LIMIT]}, C{[TOOBIG]}, C{[CANNOT]}, C{[NOPERM]},
    C{[EXPUNGEISSUED]}, and any reply nothing above matches (as before
    this module existed).

Deliberate choices: C{[SERVERBUG]} and C{[CORRUPTION]} (RFC 5530 does not
call them temporary) are retried when storing: a server that fails to
store usually fails for itself (a failed write, a read-only file system,
an index being rebuilt), and refusing would record every message of the
run as failed in seconds; retries are bounded by the job, which records a
message that keeps failing.  A source reading what it stores treats them
as about the messages asked for (L{imapmig.sources.imap}): a corrupt mail
file fails the same way every time.  C{[LIMIT]} wins over a "try again
later" in the same text: the code is the machine-readable part.  A
C{BYE} never refuses a message: nothing in it says which one.

Nothing here does I/O or keeps state; reply texts are looked at only as
far as L{TEXT_LIMIT} octets.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Callable

from attrs import frozen

from imapmig.errors import (
    ConnectionLost,
    MailboxMissing,
    QuotaExceeded,
    ServerBusy,
    TransientError,
)

__all__ = [
    "MAX_RETRY_AFTER",
    "TEXT_LIMIT",
    "ServerSignal",
    "SignalAction",
    "classifyBye",
    "classifyRefusal",
    "excerpt",
]

TEXT_LIMIT = 200
"""
How many octets of a reply text are looked at and kept for the record.
"""

MAX_RETRY_AFTER = 24 * 3600.0
"""
The longest wait, in seconds, taken from a server's text: a larger value
is taken as this.
"""


class SignalAction(Enum):
    """
    What a server's reply asks of the job.
    """

    RETRY = "retry"
    """Wait, then send the same again (L{ServerBusy})."""

    PAUSE = "pause"
    """Stop until a configured time (L{QuotaExceeded})."""

    RECREATE_MAILBOX = "recreate mailbox"
    """Create the destination mailbox again, then resume (L{MailboxMissing})."""

    RECONNECT = "reconnect"
    """The session is over: connect again (L{ConnectionLost})."""

    REFUSE = "refuse"
    """This command's message alone failed; record it and go on."""


_CODE_ACTIONS = {
    # RFC 5530 section 3.
    "UNAVAILABLE": SignalAction.RETRY,
    "INUSE": SignalAction.RETRY,
    "SERVERBUG": SignalAction.RETRY,
    "CORRUPTION": SignalAction.RETRY,
    "OVERQUOTA": SignalAction.PAUSE,
    "CONTACTADMIN": SignalAction.PAUSE,
    "NONEXISTENT": SignalAction.RECREATE_MAILBOX,
    "AUTHENTICATIONFAILED": SignalAction.RECONNECT,
    "AUTHORIZATIONFAILED": SignalAction.RECONNECT,
    "EXPIRED": SignalAction.RECONNECT,
    "PRIVACYREQUIRED": SignalAction.RECONNECT,
    "LIMIT": SignalAction.REFUSE,
    "CANNOT": SignalAction.REFUSE,
    "NOPERM": SignalAction.REFUSE,
    "ALREADYEXISTS": SignalAction.REFUSE,
    "CLIENTBUG": SignalAction.REFUSE,
    # Messages asked for were expunged meanwhile: about those messages.
    "EXPUNGEISSUED": SignalAction.REFUSE,
    # RFC 3501 7.1: APPEND to a mailbox that does not exist.
    "TRYCREATE": SignalAction.RECREATE_MAILBOX,
    # RFC 4469 (CATENATE) and RFC 7889 (APPENDLIMIT): the message is too
    # large for this server.
    "TOOBIG": SignalAction.REFUSE,
    # Gmail, on replies while it slows a client down.
    "THROTTLED": SignalAction.RETRY,
}

# Lower-case wordings, looked for in the first TEXT_LIMIT octets when the
# reply carries no code of the table above.
_PAUSE_WORDINGS = (
    # Gmail, past its daily IMAP bandwidth (2,500 MB down, 500 MB up):
    # "[ALERT] Account exceeded command or bandwidth limits. (Failure)".
    "exceeded command or bandwidth limits",
    "bandwidth limit",
    # Cyrus ("Over quota") and Courier ("You exceeded your mail quota.")
    # without a response code; Dovecot's default "Quota exceeded".
    "over quota",
    "quota exceeded",
    "exceeded your mail quota",
)
_RETRY_WORDINGS = (
    # Microsoft 365: "Request is throttled. Suggested Backoff Time: 299609
    # milliseconds" (as NO on APPEND, BAD on other commands).
    "throttl",
    "backoff time",
    # Exchange 2013-2019: "NO Server Unavailable. 15".
    "server unavailable",
    "temporarily unavailable",
    "temporary failure",
    "try again later",
    "try later",
    # Gmail: "[ALERT] Too many simultaneous connections. (Failure)";
    # Dovecot: "Maximum number of connections from user+IP exceeded".
    "too many simultaneous connections",
    "too many connections",
    "maximum number of connections",
)
_BACKOFF = re.compile(r"suggested backoff time:\s*(\d{1,15})\s*milli", re.IGNORECASE)


@frozen
class ServerSignal:
    """
    What one C{NO}, C{BAD} or C{BYE} reply means.

    @ivar action: what the job should do.
    @ivar status: C{"NO"}, C{"BAD"} or C{"BYE"}.
    @ivar code: the response code's atom, upper-cased, or L{None}.
    @ivar text: the reply's text after the status, as a short escaped
        excerpt (L{excerpt}).
    @ivar retryAfter: for L{SignalAction.RETRY}, the seconds the server
        asked to wait, or L{None}.
    """

    action: SignalAction
    status: str
    code: str | None
    text: str
    retryAfter: float | None = None

    @property
    def reply(self) -> str:
        """
        The reply as the record shows it: C{"NO [OVERQUOTA] Quota exceeded"}.
        """
        return f"{self.status} {self.text}" if self.text else self.status

    def error(self, context: str, mailbox: str | None = None) -> TransientError | None:
        """
        The error to fail with, or L{None} for L{SignalAction.REFUSE}
        (which fails the message, not the connection).

        @param context: what was going on, to start the message with: the
            command (C{"APPEND"}), the server's description.
        @param mailbox: the mailbox concerned, for L{MailboxMissing}.
        """
        make = _ERRORS.get(self.action)
        return None if make is None else make(self, context, mailbox)

    def _busy(self, context: str, mailbox: str | None) -> TransientError:
        wait = "" if self.retryAfter is None else f" {self.retryAfter:g} s"
        return ServerBusy(
            f"{context}: the server asks to wait{wait}: {self.reply}",
            self.text,
            self.code,
            self.retryAfter,
        )

    def _overLimit(self, context: str, mailbox: str | None) -> TransientError:
        return QuotaExceeded(
            f"{context}: the account is over a server limit: {self.reply}",
            self.text,
            self.code,
        )

    def _missing(self, context: str, mailbox: str | None) -> TransientError:
        name = mailbox if mailbox is not None else "?"
        return MailboxMissing(
            f"{context}: the mailbox {name!r} does not exist: {self.reply}",
            name,
            self.text,
            self.code,
        )

    def _ended(self, context: str, mailbox: str | None) -> TransientError:
        ended = "connection" if self.status == "BYE" else "session"
        return ConnectionLost(f"{context}: the server ended the {ended}: {self.reply}")


_ERRORS: dict[SignalAction, Callable[[ServerSignal, str, str | None], TransientError]] = {
    SignalAction.RETRY: ServerSignal._busy,
    SignalAction.PAUSE: ServerSignal._overLimit,
    SignalAction.RECREATE_MAILBOX: ServerSignal._missing,
    SignalAction.RECONNECT: ServerSignal._ended,
}
"""
The error each action fails with (L{SignalAction.REFUSE} fails the
message, not the connection: none).
"""


def excerpt(text: bytes | str, limit: int = TEXT_LIMIT) -> str:
    """
    A short, printable excerpt of peer text for logs and records: its first
    C{limit} octets (or characters) decoded as UTF-8, control and other
    unprintable characters escaped (C{\\x00}), C{" ..."} appended if cut.
    """
    cut = len(text) > limit
    head = text[:limit]
    decoded = head.decode("utf-8", "replace") if isinstance(head, bytes) else head
    if not decoded.isprintable():
        decoded = "".join(_printable(c) for c in decoded)
    return decoded + " ..." if cut else decoded


def _printable(c: str) -> str:
    """
    C{c}, or its escape (C{\\x00}, C{\\u200b}) if it is not printable.
    """
    if c.isprintable():
        return c
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def _code(text: str) -> str | None:
    """
    The response code atom at the start of C{text}, upper-cased.
    """
    if not text.startswith("["):
        return None
    end = text.find("]")
    if end < 0:
        return None
    atom = text[1:end].split(" ", 1)[0].upper()
    return atom or None


def _retryAfter(text: str) -> float | None:
    """
    The wait a throttling notice asks for, in seconds (at most
    L{MAX_RETRY_AFTER}), or L{None}.
    """
    match = _BACKOFF.search(text)
    if match is None:
        return None
    return min(int(match.group(1)) / 1000.0, MAX_RETRY_AFTER)


def _wordingAction(lowered: str, bye: bool) -> SignalAction:
    """
    The action a reply without a known response code asks for, by its
    wording (C{lowered}, its text in lower case).
    """
    if any(wording in lowered for wording in _PAUSE_WORDINGS):
        return SignalAction.PAUSE
    if any(wording in lowered for wording in _RETRY_WORDINGS):
        return SignalAction.RETRY
    return SignalAction.RECONNECT if bye else SignalAction.REFUSE


def _classify(status: str, text: bytes | str, bye: bool) -> ServerSignal:
    shown = excerpt(text)
    code = _code(shown)
    action = _CODE_ACTIONS.get(code) if code is not None else None
    if action is None:
        action = _wordingAction(shown.lower(), bye)
    elif bye and action in (SignalAction.REFUSE, SignalAction.RECREATE_MAILBOX):
        # A BYE ends the connection whatever it says, and says nothing of
        # which message (Dovecot: "* BYE [TOOBIG] ..." for a LITERAL-
        # literal over 4096 octets).
        action = SignalAction.RECONNECT
    retryAfter = _retryAfter(shown) if action is SignalAction.RETRY else None
    return ServerSignal(action, status, code, shown, retryAfter)


def classifyRefusal(status: bytes | str, text: bytes | str) -> ServerSignal:
    """
    Classify a tagged C{NO} or C{BAD} reply.

    @param status: C{NO} or C{BAD} (any case).
    @param text: what follows the status: C{b"[OVERQUOTA] Quota
        exceeded"}.
    """
    if isinstance(status, bytes):
        status = status.decode("ascii", "replace")
    return _classify(status.upper(), text, bye=False)


def classifyBye(text: bytes | str) -> ServerSignal:
    """
    Classify an untagged C{BYE}: why the server ends the connection.  Its
    action is never L{SignalAction.REFUSE} or
    L{SignalAction.RECREATE_MAILBOX} (a C{BYE} does not say which message
    or mailbox): L{SignalAction.RETRY}, L{SignalAction.PAUSE}, or
    L{SignalAction.RECONNECT} for a plain goodbye (C{"Server shutting
    down."}).

    @param text: what follows C{BYE }: C{b"[OVERQUOTA] Account exceeded
        command or bandwidth limits."}.
    """
    return _classify("BYE", text, bye=True)
