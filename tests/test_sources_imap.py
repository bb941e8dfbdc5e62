"""
Tests for L{imapmig.sources.imap}: an IMAP account as a message source.

The unit tests drive the real client and session against
L{ScriptedAccount}, a small fake of the read-only commands the source uses
(LIST, LSUB, EXAMINE, UID FETCH, LOGOUT) answering in Dovecot's formats,
through in-memory transports.  The integration tests read an account of a
private Dovecot loaded with L{imaplib}.
"""

from __future__ import annotations

import hashlib
import imaplib
import itertools
import os
import re
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Sequence, cast

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import ILogObserver, formatEvent, globalLogPublisher
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase
from zope.interface.verify import verifyObject

from imapmig.errors import (
    CommandFailed,
    ConnectionLost,
    QuotaExceeded,
    ServerBusy,
    SourceError,
    TransientError,
)
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.session import IMAPSession
from imapmig.mail.folders import PersonalNamespace
from imapmig.mail.message import (
    MessageBody,
    ReadBodies,
    SourceFolder,
    SourceMessage,
    StreamedBody,
    UnreadableMessage,
    toCRLF,
)
from imapmig.mail.octets import BARE_CR, BARE_LF, EIGHT_BIT, UNKNOWN
from imapmig.sources import IMessageSource, imapnuls
from imapmig.sources.imap import READ_AHEAD_CONNECTIONS, IMAPSource
from imapmig.sources.imapbodies import SPOOL_ABOVE
from imapmig.sources.imaplisting import FlagChange, sourceFlags
from imapmig.sources.imapreading import EXPUNGED, asCRLF
from imapmig.sources.imapstatus import FolderStatus, messageKey, parseMessageKey
from imapmig.sources.imapfolders import LEFT_OUT_SHOWN, folderPath

CET = timezone(timedelta(hours=1))
EST = timezone(-timedelta(hours=5))
UTC = timezone.utc

# What Dovecot advertises after login (the parts that matter here).
DOVECOT_CAPABILITIES = (
    b"IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE IDLE SORT SORT=DISPLAY THREAD=REFERENCES "
    b"MULTIAPPEND URL-PARTIAL CATENATE UNSELECT CHILDREN NAMESPACE UIDPLUS LIST-EXTENDED "
    b"I18NLEVEL=1 CONDSTORE QRESYNC ESEARCH ESORT SEARCHRES WITHIN CONTEXT=SEARCH "
    b"LIST-STATUS BINARY MOVE SNIPPET=FUZZY PREVIEW=FUZZY STATUS=SIZE SAVEDATE "
    b"LITERAL+ NOTIFY SPECIAL-USE"
)
PLAIN_CAPABILITIES = b"IMAP4rev1 LITERAL+ UIDPLUS"

# Anything that would change the source account.
_FORBIDDEN = (b"SELECT", b"STORE", b"UID STORE", b"EXPUNGE", b"UID EXPUNGE", b"COPY",
              b"UID COPY", b"MOVE", b"UID MOVE", b"APPEND", b"CREATE", b"DELETE", b"RENAME",
              b"SUBSCRIBE", b"UNSUBSCRIBE", b"CLOSE")  # fmt: skip


class FakeMessage:
    """
    A message of a L{FakeFolder}.
    """

    def __init__(
        self, uid: int, body: bytes, flags: tuple[str, ...], date: str, modSeq: int
    ) -> None:
        self.uid = uid
        self.body = body
        self.flags = flags
        self.date = date
        self.modSeq = modSeq


class FakeFolder:
    """
    A mailbox of a L{ScriptedAccount}.
    """

    def __init__(
        self,
        uidValidity: int,
        attributes: tuple[str, ...] = (),
        subscribed: bool = True,
    ) -> None:
        self.uidValidity = uidValidity
        self.attributes = attributes
        self.subscribed = subscribed
        self.messages: dict[int, FakeMessage] = {}
        self.uidNext = 1
        self.highestModSeq = 1

    def add(
        self,
        body: bytes,
        flags: tuple[str, ...] = (),
        date: str = "22-Nov-2026 10:00:00 +0100",
    ) -> int:
        """
        Deliver a message; return its UID.
        """
        uid = self.uidNext
        self.uidNext += 1
        self.highestModSeq += 1
        self.messages[uid] = FakeMessage(uid, body, flags, date, self.highestModSeq)
        return uid

    def setFlags(self, uid: int, flags: tuple[str, ...]) -> None:
        """
        Change a message's flags, as another client would.
        """
        self.highestModSeq += 1
        message = self.messages[uid]
        message.flags = flags
        message.modSeq = self.highestModSeq


DROP = b"<drop the connection>"

Interceptor = Callable[[bytes, bytes], "bytes | None"]


def _unquote(value: bytes) -> bytes:
    """
    The value of an IMAP quoted string (or an atom as is).
    """
    if value.startswith(b'"') and value.endswith(b'"'):
        return re.sub(rb"\\(.)", rb"\1", value[1:-1])
    return value


def _uidsIn(uidSet: bytes, uids: Sequence[int]) -> list[int]:
    """
    The UIDs among C{uids} that C{uidSet} names, C{*} being the highest
    (so that C{n:*} names the last message even when C{n} is beyond it).
    """
    highest = max(uids, default=0)
    chosen: set[int] = set()
    for part in uidSet.split(b","):
        low, _, high = part.partition(b":")
        a = highest if low == b"*" else int(low)
        b = a if not high else highest if high == b"*" else int(high)
        a, b = min(a, b), max(a, b)
        chosen.update(uid for uid in uids if a <= uid <= b)
    return sorted(chosen)


class _ConnectionState:
    """
    What one connection to a L{ScriptedAccount} has done: the folder it
    has open, whether it enabled CONDSTORE.
    """

    def __init__(self) -> None:
        self.examined: FakeFolder | None = None
        self.condstore = False


class ScriptedAccount:
    """
    One account of a fake server answering the read-only commands the
    source sends, in Dovecot's formats; it records every command, and
    answers commands that would change the account with C{BAD}, recording
    them as forbidden.

    @ivar interceptors: called in turn with each command's tag and text
        (without the tag); the first that returns octets answers instead
        of the fake (L{DROP} drops the connection).
    """

    def __init__(self, capabilities: bytes = DOVECOT_CAPABILITIES, delimiter: str = "/") -> None:
        self.capabilities = capabilities
        self.delimiter = delimiter
        self.folders: dict[str, FakeFolder] = {"INBOX": FakeFolder(1700000001)}
        self.commands: list[bytes] = []
        self.forbidden: list[bytes] = []
        self.interceptors: list[Interceptor] = []
        self._connections: dict[object, _ConnectionState] = {}
        self._connection = _ConnectionState()
        # What NAMESPACE answers: Dovecot's default, the empty prefix.
        self.namespaceText = b'(("" "' + delimiter.encode("ascii") + b'")) NIL NIL'

    def folder(self, name: str, **kwargs: Any) -> FakeFolder:
        """
        Create a folder named C{name} (decoded).
        """
        folder = self.folders[name] = FakeFolder(1700000000 + len(self.folders) + 1, **kwargs)
        return folder

    def handle(self, line: bytes, connection: object = None) -> bytes:
        """
        The server's reply to one command line.

        @param connection: identifies the connection it came on (which has
            its own folder open).
        """
        self._connection = self._connections.setdefault(connection, _ConnectionState())
        tag, _, command = line.partition(b" ")
        self.commands.append(command)
        for interceptor in self.interceptors:
            answer = interceptor(tag, command)
            if answer is not None:
                return answer
        words = command.split(b" ")
        verb = words[0].upper()
        if verb == b"UID":
            verb += b" " + words[1].upper()
        if verb in _FORBIDDEN:
            self.forbidden.append(command)
            return tag + b" BAD Forbidden in a read-only source\r\n"
        if verb == b"LIST" or verb == b"LSUB":
            return self._list(tag, verb, command)
        if verb == b"EXAMINE":
            return self._examine(tag, command)
        if verb == b"NAMESPACE":
            return b"* NAMESPACE " + self.namespaceText + b"\r\n" + tag + b" OK Namespace completed.\r\n"
        if verb == b"UID FETCH":
            return self._fetch(tag, command)
        if verb == b"LOGOUT":
            return b"* BYE Logging out\r\n" + tag + b" OK Logout completed.\r\n"
        return tag + b" BAD Unknown command\r\n"

    def _wireName(self, name: str) -> bytes:
        """
        A decoded mailbox name in modified UTF-7.
        """
        return name.encode("imap4-utf-7")

    def _list(self, tag: bytes, verb: bytes, command: bytes) -> bytes:
        """
        Answer LIST (plain, or with RETURN options) or LSUB.
        """
        extended = b"RETURN" in command
        lines = []
        for name, folder in self.folders.items():
            if verb == b"LSUB" and not folder.subscribed:
                continue
            attributes = list(folder.attributes)
            if extended and folder.subscribed:
                attributes.append("\\Subscribed")
            wire = self._wireName(name).replace(b"\\", b"\\\\").replace(b'"', b'\\"')
            quotedName = b'"' + wire + b'"'
            lines.append(
                b"* " + verb + b" (" + " ".join(attributes).encode("ascii") + b') "'
                + self.delimiter.encode("ascii") + b'" ' + quotedName + b"\r\n"
            )
        done = b" OK " + verb.capitalize() + b" completed (0.001 + 0.000 secs).\r\n"
        return b"".join(lines) + tag + done

    def _examine(self, tag: bytes, command: bytes) -> bytes:
        """
        Answer EXAMINE as Dovecot does, HIGHESTMODSEQ once CONDSTORE is on.
        """
        match = re.match(rb'EXAMINE ("(?:\\.|[^"\\])*"|\S+)( \(CONDSTORE\))?$', command)
        assert match is not None, command
        name = _unquote(match.group(1)).decode("imap4-utf-7")
        folder = self.folders.get("INBOX" if name.upper() == "INBOX" else name)
        state = self._connection
        state.examined = None
        if folder is None or "\\Noselect" in folder.attributes:
            return tag + b" NO Mailbox doesn't exist: " + name.encode("utf-8") + b"\r\n"
        if match.group(2):
            state.condstore = True
        state.examined = folder
        lines = [
            b"* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft $Forwarded)",
            b"* OK [PERMANENTFLAGS ()] Read-only mailbox.",
            b"* %d EXISTS" % len(folder.messages),
            b"* 0 RECENT",
            b"* OK [UIDVALIDITY %d] UIDs valid" % folder.uidValidity,
            b"* OK [UIDNEXT %d] Predicted next UID" % folder.uidNext,
        ]
        if state.condstore:
            lines.append(b"* OK [HIGHESTMODSEQ %d] Highest" % folder.highestModSeq)
        lines.append(tag + b" OK [READ-ONLY] Examine completed (0.001 + 0.000 secs).")
        return b"\r\n".join(lines) + b"\r\n"

    def _fetch(self, tag: bytes, command: bytes) -> bytes:
        """
        Answer UID FETCH of the items the source asks for, with MODSEQ once
        CONDSTORE is on, honouring CHANGEDSINCE.
        """
        folder = self._connection.examined
        condstore = self._connection.condstore
        if folder is None:
            return tag + b" BAD No mailbox selected\r\n"
        match = re.match(rb"UID FETCH (\S+) \(([^)]*)\)(?: \(CHANGEDSINCE (\d+)\))?$", command)
        assert match is not None, command
        uids = sorted(folder.messages)
        changedSince = int(match.group(3)) if match.group(3) else None
        items = match.group(2).upper().split()
        out = []
        for uid in _uidsIn(match.group(1), uids):
            message = folder.messages[uid]
            if changedSince is not None and message.modSeq <= changedSince:
                continue
            parts = []
            for item in items:
                if item == b"UID":
                    parts.append(b"UID %d" % uid)
                    if condstore:
                        parts.append(b"MODSEQ (%d)" % message.modSeq)
                elif item == b"FLAGS":
                    parts.append(b"FLAGS (" + " ".join(message.flags).encode("ascii") + b")")
                elif item == b"INTERNALDATE":
                    parts.append(b'INTERNALDATE "' + message.date.encode("ascii") + b'"')
                elif item == b"RFC822.SIZE":
                    parts.append(b"RFC822.SIZE %d" % len(message.body))
                elif item == b"BODY.PEEK[]":
                    # A literal cannot carry NUL: Dovecot sends 0x80.
                    sent = message.body.replace(b"\0", b"\x80")
                    parts.append(b"BODY[] {%d}\r\n" % len(sent) + sent)
                elif item == b"BINARY.PEEK[]":
                    # Dovecot decodes the Content-Transfer-Encoding (here,
                    # the header only) and sends NUL in a literal8.
                    sent = message.body.replace(
                        b"Content-Transfer-Encoding: 8bit", b"Content-Transfer-Encoding: binary"
                    )
                    parts.append(b"BINARY[] ~{%d}\r\n" % len(sent) + sent)
                else:
                    raise AssertionError(f"unexpected item {item!r}")
            out.append(b"* %d FETCH (" % (uids.index(uid) + 1) + b" ".join(parts) + b")\r\n")
        return b"".join(out) + tag + b" OK Fetch completed (0.001 + 0.000 secs).\r\n"


