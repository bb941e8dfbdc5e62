# -*- test-case-name: tests.test_errors -*-
"""
One hierarchy of errors, split into what may succeed if tried again later
(L{TransientError}) and what will not (L{PermanentError}).  IMAP replies are
mapped to it once, at the session edge (L{imapmig.imap.session}).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from twisted.python.failure import Failure

    from imapmig.throttle import DailyBudget

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


class NoStateYet(ConfigError):
    """
    A PostgreSQL database given as C{state} holds no imapmig state yet
    (no daemon has run on it): a command that reads one refuses it
    (L{imapmig.daemon.pgstate}), C{imapmig plan} reads it as empty.
    """


class StateURIProblem(ImapmigError):
    """
    A PostgreSQL URI given as C{state} cannot be used
    (L{imapmig.config.statelocation}); the reader records it as a problem
    of C{state}.  Its message never holds the URI: it could hold a
    password.
    """


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


class DatabaseRefused(TransientError):
    """
    The database was reached and refused a statement for a reason that may
    pass (its disk full, a statement timeout, a conflict): its own reason
    is the message, not a connection lost (L{imapmig.state.outage}).
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


class StateSchemaTooNew(PermanentError):
    """
    The state database's schema is newer than this imapmig knows: another
    daemon of a later version migrated it.  The message names the database
    and both versions.

    @ivar found: the database's version.
    @ivar known: the newest this code knows.
    """

    def __init__(self, where: str, found: int, known: int) -> None:
        super().__init__(
            f"{where}: the state database has schema version {found}, newer"
            f" than this imapmig knows ({known}); upgrade imapmig"
        )
        self.found = found
        self.known = known


class StateCopyRefused(PermanentError):
    """
    C{imapmig state copy} will not start: an argument is wrong (a missing
    file, a URI with a password, a database it cannot reach, a source
    with nothing in it), a side is in use (a daemon holds the SQLite
    file's lock, or a live lease on the PostgreSQL database), or the
    target holds state of the jobs copied.  Nothing was written.  The
    message names the argument (C{--from}, C{--to}) and never a password.
    """


class StateCopyMismatch(PermanentError):
    """
    C{imapmig state copy} found, in its transaction of the target, counts
    of rows that differ from the source's: the transaction was rolled
    back, nothing was copied.

    @ivar source: the source's counts, per table and job (or account).
    @ivar target: the target's counts, likewise.
    """

    def __init__(
        self,
        message: str,
        source: Mapping[str, Mapping[tuple[str, ...], int]],
        target: Mapping[str, Mapping[tuple[str, ...], int]],
    ) -> None:
        super().__init__(message)
        self.source = source
        self.target = target


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


# The daemon and its status site.


class StatusListenerFailed(ImapmigError):
    """
    The status listener could not listen when the daemon started (the
    port in use, no permission): the start fails with it, after one
    critical log line naming the endpoint and the reason.  The process
    then exits with status 1, without a traceback: C{imapmig-daemon}
    catches it, and under C{twistd} L{imapmig.daemon.tap.quietStartFailures}
    keeps Python from printing one.  (An C{Exception}, not a
    C{SystemExit}: a daemonizing C{twistd} reports an C{Exception} to the
    parent waiting for the start, and removes its pid file.)  Made by
    L{imapmig.daemon.listener.listenerFailed}, which puts the reason
    first.

    @ivar reason: the endpoint's failure.
    """

    # What twistd's report names: a daemonizing twistd hands its parent
    # only the first 100 octets of "1 imapmig.daemon.StatusListenerFailed:
    # MESSAGE" (40 of them before the message); the class names the
    # package (which exports it), not this module, to keep them so.
    __module__ = "imapmig.daemon"

    def __init__(self, message: str, reason: Failure) -> None:
        super().__init__(message)
        self.reason = reason


class HTTPProblem(ImapmigError):
    """
    A request to the status site that cannot be answered as asked: the
    status code to answer with and why, in words for the client.

    @ivar code: the HTTP status code.
    @ivar message: the C{error} of the JSON body.
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message


class WebhookRefused(PermanentError):
    """
    The webhook's receiver answered with a status retrying will not
    change.
    """


class WebhookUnavailable(TransientError):
    """
    The webhook's receiver could not be reached, timed out, or answered
    with a status worth retrying.

    @ivar retryAfter: its C{Retry-After}, in seconds, if any.
    """

    def __init__(self, reason: str, retryAfter: float | None = None) -> None:
        super().__init__(reason)
        self.retryAfter = retryAfter


# -- imapmig.testing: the private servers of the tests and the demo ----------


class ServerNotFound(ImapmigError):
    """
    A server a test or the demo needs (Dovecot, Cyrus, Courier, a browser)
    is not installed where L{imapmig.testing} looks for it.
    """


class DovecotNotFound(ServerNotFound):
    """
    No C{dovecot} binary is installed on this machine.
    """


class PostgreSQLNotFound(ServerNotFound):
    """
    No PostgreSQL server (Debian's C{postgresql} package: C{initdb} and
    C{postgres}) is installed, or, as root, there is no C{postgres} user
    to run it as (L{imapmig.testing.postgresql}).
    """


class ServerStartFailed(ImapmigError):
    """
    A private server did not start; the message carries its log tail.
    """


class PostgreSQLStartFailed(ServerStartFailed):
    """
    A private PostgreSQL cluster did not start (or its template data
    directory could not be made); the message carries its log tail.
    """


class DovecotStartFailed(ServerStartFailed):
    """
    A private Dovecot did not start; the message carries its log tail.
    """


class Stopped(BaseException):
    """
    A stop signal arrived (raised by
    L{imapmig.testing.children.StopSignals}' handler in the demo and
    C{python -m imapmig.testing.dovecot}).  A L{BaseException}, like
    L{KeyboardInterrupt}, and outside L{ImapmigError} on purpose: it must
    unwind through every C{except Exception} (and C{except ImapmigError})
    between the signal and the program's C{finally} that stops the
    servers it started.

    @ivar signum: the signal's number.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exitStatus(self) -> int:
        """
        The exit status of a program that stops because of this signal:
        128 + its number, as the shell reports a program it killed.
        """
        return 128 + self.signum


