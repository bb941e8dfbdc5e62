# -*- test-case-name: tests.test_testing_fakeserver -*-
# mypy: disallow-untyped-calls=False
# (LineReceiver's sendLine, setRawMode and setLineMode are unannotated.)
"""
An in-memory IMAP4rev1 server, to exercise imapmig's client side
deterministically through L{twisted.test.iosim} or a
L{twisted.internet.testing.StringTransport}: no socket, no reactor.

It implements only what a migration uses (CAPABILITY, LOGIN, AUTHENTICATE
PLAIN with an initial response, LIST, LSUB, NAMESPACE, CREATE, SUBSCRIBE, SELECT,
EXAMINE, UID FETCH of metadata and bodies, APPEND
with MULTIAPPEND, NOOP, LOGOUT), and that part as the RFCs say:
synchronizing literals wait for C{+}, non-synchronizing ones (RFC 7888) are
read even when the command is rejected, LITERAL- refuses them above 4096
octets, a MULTIAPPEND is atomic (RFC 3502), and APPEND answers with
C{APPENDUID} (RFC 4315) where UIDPLUS is advertised.  It is a fake:
correctness over completeness.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Callable, Sequence

from twisted.protocols.basic import LineReceiver

from imapmig.testing.fakestore import FakeMailStore, StoredMessage, gmailMessageId
from imapmig.testing.imapsyntax import (
    Appended,
    Kind,
    Token,
    appendedMessages,
    bodyItems,
    decodeName,
    quote,
    tokenize,
    uidsIn,
)

DEFAULT_CAPABILITIES = ("IMAP4rev1", "LITERAL+", "MULTIAPPEND", "UIDPLUS", "SASL-IR", "AUTH=PLAIN")
LITERAL_MINUS_LIMIT = 4096
_LITERAL = re.compile(rb"\{(\d+)(\+?)\}$")


_UID_FETCH = re.compile(rb"([^ ]+) UID FETCH ([0-9:*,]+) \((.*)\)", re.IGNORECASE)


class FakeIMAPServer(LineReceiver):
    """
    One server connection over a L{FakeMailStore}.

    @ivar received: every line received outside literals (command lines and
        the continuation lines that follow literals), in order.
    """

    def __init__(
        self,
        store: FakeMailStore,
        capabilities: Sequence[str] = DEFAULT_CAPABILITIES,
        refuse: Callable[[bytes], str | None] = lambda body: None,
        dropAfterAppends: int | None = None,
    ) -> None:
        """
        @param capabilities: what CAPABILITY and the greeting advertise, and
            what the server accepts (C{LITERAL+}, C{LITERAL-},
            C{MULTIAPPEND}).
        @param refuse: called with each APPENDed body; a reply such as
            C{"NO [LIMIT] too big"} refuses that message, and the whole
            APPEND command it is part of.
        @param dropAfterAppends: after answering that many APPEND commands,
            the next one closes the connection unanswered and unstored.
        """
        self.store = store
        self.capabilities = tuple(capabilities)
        self.refuse = refuse
        self.dropAfterAppends = dropAfterAppends
        self.received: list[bytes] = []
        self.user: str | None = None
        self.selected: str | None = None
        self._appends = 0
        self._tokens: list[Token] = []
        self._error: bytes | None = None
        self._literal: list[bytes] = []
        self._literalLeft = 0
        self._closed = False
        self._closeAfterReply = False
        self._caps = {c.upper() for c in self.capabilities}
        self._literalPlus = "LITERAL+" in self._caps
        self._literalMinus = "LITERAL-" in self._caps

    def connectionMade(self) -> None:
        self.sendLine(b"* OK [CAPABILITY %s] Fake IMAP server ready." % self._capabilityText())

    def _capabilityText(self) -> bytes:
        return " ".join(self.capabilities).encode("ascii")

    def _close(self) -> None:
        self._closed = True
        self.transport.loseConnection()  # type: ignore[union-attr]

    # Reading commands and literals.

    def dataReceived(self, data: bytes) -> None:
        if not self._closed:
            LineReceiver.dataReceived(self, data)

    def lineReceived(self, line: bytes) -> None:
        if self._closed:
            return
        self.received.append(line)
        if not self._tokens:
            fetch = _UID_FETCH.fullmatch(line)
            if fetch is not None:
                self._uidFetch(fetch.group(1), fetch.group(2), fetch.group(3))
                return
        marker = _LITERAL.search(line)
        try:
            self._tokens.extend(tokenize(line[: marker.start()] if marker else line))
        except ValueError as e:
            self._fail(b"BAD " + str(e).encode("ascii"))
        if marker is None:
            self._executeCommand()
            return
        self._startLiteral(int(marker.group(1)), marker.group(2) == b"+")

    def _fail(self, error: bytes | None) -> None:
        """
        Remember the first error of the command being read: it is the
        reply once the command is complete.
        """
        self._error = self._error or error

    def _literalError(self, size: int, nonSync: bool) -> bytes | None:
        """
        Why a literal of C{size} octets cannot be read, or L{None}.
        """
        if not nonSync:
            return None
        if not (self._literalPlus or self._literalMinus):
            return b"BAD Non-synchronizing literal without LITERAL+"
        if not self._literalPlus and size > LITERAL_MINUS_LIMIT:
            return b"BAD [TOOBIG] Non-synchronizing literal over 4096 octets"
        return None

    def _startLiteral(self, size: int, nonSync: bool) -> None:
        """
        Read a literal of C{size} octets; a synchronizing one is asked for
        with C{+}, or, when the command is refused already, not at all
        (the client sends no literal if the command is answered now).
        """
        self._fail(self._literalError(size, nonSync))
        if not nonSync:
            if self._error is not None:
                self._executeCommand()
                return
            self.sendLine(b"+ Ready for literal data")
        self._literal, self._literalLeft = [], size
        self.setRawMode()
        if size == 0:
            self.rawDataReceived(b"")

    def _executeCommand(self) -> None:
        """
        Execute the command read so far, and start reading the next.
        """
        tokens, error, self._tokens, self._error = self._tokens, self._error, [], None
        self._execute(tokens, error)

    def rawDataReceived(self, data: bytes) -> None:
        if self._closed:
            return
        left = self._literalLeft
        self._literal.append(data[:left])
        self._literalLeft = max(0, left - len(data))
        if self._literalLeft == 0:
            self._tokens.append(Token(Kind.LITERAL, b"".join(self._literal)))
            self._literal = []
            self.setLineMode(data[left:])

    # Executing commands.

    def _execute(self, tokens: list[Token], error: bytes | None) -> None:
        tag = _tag(tokens)
        error = error or self._commandError(tokens)
        if error is not None:
            self.sendLine(tag + b" " + error)
            return
        handler: Callable[[list[Token]], bytes | None] = getattr(
            self, _COMMANDS[_commandName(tokens)]
        )
        reply = handler(tokens[2:])
        if reply is not None:
            self.sendLine(tag + b" " + reply)
        if self._closeAfterReply:
            self._close()

    def _commandError(self, tokens: list[Token]) -> bytes | None:
        """
        Why the command of C{tokens} cannot run here, or L{None}.
        """
        if len(tokens) < 2 or tokens[1].kind is not Kind.ATOM:
            return b"BAD Missing command"
        name = _commandName(tokens)
        if name in _AFTER_LOGIN and self.user is None:
            return b"BAD Command not allowed before login"
        if name not in _COMMANDS:
            return b"BAD Unknown command"
        return None

    def _capability(self, args: list[Token]) -> bytes:
        self.sendLine(b"* CAPABILITY " + self._capabilityText())
        return b"OK Capability completed."

    def _noop(self, args: list[Token]) -> bytes:
        return b"OK NOOP completed."

    def _logout(self, args: list[Token]) -> bytes:
        self.sendLine(b"* BYE Logging out")
        self._closeAfterReply = True
        return b"OK Logout completed."

    def _loggedIn(self, user: str, password: str) -> bytes:
        if not self.store.authenticate(user, password):
            return b"NO [AUTHENTICATIONFAILED] Authentication failed."
        self.user = user
        return b"OK Logged in."

    def _login(self, args: list[Token]) -> bytes:
        if len(args) != 2 or args[0].kind is Kind.LIST or args[1].kind is Kind.LIST:
            return b"BAD LOGIN expects a user name and a password"
        if self.user is not None:
            return b"BAD Already logged in"
        return self._loggedIn(
            args[0].value.decode("utf-8", "replace"), args[1].value.decode("utf-8", "replace")
        )

    def _authenticate(self, args: list[Token]) -> bytes:
        if len(args) != 2 or args[0].value.upper() != b"PLAIN" or "SASL-IR" not in self._caps:
            return b"BAD Only AUTHENTICATE PLAIN with an initial response is supported"
        if self.user is not None:
            return b"BAD Already logged in"
        decoded = _base64(args[1].value)
        if decoded is None:
            return b"BAD Invalid base64"
        credentials = _plainCredentials(decoded)
        if credentials is None:
            return b"NO [AUTHENTICATIONFAILED] Authentication failed."
        return self._loggedIn(*credentials)

    def _list(self, args: list[Token]) -> bytes:
        if len(args) != 2 or args[0].value != b"":
            return b"BAD LIST supports an empty reference only"
        delimiter = self.store.delimiter
        quoted = quote(delimiter.encode("ascii"))
        pattern = decodeName(args[1].value)
        if pattern is None:
            return b"BAD Invalid mailbox pattern"
        if pattern == "":
            self.sendLine(b"* LIST (\\Noselect) " + quoted + b' ""')
            return b"OK List completed."
        regex = _patternRegex(pattern, delimiter)
        assert self.user is not None
        names = self.store.mailboxes(self.user)
        for name in names:
            if re.fullmatch(regex, name):
                self.sendLine(
                    b"* LIST (%s) %s %s"
                    % (self._listAttributes(name, names), quoted, quote(name.encode("imap4-utf-7")))
                )
        return b"OK List completed."

    def _listAttributes(self, name: str, names: list[str]) -> bytes:
        """
        The attributes LIST shows for mailbox C{name} among C{names}:
        whether it has children, and its SPECIAL-USE attribute if any.
        """
        children = any(other.startswith(name + self.store.delimiter) for other in names)
        attribute = b"\\HasChildren" if children else b"\\HasNoChildren"
        use = self.store.specialUse.get(name)
        return attribute if use is None else attribute + b" " + use.encode("ascii")

    def _namespace(self, args: list[Token]) -> bytes:
        if "NAMESPACE" not in self._caps:
            return b"BAD Unknown command"
        if self.store.namespaceRefusal is not None:
            return self.store.namespaceRefusal
        text = self.store.namespaceText
        if text is None:
            text = b"((%s %s)) NIL NIL" % (
                quote(self.store.prefix.encode("imap4-utf-7")),
                quote(self.store.delimiter.encode("ascii")),
            )
        self.sendLine(b"* NAMESPACE " + text)
        return b"OK Namespace completed."

    def _mailboxArgument(self, args: list[Token]) -> str | None:
        if len(args) != 1 or args[0].kind is Kind.LIST:
            return None
        return decodeName(args[0].value)

    def _create(self, args: list[Token]) -> bytes:
        name = self._mailboxArgument(args)
        if name is None:
            return b"BAD CREATE expects a mailbox name"
        assert self.user is not None
        if self.store.outsidePrefix(name):
            return b"NO Invalid mailbox name."
        refusal = self.store.refuseCreate(name)
        if refusal is not None:
            return refusal
        if not self.store.create(self.user, name):
            return b"NO [ALREADYEXISTS] Mailbox already exists"
        return b"OK Create completed."

    def _subscribe(self, args: list[Token]) -> bytes:
        name = self._mailboxArgument(args)
        if name is None:
            return b"BAD SUBSCRIBE expects a mailbox name"
        assert self.user is not None
        self.store.subscribe(self.user, name)
        return b"OK Subscribe completed."

    def _select(self, args: list[Token], readOnly: bool = False) -> bytes:
        command, permanentFlags, completed = _OPENING[readOnly]
        name = self._mailboxArgument(args)
        if name is None:
            return command + b" expects a mailbox name"
        assert self.user is not None
        self.selected = None
        if name not in self.store.mailboxes(self.user):
            return b"NO [NONEXISTENT] Mailbox doesn't exist"
        self._sendMailboxState(self.user, name)
        self.sendLine(permanentFlags)
        self.selected = name
        return completed

    def _sendMailboxState(self, user: str, name: str) -> None:
        """
        The untagged replies of SELECT and EXAMINE before PERMANENTFLAGS:
        FLAGS, EXISTS, RECENT, UIDVALIDITY and (Gmail-like) UIDNEXT.
        """
        self.sendLine(b"* FLAGS (%s)" % (_FLAGS,))
        self.sendLine(b"* %d EXISTS" % (len(self.store.mailbox(user, name)),))
        self.sendLine(b"* 0 RECENT")
        self.sendLine(b"* OK [UIDVALIDITY %d] UIDs valid" % (self.store.uidValidity(user, name),))
        if self.store.announceUIDNext:
            uidNext = self.store.uidNext(user, name)
            self.sendLine(b"* OK [UIDNEXT %d] Predicted next UID" % (uidNext,))

    def _examine(self, args: list[Token]) -> bytes:
        return self._select(args, readOnly=True)

    def _lsub(self, args: list[Token]) -> bytes:
        if [arg.value for arg in args] != [b"", b"*"]:
            return b"BAD LSUB supports LSUB \"\" \"*\" only"
        assert self.user is not None
        quoted = quote(self.store.delimiter.encode("ascii"))
        for name in self.store.subscriptions(self.user):
            self.sendLine(b"* LSUB () %s %s" % (quoted, quote(name.encode("imap4-utf-7"))))
        return b"OK Lsub completed."

    def _uidFetch(self, tag: bytes, uidSet: bytes, items: bytes) -> None:
        """
        C{UID FETCH} of the items a migration asks for (UID, FLAGS,
        INTERNALDATE, RFC822.SIZE, BODY.PEEK[], BODY.PEEK[]<0.N>,
        BODY.PEEK[HEADER.FIELDS (NAME ...)], and X-GM-MSGID where
        X-GM-EXT-1 is advertised) in the selected mailbox.
        """
        refusal = self._fetchRefusal(items)
        if refusal is not None:
            self.sendLine(tag + b" " + refusal)
            return
        assert self.user is not None
        assert self.selected is not None
        messages = self.store.mailbox(self.user, self.selected)
        wanted = uidsIn(uidSet, messages[-1].uid if messages else 0)
        upper = items.upper()
        write = self.transport.write  # type: ignore[union-attr]
        for sequence, message in enumerate(messages, 1):
            if message.uid in wanted:
                fetched = b" ".join(self._fetchItems(message, upper))
                write(b"* %d FETCH (%s)\r\n" % (sequence, fetched))
        self.sendLine(tag + b" OK Fetch completed.")

    def _fetchRefusal(self, items: bytes) -> bytes | None:
        """
        Why a UID FETCH of C{items} is refused here, or L{None}.
        """
        if self.user is None or self.selected is None:
            return b"BAD No mailbox selected"
        return self.store.refuseFetch(self.user, items)

    def _fetchItems(self, message: StoredMessage, upper: bytes) -> list[bytes]:
        """
        The items of one message's FETCH response, in a fixed order: UID,
        then those of L{_FETCH_ITEMS} asked for in C{upper}, then header
        fields and the body.
        """
        gmail = "X-GM-EXT-1" in self._caps
        return [
            b"UID %d" % message.uid,
            *(
                render(self, message)
                for item, isGmail, render in _FETCH_ITEMS
                if item in upper and (gmail or not isGmail)
            ),
            *bodyItems(message.body, upper),
        ]

    def _sizeItem(self, message: StoredMessage) -> bytes:
        return b"RFC822.SIZE %d" % len(message.body)

    def _flagsItem(self, message: StoredMessage) -> bytes:
        return b"FLAGS (%s)" % " ".join(message.flags).encode("ascii")

    def _gmailIdItem(self, message: StoredMessage) -> bytes:
        return b"X-GM-MSGID %d" % gmailMessageId(message.body)

    def _gmailLabelsItem(self, message: StoredMessage) -> bytes:
        assert self.user is not None
        return b"X-GM-LABELS (%s)" % b" ".join(self.store.gmailLabels(self.user, message.body))

    def _internalDateItem(self, message: StoredMessage) -> bytes:
        date = message.internalDate or "01-Jan-2020 00:00:00 +0000"
        return b'INTERNALDATE "%s"' % date.encode("ascii")

    def _append(self, args: list[Token]) -> bytes | None:
        if self.dropAfterAppends is not None and self._appends >= self.dropAfterAppends:
            self._close()
            return None
        self._appends += 1
        name = self._mailboxArgument(args[:1])
        if name is None:
            return b"BAD APPEND expects a mailbox name"
        messages = appendedMessages(args[1:])
        if isinstance(messages, bytes):
            return messages
        return self._appendRefusal(name, messages) or self._appendStored(name, messages)

    def _appendRefusal(self, name: str, messages: list[Appended]) -> bytes | None:
        """
        Why the APPEND of C{messages} to C{name} is refused, or L{None}.
        """
        if len(messages) > 1 and "MULTIAPPEND" not in self._caps:
            return b"BAD MULTIAPPEND is not supported"
        assert self.user is not None
        if name not in self.store.mailboxes(self.user):
            return b"NO [TRYCREATE] Mailbox doesn't exist"
        # RFC 3502: one refused message refuses the whole command.
        refusals = (self.refuse(body) for body, _, _ in messages)
        refusal = next((r for r in refusals if r is not None), None)
        return None if refusal is None else refusal.encode("utf-8")

    def _appendStored(self, name: str, messages: list[Appended]) -> bytes:
        """
        Store C{messages} in C{name}; the tagged reply, with C{APPENDUID}
        where UIDPLUS is advertised.
        """
        assert self.user is not None
        uidValidity, uids = self.store.append(self.user, name, messages)
        if self.selected == name:
            self.sendLine(b"* %d EXISTS" % (len(self.store.mailbox(self.user, name)),))
        if "UIDPLUS" not in self._caps:
            return b"OK Append completed."
        uidSet = b"%d" % uids[0] if len(uids) == 1 else b"%d:%d" % (uids[0], uids[-1])
        return b"OK [APPENDUID %d %s] Append completed." % (uidValidity, uidSet)


_FLAGS = b"\\Answered \\Flagged \\Deleted \\Seen \\Draft"

_OPENING = {
    False: (
        b"SELECT",
        b"* OK [PERMANENTFLAGS (%s \\*)] Flags permitted." % (_FLAGS,),
        b"OK [READ-WRITE] Select completed.",
    ),
    True: (
        b"EXAMINE",
        b"* OK [PERMANENTFLAGS ()] Read-only mailbox.",
        b"OK [READ-ONLY] Examine completed.",
    ),
}
"""
What SELECT (C{False}) and EXAMINE (C{True}, read-only) say: the
command's name, the PERMANENTFLAGS reply and the tagged OK.
"""

_COMMANDS = {
    "CAPABILITY": "_capability",
    "NOOP": "_noop",
    "LOGOUT": "_logout",
    "LOGIN": "_login",
    "AUTHENTICATE": "_authenticate",
    "LIST": "_list",
    "NAMESPACE": "_namespace",
    "CREATE": "_create",
    "SUBSCRIBE": "_subscribe",
    "SELECT": "_select",
    "EXAMINE": "_examine",
    "LSUB": "_lsub",
    "APPEND": "_append",
}
"""
The commands the fake server knows, by name (upper case), and the methods
that execute them (looked up on the connection, so that a test's subclass
may override one).
"""

_AFTER_LOGIN = frozenset(
    {"LIST", "NAMESPACE", "CREATE", "SUBSCRIBE", "SELECT", "EXAMINE", "LSUB", "APPEND"}
)
"""
The commands of L{_COMMANDS} refused before login.
"""

_FETCH_ITEMS: tuple[tuple[bytes, bool, Callable[[FakeIMAPServer, StoredMessage], bytes]], ...] = (
    (b"RFC822.SIZE", False, FakeIMAPServer._sizeItem),
    (b"FLAGS", False, FakeIMAPServer._flagsItem),
    (b"X-GM-MSGID", True, FakeIMAPServer._gmailIdItem),
    (b"X-GM-LABELS", True, FakeIMAPServer._gmailLabelsItem),
    (b"INTERNALDATE", False, FakeIMAPServer._internalDateItem),
)
"""
The FETCH items answered from a message's metadata, in the order of the
response: the item's name, whether only X-GM-EXT-1 answers it, and its
rendering.
"""


def _patternRegex(pattern: str, delimiter: str) -> str:
    """
    The regular expression of a LIST pattern: C{*} matches anything, C{%}
    anything but the hierarchy C{delimiter}.
    """
    wildcards = {"*": ".*", "%": "[^" + re.escape(delimiter) + "]*"}
    return "".join(wildcards.get(c, re.escape(c)) for c in pattern)


def _plainCredentials(response: bytes) -> tuple[str, str] | None:
    """
    The user and password of a SASL PLAIN response, or L{None} when it is
    malformed or asks to act as another user.
    """
    parts = response.split(b"\0")
    if len(parts) != 3 or parts[0] not in (b"", parts[1]):
        return None
    return parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")


def _base64(value: bytes) -> bytes | None:
    """
    C{value} decoded from base64, or L{None} if it is not valid base64.
    """
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        return None


def _tag(tokens: list[Token]) -> bytes:
    """
    The tag of a command, C{*} when it has none.
    """
    return tokens[0].value if tokens and tokens[0].kind is Kind.ATOM else b"*"


def _commandName(tokens: list[Token]) -> str:
    return tokens[1].value.upper().decode("ascii", "replace")


