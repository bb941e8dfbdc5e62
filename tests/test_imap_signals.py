"""
Tests for L{imapmig.imap.signals}: what each server reply means, on the
wordings real servers send (each test names where its wording comes from),
and the error each signal raises.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import (
    ConnectionLost,
    MailboxMissing,
    QuotaExceeded,
    ServerBusy,
    TransientError,
)
from imapmig.imap.signals import (
    MAX_RETRY_AFTER,
    ServerSignal,
    SignalAction,
    classifyBye,
    classifyRefusal,
    excerpt,
)

RETRY = SignalAction.RETRY
PAUSE = SignalAction.PAUSE
RECREATE = SignalAction.RECREATE_MAILBOX
RECONNECT = SignalAction.RECONNECT
REFUSE = SignalAction.REFUSE


class RefusalTests(SynchronousTestCase):
    """
    L{classifyRefusal} on tagged C{NO} and C{BAD} replies.
    """

    def assertAction(
        self, action: SignalAction, text: bytes, status: bytes = b"NO"
    ) -> ServerSignal:
        signal = classifyRefusal(status, text)
        self.assertIs(signal.action, action, text)
        return signal

    def test_rfc5530Examples(self) -> None:
        """
        The examples of RFC 5530 section 3, each with the action chosen for
        its code: wait for UNAVAILABLE, INUSE, SERVERBUG, CORRUPTION;
        pause for OVERQUOTA and CONTACTADMIN; the mailbox for NONEXISTENT;
        a new session for EXPIRED and the other login codes; the message
        alone for LIMIT, CANNOT, NOPERM, EXPUNGEISSUED.
        """
        expected = [
            (RETRY, b"[UNAVAILABLE] User's backend down for maintenance"),
            (RETRY, b"[INUSE] Mailbox in use"),
            (RETRY, b"[SERVERBUG] This should not happen"),
            (RETRY, b"[CORRUPTION] Cannot open mailbox"),
            (PAUSE, b"[OVERQUOTA] Sorry"),
            (PAUSE, b"[CONTACTADMIN]"),
            (RECREATE, b"[NONEXISTENT] No such mailbox"),
            (RECONNECT, b"[EXPIRED] That password isn't valid any more"),
            (RECONNECT, b"[AUTHENTICATIONFAILED] Authentication failed"),
            (RECONNECT, b"[AUTHORIZATIONFAILED] No such authorization-ID"),
            (RECONNECT, b"[PRIVACYREQUIRED] Connection offers no privacy"),
            (REFUSE, b"[LIMIT] At most 32 flags in one mailbox supported"),
            (REFUSE, b"[CANNOT] Adjacent slashes are not supported"),
            (REFUSE, b"[NOPERM] Access denied"),
            (REFUSE, b'[ALREADYEXISTS] Mailbox "that" already exists'),
            (REFUSE, b"[EXPUNGEISSUED] Some of the requested messages no longer exist"),
        ]
        for action, text in expected:
            self.assertAction(action, text)

    def test_codeParsed(self) -> None:
        """
        The response code is the first atom inside the brackets, in any
        case, with or without arguments.
        """
        self.assertEqual(classifyRefusal(b"NO", b"[inuse] busy").code, "INUSE")
        self.assertEqual(classifyRefusal(b"NO", b"[TOOBIG 1024] too big").code, "TOOBIG")
        self.assertIsNone(classifyRefusal(b"NO", b"no code here").code)
        self.assertIsNone(classifyRefusal(b"NO", b"[unterminated").code)
        self.assertEqual(classifyRefusal(b"bad", b"x").status, "BAD")

    def test_dovecot(self) -> None:
        """
        Dovecot's wordings: its default quota message (quota plugin,
        C{quota_exceeded_message}), an internal error, the per-user
        connection limit (login-common, C{ERR_TOO_MANY_USERIP_CONNECTIONS}),
        an APPEND to a missing mailbox, a mail over C{quota_max_mail_size}
        (quota.c) and an empty message (cmd-append.c).
        """
        self.assertAction(PAUSE, b"[OVERQUOTA] Quota exceeded (mailbox for user is full)")
        self.assertAction(
            RETRY,
            b"[SERVERBUG] Internal error occurred. Refer to server log for more "
            b"information. [2026-11-22 10:00:00]",
        )
        self.assertAction(
            RETRY,
            b"[UNAVAILABLE] Maximum number of connections from user+IP exceeded "
            b"(mail_max_userip_connections=10)",
        )
        self.assertAction(RECREATE, b"[TRYCREATE] Mailbox doesn't exist: Archive")
        self.assertAction(
            REFUSE,
            b"[LIMIT] Mail size is larger than the maximum size allowed by server configuration",
        )
        self.assertAction(REFUSE, b"Can't save a zero byte message.")

    def test_tooBig(self) -> None:
        """
        C{TOOBIG} (RFC 4469, and RFC 7889 for APPENDLIMIT) refuses the
        message, as NO or BAD; Dovecot's wording for CATENATE.
        """
        self.assertAction(REFUSE, b"[TOOBIG] Composed message grows too big.")
        self.assertAction(REFUSE, b"[TOOBIG] Message exceeds the APPENDLIMIT", b"BAD")

    def test_microsoftThrottling(self) -> None:
        """
        Microsoft 365's throttling notice, as a NO to APPEND (imapsync
        issue 198: "1069 NO Request is throttled. Suggested Backoff Time:
        299609 milliseconds") or a BAD (email-oauth2-proxy issue 191),
        asks to wait as long as it says, in seconds.
        """
        signal = self.assertAction(
            RETRY, b"Request is throttled. Suggested Backoff Time: 299609 milliseconds"
        )
        self.assertEqual(signal.retryAfter, 299.609)
        self.assertIsNone(signal.code)
        signal = self.assertAction(
            RETRY, b"Request is throttled. Suggested Backoff Time: 89117 milliseconds", b"BAD"
        )
        self.assertEqual(signal.retryAfter, 89.117)
        signal = self.assertAction(
            RETRY, b"Request is throttled. Suggested Backoff Time: 298713 milliseconds"
        )
        self.assertEqual(signal.retryAfter, 298.713)

    def test_absurdBackoff(self) -> None:
        """
        A wait beyond L{MAX_RETRY_AFTER} is taken as that.
        """
        signal = classifyRefusal(
            b"NO", b"Request is throttled. Suggested Backoff Time: 999999999999999 milliseconds"
        )
        self.assertEqual(signal.retryAfter, MAX_RETRY_AFTER)

    def test_exchangeUnavailable(self) -> None:
        """
        Exchange 2013's "NO Server Unavailable. 15" (imapfilter issue 146)
        asks to wait, with no wait of its own.
        """
        signal = self.assertAction(RETRY, b"Server Unavailable. 15")
        self.assertIsNone(signal.retryAfter)

    def test_gmail(self) -> None:
        """
        Gmail's bandwidth limit pauses, with the code (a NO to FETCH,
        ha-email-sensor issue 16) or only an ALERT (the same text at
        LOGIN, as imapsync reports it); its connection cap and its
        THROTTLED code ask to wait.
        """
        self.assertAction(PAUSE, b"[OVERQUOTA] Account exceeded command or bandwidth limits.")
        signal = self.assertAction(
            PAUSE, b"[ALERT] Account exceeded command or bandwidth limits. (Failure)"
        )
        self.assertEqual(signal.code, "ALERT")
        self.assertAction(RETRY, b"[ALERT] Too many simultaneous connections. (Failure)")
        self.assertAction(RETRY, b"[THROTTLED] Slow down")

    def test_cyrusQuota(self) -> None:
        """
        A quota refusal without a code (Cyrus's C{IMAP_QUOTA_EXCEEDED}
        text, "Over quota") pauses.
        """
        self.assertAction(PAUSE, b"Over quota")

    def test_codeWinsOverWording(self) -> None:
        """
        A code that says the message is at fault wins over a wording that
        suggests waiting: the code is the machine-readable part.
        """
        self.assertAction(REFUSE, b"[LIMIT] Too many keywords, try again later")
        self.assertAction(RETRY, b"[UNAVAILABLE] Over quota accounting offline")

    def test_otherwiseRefused(self) -> None:
        """
        Anything not recognised refuses the message, as before: a BAD for
        a malformed command, an unknown code, no text at all.
        """
        self.assertAction(REFUSE, b"Invalid arguments.", b"BAD")
        self.assertAction(REFUSE, b"[X-UNKNOWN-CODE] whatever")
        self.assertAction(REFUSE, b"")

    def test_wordingsOnlyNearTheStart(self) -> None:
        """
        Only the first octets are looked at: a wording past them does not
        count, however long the reply.
        """
        self.assertAction(REFUSE, b"x" * 10_000 + b" try again later")


class ByeTests(SynchronousTestCase):
    """
    L{classifyBye} on untagged C{BYE}s.
    """

    def test_gmailBandwidth(self) -> None:
        """
        Gmail's goodbye past its bandwidth limit (mbsync: "unexpected BYE
        response: [OVERQUOTA] Account exceeded command or bandwidth
        limits."), with or without the code, pauses.
        """
        signal = classifyBye(b"[OVERQUOTA] Account exceeded command or bandwidth limits.")
        self.assertIs(signal.action, PAUSE)
        self.assertEqual(signal.status, "BYE")
        signal = classifyBye(b"Account exceeded command or bandwidth limits.")
        self.assertIs(signal.action, PAUSE)

    def test_unavailable(self) -> None:
        """
        C{BYE [UNAVAILABLE]} (a server over its connection limit, or
        shutting down) asks to wait; so does Microsoft's throttling in a
        BYE, with its wait.
        """
        self.assertIs(classifyBye(b"[UNAVAILABLE] Server shutting down").action, RETRY)
        signal = classifyBye(b"Request is throttled. Suggested Backoff Time: 5000 milliseconds")
        self.assertIs(signal.action, RETRY)
        self.assertEqual(signal.retryAfter, 5.0)

    def test_plainGoodbye(self) -> None:
        """
        A goodbye without a reason (Dovecot shutting down, Exchange's
        "Connection closed. 14") means connect again.
        """
        self.assertIs(classifyBye(b"Server shutting down.").action, RECONNECT)
        self.assertIs(classifyBye(b"Connection closed. 14").action, RECONNECT)

    def test_neverRefuses(self) -> None:
        """
        A BYE says nothing of which message or mailbox: Dovecot's
        C{BYE [TOOBIG]} for a LITERAL- literal over 4096 octets
        (cmd-append.c) and a C{BYE [TRYCREATE]} mean connect again.
        """
        self.assertIs(classifyBye(b"[TOOBIG] Literal too large").action, RECONNECT)
        self.assertIs(classifyBye(b"[TRYCREATE] odd").action, RECONNECT)


class ErrorTests(SynchronousTestCase):
    """
    L{ServerSignal.error}: the typed error of each action.
    """

    def test_retry(self) -> None:
        """
        RETRY raises L{ServerBusy} with the server's text, code and wait.
        """
        signal = classifyRefusal(
            b"NO", b"Request is throttled. Suggested Backoff Time: 1500 milliseconds"
        )
        error = signal.error("APPEND")
        assert isinstance(error, ServerBusy)
        self.assertEqual(error.retryAfter, 1.5)
        self.assertIsNone(error.code)
        self.assertEqual(
            error.text, "Request is throttled. Suggested Backoff Time: 1500 milliseconds"
        )
        self.assertEqual(
            str(error),
            "APPEND: the server asks to wait 1.5 s: NO Request is throttled. "
            "Suggested Backoff Time: 1500 milliseconds",
        )

    def test_pause(self) -> None:
        """
        PAUSE raises L{QuotaExceeded}, a L{TransientError}.
        """
        error = classifyBye(b"[OVERQUOTA] Account exceeded command or bandwidth limits.").error(
            "imap.example.org"
        )
        assert isinstance(error, QuotaExceeded)
        self.assertIsInstance(error, TransientError)
        self.assertEqual(error.code, "OVERQUOTA")
        self.assertEqual(
            str(error),
            "imap.example.org: the account is over a server limit: BYE [OVERQUOTA] "
            "Account exceeded command or bandwidth limits.",
        )

    def test_recreate(self) -> None:
        """
        RECREATE_MAILBOX raises L{MailboxMissing} naming the mailbox.
        """
        error = classifyRefusal(b"NO", b"[TRYCREATE] Mailbox doesn't exist: A").error(
            "APPEND", "A"
        )
        assert isinstance(error, MailboxMissing)
        self.assertEqual(error.mailbox, "A")
        self.assertEqual(error.code, "TRYCREATE")

    def test_reconnect(self) -> None:
        """
        RECONNECT raises L{ConnectionLost} saying who ended what.
        """
        error = classifyBye(b"Server shutting down.").error("APPEND")
        self.assertIsInstance(error, ConnectionLost)
        self.assertEqual(
            str(error), "APPEND: the server ended the connection: BYE Server shutting down."
        )
        error = classifyRefusal(b"NO", b"[EXPIRED] gone").error("APPEND")
        self.assertEqual(str(error), "APPEND: the server ended the session: NO [EXPIRED] gone")

    def test_refuse(self) -> None:
        """
        REFUSE raises nothing: the message fails, not the connection.
        """
        self.assertIsNone(classifyRefusal(b"NO", b"[LIMIT] x").error("APPEND"))


class ExcerptTests(SynchronousTestCase):
    """
    L{excerpt}: peer text made short and printable.
    """

    def test_short(self) -> None:
        """
        Short printable text is kept as is, bytes or str.
        """
        self.assertEqual(excerpt(b"[INUSE] Mailbox in use"), "[INUSE] Mailbox in use")
        self.assertEqual(excerpt("caf\u00e9"), "caf\u00e9")
        self.assertEqual(excerpt("caf\u00e9".encode()), "caf\u00e9")

    def test_escaped(self) -> None:
        """
        Control characters are escaped; undecodable octets replaced.
        """
        self.assertEqual(excerpt(b"a\x00b\r\n\x1b[0m\xff"), "a\\x00b\\x0d\\x0a\\x1b[0m\ufffd")
        self.assertEqual(excerpt("\u2028"), "\\u2028")

    def test_cut(self) -> None:
        """
        Text longer than the limit is cut, and says so.
        """
        self.assertEqual(excerpt(b"abcdef", 3), "abc ...")
        self.assertEqual(len(excerpt(b"x" * 100_000)), 204)