# sources/ (local files): Maildir, mbox, .eml


class LeavesTree(ImapmigError):
    """
    A symbolic link below a source's root leads out of it: it is not
    followed.

    @ivar path: the path that was to be opened, relative to the root.
    @ivar target: where it leads, resolved.
    """

    def __init__(self, path: str, target: str) -> None:
        super().__init__(path, target)
        self.path = path
        self.target = target


# --- config, access, oauth (issue 29, config area): the errors of reading
# the configuration file, password files and systemd credentials, and of
# obtaining OAuth tokens, moved here from imapmig.configfile,
# imapmig.access.secrets (with credentials), imapmig.oauth.httpclient,
# imapmig.oauth.tokenrefresh and imapmig.oauth.tokens.  (IdentityRefused
# stays in imapmig.access.tlsidentity: it is an OpenSSL SSL.Error, and this
# module must not import OpenSSL.)


class DocumentRefused(ImapmigError):
    """
    The configuration document is refused while it is composed (past a
    bound of L{imapmig.configfile}): C{message}, at C{mark}.
    """

    def __init__(self, message: str, mark: Any) -> None:
        super().__init__(message)
        self.message = message
        self.mark = mark


class PasswordFileError(PermanentError, ValueError):
    """
    A password file cannot be used.  The message names the file and says
    why; it never contains any of the file's content.
    """


class CredentialError(PasswordFileError):
    """
    A credential cannot be used.  The message says why and what to do; it
    never contains any of the credential's content.
    """


class BodyTooLarge(ImapmigError):
    """
    A response body was longer than the bound it is read with.
    """


class TokenRefreshRefused(AuthenticationFailed):
    """
    The token endpoint refused the refresh (C{invalid_grant}: the refresh
    token was revoked or expired; C{invalid_client}; ...), or answered in
    a way that retrying will not change.  Permanent.
    """


class TokenEndpointUnavailable(TransientError):
    """
    The token endpoint could not be reached or answered, timed out, or
    answered with a server error (5xx) or C{429}.  Retried with the job.
    """


class TokenUnavailable(AuthenticationFailed):
    """
    No access token could be obtained: the file cannot be used, or the
    command failed.  Permanent, as a refused login is.
    """


class TokenCommandTimedOut(TransientError):
    """
    The token command did not finish within its timeout (it was killed).
    Transient: such a command usually waits on its identity provider,
    which may answer on the job's next attempt.
    """


# -- the job queue, its controls, grants and daily budgets (i29-layers) ------
# Raised by the queue (imapmig.queue), the admin's controls
# (imapmig.schedule.controls), the grants (imapmig.schedule.grants) and the
# daily budgets (imapmig.throttle); here so that job/, which catches them,
# imports nothing of the scheduler above it.


class UnknownJob(ImapmigError):
    """
    No job has this name.

    @ivar name: the name asked for.
    """

    def __init__(self, name: str) -> None:
        Exception.__init__(self, f"no job named {name!r}")
        self.name = name


class ControlRefused(ImapmigError):
    """
    The control does not apply to the job as it is (resume a job that is
    not paused, retry-failed with nothing failed, cancel a job that has
    ended).

    @ivar reason: why, in words, for the admin.
    """

    def __init__(self, reason: str) -> None:
        Exception.__init__(self, reason)
        self.reason = reason


class LeaseLost(ImapmigError):
    """
    A claim's lease expired and another owner took the job over.
    """


class QueueUnavailable(TransientError):
    """
    The shared job queue's database could not be reached (its connection
    lost and not opened again, a statement timed out): the call may be
    tried again.  The message names the database without its password.
    """


class QueueSchemaTooNew(ImapmigError):
    """
    The PostgreSQL job queue's tables have a schema version newer than
    this imapmig knows (L{imapmig.queue._pgschema}); the message names
    both.
    """


class FleetMismatch(PermanentError):
    """
    The queue's database holds another fleet, or this fleet with another
    job list than this configuration's (L{imapmig.queue._pgjoblist}): the
    daemon is refused at start (exit 2).  The message names the database
    without its password, both fleets or both lists' digests and the
    first job that differs, and how to change the list on purpose.
    """


class JobListStale(ImapmigError):
    """
    This daemon's job list is no longer the fleet's: another daemon's
    reload (or C{imapmig state load-jobs}) replaced it since.  A change of
    one job is refused (reload this daemon with the fleet's file); a claim
    takes nothing (L{imapmig.queue._pgjoblist}).
    """


class GrantImpossible(PermanentError):
    """
    A demand exceeds a pool's limit: it could never be granted (a job
    whose source and destination are the same account, under a
    C{per_account.max_connections} of 1).
    """


class ConnectionNotGranted(TransientError):
    """
    An extra connection is not granted now (all its pools' units are
    taken), and the caller asked not to wait.
    """


class DailyLimitReached(QuotaExceeded):
    """
    A daily budget of an account is used up: the job pauses until
    L{resumeAt}, the next UTC midnight.

    @ivar resumeAt: the POSIX time when the budget is renewed.
    @ivar budget: the budget used up.
    """

    def __init__(
        self, message: str, resumeAt: float, budget: DailyBudget | None = None
    ) -> None:
        QuotaExceeded.__init__(self, message, "")
        self.resumeAt = resumeAt
        self.budget = budget


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