class Harness:
    """
    Opens sessions to a L{ScriptedAccount} over in-memory transports and
    carries commands and replies between them.

    @ivar opened: every session opened, in order.
    """

    def __init__(self, account: ScriptedAccount, readSize: int = 1 << 20) -> None:
        self.account = account
        self.readSize = readSize
        self.opened: list[tuple[IMAPSession, StringTransport]] = []

    async def open(self) -> IMAPSession:
        """
        A new logged-in session (the opener the source is given).
        """
        client = MigrationIMAP4Client(Clock())
        transport = StringTransport()
        client.makeConnection(transport)
        client.dataReceived(b"* OK [CAPABILITY IMAP4rev1] Dovecot ready.\r\n")
        session = IMAPSession(client, "source")
        session.capabilities = frozenset(self.account.capabilities.upper().split())
        self.opened.append((session, transport))
        return session

    def pending(self) -> bytes:
        """
        What the newest session wrote and the fake has not read yet.
        """
        written: bytes = self.opened[-1][1].value()
        return written

    def pump(self) -> None:
        """
        Answer every command written, and those written in response, until
        nothing is left.
        """
        progress = True
        while progress:
            progress = False
            for session, transport in self.opened:
                data = transport.value()
                if not data or session.client.closed.called:
                    continue
                transport.clear()
                progress = True
                for line in data.split(b"\r\n")[:-1]:
                    reply = self.account.handle(line, session)
                    if reply == DROP:
                        session.client.connectionLost(Failure(ConnectionDone()))
                        break
                    for i in range(0, len(reply), self.readSize):
                        session.client.dataReceived(reply[i : i + self.readSize])


def body(n: int, size: int = 200) -> bytes:
    """
    A CRLF message of C{size} octets or more, numbered C{n}.
    """
    head = b"Message-ID: <%d@example.org>\r\nSubject: message %d (x) {3}\r\n\r\n" % (n, n)
    return head + b"line of text\r\n" * max(1, (size - len(head)) // 14)


class SourceTestCase(SynchronousTestCase):
    """
    Sets up a L{ScriptedAccount}, a L{Harness} and an L{IMAPSource}, and
    checks after each test that the source sent nothing that changes the
    account.
    """

    capabilities = DOVECOT_CAPABILITIES
    delimiter = "/"

    def setUp(self) -> None:
        """
        A fresh account with an empty INBOX, and a source reading it.
        """
        self.account = ScriptedAccount(self.capabilities, self.delimiter)
        self.harness = Harness(self.account)
        self.source = IMAPSource(self.harness.open, "alice at source")
        self.addCleanup(lambda: self.assertEqual(self.account.forbidden, []))

    def run_(self, d: Deferred[Any]) -> Any:
        """
        Pump the exchange and return C{d}'s result.
        """
        self.harness.pump()
        return self.successResultOf(d)

    def fails(self, d: Deferred[Any], *errors: type[BaseException]) -> BaseException:
        """
        Pump the exchange and return C{d}'s failure.
        """
        self.harness.pump()
        error: BaseException = self.failureResultOf(d, *errors).value
        return error

    def folderNamed(self, key: str) -> SourceFolder:
        """
        List the folders and return the one keyed C{key}.
        """
        folders: list[SourceFolder] = self.run_(self.source.listFolders())
        [folder] = [f for f in folders if f.key == key]
        return folder

    def commandsSince(self, start: int) -> list[bytes]:
        """
        The commands the account received from the C{start}th on.
        """
        return self.account.commands[start:]


class FolderTests(SourceTestCase):
    """
    L{IMAPSource.listFolders}.
    """

    def test_provides(self) -> None:
        """
        L{IMAPSource} provides L{IMessageSource}.
        """
        self.assertTrue(verifyObject(IMessageSource, self.source))

    def test_listFolders(self) -> None:
        """
        Every selectable folder, INBOX first then by path: paths split at
        the delimiter (INBOX's children under C{"INBOX"}), keys the decoded
        names, special use and subscription from one extended LIST; a
        C{\\Noselect} parent is left out but not its child, a
        C{\\NonExistent} one too.
        """
        account = self.account
        account.folder("Sent", attributes=("\\HasNoChildren", "\\Sent"))
        account.folder("INBOX/Lists", subscribed=False)
        account.folder("Entwürfe", attributes=("\\HasNoChildren", "\\Drafts"), subscribed=False)
        account.folder("Archive", attributes=("\\Noselect", "\\HasChildren"))
        account.folder("Archive/2019", attributes=("\\HasNoChildren",))
        account.folder("Old", attributes=("\\NonExistent",))
        folders = self.run_(self.source.listFolders())
        self.assertEqual(
            folders,
            [
                SourceFolder(("INBOX",), "INBOX", None, True),
                SourceFolder(("INBOX", "Lists"), "INBOX/Lists", None, False),
                SourceFolder(("Archive", "2019"), "Archive/2019", None, True),
                SourceFolder(("Entwürfe",), "Entwürfe", "\\Drafts", False),
                SourceFolder(("Sent",), "Sent", "\\Sent", True),
            ],
        )
        self.assertEqual(
            account.commands, [b"NAMESPACE", b'LIST "" "*" RETURN (SUBSCRIBED SPECIAL-USE)']
        )
        self.assertEqual(len(self.harness.opened), 1)

    def test_refused(self) -> None:
        """
        A refused LIST fails with L{SourceError}.
        """
        self.account.interceptors.append(lambda tag, command: tag + b" NO [SERVERBUG] oops\r\n")
        error = self.fails(self.source.listFolders(), SourceError)
        self.assertIn("SERVERBUG", str(error))


class NamespaceFolderTests(SourceTestCase):
    """
    L{IMAPSource.listFolders} strips the personal namespace's prefix and
    leaves other namespaces out unless an include rule names them.
    """

    delimiter = "."

    def test_courierPrefix(self) -> None:
        """
        On a server whose prefix is C{INBOX.} (Courier), C{INBOX.Sent} is
        the path C{("Sent",)}, C{INBOX} stays C{("INBOX",)}; keys stay the
        names as listed.
        """
        self.account.namespaceText = b'(("INBOX." ".")) NIL NIL'
        self.account.folder("INBOX.Sent")
        self.account.folder("INBOX.Archive.2019")
        folders = self.run_(self.source.listFolders())
        self.assertEqual(
            [(f.path, f.key) for f in folders],
            [
                (("INBOX",), "INBOX"),
                (("Archive", "2019"), "INBOX.Archive.2019"),
                (("Sent",), "INBOX.Sent"),
            ],
        )

    def test_sharedLeftOut(self) -> None:
        """
        Mailboxes in other users' and shared namespaces, and outside the
        personal prefix, are left out, with one log line per namespace
        saying how many.
        """
        self.account.namespaceText = (
            b'(("INBOX." ".")) (("#users." ".")) (("#shared." "."))'
        )
        self.account.folder("INBOX.Sent")
        self.account.folder("#users.bob.INBOX")
        self.account.folder("#shared.team")
        self.account.folder("#shared.team.x")
        self.account.folder("Stray")
        events: list[dict[str, Any]] = []
        observer = cast(ILogObserver, events.append)
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        folders = self.run_(self.source.listFolders())
        self.assertEqual([f.path for f in folders], [("INBOX",), ("Sent",)])
        leftOut = [e for e in events if "left out" in e.get("log_format", "")]
        lines = sorted(formatEvent(e) for e in leftOut)
        self.assertEqual(
            lines,
            [
                "alice at source: 1 mailbox in the other users' namespace left out,"
                " among them ['#users.bob.INBOX']; a folder rule (include) naming them"
                " copies them",
                "alice at source: 1 mailbox outside the personal namespace left"
                " out, among them ['Stray']; a folder rule (include) naming them copies them",
                "alice at source: 2 mailboxes in the shared namespace left out, among"
                " them ['#shared.team', '#shared.team.x']; a folder rule (include) naming"
                " them copies them",
            ],
        )
        # Structured: the names as a list, not pre-formatted text.
        shared = [e for e in leftOut if e["where"] == "in the shared namespace"]
        self.assertEqual(shared[0]["names"], ["#shared.team", "#shared.team.x"])

    def test_manyLeftOut(self) -> None:
        """
        Of many mailboxes left out, the log event holds their count and
        the first L{LEFT_OUT_SHOWN} names only.
        """
        self.account.namespaceText = b'(("" ".")) NIL (("#shared." "."))'
        for n in range(LEFT_OUT_SHOWN + 3):
            self.account.folder(f"#shared.f{n:02}")
        events: list[dict[str, Any]] = []
        observer = cast(ILogObserver, events.append)
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        self.run_(self.source.listFolders())
        [event] = [e for e in events if "left out" in e.get("log_format", "")]
        self.assertEqual(event["count"], LEFT_OUT_SHOWN + 3)
        self.assertEqual(event["names"], [f"#shared.f{n:02}" for n in range(LEFT_OUT_SHOWN)])

    def test_includeNamesShared(self) -> None:
        """
        An include rule naming a shared mailbox explicitly (no wildcard in
        its first level) lists it, with its whole name as its path; C{*}
        alone does not.
        """
        self.account.namespaceText = b'(("" ".")) NIL (("#shared." "."))'
        self.account.folder("Sent")
        self.account.folder("#shared.team")
        self.source = IMAPSource(
            self.harness.open, "alice at source", include=("*", "#shared/*")
        )
        folders = self.run_(self.source.listFolders())
        self.assertEqual(
            [f.path for f in folders], [("INBOX",), ("#shared", "team"), ("Sent",)]
        )
        self.source = IMAPSource(self.harness.open, "alice at source", include=("*",))
        folders = self.run_(self.source.listFolders())
        self.assertEqual([f.path for f in folders], [("INBOX",), ("Sent",)])

    def test_override(self) -> None:
        """
        The configuration's override is believed over NAMESPACE.
        """
        self.account.namespaceText = b'(("" ".")) NIL NIL'
        self.account.folder("INBOX.Sent")

        async def opened() -> IMAPSession:
            session = await self.harness.open()
            session.namespaceOverride = PersonalNamespace("INBOX.", ".")
            return session

        self.source = IMAPSource(opened, "alice at source")
        folders = self.run_(self.source.listFolders())
        self.assertEqual([f.path for f in folders], [("INBOX",), ("Sent",)])

    def test_overrideLeavesSharedOut(self) -> None:
        """
        With the override, NAMESPACE is still asked: an empty configured
        prefix does not make other users' and shared mailboxes personal.
        """
        self.account.namespaceText = b'(("" ".")) (("user." ".")) (("shared." "."))'
        self.account.folder("Sent")
        self.account.folder("user.bob.INBOX")
        self.account.folder("shared.team")

        async def opened() -> IMAPSession:
            session = await self.harness.open()
            session.namespaceOverride = PersonalNamespace("", ".")
            return session

        self.source = IMAPSource(opened, "alice at source")
        folders = self.run_(self.source.listFolders())
        self.assertEqual([f.path for f in folders], [("INBOX",), ("Sent",)])
        self.assertIn(b"NAMESPACE", self.account.commands)

    def test_overrideFlat(self) -> None:
        """
        An override without a separator makes the server flat: a listed
        name is one level even where LIST shows a delimiter; a NAMESPACE
        without a delimiter takes LIST's.
        """
        self.account.namespaceText = b'(("" NIL)) NIL NIL'
        self.account.folder("a.b")
        folders = self.run_(self.source.listFolders())
        self.assertEqual([f.path for f in folders], [("INBOX",), ("a", "b")])

        async def opened() -> IMAPSession:
            session = await self.harness.open()
            session.namespaceOverride = PersonalNamespace("", None)
            return session

        self.source = IMAPSource(opened, "alice at source")
        folders = self.run_(self.source.listFolders())
        self.assertEqual([f.path for f in folders], [("INBOX",), ("a.b",)])


class PlainServerFolderTests(SourceTestCase):
    """
    L{IMAPSource.listFolders} on a server without LIST-EXTENDED, with C{.}
    as delimiter.
    """

    capabilities = PLAIN_CAPABILITIES
    delimiter = "."

    def test_listAndLsub(self) -> None:
        """
        LIST then LSUB: subscriptions from LSUB, paths split at C{.}.
        """
        self.account.folder("INBOX.Lists", subscribed=False)
        self.account.folder("a.b.c")
        folders = self.run_(self.source.listFolders())
        self.assertEqual(
            [(f.path, f.key, f.subscribed) for f in folders],
            [(("INBOX",), "INBOX", True), (("INBOX", "Lists"), "INBOX.Lists", False),
             (("a", "b", "c"), "a.b.c", True)],
        )  # fmt: skip
        self.assertEqual(self.account.commands, [b'LIST "" "*"', b'LSUB "" "*"'])


class MessageTests(SourceTestCase):
    """
    L{IMAPSource.listMessages} and L{IMAPSource.folderStatus}.
    """

    def test_listMessages(self) -> None:
        """
        EXAMINE (with CONDSTORE where offered) and one UID FETCH of the
        metadata: messages by UID keyed C{"<UIDVALIDITY>:<UID>"}, every
        flag but C{\\Recent}, keywords included, INTERNALDATE with its
        offset, RFC822.SIZE.
        """
        inbox = self.account.folders["INBOX"]
        inbox.add(body(1), ("\\Seen", "$Forwarded", "\\Recent"), "22-Nov-2026 10:00:00 +0100")
        inbox.add(body(2, 500), (), " 2-Jan-2020 23:59:58 -0530")
        folder = self.folderNamed("INBOX")
        start = len(self.account.commands)
        messages = self.run_(self.source.listMessages(folder))
        self.assertEqual(
            messages,
            [
                SourceMessage(
                    "1700000001:1",
                    ("\\Seen", "$Forwarded"),
                    datetime(2026, 11, 22, 10, 0, tzinfo=CET),
                    len(body(1)),
                ),
                SourceMessage(
                    "1700000001:2",
                    (),
                    datetime(
                        2020, 1, 2, 23, 59, 58, tzinfo=timezone(-timedelta(hours=5, minutes=30))
                    ),
                    len(body(2, 500)),
                ),
            ],
        )
        self.assertEqual(
            self.commandsSince(start),
            [b'EXAMINE "INBOX" (CONDSTORE)', b"UID FETCH 1:* (UID FLAGS INTERNALDATE RFC822.SIZE)"],
        )
        status = self.source.folderStatus(folder)
        self.assertEqual(status, FolderStatus(1700000001, 3, inbox.highestModSeq, 2))

    def test_emptyFolder(self) -> None:
        """
        An empty folder is listed with EXAMINE alone.
        """
        folder = self.folderNamed("INBOX")
        start = len(self.account.commands)
        self.assertEqual(self.run_(self.source.listMessages(folder)), [])
        self.assertEqual(self.commandsSince(start), [b'EXAMINE "INBOX" (CONDSTORE)'])
        self.assertEqual(self.source.folderStatus(folder), FolderStatus(1700000001, 1, 1, 0))

    def test_nonAsciiFolderName(self) -> None:
        """
        A folder is opened by the name the server listed, in modified
        UTF-7.
        """
        self.account.folder("Entwürfe").add(body(1))
        folder = self.folderNamed("Entwürfe")
        self.assertEqual(len(self.run_(self.source.listMessages(folder))), 1)
        self.assertIn(b'EXAMINE "Entw&APw-rfe" (CONDSTORE)', self.account.commands)

    def test_folderGone(self) -> None:
        """
        A folder that cannot be opened fails the listing with
        L{SourceError}.
        """
        self.account.folder("Work")
        folder = self.folderNamed("Work")
        del self.account.folders["Work"]
        error = self.fails(self.source.listMessages(folder), SourceError)
        self.assertIn("Work", str(error))

    def test_unavailableDropsConnection(self) -> None:
        """
        C{NO [UNAVAILABLE]} fails with a L{TransientError}; the connection
        is dropped and the next call opens a new one.
        """
        folder = self.folderNamed("INBOX")
        self.account.interceptors.append(
            lambda tag, command: tag + b" NO [UNAVAILABLE] Try later\r\n"
            if command.startswith(b"EXAMINE") else None
        )  # fmt: skip
        self.fails(self.source.listMessages(folder), TransientError)
        self.assertTrue(self.harness.opened[0][1].disconnecting)
        self.account.interceptors.clear()
        self.assertEqual(self.run_(self.source.listMessages(folder)), [])
        self.assertEqual(len(self.harness.opened), 2)


class PlainServerMessageTests(SourceTestCase):
    """
    Listing on a server without CONDSTORE.
    """

    capabilities = PLAIN_CAPABILITIES

    def test_noCondstore(self) -> None:
        """
        EXAMINE without the CONDSTORE parameter; no mod-sequence in the
        status.
        """
        self.account.folders["INBOX"].add(body(1))
        folder = self.folderNamed("INBOX")
        self.run_(self.source.listMessages(folder))
        self.assertIn(b'EXAMINE "INBOX"', self.account.commands)
        status = self.source.folderStatus(folder)
        assert status is not None
        self.assertIsNone(status.highestModSeq)


class BodyTests(SourceTestCase):
    """
    L{IMAPSource.readBodies}.
    """

    def listed(self, key: str = "INBOX") -> tuple[SourceFolder, list[SourceMessage]]:
        """
        List the folders, then the messages of the one keyed C{key}.
        """
        folder = self.folderNamed(key)
        return folder, self.run_(self.source.listMessages(folder))

    def test_readBodies(self) -> None:
        """
        Bodies come exact and in the caller's order, from one
        C{UID FETCH ... (UID BODY.PEEK[])} for the UIDs asked for only,
        without opening the folder again.
        """
        inbox = self.account.folders["INBOX"]
        bodies = {inbox.add(body(n, 100 * n)): body(n, 100 * n) for n in range(1, 6)}
        folder, messages = self.listed()
        wanted = [messages[3], messages[0], messages[1]]
        start = len(self.account.commands)
        read = self.run_(self.source.readBodies(folder, wanted))
        self.assertEqual(read, [bodies[4], bodies[1], bodies[2]])
        self.assertEqual(self.commandsSince(start), [b"UID FETCH 1:2,4 (UID BODY.PEEK[])"])

    def test_commandsPipelinedAndBounded(self) -> None:
        """
        Each command asks for about C{commandBytes} octets of messages
        (a message larger than that gets one of its own), and all are
        written before any reply.
        """
        self.source = IMAPSource(self.harness.open, "alice", commandBytes=1000)
        inbox = self.account.folders["INBOX"]
        sizes = [400, 400, 400, 3000, 100, 100]
        for n, size in enumerate(sizes, 1):
            inbox.add(body(n, size))
        folder, messages = self.listed()
        d = self.source.readBodies(folder, messages)
        self.assertEqual(
            self.harness.pending(),
            b"0005 UID FETCH 1:2 (UID BODY.PEEK[])\r\n"
            b"0006 UID FETCH 3 (UID BODY.PEEK[])\r\n"
            b"0007 UID FETCH 4 (UID BODY.PEEK[])\r\n"
            b"0008 UID FETCH 5:6 (UID BODY.PEEK[])\r\n",
        )
        read = self.run_(d)
        self.assertEqual(read, [inbox.messages[uid].body for uid in range(1, 7)])

    def test_smallReads(self) -> None:
        """
        Replies arriving a few octets per read give the same bodies.
        """
        self.harness.readSize = 7
        inbox = self.account.folders["INBOX"]
        for n in range(1, 4):
            inbox.add(body(n, 1000 * n))
        folder, messages = self.listed()
        read = self.run_(self.source.readBodies(folder, messages))
        self.assertEqual(read, [inbox.messages[uid].body for uid in (1, 2, 3)])

    def test_opensFolderWhenNeeded(self) -> None:
        """
        Reading from a folder other than the one opened last opens it
        again (EXAMINE, never SELECT).
        """
        self.account.folders["INBOX"].add(body(1))
        self.account.folder("Sent").add(body(2))
        inbox, inboxMessages = self.listed("INBOX")
        sent, sentMessages = self.listed("Sent")
        start = len(self.account.commands)
        self.assertEqual(self.run_(self.source.readBodies(inbox, inboxMessages)), [body(1)])
        self.assertEqual(
            self.commandsSince(start),
            [b'EXAMINE "INBOX" (CONDSTORE)', b"UID FETCH 1 (UID BODY.PEEK[])"],
        )

    def test_expunged(self) -> None:
        """
        A message gone since the listing (no FETCH response for its UID)
        is an L{UnreadableMessage}; the others are read.
        """
        inbox = self.account.folders["INBOX"]
        for n in range(1, 4):
            inbox.add(body(n))
        folder, messages = self.listed()
        del inbox.messages[2]
        read = self.run_(self.source.readBodies(folder, messages))
        self.assertEqual(read, [body(1), UnreadableMessage(EXPUNGED), body(3)])

    def test_factsCarried(self) -> None:
        """
        The bodies come with the facts of their octets, found as they were
        made CRLF (L{ReadBodies}): 8-bit, bare CR, bare LF; a message
        gone since the listing has none.
        """
        stored = [b"a\r\nb\r\n", "\u00e9\r\n".encode(), b"a\nb\r\n", b"a\rb\r\n", b"gone\r\n"]
        inbox = self.account.folders["INBOX"]
        for octets in stored:
            inbox.add(octets)
        folder, messages = self.listed()
        del inbox.messages[5]
        read = self.run_(self.source.readBodies(folder, messages))
        assert isinstance(read, ReadBodies)
        self.assertEqual(list(read.facts), [0, EIGHT_BIT, BARE_LF, BARE_CR, UNKNOWN])
        self.assertEqual(read[:4], [toCRLF(octets) for octets in stored[:4]])

    def test_expungeIssued(self) -> None:
        """
        C{NO [EXPUNGEISSUED]} after some responses: the messages without a
        body are expunged.
        """
        inbox = self.account.folders["INBOX"]
        inbox.add(body(1))
        inbox.add(body(2))
        folder, messages = self.listed()
        self.account.interceptors.append(
            lambda tag, command: b"* 1 FETCH (UID 1 BODY[] {%d}\r\n%s)\r\n%s NO [EXPUNGEISSUED] "
            b"Some of the requested messages no longer exist\r\n" % (len(body(1)), body(1), tag)
        )
        read = self.run_(self.source.readBodies(folder, messages))
        self.assertEqual(read, [body(1), UnreadableMessage(EXPUNGED)])

    def test_refusedMessages(self) -> None:
        """
        Another C{NO} makes the messages without a body unreadable, with
        the server's text.
        """
        self.account.folders["INBOX"].add(body(1))
        folder, messages = self.listed()
        self.account.interceptors.append(
            lambda tag, command: tag + b" NO [SERVERBUG] Internal error occurred.\r\n"
        )
        read = self.run_(self.source.readBodies(folder, messages))
        self.assertEqual(
            read,
            [
                UnreadableMessage(
                    "the source server refused to send it: "
                    "NO [SERVERBUG] Internal error occurred."
                )
            ],
        )

    def test_transientRefusal(self) -> None:
        """
        C{NO [UNAVAILABLE]} (and the like) fails the call with a
        L{TransientError} rather than marking messages unreadable.
        """
        self.account.folders["INBOX"].add(body(1))
        folder, messages = self.listed()
        self.account.interceptors.append(
            lambda tag, command: tag
            + b" NO [OVERQUOTA] Account exceeded command or bandwidth limits\r\n"
        )
        error = self.fails(self.source.readBodies(folder, messages), TransientError)
        self.assertIn("OVERQUOTA", str(error))

    def test_bad(self) -> None:
        """
        C{BAD} fails the call with L{CommandFailed}.
        """
        self.account.folders["INBOX"].add(body(1))
        folder, messages = self.listed()
        self.account.interceptors.append(
            lambda tag, command: tag + b" BAD Error in IMAP command\r\n"
        )
        error = self.fails(self.source.readBodies(folder, messages), CommandFailed)
        self.assertEqual(error.status, "BAD")  # type: ignore[attr-defined]

    def test_nilBody(self) -> None:
        """
        A body the server sends as C{NIL} is unreadable.
        """
        self.account.folders["INBOX"].add(body(1))
        folder, messages = self.listed()
        self.account.interceptors.append(
            lambda tag, command: b"* 1 FETCH (UID 1 BODY[] NIL)\r\n" + tag + b" OK done\r\n"
        )
        [read] = self.run_(self.source.readBodies(folder, messages))
        self.assertIsInstance(read, UnreadableMessage)

    def test_bareLineFeeds(self) -> None:
        """
        A body with bare LFs (stored so by a careless server) is given
        with CRLF, as APPEND needs.
        """
        self.account.folders["INBOX"].add(b"Subject: x\n\nbody\n")
        folder, messages = self.listed()
        self.assertEqual(
            self.run_(self.source.readBodies(folder, messages)), [b"Subject: x\r\n\r\nbody\r\n"]
        )

    def test_nulRestored(self) -> None:
        """
        A message with NUL, which C{BODY[]} carries as 0x80, is read as
        stored, from C{BINARY.PEEK[]} asked for it alone.
        """
        inbox = self.account.folders["INBOX"]
        stored = b"Subject: nul\r\n\r\nbefore\0after \x80\r\n"
        inbox.add(body(1))
        inbox.add(stored)
        folder, messages = self.listed()
        start = len(self.account.commands)
        self.assertEqual(self.run_(self.source.readBodies(folder, messages)), [body(1), stored])
        self.assertEqual(
            self.commandsSince(start),
            [b"UID FETCH 1:2 (UID BODY.PEEK[])", b"UID FETCH 2 (UID BINARY.PEEK[])"],
        )

    def test_bodySearchedOnce(self) -> None:
        """
        A body held in memory is searched for 0x80 once, as it arrives: not
        again when the bodies that may have lost a NUL are picked.
        """
        searched: list[object] = []

        def holds(body: object, octet: int) -> bool:
            searched.append(body)
            return False

        self.patch(imapnuls, "holds", holds)
        inbox = self.account.folders["INBOX"]
        inbox.add(body(1))
        inbox.add(b"Subject: nul\r\n\r\nbefore\0after\r\n")
        folder, messages = self.listed()
        self.assertEqual(len(self.run_(self.source.readBodies(folder, messages))), 2)
        self.assertEqual(searched, [])

    def startRead(self, stored: Sequence[bytes]) -> tuple[Deferred[Any], IMAPSession, StringTransport, bytes]:
        """
        Add C{stored} to INBOX, list it, start reading every body, and
        answer the body fetch on the wire.

        @return: the read, its session and transport (cleared of the body
            fetch), and the account's whole reply to it.
        """
        inbox = self.account.folders["INBOX"]
        for message in stored:
            inbox.add(message)
        folder, messages = self.listed()
        reading = self.source.readBodies(folder, messages)
        session, transport = self.harness.opened[-1]
        [line] = transport.value().split(b"\r\n")[:-1]
        transport.clear()
        self.assertTrue(line.endswith(b" UID FETCH 1:%d (UID BODY.PEEK[])" % len(stored)), line)
        return reading, session, transport, self.account.handle(line, session)

    def test_binaryAskedAsTheBodiesArrive(self) -> None:
        """
        The C{BINARY.PEEK[]} of the bodies holding 0x80 is asked for in one
        command, written as soon as the last body of the body fetch has
        arrived and before that fetch's tagged reply (pipelined behind it,
        no round trip); the read completes once both have been answered.
        """
        nul = b"Subject: nul\r\n\r\nbefore\0after\r\n"
        utf8 = b"Subject: \xe2\x80\xa6\r\n\r\n\xe2\x80\xa6\r\n"
        reading, session, transport, reply = self.startRead([body(1), nul, utf8, body(4)])
        fourth = reply.index(b"* 4 FETCH")
        tagged = reply.rindex(b"\r\n", 0, -2) + 2
        session.client.dataReceived(reply[:fourth])
        self.assertEqual(transport.value(), b"")
        session.client.dataReceived(reply[fourth:tagged])
        written = transport.value()
        self.assertTrue(written.endswith(b" UID FETCH 2:3 (UID BINARY.PEEK[])\r\n"), written)
        self.assertEqual(written.count(b"\r\n"), 1)
        self.assertNoResult(reading)
        session.client.dataReceived(reply[tagged:])
        self.assertNoResult(reading)
        self.assertEqual(self.run_(reading), [body(1), nul, utf8, body(4)])
        self.assertEqual(self.harness.pending(), b"")

    def test_binaryAfterAnIncompleteFetch(self) -> None:
        """
        When the body fetch's responses do not name every UID asked for
        (one expunged meanwhile), the C{BINARY.PEEK[]} of the bodies
        holding 0x80 is asked for after its tagged reply, and the NULs are
        still put back.
        """
        nul = b"Subject: nul\r\n\r\nbefore\0after\r\n"
        reading, session, transport, reply = self.startRead([nul, body(2)])
        second = reply.index(b"* 2 FETCH")
        tagged = reply.rindex(b"\r\n", 0, -2) + 2
        session.client.dataReceived(reply[:second])
        self.assertEqual(transport.value(), b"")
        session.client.dataReceived(reply[tagged:])
        self.assertEqual(self.run_(reading), [nul, UnreadableMessage(EXPUNGED)])
        self.assertEqual(self.account.commands[-1], b"UID FETCH 1 (UID BINARY.PEEK[])")

    def test_binaryLostWithTheConnection(self) -> None:
        """
        When the connection is lost while a C{BINARY.PEEK[]} asked for
        early is unanswered, the read fails with L{ConnectionLost} and
        leaves nothing unhandled.
        """
        nul = b"Subject: nul\r\n\r\nbefore\0after\r\n"
        reading, session, transport, reply = self.startRead([nul, body(2)])
        session.client.dataReceived(reply[: reply.rindex(b"\r\n", 0, -2) + 2])
        self.assertIn(b"UID FETCH 1 (UID BINARY.PEEK[])", transport.value())
        session.client.connectionLost(Failure(ConnectionDone()))
        self.failureResultOf(reading, ConnectionLost)

    def test_binaryNotTheMessage(self) -> None:
        """
        Where C{BINARY[]} is not C{BODY[]} but for NULs (the server decoded
        a Content-Transfer-Encoding), or has no NUL, C{BODY[]} is kept.
        """
        inbox = self.account.folders["INBOX"]
        decoded = b"Content-Transfer-Encoding: 8bit\r\n\r\nx\0\x80y\r\n"
        utf8 = b"Subject: \xe2\x80\xa6\r\n\r\n\xe2\x80\xa6\r\n"
        inbox.add(decoded)
        inbox.add(utf8)
        folder, messages = self.listed()
        self.assertEqual(
            self.run_(self.source.readBodies(folder, messages)),
            [decoded.replace(b"\0", b"\x80"), utf8],
        )

    def test_nulWithoutBinary(self) -> None:
        """
        A server without BINARY is not asked for C{BINARY[]}: its
        C{BODY[]} is what there is.
        """
        self.account.capabilities = PLAIN_CAPABILITIES
        self.account.folders["INBOX"].add(b"Subject: nul\r\n\r\na\0b\r\n")
        folder, messages = self.listed()
        start = len(self.account.commands)
        self.assertEqual(
            self.run_(self.source.readBodies(folder, messages)),
            [b"Subject: nul\r\n\r\na\x80b\r\n"],
        )
        self.assertEqual(self.commandsSince(start), [b"UID FETCH 1 (UID BODY.PEEK[])"])

    def test_unsolicitedResponsesMixedIn(self) -> None:
        """
        EXISTS and another client's flag updates among the responses do
        not disturb the bodies.
        """
        inbox = self.account.folders["INBOX"]
        inbox.add(body(1))
        inbox.add(body(2))
        folder, messages = self.listed()

        def mixed(tag: bytes, command: bytes) -> bytes | None:
            if not command.startswith(b"UID FETCH"):
                return None
            return (
                b"* 3 EXISTS\r\n* 2 FETCH (UID 2 FLAGS (\\Seen))\r\n"
                b"* 1 FETCH (UID 1 BODY[] {%d}\r\n%s)\r\n* 1 FETCH (FLAGS (\\Deleted))\r\n"
                b"* 2 FETCH (UID 2 BODY[] {%d}\r\n%s)\r\n%s OK done\r\n"
                % (len(body(1)), body(1), len(body(2)), body(2), tag)
            )

        self.account.interceptors.append(mixed)
        self.assertEqual(self.run_(self.source.readBodies(folder, messages)), [body(1), body(2)])

    def test_renumbered(self) -> None:
        """
        Messages listed under a UIDVALIDITY the folder no longer has are
        unreadable, and no FETCH is sent for them.
        """
        self.account.folders["INBOX"].add(body(1))
        self.account.folder("Sent")
        inbox, messages = self.listed("INBOX")
        self.listed("Sent")
        self.account.folders["INBOX"].uidValidity += 1
        start = len(self.account.commands)
        [read] = self.run_(self.source.readBodies(inbox, messages))
        assert isinstance(read, UnreadableMessage)
        self.assertIn("UIDVALIDITY", read.reason)
        self.assertEqual(self.commandsSince(start), [b'EXAMINE "INBOX" (CONDSTORE)'])

    def test_folderGone(self) -> None:
        """
        Messages of a folder that can no longer be opened are unreadable.
        """
        self.account.folder("Work").add(body(1))
        self.account.folder("Sent")
        work, messages = self.listed("Work")
        self.listed("Sent")
        del self.account.folders["Work"]
        [read] = self.run_(self.source.readBodies(work, messages))
        assert isinstance(read, UnreadableMessage)
        self.assertIn("cannot be opened", read.reason)

    def test_connectionLost(self) -> None:
        """
        A connection lost while reading fails the call with
        L{ConnectionLost}; the next call opens a new connection.
        """
        self.account.folders["INBOX"].add(body(1))
        folder, messages = self.listed()
        self.account.interceptors.append(
            lambda tag, command: DROP if command.startswith(b"UID FETCH") else None
        )
        self.fails(self.source.readBodies(folder, messages), ConnectionLost)
        self.account.interceptors.clear()
        self.assertEqual(self.run_(self.source.readBodies(folder, messages)), [body(1)])
        self.assertEqual(len(self.harness.opened), 2)

    def test_callsTakeTurns(self) -> None:
        """
        Calls made while one is in progress wait for it: each folder's
        EXAMINE is followed by its own FETCH (one connection, none for
        reading ahead).
        """
        self.source = IMAPSource(self.harness.open, "alice at source", readAheadConnections=0)
        self.account.folders["INBOX"].add(body(1))
        self.account.folder("Sent").add(body(2))
        inbox, inboxMessages = self.listed("INBOX")
        sent, sentMessages = self.listed("Sent")
        start = len(self.account.commands)
        first = self.source.readBodies(inbox, inboxMessages)
        second = self.source.readBodies(sent, sentMessages)
        self.harness.pump()
        self.assertEqual(self.successResultOf(first), [body(1)])
        self.assertEqual(self.successResultOf(second), [body(2)])
        self.assertEqual(
            self.commandsSince(start),
            [b'EXAMINE "INBOX" (CONDSTORE)', b"UID FETCH 1 (UID BODY.PEEK[])",
             b'EXAMINE "Sent" (CONDSTORE)', b"UID FETCH 1 (UID BODY.PEEK[])"],
        )  # fmt: skip

    def test_nothingAsked(self) -> None:
        """
        Reading no message sends nothing.
        """
        folder = self.folderNamed("INBOX")
        start = len(self.account.commands)
        self.assertEqual(self.run_(self.source.readBodies(folder, [])), [])
        self.assertEqual(self.commandsSince(start), [])

    def test_close(self) -> None:
        """
        L{IMAPSource.close} logs out; without a connection it does
        nothing.
        """
        self.successResultOf(IMAPSource(self.harness.open).close())
        self.assertEqual(self.harness.opened, [])
        self.folderNamed("INBOX")
        self.run_(self.source.close())
        self.assertEqual(self.account.commands[-1], b"LOGOUT")
        self.assertTrue(self.harness.opened[0][1].disconnecting)


def openDescriptors() -> int:
    """
    How many file descriptors this process has open.
    """
    return len(os.listdir("/proc/self/fd"))


class ServerSignalTests(SourceTestCase):
    """
    What the source does with a server's "not now": wait, pause, or
    refuse the messages.
    """

    def listed(self) -> tuple[SourceFolder, list[SourceMessage]]:
        """
        INBOX with one message, listed.
        """
        self.account.folders["INBOX"].add(body(1))
        folder = self.folderNamed("INBOX")
        return folder, self.run_(self.source.listMessages(folder))

    def refuseFetch(self, reply: bytes) -> None:
        """
        Answer every UID FETCH with C{reply} after the tag.
        """
        self.account.interceptors.append(
            lambda tag, command: tag + b" " + reply + b"\r\n"
            if command.startswith(b"UID FETCH")
            else None
        )

    def test_quota(self) -> None:
        """
        Gmail's bandwidth refusal of a FETCH (ha-email-sensor issue 16:
        "FETCH => [OVERQUOTA] Account exceeded command or bandwidth
        limits.") fails the call with L{QuotaExceeded}: pause.
        """
        folder, messages = self.listed()
        self.refuseFetch(b"NO [OVERQUOTA] Account exceeded command or bandwidth limits.")
        error = self.fails(self.source.readBodies(folder, messages), QuotaExceeded)
        self.assertEqual(
            str(error),
            "alice at source: UID FETCH: the account is over a server limit: "
            "NO [OVERQUOTA] Account exceeded command or bandwidth limits.",
        )

    def test_throttledWithBad(self) -> None:
        """
        Microsoft 365 throttles a FETCH with a BAD: the call fails with
        L{ServerBusy} and the wait it suggests, not with the BAD.
        """
        folder, messages = self.listed()
        self.refuseFetch(b"BAD Request is throttled. Suggested Backoff Time: 89117 milliseconds")
        error = self.fails(self.source.readBodies(folder, messages), ServerBusy)
        self.assertEqual(error.retryAfter, 89.117)  # type: ignore[attr-defined]

    def test_limitRefusesMessages(self) -> None:
        """
        C{NO [LIMIT]} on a FETCH is about what was asked: the messages are
        unreadable, with the server's text.
        """
        folder, messages = self.listed()
        self.refuseFetch(b"NO [LIMIT] Too many messages in one FETCH")
        [read] = self.run_(self.source.readBodies(folder, messages))
        self.assertEqual(
            read,
            UnreadableMessage(
                "the source server refused to send it: NO [LIMIT] Too many messages in one FETCH"
            ),
        )


class SpoolTests(SourceTestCase):
    """
    Bodies above the spool threshold come as L{StreamedBody}s on unlinked
    temporary files; what the server may send is bounded by what it
    listed.
    """

    def setUp(self) -> None:
        super().setUp()
        self.directory = self.mktemp()
        os.mkdir(self.directory)
        self.source = IMAPSource(
            self.harness.open, "alice at source", spoolAbove=1000, spoolDirectory=self.directory
        )
        self.inbox = self.account.folders["INBOX"]

    def read(self) -> list[MessageBody]:
        """
        List INBOX and read every message of it.
        """
        folder = self.folderNamed("INBOX")
        messages = self.run_(self.source.listMessages(folder))
        read: list[MessageBody] = self.run_(self.source.readBodies(folder, messages))
        return read

    def test_spooled(self) -> None:
        """
        A body above the threshold is a L{StreamedBody} giving the message
        octet for octet; one at or below it is bytes; the spool directory
        shows no file.
        """
        large, small = body(1, 5000), body(2, 500)
        self.inbox.add(large)
        self.inbox.add(small)
        before = openDescriptors()
        streamed, inMemory = self.read()
        assert isinstance(streamed, StreamedBody)
        self.assertEqual(len(streamed), len(large))
        self.assertEqual(b"".join(streamed.slices(777)), large)
        self.assertFalse(streamed.hasNUL)
        self.assertEqual(inMemory, small)
        self.assertEqual(os.listdir(self.directory), [])
        self.assertEqual(openDescriptors(), before + 1)
        streamed.close()
        self.assertEqual(openDescriptors(), before)

    def test_bareLineFeeds(self) -> None:
        """
        A spooled body with bare LFs gives CRLF, as L{toCRLF} would.
        """
        stored = b"Subject: x\n\n" + b"line\n" * 1000 + b"last\r\n"
        self.inbox.add(stored)
        [streamed] = self.read()
        assert isinstance(streamed, StreamedBody)
        self.assertEqual(b"".join(streamed.slices(100)), toCRLF(stored))
        streamed.close()

    def test_nulRestored(self) -> None:
        """
        A spooled body holding 0x80 is checked against its spooled
        C{BINARY[]}, searched and compared a slice at a time, and the
        message as stored (with its NULs) is what is given.
        """
        stored = b"Subject: nul\r\n\r\n" + b"before\0after \x80\r\n" * 300
        self.inbox.add(stored)
        before = openDescriptors()
        [streamed] = self.read()
        assert isinstance(streamed, StreamedBody)
        self.assertTrue(streamed.hasNUL)
        self.assertEqual(b"".join(streamed.slices(1000)), stored)
        self.assertEqual(openDescriptors(), before + 1)
        streamed.close()

    def test_overListedSize(self) -> None:
        """
        A body literal far larger than the size the server listed fails
        the call with L{ConnectionLost} before it is read, drops the
        connection, and leaves no file open.
        """
        self.inbox.add(body(1, 500))
        folder = self.folderNamed("INBOX")
        messages = self.run_(self.source.listMessages(folder))
        self.account.interceptors.append(
            lambda tag, command: b"* 1 FETCH (UID 1 BODY[] {99999999999}\r\n" + b"x" * 65536
            if command.startswith(b"UID FETCH")
            else None
        )
        before = openDescriptors()
        error = self.fails(self.source.readBodies(folder, messages), ConnectionLost)
        self.assertIn("a literal of 99999999999 octets announced", str(error))
        [(session, transport)] = self.harness.opened
        self.assertTrue(transport.disconnecting)
        self.assertEqual(openDescriptors(), before)

    def test_moreThanListed(self) -> None:
        """
        Bodies adding up to more than twice what was listed (each within
        bounds on its own: here, the same message sent again and again)
        fail the call with L{ConnectionLost}.
        """
        self.inbox.add(body(1, 30_000))
        folder = self.folderNamed("INBOX")
        messages = self.run_(self.source.listMessages(folder))
        flood = b"".join(
            b"* 1 FETCH (UID 1 BODY[] {30000}\r\n" + b"x" * 30000 + b")\r\n" for _ in range(8)
        )
        self.account.interceptors.append(
            lambda tag, command: flood + tag + b" OK done\r\n"
            if command.startswith(b"UID FETCH")
            else None
        )
        error = self.fails(self.source.readBodies(folder, messages), ConnectionLost)
        self.assertIn("octets expected for the messages asked for", str(error))

    def test_tooLarge(self) -> None:
        """
        A message listed larger than C{maxMessageBytes} is unreadable,
        saying why, and is not fetched.
        """
        self.source = IMAPSource(self.harness.open, "alice at source", maxMessageBytes=1000)
        self.inbox.add(body(1, 2000))
        self.inbox.add(body(2, 500))
        folder = self.folderNamed("INBOX")
        messages = self.run_(self.source.listMessages(folder))
        start = len(self.account.commands)
        read = self.run_(self.source.readBodies(folder, messages))
        self.assertEqual(
            read,
            [
                UnreadableMessage(
                    f"listed at {len(body(1, 2000))} octets, more than the 1000 read from a source"
                ),
                body(2, 500),
            ],
        )
        self.assertEqual(self.commandsSince(start), [b"UID FETCH 2 (UID BODY.PEEK[])"])

    def test_unwantedSpoolsClosed(self) -> None:
        """
        Spooled bodies of messages not asked for, and a body sent twice,
        leave no file open.
        """
        self.inbox.add(body(1, 5000))
        folder = self.folderNamed("INBOX")
        messages = self.run_(self.source.listMessages(folder))
        other = b"* 9 FETCH (UID 9 BODY[] {3000}\r\n" + b"y" * 3000 + b")\r\n"
        again = b"* 1 FETCH (UID 1 BODY[] {%d}\r\n" % len(body(1, 5000)) + body(1, 5000) + b")\r\n"
        self.account.interceptors.append(
            lambda tag, command: other + again + again + tag + b" OK done\r\n"
            if command.startswith(b"UID FETCH")
            else None
        )
        before = openDescriptors()
        [streamed] = self.run_(self.source.readBodies(folder, messages))
        assert isinstance(streamed, StreamedBody)
        self.assertEqual(openDescriptors(), before + 1)
        streamed.close()


class ConnectionPoolTests(SourceTestCase):
    """
    An L{IMAPSource} given several connections keeps each worker's folder
    open on a connection of its own.
    """

    def setUp(self) -> None:
        super().setUp()
        self.source = IMAPSource(self.harness.open, "alice", connections=2)
        self.account.folders["INBOX"].add(body(1))
        self.account.folders["INBOX"].add(body(2))
        self.account.folder("Sent").add(body(3))
        self.account.folders["Sent"].add(body(4))
        self.inbox, self.inboxMessages = self.listed("INBOX")
        self.sent, self.sentMessages = self.listed("Sent")

    def listed(self, key: str) -> tuple[SourceFolder, list[SourceMessage]]:
        folder = self.folderNamed(key)
        return folder, self.run_(self.source.listMessages(folder))

    def examines(self, start: int) -> list[bytes]:
        return [c for c in self.commandsSince(start) if c.startswith(b"EXAMINE")]

    def assertThreeReadsServed(self) -> None:
        """
        Read INBOX, Sent and Sent's first message at once: each gets its
        bodies once the harness is pumped.
        """
        calls = [
            self.source.readBodies(self.inbox, self.inboxMessages),
            self.source.readBodies(self.sent, self.sentMessages),
            self.source.readBodies(self.sent, self.sentMessages[:1]),
        ]
        self.harness.pump()
        self.assertEqual(
            [self.successResultOf(d) for d in calls],
            [[body(1), body(2)], [body(3), body(4)], [body(3)]],
        )

    def test_twoWorkersTwoFolders(self) -> None:
        """
        Two workers reading two folders in turn, concurrently, each open
        their folder once: the second call opens a second connection, and
        later calls go to the connection with their folder open.
        """
        start = len(self.account.commands)
        for n in range(3):
            inbox = self.source.readBodies(self.inbox, self.inboxMessages[n % 2 :][:1])
            sent = self.source.readBodies(self.sent, self.sentMessages[n % 2 :][:1])
            self.harness.pump()
            self.assertEqual(self.successResultOf(inbox), [body(1 + n % 2)])
            self.assertEqual(self.successResultOf(sent), [body(3 + n % 2)])
        # Listing INBOX, then Sent, left one open on each connection:
        # neither is opened again for all the reading.
        self.assertEqual(len(self.harness.opened), 2)
        self.assertEqual(self.examines(start), [])

    def test_withinLimit(self) -> None:
        """
        Calls about a third folder, one after another, reuse a connection
        rather than open a third.
        """
        self.account.folder("Work").add(body(5))
        work, workMessages = self.listed("Work")
        self.assertEqual(self.run_(self.source.readBodies(work, workMessages)), [body(5)])
        self.assertEqual(self.run_(self.source.readBodies(self.inbox, self.inboxMessages[:1])),
                         [body(1)])  # fmt: skip
        self.assertEqual(len(self.harness.opened), 2)

    def test_atMost(self) -> None:
        """
        No more connections than given are opened: without a read-ahead
        connection, a third concurrent call waits its turn on the
        connection with its folder open.
        """
        self.source = IMAPSource(self.harness.open, "alice", connections=2, readAheadConnections=0)
        before = len(self.harness.opened)
        self.inbox, self.inboxMessages = self.listed("INBOX")
        self.sent, self.sentMessages = self.listed("Sent")
        start = len(self.account.commands)
        self.assertThreeReadsServed()
        self.assertEqual(len(self.harness.opened) - before, 2)
        self.assertEqual(self.examines(start), [])

    def test_readAheadConnection(self) -> None:
        """
        A call that finds every connection busy opens the read-ahead
        connection (L{READ_AHEAD_CONNECTIONS}) and reads there at once,
        EXAMINEing its folder; a fourth waits its turn.
        """
        start = len(self.account.commands)
        calls = [
            self.source.readBodies(self.inbox, self.inboxMessages),
            self.source.readBodies(self.sent, self.sentMessages),
            self.source.readBodies(self.sent, self.sentMessages[:1]),
            self.source.readBodies(self.sent, self.sentMessages[1:]),
        ]
        self.harness.pump()
        self.assertEqual(
            [self.successResultOf(d) for d in calls],
            [[body(1), body(2)], [body(3), body(4)], [body(3)], [body(4)]],
        )
        self.assertEqual(READ_AHEAD_CONNECTIONS, 1)
        self.assertEqual(len(self.harness.opened), 3)
        self.assertEqual(self.examines(start), [b'EXAMINE "Sent" (CONDSTORE)'])

    def test_readAheadOnlyWhenBusy(self) -> None:
        """
        A call that finds an idle connection with another folder open
        re-EXAMINEs there rather than open the read-ahead connection.
        """
        self.source = IMAPSource(self.harness.open, "alice", connections=1)
        before = len(self.harness.opened)
        inbox, messages = self.listed("INBOX")
        self.listed("Sent")
        self.assertEqual(self.run_(self.source.readBodies(inbox, messages[:1])), [body(1)])
        self.assertEqual(len(self.harness.opened) - before, 1)

    def test_readAheadRefused(self) -> None:
        """
        A read-ahead connection the server (or the servers' connection
        limits) refuses leaves the pool at the workers' connections: the
        call waits its turn, and no other is tried.
        """
        opened = self.harness.open
        before = len(self.harness.opened)

        async def refuseThird() -> IMAPSession:
            if len(self.harness.opened) - before >= 2:
                raise TransientError("too many connections")
            return await opened()

        self.source = IMAPSource(refuseThird, "alice", connections=2)
        self.inbox, self.inboxMessages = self.listed("INBOX")
        self.sent, self.sentMessages = self.listed("Sent")
        self.assertThreeReadsServed()
        self.assertEqual(len(self.harness.opened) - before, 2)
        self.assertEqual(self.source._pool._readAhead, 0)

    def test_extraConnectionRefused(self) -> None:
        """
        When the server refuses an extra connection, the calls are served
        by those open, and no more is tried.
        """
        opened = self.harness.open

        async def refuseExtra() -> IMAPSession:
            if self.harness.opened:
                raise TransientError("too many connections")
            return await opened()

        self.harness.opened.clear()
        self.source = IMAPSource(refuseExtra, "alice", connections=2)
        first = self.source.readBodies(self.inbox, self.inboxMessages)
        second = self.source.readBodies(self.sent, self.sentMessages)
        self.harness.pump()
        self.assertEqual(self.successResultOf(first), [body(1), body(2)])
        self.assertEqual(self.successResultOf(second), [body(3), body(4)])
        self.assertEqual(len(self.harness.opened), 1)
        self.assertEqual(len(self.flushLoggedErrors()), 0)

    def test_closeAll(self) -> None:
        """
        L{IMAPSource.close} logs out every connection.
        """
        self.source.readBodies(self.inbox, self.inboxMessages)
        self.source.readBodies(self.sent, self.sentMessages)
        self.harness.pump()
        self.run_(self.source.close())
        self.assertEqual(self.account.commands.count(b"LOGOUT"), 2)
        self.assertTrue(all(transport.disconnecting for _, transport in self.harness.opened))


class DeltaTests(SourceTestCase):
    """
    L{IMAPSource.listMessagesSince}: delta passes.
    """

    def test_newAndChanged(self) -> None:
        """
        Messages that arrived since (from the old UIDNEXT) and flag changes
        since the old mod-sequence (CHANGEDSINCE) are reported.
        """
        inbox = self.account.folders["INBOX"]
        for n in range(1, 4):
            inbox.add(body(n))
        folder = self.folderNamed("INBOX")
        self.run_(self.source.listMessages(folder))
        before = self.source.folderStatus(folder)
        assert before is not None and before.highestModSeq is not None
        modSeq = before.highestModSeq
        inbox.setFlags(2, ("\\Seen", "$Label1"))
        inbox.add(body(4), ("\\Flagged",))
        start = len(self.account.commands)
        changes = self.run_(
            self.source.listMessagesSince(folder, before.uidValidity, before.uidNext, modSeq)
        )
        self.assertFalse(changes.uidValidityChanged)
        self.assertEqual(
            [(m.key, m.flags) for m in changes.newMessages], [("1700000001:4", ("\\Flagged",))]
        )
        self.assertEqual(changes.flagChanges, (FlagChange("1700000001:2", ("\\Seen", "$Label1")),))
        self.assertTrue(changes.flagChangesKnown)
        self.assertEqual(changes.status, FolderStatus(1700000001, 5, inbox.highestModSeq, 4))
        self.assertEqual(
            self.commandsSince(start),
            [
                b'EXAMINE "INBOX" (CONDSTORE)',
                b"UID FETCH 4:* (UID FLAGS INTERNALDATE RFC822.SIZE)",
                b"UID FETCH 1:3 (UID FLAGS) (CHANGEDSINCE %d)" % modSeq,
            ],
        )

    def test_nothingChanged(self) -> None:
        """
        An unchanged folder costs one EXAMINE.
        """
        self.account.folders["INBOX"].add(body(1))
        folder = self.folderNamed("INBOX")
        self.run_(self.source.listMessages(folder))
        before = self.source.folderStatus(folder)
        assert before is not None
        start = len(self.account.commands)
        changes = self.run_(
            self.source.listMessagesSince(
                folder, before.uidValidity, before.uidNext, before.highestModSeq
            )
        )
        self.assertEqual(
            (changes.newMessages, changes.flagChanges, changes.flagChangesKnown), ((), (), True)
        )
        self.assertEqual(self.commandsSince(start), [b'EXAMINE "INBOX" (CONDSTORE)'])

    def test_renumbered(self) -> None:
        """
        After a UIDVALIDITY change every message is new.
        """
        inbox = self.account.folders["INBOX"]
        inbox.add(body(1))
        inbox.add(body(2))
        folder = self.folderNamed("INBOX")
        changes = self.run_(self.source.listMessagesSince(folder, 42, 3, 10))
        self.assertTrue(changes.uidValidityChanged)
        self.assertEqual([m.key for m in changes.newMessages], ["1700000001:1", "1700000001:2"])
        self.assertFalse(changes.flagChangesKnown)


class PlainServerDeltaTests(SourceTestCase):
    """
    Delta passes without CONDSTORE.
    """

    capabilities = PLAIN_CAPABILITIES

    def test_flagChangesUnknown(self) -> None:
        """
        Without CONDSTORE only new messages are reported, and the flag
        changes are said to be unknown.
        """
        inbox = self.account.folders["INBOX"]
        inbox.add(body(1))
        folder = self.folderNamed("INBOX")
        self.run_(self.source.listMessages(folder))
        inbox.add(body(2))
        start = len(self.account.commands)
        changes = self.run_(self.source.listMessagesSince(folder, 1700000001, 2, 5))
        self.assertEqual([m.key for m in changes.newMessages], ["1700000001:2"])
        self.assertFalse(changes.flagChangesKnown)
        self.assertEqual(
            self.commandsSince(start),
            [b'EXAMINE "INBOX"', b"UID FETCH 2:* (UID FLAGS INTERNALDATE RFC822.SIZE)"],
        )

    def test_starGivesLastMessage(self) -> None:
        """
        C{UID FETCH n:*} beyond the last UID gives the last message anyway;
        it is not reported as new.
        """
        inbox = self.account.folders["INBOX"]
        inbox.add(body(1))
        # Messages 2 to 4 came and went: UIDNEXT is 5, UID 1 the last.
        inbox.uidNext = 5
        folder = self.folderNamed("INBOX")
        start = len(self.account.commands)
        changes = self.run_(self.source.listMessagesSince(folder, 1700000001, 2, None))
        self.assertEqual(changes.newMessages, ())
        self.assertEqual(
            self.commandsSince(start)[1:], [b"UID FETCH 2:* (UID FLAGS INTERNALDATE RFC822.SIZE)"]
        )
        self.assertEqual(changes.status.uidNext, 5)


class HelperTests(SynchronousTestCase):
    """
    The module's small functions.
    """

    def test_keys(self) -> None:
        """
        Keys carry UIDVALIDITY and UID, and are read back.
        """
        self.assertEqual(messageKey(1700000000, 42), "1700000000:42")
        self.assertEqual(parseMessageKey("1700000000:42"), (1700000000, 42))
        for bad in ["42", "a:1", "1:", ":1", "1:2:3", "١:٢"]:
            self.assertIsNone(parseMessageKey(bad), bad)

    def test_sourceFlags(self) -> None:
        """
        Every flag but C{\\Recent} is kept, keywords included; a non-ASCII
        flag, which could not be sent on, is dropped.
        """
        self.assertEqual(
            sourceFlags(("\\Seen", "\\RECENT", "$Forwarded", "Junk", "Erledigt\u00e9")),
            ("\\Seen", "$Forwarded", "Junk"),
        )
        self.assertEqual(sourceFlags(None), ())

    def test_sourceFlagsShared(self) -> None:
        """
        Messages listed with equal flags share one tuple of source flags:
        each set of flags is filtered once, not once per message.
        """
        first = sourceFlags(tuple(["\\Seen", "$Label7", "\\Recent"]))
        second = sourceFlags(tuple(["\\Seen", "$Label7", "\\Recent"]))
        self.assertEqual(first, ("\\Seen", "$Label7"))
        self.assertIs(first, second)

    def test_folderPath(self) -> None:
        """
        Paths split at the delimiter, INBOX in any case made C{"INBOX"};
        a flat server gives one level.
        """
        self.assertEqual(folderPath("inbox/x/y", "/"), ("INBOX", "x", "y"))
        self.assertEqual(folderPath("a.b", None), ("a.b",))
        self.assertEqual(folderPath("Inboxes.x", "."), ("Inboxes", "x"))

    def test_asCRLFIsToCRLF(self) -> None:
        """
        L{asCRLF} gives what L{toCRLF} gives for every body of up to seven
        octets made of CR, LF and a letter (so every arrangement of bare
        CR, bare LF, CRLF, LFCR and CRCRLF there is), and for a longer
        CRLF body with one bare LF or one bare CR in it.
        """
        for length in range(8):
            for octets in itertools.product(b"\r\na", repeat=length):
                stored = bytes(octets)
                self.assertEqual(asCRLF(stored), toCRLF(stored), stored)
        crlf = b"Subject: x\r\n\r\n" + b"line\r\n" * 100
        for odd in (b"bare\n", b"bare\r", b"\n\r", b"\r\r\n", b"\n"):
            for where in (0, 14, len(crlf)):
                stored = crlf[:where] + odd + crlf[where:]
                self.assertEqual(asCRLF(stored), toCRLF(stored), stored[:40])

    def test_asCRLFKeepsCRLF(self) -> None:
        """
        A body that is CRLF throughout is handed on as the same object,
        uncopied.
        """
        stored = b"Subject: x\r\n\r\n" + b"\xe2\x80\x94 line\r\n" * 100
        self.assertIs(asCRLF(stored), stored)


# Against a private Dovecot.

Plan = dict[str, list[tuple[bytes, tuple[str, ...], datetime]]]
"""
Per folder (decoded name, C{.} as delimiter), the messages loaded: body,
flags, INTERNALDATE.
"""

# Hides LIST-EXTENDED, SPECIAL-USE and CONDSTORE: LIST and LSUB, no
# mod-sequences.
MINIMAL_CAPABILITIES = "IMAP4rev1 SASL-IR LITERAL+ UIDPLUS"


def _bodies(bodies: Sequence[MessageBody]) -> list[bytes]:
    """
    C{bodies}, checked to be all readable: in memory, or a
    L{StreamedBody} (a spooled body) read whole.
    """
    result = []
    for each in bodies:
        if isinstance(each, StreamedBody):
            result.append(b"".join(each.slices(1 << 20)))
            each.close()
        else:
            assert isinstance(each, bytes), each
            result.append(each)
    return result


def _quotedName(name: str) -> str:
    """
    A decoded mailbox name as an imaplib argument.
    """
    return '"' + name.encode("imap4-utf-7").decode("ascii") + '"'


def _imaplibSession(instance: Any, user: Any) -> imaplib.IMAP4:
    """
    An independent client logged in to C{user}'s account.
    """
    client = imaplib.IMAP4("127.0.0.1", instance.port, timeout=60)
    client.login(user.name, user.password)
    return client


def _append(
    client: imaplib.IMAP4, name: str, message: bytes, flags: tuple[str, ...], when: datetime
) -> None:
    """
    APPEND one message with its flags and INTERNALDATE.
    """
    flagList = "(" + " ".join(flags) + ")"
    typ, data = client.append(_quotedName(name), flagList, imaplib.Time2Internaldate(when), message)
    assert typ == "OK", data


def _load(instance: Any, user: Any) -> Plan:
    """
    Fill C{user}'s account: INBOX (flags, a keyword, a 5 MB message),
    C{Entwürfe}, INBOX's child C{Lists} (not subscribed), an empty
    C{Sent}.
    """
    line = b"%07d the quick brown fox jumps over the lazy dog\r\n"
    big = b"Subject: big\r\nMessage-ID: <big@example.org>\r\n\r\n" + b"".join(
        line % i for i in range(100_000)
    )
    plan: Plan = {
        "INBOX": [
            (body(1, 2000), ("\\Seen", "$Forwarded"), datetime(2024, 3, 1, 12, 30, tzinfo=CET)),
            (body(2, 300), (), datetime(2020, 1, 2, 23, 59, 58, tzinfo=EST)),
            (big, ("\\Flagged",), datetime(2019, 7, 14, 8, 0, tzinfo=UTC)),
        ],
        "Entwürfe": [(body(3), ("\\Draft",), datetime(2023, 5, 5, 5, 5, 5, tzinfo=UTC))],
        "INBOX.Lists": [
            (body(4, 100_000), ("\\Seen", "\\Answered"), datetime(2022, 2, 2, 2, 2, tzinfo=UTC))
        ],
        "Sent": [],
    }
    client = _imaplibSession(instance, user)
    try:
        for name in ("Entwürfe", "INBOX.Lists", "Sent"):
            typ, data = client.create(_quotedName(name))
            assert typ == "OK", data
        for name in ("INBOX", "Entwürfe", "Sent"):
            client.subscribe(_quotedName(name))
        for name, messages in plan.items():
            for message, flags, when in messages:
                _append(client, name, message, flags, when)
    finally:
        client.logout()
    return plan


def _opener(instance: Any, user: Any, compress: bool = False) -> Callable[[], Any]:
    """
    Opens logged-in sessions to C{user}'s account on the real reactor.
    """
    from twisted.internet import reactor
    from twisted.internet.endpoints import TCP4ClientEndpoint

    from imapmig.imap.opening import openSession

    def open() -> Any:
        return openSession(
            TCP4ClientEndpoint(reactor, "127.0.0.1", instance.port),
            reactor,
            description=f"{user.name} at dovecot",
            user=user.name,
            password=user.password,
            starttls=False,
            tlsOptions=None,
            timeout=60,
            compress=compress,
        )

    return open


def _digests(bodies: Sequence[bytes]) -> list[str]:
    """
    The hex SHA-256 of each body.
    """
    return [hashlib.sha256(b).hexdigest() for b in bodies]


class DovecotSourceTests(TestCase):
    """
    An account of a real Dovecot, loaded with L{imaplib}, read with
    L{IMAPSource}.
    """

    def setUp(self) -> None:
        """
        Skip without a Dovecot binary.
        """
        from imapmig.testing.dovecot import requireDovecot

        requireDovecot(self)

    async def readAndCheck(self, source: IMAPSource, plan: Plan, condstore: bool) -> None:
        """
        Read every folder of C{source} and compare with C{plan}: paths,
        subscriptions, flags, INTERNALDATEs, sizes, and the SHA-256 of
        every body (read in reverse order); then check that reading set
        no flag.
        """
        folders = await source.listFolders()
        self.assertEqual(
            [(f.path, f.subscribed) for f in folders],
            [
                (("INBOX",), True),
                (("INBOX", "Lists"), False),
                (("Entwürfe",), True),
                (("Sent",), True),
            ],
        )
        byKey = {f.key: f for f in folders}
        self.assertEqual(set(byKey), set(plan))
        for key, expected in plan.items():
            folder = byKey[key]
            messages = await source.listMessages(folder)
            self.assertEqual(
                [(tuple(sorted(m.flags)), m.internalDate, m.size) for m in messages],
                [(tuple(sorted(f)), when, len(b)) for b, f, when in expected],
                key,
            )
            status = source.folderStatus(folder)
            assert status is not None
            self.assertEqual((status.exists, status.uidNext), (len(expected), len(expected) + 1))
            self.assertEqual(status.highestModSeq is not None, condstore)
            read = await source.readBodies(folder, list(reversed(messages)))
            self.assertEqual(
                [isinstance(b, StreamedBody) for b in read],
                [len(b) > SPOOL_ABOVE for b, _, _ in reversed(expected)],
            )
            bodies = _bodies(read)
            self.assertEqual(_digests(bodies), _digests([b for b, _, _ in reversed(expected)]))
        again = await source.listMessages(byKey["INBOX"])
        self.assertEqual(
            [tuple(sorted(m.flags)) for m in again],
            [tuple(sorted(f)) for _, f, _ in plan["INBOX"]],
        )

    async def test_readAccount(self) -> None:
        """
        Everything loaded into a Dovecot account with its full capability
        list (LIST-EXTENDED, SPECIAL-USE, CONDSTORE) is read back exactly;
        C{Sent} carries its special use.
        """
        from tests.support import freshUser, sharedDovecot

        instance = sharedDovecot()
        user = freshUser(instance)
        plan = _load(instance, user)
        source = IMAPSource(_opener(instance, user), "dovecot", commandBytes=1024 * 1024)
        try:
            await self.readAndCheck(source, plan, condstore=True)
            folders = await source.listFolders()
            self.assertEqual(
                {f.key: f.specialUse for f in folders},
                {"INBOX": None, "INBOX.Lists": None, "Entwürfe": None, "Sent": "\\Sent"},
            )
        finally:
            await source.close()

    async def test_readWithoutExtensions(self) -> None:
        """
        A Dovecot advertising neither LIST-EXTENDED nor CONDSTORE is read
        with LIST and LSUB, and without mod-sequences, just as exactly.
        """
        from tests.support import freshUser, sharedDovecot

        instance = sharedDovecot(MINIMAL_CAPABILITIES)
        user = freshUser(instance)
        plan = _load(instance, user)
        source = IMAPSource(_opener(instance, user), "dovecot")
        try:
            await self.readAndCheck(source, plan, condstore=False)
        finally:
            await source.close()

    async def test_readCompressed(self) -> None:
        """
        Bodies read through COMPRESS=DEFLATE arrive exact, and fewer
        octets crossed the wire than were read.
        """
        from tests.test_imap_compress import _compressingDovecot, _freshUser

        instance = _compressingDovecot()
        user = _freshUser(instance)
        plan = _load(instance, user)
        sessions: list[IMAPSession] = []
        opener = _opener(instance, user, compress=True)

        async def open() -> IMAPSession:
            session: IMAPSession = await opener()
            sessions.append(session)
            return session

        source = IMAPSource(open, "dovecot")
        try:
            await self.readAndCheck(source, plan, condstore=True)
            [session] = sessions
            stats = session.compressionStats()
            assert stats is not None
            self.assertGreater(stats.receivedPlain, 5 * 1024 * 1024)
            self.assertLess(stats.receivedWire, stats.receivedPlain // 2)
        finally:
            await source.close()

    async def test_deltaPassAndExpunge(self) -> None:
        """
        After another client adds a message, changes flags and expunges a
        message, a delta pass reports the new message and the flag change,
        and the expunged message reads as expunged.
        """
        from tests.support import freshUser, sharedDovecot

        instance = sharedDovecot()
        user = freshUser(instance)
        _load(instance, user)
        source = IMAPSource(_opener(instance, user), "dovecot")
        try:
            [inbox] = [f for f in await source.listFolders() if f.key == "INBOX"]
            messages = await source.listMessages(inbox)
            before = source.folderStatus(inbox)
            assert before is not None
            other = _imaplibSession(instance, user)
            try:
                other.select("INBOX")
                other.uid("STORE", "2", "+FLAGS", "(\\Answered)")
                other.uid("STORE", "1", "+FLAGS", "(\\Deleted)")
                other.expunge()
                _append(other, "INBOX", body(9), ("$Later",), datetime(2021, 1, 1, tzinfo=UTC))
            finally:
                other.logout()
            changes = await source.listMessagesSince(
                inbox, before.uidValidity, before.uidNext, before.highestModSeq
            )
            self.assertFalse(changes.uidValidityChanged)
            self.assertEqual(
                [(m.key, m.flags) for m in changes.newMessages],
                [(messageKey(before.uidValidity, 4), ("$Later",))],
            )
            self.assertTrue(changes.flagChangesKnown)
            self.assertEqual(
                changes.flagChanges,
                (FlagChange(messageKey(before.uidValidity, 2), ("\\Answered",)),),
            )
            bodies = await source.readBodies(inbox, messages[:2])
            self.assertEqual(bodies[0], UnreadableMessage(EXPUNGED))
            self.assertEqual(_digests(_bodies(bodies[1:])), _digests([body(2, 300)]))
        finally:
            await source.close()
