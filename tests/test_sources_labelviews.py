# -*- test-case-name: tests.test_sources_labelviews -*-
"""
Tests for L{imapmig.sources.labelviews}: Gmail's All Mail, Important and
Starred as an IMAP source, alone (L{IMAPSource}) and in a whole job,
against the fake server in Gmail's shape (L{GMAIL_CAPABILITIES}: LITERAL-
only, no MULTIAPPEND, X-GM-EXT-1).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Sequence

from twisted.internet.defer import Deferred
from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from imapmig.errors import SourceError
from imapmig.imap.fetcheditem import FetchedItem, parseInternalDate
from imapmig.imap.syntax import Value
from imapmig.imap.opening import openSession
from imapmig.imap.session import IMAPSession
from imapmig.job import JobSettings, MigrationJob
from imapmig.mail.message import SourceFolder, SourceMessage
from imapmig.mail.folders import FolderRules, isIncluded
from imapmig.sources.imap import IMAPSource
from imapmig.sources.labelviews import (
    LabelViewFilter,
    folderLabels,
    gmailMessageId,
    headerIdentity,
    labelViewUse,
    planLabelViews,
    resolveLabelViews,
)
from imapmig.testing.fakestore import FakeMailStore, gmailMessageId as fakeMessageId
from tests.test_job import JOB, PASSWORD, USER, JobHarness, body

GMAIL_CAPABILITIES = ("IMAP4rev1", "LITERAL-", "UIDPLUS", "X-GM-EXT-1", "SASL-IR", "AUTH=PLAIN")
"""
What Gmail offers that matters here (its CAPABILITY after login also has
ID, IDLE, NAMESPACE, QUOTA, XLIST, CHILDREN, ENABLE, MOVE, CONDSTORE,
ESEARCH, UTF8=ACCEPT, LIST-EXTENDED, LIST-STATUS, LITERAL-, SPECIAL-USE,
APPENDLIMIT=35651584, COMPRESS=DEFLATE).
"""

GMAIL_USER = "gmail-user"
GMAIL_PASSWORD = "gmail-pw"

ALL_MAIL = "[Gmail]/All Mail"
IMPORTANT = "[Gmail]/Important"
STARRED = "[Gmail]/Starred"
SENT = "[Gmail]/Sent Mail"

_VIEWS = {ALL_MAIL: "\\All", IMPORTANT: "\\Important", STARRED: "\\Flagged", SENT: "\\Sent"}


def folder(path: tuple[str, ...], specialUse: str | None = None) -> SourceFolder:
    """
    A source folder keyed by its path joined with C{/}.
    """
    return SourceFolder(path=path, key="/".join(path), specialUse=specialUse)


class LabelViewUseTests(SynchronousTestCase):
    """
    L{labelViewUse} finds the views by SPECIAL-USE, else by Gmail's names.
    """

    def test_bySpecialUse(self) -> None:
        """
        C{\\All}, C{\\Important} and C{\\Flagged} make a folder a view,
        whatever its name (Gmail localises them).
        """
        self.assertEqual(labelViewUse(folder(("[Gmail]", "Alle Nachrichten"), "\\All")), "\\All")
        self.assertEqual(labelViewUse(folder(("x",), "\\Important")), "\\Important")
        self.assertEqual(labelViewUse(folder(("Markiert",), "\\Flagged")), "\\Flagged")
        self.assertIsNone(labelViewUse(folder(("[Gmail]", "Sent Mail"), "\\Sent")))

    def test_byName(self) -> None:
        """
        Without SPECIAL-USE, Gmail's English names under C{[Gmail]} or
        C{[Google Mail]} make a folder a view; the same names elsewhere do
        not.
        """
        self.assertEqual(labelViewUse(folder(("[Gmail]", "All Mail"))), "\\All")
        self.assertEqual(labelViewUse(folder(("[Google Mail]", "Starred"))), "\\Flagged")
        self.assertEqual(labelViewUse(folder(("[Gmail]", "Important"))), "\\Important")
        self.assertIsNone(labelViewUse(folder(("Starred",))))
        self.assertIsNone(labelViewUse(folder(("Archive", "All Mail"))))

    def test_resolve(self) -> None:
        """
        C{auto} de-duplicates where the server offers X-GM-EXT-1 only;
        C{dedup} and C{copy} mean themselves.
        """
        self.assertEqual(resolveLabelViews("auto", {b"X-GM-EXT-1", b"IMAP4REV1"}), "dedup")
        self.assertEqual(resolveLabelViews("auto", {b"IMAP4REV1"}), "copy")
        self.assertEqual(resolveLabelViews("dedup", set()), "dedup")
        self.assertEqual(resolveLabelViews("copy", {b"X-GM-EXT-1"}), "copy")


class PlanLabelViewsTests(SynchronousTestCase):
    """
    L{planLabelViews} leaves Important and Starred out and puts All Mail
    last, to be de-duplicated.
    """

    folders = [
        folder(("INBOX",)),
        folder(("[Gmail]", "All Mail"), "\\All"),
        folder(("[Gmail]", "Important"), "\\Important"),
        folder(("[Gmail]", "Starred"), "\\Flagged"),
        folder(("Work",)),
    ]

    def test_withMessageIds(self) -> None:
        """
        With X-GM-MSGID, All Mail is kept, last, and de-duplicated;
        Important and Starred are left out, each with why.
        """
        kept, deduplicated, leftOut = planLabelViews(self.folders, (), True)
        self.assertEqual([f.key for f in kept], ["INBOX", "Work", "[Gmail]/All Mail"])
        self.assertEqual(deduplicated, {"[Gmail]/All Mail"})
        self.assertEqual([f.key for f, _ in leftOut], ["[Gmail]/Important", "[Gmail]/Starred"])
        self.assertIn("\\Flagged flag is copied", leftOut[1][1])

    def test_withoutMessageIds(self) -> None:
        """
        Without X-GM-MSGID All Mail is still listed last and de-duplicated
        (by L{headerIdentity}), bound for the archive folder
        (C{destination}); with the archive folder off it is marked not
        migrated, with why.  Important and Starred are left out.
        """
        kept, deduplicated, leftOut = planLabelViews(self.folders, (), False)
        self.assertEqual([f.key for f in kept], ["INBOX", "Work", "[Gmail]/All Mail"])
        self.assertEqual(deduplicated, {"[Gmail]/All Mail"})
        self.assertEqual((kept[-1].destination, kept[-1].notMigrated), (("Archive",), None))
        self.assertEqual([f.key for f, _ in leftOut], ["[Gmail]/Important", "[Gmail]/Starred"])
        kept, _, _ = planLabelViews(self.folders, (), False, "Mail/Old")
        self.assertEqual(kept[-1].destination, ("Mail", "Old"))
        kept, _, _ = planLabelViews(self.folders, (), False, None)
        self.assertIsNone(kept[-1].destination)
        self.assertEqual(
            kept[-1].notMigrated,
            "found only in [Gmail]/All Mail (archived mail, in no other folder copied)"
            " and archive_folder is off",
        )
        kept, _, _ = planLabelViews(self.folders, (), True, None)
        self.assertEqual((kept[-1].destination, kept[-1].notMigrated), (None, None))

    def test_includeNamesThem(self) -> None:
        """
        An C{include} pattern naming a view explicitly keeps it, as an
        ordinary folder (All Mail still de-duplicated, last); a wildcard
        at the top level names none.
        """
        include = ("INBOX", "[Gmail]/Starred", "[Gmail]/All Mail")
        kept, deduplicated, leftOut = planLabelViews(self.folders, include, False)
        self.assertEqual(
            [f.key for f in kept], ["INBOX", "[Gmail]/Starred", "Work", "[Gmail]/All Mail"]
        )
        self.assertEqual(deduplicated, {"[Gmail]/All Mail"})
        self.assertEqual([f.key for f, _ in leftOut], ["[Gmail]/Important"])
        kept, deduplicated, _ = planLabelViews(self.folders, include, True)
        self.assertEqual(deduplicated, {"[Gmail]/All Mail"})
        self.assertEqual(kept[-1].key, "[Gmail]/All Mail")
        _, _, leftOut = planLabelViews(self.folders, ("*",), True)
        self.assertEqual(len(leftOut), 2)


class LabelViewFilterTests(SynchronousTestCase):
    """
    L{LabelViewFilter} filters a view's listing by what ordinary folders
    listed.
    """

    def item(self, uid: int, messageId: bytes | None) -> FetchedItem:
        extra = {} if messageId is None else {b"X-GM-MSGID": messageId}
        return FetchedItem(sequence=uid, uid=uid, extra=extra)

    def test_filter(self) -> None:
        """
        A view keeps the messages seen in no ordinary folder, and those
        without X-GM-MSGID (nothing tells).
        """
        labels = LabelViewFilter({"All"})
        inbox = [self.item(1, b"10"), self.item(2, b"11")]
        self.assertEqual(labels.listed(folder(("INBOX",)), inbox), (inbox, 0))
        allMail = [self.item(1, b"10"), self.item(2, b"12"), self.item(3, b"11"), self.item(4, None)]
        kept, dropped = labels.listed(folder(("All",)), allMail)
        self.assertEqual([i.uid for i in kept], [2, 4])
        self.assertEqual(dropped, 2)
        self.assertEqual(gmailMessageId(self.item(1, b"10")), b"10")
        self.assertEqual(gmailMessageId(FetchedItem(sequence=1, extra={b"x-gm-msgid": b"7"})), b"7")

    def test_labels(self) -> None:
        """
        A view's message not seen by X-GM-MSGID but labelled with a folder
        listed in the pass is left out; if it arrived during the pass (at
        or above the view's UIDNEXT when the pass began) it is deferred:
        its UID is among the view's deferred ones.  A label of a folder not
        listed does not count; system labels match whatever their case.
        """
        labels = LabelViewFilter({"All"})
        labels.began(folder(("All",)), 4)
        inbox = folder(("INBOX",))
        labels.listed(inbox, [self.item(1, b"10")], folderLabels(inbox, b"INBOX"))
        work = folder(("Work",))
        labels.listed(work, [], folderLabels(work, b"Work"))
        def labelled(uid: int, messageId: bytes, *names: bytes) -> FetchedItem:
            labelList: list[Value] = list(names)
            extra: dict[bytes, Value] = {b"X-GM-MSGID": messageId, b"X-GM-LABELS": labelList}
            return FetchedItem(sequence=uid, uid=uid, extra=extra)
        allMail = [
            labelled(1, b"10", b"\\Inbox"),
            labelled(2, b"20", b"Work"),
            labelled(3, b"30", b"Other"),
            labelled(5, b"50", b"\\INBOX"),
            labelled(6, b"60", b"Work", b"Other"),
            labelled(7, b"70"),
        ]
        kept, dropped = labels.listed(folder(("All",)), allMail)
        self.assertEqual([i.uid for i in kept], [3, 7])
        self.assertEqual(dropped, 4)
        self.assertEqual(labels.heldBack(folder(("All",))), 5)
        self.assertEqual(labels.deferred(folder(("All",))), (5, 6))
        self.assertIsNone(labels.heldBack(inbox))
        self.assertEqual(labels.deferred(inbox), ())

    def test_deferredOnly(self) -> None:
        """
        The deferred UIDs are those of the messages left undecided, not
        every UID from the lowest of them up: a message that arrived
        during the pass above a deferred one and was seen in INBOX
        (copied there) is not among them, so the next pass does not list
        it again (and, archived meanwhile, copy it into All Mail too).
        """
        allMail = folder(("[Gmail]", "All Mail"))
        labels = LabelViewFilter({allMail.key})
        labels.began(allMail, 100)
        inbox = folder(("INBOX",))
        labels.listed(inbox, [self.item(7, b"555")], folderLabels(inbox, b"INBOX"))

        def inInbox(uid: int, messageId: bytes) -> FetchedItem:
            extra: dict[bytes, Value] = {b"X-GM-MSGID": messageId, b"X-GM-LABELS": [b"\\Inbox"]}
            return FetchedItem(sequence=uid, uid=uid, extra=extra)

        kept, dropped = labels.listed(allMail, [inInbox(120, b"777"), inInbox(130, b"555")])
        self.assertEqual((kept, dropped), ([], 2))
        self.assertEqual(labels.deferred(allMail), (120,))

    def test_noPassStart(self) -> None:
        """
        Without the view's UIDNEXT at the start of the pass, a labelled
        message is left out but nothing is held back.
        """
        labels = LabelViewFilter({"All"})
        inbox = folder(("INBOX",))
        labels.listed(inbox, [], folderLabels(inbox, b"INBOX"))
        item = FetchedItem(sequence=1, uid=9, extra={b"X-GM-MSGID": b"1", b"X-GM-LABELS": [b"\\Inbox"]})
        self.assertEqual(labels.listed(folder(("All",)), [item]), ([], 1))
        self.assertIsNone(labels.heldBack(folder(("All",))))

    def test_compactIds(self) -> None:
        """
        The message ids seen are kept as 64-bit numbers, 8 octets each; an
        id that is no such number does not count as seen.
        """
        labels = LabelViewFilter({"All"})
        many = [self.item(n, b"%d" % (2**63 + n)) for n in range(1000)]
        many.append(self.item(1001, b"x1"))
        many.append(self.item(1002, b"%d" % 2**64))
        labels.listed(folder(("INBOX",)), many)
        self.assertEqual(labels._seen.itemsize * len(labels._seen), 8000)
        view = [self.item(1, b"%d" % (2**63 + 5)), self.item(2, b"x1"), self.item(3, b"%d" % 2**64)]
        kept, dropped = labels.listed(folder(("All",)), view)
        self.assertEqual(([i.uid for i in kept], dropped), ([2, 3], 1))

    def test_failed(self) -> None:
        """
        An ordinary folder that could not be listed is remembered; a view
        is not.
        """
        labels = LabelViewFilter({"All"})
        labels.failed(folder(("All",)))
        labels.failed(folder(("Work", "2020")))
        self.assertEqual(labels.unlisted, ["Work/2020"])


def headerItem(
    uid: int, messageId: bytes | None, size: int = 100, date: str = "01-Jan-2020 00:00:00 +0000"
) -> FetchedItem:
    """
    A listing response with C{BODY[HEADER.FIELDS (MESSAGE-ID)]} (empty
    for C{None}), a size and an INTERNALDATE.
    """
    header = b"" if messageId is None else b"Message-ID: " + messageId + b"\r\n\r\n"
    parsed = parseInternalDate(date.encode("ascii"))
    return FetchedItem(
        sequence=uid,
        uid=uid,
        size=size,
        internalDate=parsed,
        sections={b"BODY[HEADER.FIELDS (MESSAGE-ID)]": header},
    )


class HeaderIdentityTests(SynchronousTestCase):
    """
    Without X-GM-EXT-1 (L{LabelViewFilter} with C{byHeader}), a message is
    recognised by its Message-ID, size and INTERNALDATE
    (L{headerIdentity}).
    """

    def test_identity(self) -> None:
        """
        The identity is the Message-ID as L{messageIdOf} reads it (folded
        or not, with outer spaces or not), with the size and the instant;
        none for a message without a Message-ID.
        """
        one = headerIdentity(headerItem(1, b"<a@example>"))
        self.assertIsNotNone(one)
        folded = headerItem(2, b"\r\n <a@example> ")
        self.assertEqual(headerIdentity(folded), one)
        sameInstant = headerItem(3, b"<a@example>", date="01-Jan-2020 01:00:00 +0100")
        self.assertEqual(headerIdentity(sameInstant), one)
        self.assertNotEqual(headerIdentity(headerItem(4, b"<A@example>")), one)
        self.assertNotEqual(headerIdentity(headerItem(5, b"<a@example>", size=101)), one)
        later = headerItem(6, b"<a@example>", date="01-Jan-2020 00:00:01 +0000")
        self.assertNotEqual(headerIdentity(later), one)
        self.assertIsNone(headerIdentity(headerItem(7, None)))
        self.assertIsNone(headerIdentity(FetchedItem(sequence=8, uid=8)))

    def test_withoutMessageId(self) -> None:
        """
        A message without a Message-ID is recognised by its Date, From, To
        and Subject lines as the server returns them, with its size and
        date; with none of them, it has no identity.
        """

        def fields(uid: int, lines: bytes, size: int = 100) -> FetchedItem:
            item = headerItem(uid, None, size)
            section = {b"BODY[HEADER.FIELDS (DATE FROM TO SUBJECT)]": lines}
            return FetchedItem(
                sequence=uid, uid=uid, size=size, internalDate=item.internalDate,
                sections={**item.sections, **section},
            )  # fmt: skip

        lines = b"Subject: hello\r\nFrom: a@example\r\n\r\n"
        one = headerIdentity(fields(1, lines))
        self.assertIsNotNone(one)
        self.assertEqual(headerIdentity(fields(2, lines)), one)
        self.assertNotEqual(headerIdentity(fields(3, lines.replace(b"hello", b"hullo"))), one)
        self.assertNotEqual(headerIdentity(fields(4, lines, size=101)), one)
        self.assertIsNone(headerIdentity(fields(5, b"\r\n")))
        withId = headerItem(6, b"<x@example>")
        self.assertNotEqual(headerIdentity(withId), one)

    def test_filter(self) -> None:
        """
        All Mail keeps the messages whose identity no ordinary folder
        listed, and those without a Message-ID (never taken for another);
        an unmatched message that arrived during the pass (at or above
        All Mail's UIDNEXT when it began) is deferred, not kept.
        """
        allMail = folder(("[Gmail]", "All Mail"))
        labels = LabelViewFilter({allMail.key}, byHeader=True)
        labels.began(allMail, 10)
        inbox = [headerItem(1, b"<1@x>"), headerItem(2, b"<2@x>"), headerItem(3, None)]
        self.assertEqual(labels.listed(folder(("INBOX",)), inbox), (inbox, 0))
        view = [
            headerItem(1, b"<1@x>"),
            headerItem(2, b"<2@x>", size=99),
            headerItem(3, None),
            headerItem(4, b"<4@x>"),
            headerItem(10, b"<1@x>"),
            headerItem(11, b"<11@x>"),
        ]
        kept, dropped = labels.listed(allMail, view)
        self.assertEqual([i.uid for i in kept], [2, 3, 4])
        self.assertEqual(dropped, 3)
        self.assertEqual(labels.deferred(allMail), (11,))


class GmailAccount:
    """
    A Gmail-shaped account on the fake server of a L{JobHarness} (which
    also holds the destination account): labels are mailboxes, every
    message but those in Sent only is also in All Mail, flagged ones in
    Starred.
    """

    def __init__(
        self,
        test: SynchronousTestCase,
        capabilities: Sequence[str] = GMAIL_CAPABILITIES,
        withIds: bool = False,
        **kwargs: Any,
    ) -> None:
        """
        @param withIds: deliver messages with a Message-ID (L{idBody}).
        """
        self.body = idBody if withIds else body
        self.harness = JobHarness(test, capabilities=capabilities, delimiter="/", **kwargs)
        self.mail = self.harness.mail = FakeMailStore({USER: PASSWORD, GMAIL_USER: GMAIL_PASSWORD}, "/")
        self.mail.announceUIDNext = True
        for name, use in _VIEWS.items():
            self.mail.create(GMAIL_USER, name)
            self.mail.specialUse[name] = use
        self.mail.create(GMAIL_USER, "Work")

    def deliver(
        self, n: int, labels: Sequence[str], flags: tuple[str, ...] = (), important: bool = False
    ) -> None:
        """
        Store message C{n} under C{labels} (none: archived), and in All
        Mail, Starred (if flagged) and Important, as Gmail shows it.
        """
        views = list(labels) + [ALL_MAIL]
        if "\\Flagged" in flags:
            views.append(STARRED)
        if important:
            views.append(IMPORTANT)
        for name in views:
            self.mail.append(GMAIL_USER, name, [(self.body(n), flags, None)])

    def opener(self) -> Callable[[], Awaitable[IMAPSession]]:
        """
        Opens a session to the Gmail account.
        """
        harness = self.harness

        def open() -> Awaitable[IMAPSession]:
            return openSession(
                harness.endpoint, harness.clock, description="gmail at memory",
                user=GMAIL_USER, password=GMAIL_PASSWORD, starttls=False,
                tlsOptions=None, timeout=30,
            )  # fmt: skip

        return open

    def source(
        self,
        labelViews: str = "dedup",
        include: Sequence[str] = (),
        archiveFolder: str | None = "Archive",
    ) -> IMAPSource:
        """
        An L{IMAPSource} reading the account for the job L{JOB}.
        """
        return IMAPSource(
            self.opener(), "gmail at memory", include=include, labelViews=labelViews,
            archiveFolder=archiveFolder, job=JOB,
        )  # fmt: skip

    def job(self, source: IMAPSource, rules: FolderRules = FolderRules()) -> MigrationJob:
        """
        A job copying C{source} into the destination account.
        """
        harness = self.harness
        return MigrationJob(
            JOB, source, harness.store, harness.progress,
            self._destinationOpener(), harness.clock, JobSettings(connections=1),
            rules=rules, jitter=lambda: 0.0,
        )  # fmt: skip

    def _destinationOpener(self) -> Callable[[], Awaitable[IMAPSession]]:
        harness = self.harness

        def open() -> Awaitable[IMAPSession]:
            return openSession(
                harness.endpoint, harness.clock, description="alice at memory",
                user=USER, password=PASSWORD, starttls=False, tlsOptions=None, timeout=30,
            )  # fmt: skip

        return open

    def call(self, d: Deferred[Any]) -> Any:
        """
        Pump until C{d} has its result, and return it.
        """
        self.harness.settle(lambda: d.called)
        return self.harness.test.successResultOf(d)

    def numbers(self, mailbox: str) -> list[int]:
        """
        The numbers of the L{body} messages in the destination C{mailbox}.
        """
        found = []
        for stored in self.mail.mailbox(USER, mailbox):
            subject = stored.body.split(b"\r\n", 1)[0]
            found.append(int(subject.rsplit(b" ", 1)[1]))
        return sorted(found)

    def fetchLines(self) -> list[bytes]:
        """
        The UID FETCH command lines every connection's server received.
        """
        return [
            line
            for server in self.harness.endpoint.servers
            for line in server.received
            if b" UID FETCH " in line
        ]


def idBody(n: int) -> bytes:
    """
    Message C{n} as L{body} has it, with a Message-ID.
    """
    return b"Subject: message %d\r\nMessage-ID: <%d@gmail.example>\r\n\r\nHello %d.\r\n" % (
        n,
        n,
        n,
    )


WITHOUT_EXTENSION = tuple(c for c in GMAIL_CAPABILITIES if c != "X-GM-EXT-1")


def _populate(account: GmailAccount) -> None:
    """
    1 in INBOX; 2 in INBOX and Work; 3 archived (All Mail only); 4 in
    Work, starred; 5 in INBOX, important; 6 sent.
    """
    account.deliver(1, ["INBOX"])
    account.deliver(2, ["INBOX", "Work"])
    account.deliver(3, [])
    account.deliver(4, ["Work"], flags=("\\Flagged",))
    account.deliver(5, ["INBOX"], important=True)
    account.deliver(6, [SENT])


class ArrivingSource(IMAPSource):
    """
    An L{IMAPSource} that calls C{arrive} once, just before All Mail is
    listed: mail arriving between the listings of a pass.
    """

    arrive: Callable[[], None] | None = None

    def listMessages(self, folder: SourceFolder) -> Deferred[Sequence[SourceMessage]]:
        arrive, self.arrive = self.arrive, None
        if folder.key == ALL_MAIL and arrive is not None:
            arrive()
        elif arrive is not None:
            self.arrive = arrive
        return super().listMessages(folder)


class HookedSource(IMAPSource):
    """
    An L{IMAPSource} that calls the hook of a folder, once, just before
    that folder is listed: mail arriving, or labelled, at a given point of
    a pass.
    """

    hooks: dict[str, Callable[[], None]] = {}

    def listMessages(self, folder: SourceFolder) -> Deferred[Sequence[SourceMessage]]:
        hook = self.hooks.pop(folder.key, None)
        if hook is not None:
            hook()
        return super().listMessages(folder)


def arrivingSource(account: GmailAccount, arrive: Callable[[], None]) -> ArrivingSource:
    """
    An L{ArrivingSource} reading the account for the job L{JOB}.
    """
    source = ArrivingSource(account.opener(), "gmail at memory", labelViews="dedup", job=JOB)
    source.arrive = arrive
    return source


class GmailSourceTests(SynchronousTestCase):
    """
    L{IMAPSource} with C{labelViews}.
    """

    def listAll(self, source: IMAPSource, account: GmailAccount) -> dict[str, list[SourceMessage]]:
        """
        List the folders, then each folder's messages in order.
        """
        folders = account.call(source.listFolders())
        listed = {}
        for each in folders:
            listed[each.key] = account.call(source.listMessages(each))
        account.call(source.close())
        return listed

    def test_listingWindow(self) -> None:
        """
        Once its folders are listed, a source with C{dedup} lists them one
        at a time (a view after the folders it is set against,
        L{IMAPSource.listingWindow}); with C{copy}, one per connection.
        """
        account = GmailAccount(self)
        _populate(account)
        windows = []
        for labelViews in ["dedup", "copy"]:
            source = IMAPSource(
                account.opener(), "gmail at memory", connections=3, labelViews=labelViews, job=JOB
            )
            account.call(source.listFolders())
            windows.append(source.listingWindow)
            account.call(source.close())
        self.assertEqual(windows, [1, 3])

    def test_dedup(self) -> None:
        """
        With C{dedup}, Important and Starred are left out (logged, with
        the job's name, as every label view event is), All Mail comes last and lists only the archived message; listings ask
        for X-GM-MSGID.
        """
        account = GmailAccount(self)
        _populate(account)
        source = account.source("dedup")
        with capturedLogs() as events:
            listed = self.listAll(source, account)
        self.assertEqual(list(listed), ["INBOX", "Work", SENT, ALL_MAIL])
        self.assertEqual({k: len(v) for k, v in listed.items()}, {"INBOX": 3, SENT: 1, "Work": 2, ALL_MAIL: 1})
        [archived] = listed[ALL_MAIL]
        uid = int(archived.key.split(":")[1])
        self.assertEqual(account.mail.mailbox(GMAIL_USER, ALL_MAIL)[uid - 1].body, body(3))
        self.assertTrue(all(b"X-GM-MSGID" in line for line in account.fetchLines()))
        text = [formatEvent(e) for e in events]
        self.assertTrue(any("label view [Gmail]/Starred left out" in t for t in text), text)
        self.assertTrue(any("label view [Gmail]/Important left out" in t for t in text), text)
        self.assertTrue(
            any("5 messages of [Gmail]/All Mail are also in other folders" in t for t in text), text
        )
        labelEvents = [
            e
            for e in events
            if "label view" in e["log_format"] or "also in other folders" in e["log_format"]
        ]
        self.assertEqual(len(labelEvents), 3)
        self.assertEqual({e.get("job") for e in labelEvents}, {JOB})

    def test_autoWithGmailExtension(self) -> None:
        """
        C{auto} de-duplicates on a server with X-GM-EXT-1.
        """
        account = GmailAccount(self)
        _populate(account)
        listed = self.listAll(account.source("auto"), account)
        self.assertEqual(len(listed[ALL_MAIL]), 1)
        self.assertNotIn(STARRED, listed)

    def test_copy(self) -> None:
        """
        With C{copy} every folder is listed whole, without X-GM-MSGID.
        """
        account = GmailAccount(self)
        _populate(account)
        listed = self.listAll(account.source("copy"), account)
        self.assertEqual(len(listed[ALL_MAIL]), 6)
        self.assertEqual(len(listed[STARRED]), 1)
        self.assertEqual(len(listed[IMPORTANT]), 1)
        self.assertFalse(any(b"X-GM-MSGID" in line for line in account.fetchLines()))

    def test_dedupWithoutExtension(self) -> None:
        """
        C{dedup} on a server without X-GM-EXT-1 lists All Mail last, bound
        for C{Archive}, with only the message in no other folder (seen by
        Message-ID, size and date); every listing asks for the
        Message-ID header, none for X-GM-MSGID; Starred and Important are
        left out (L{IMAPSource.leftOut}, with why), and counted by
        EXAMINE.  C{auto} there copies everything.
        """
        account = GmailAccount(self, WITHOUT_EXTENSION, withIds=True)
        _populate(account)
        source = account.source("dedup")
        folders = account.call(source.listFolders())
        listed = self.listAll(source, account)
        self.assertEqual(list(listed), ["INBOX", "Work", SENT, ALL_MAIL])
        self.assertEqual(len(listed[ALL_MAIL]), 1)
        self.assertEqual(folders[-1].destination, ("Archive",))
        lines = account.fetchLines()
        self.assertFalse(any(b"X-GM-MSGID" in line for line in lines))
        listings = [line for line in lines if b"RFC822.SIZE" in line]
        self.assertTrue(listings)
        self.assertTrue(all(b"BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)]" in line for line in listings))
        self.assertEqual(
            [(f.key, why.split(";")[0]) for f, why in source.leftOut],
            [
                (IMPORTANT, "a view of the messages marked important"),
                (STARRED, "a view of the flagged messages, whose \\Flagged flag is copied"),
            ],
        )
        counts = [account.call(source.countMessages(f)) for f, _ in source.leftOut]
        account.call(source.close())
        self.assertEqual(counts, [1, 1])
        listed = self.listAll(account.source("auto"), account)
        self.assertEqual(len(listed), 6)

    def test_includeNamesAView(self) -> None:
        """
        An C{include} naming Starred copies it whole under C{dedup}.
        """
        account = GmailAccount(self)
        _populate(account)
        listed = self.listAll(account.source("dedup", include=[STARRED]), account)
        self.assertEqual(len(listed[STARRED]), 1)
        self.assertNotIn(IMPORTANT, listed)

    def test_labelFolderUnlisted(self) -> None:
        """
        When an ordinary folder cannot be listed, All Mail is not listed
        either (a SourceError naming that folder): none of its messages is
        copied rather than some twice.
        """
        account = GmailAccount(self)
        _populate(account)
        source = account.source("dedup")
        folders = account.call(source.listFolders())
        work = [f for f in folders if f.key == "Work"][0]
        gone = SourceFolder(path=("Gone",), key="Gone")
        for each in folders:
            if each is work:
                d = source.listMessages(gone)
                account.harness.settle(lambda: d.called)
                self.failureResultOf(d, SourceError)
                continue
            if each.key == ALL_MAIL:
                d = source.listMessages(each)
                account.harness.settle(lambda: d.called)
                error = self.failureResultOf(d, SourceError).value
                self.assertIn("the folder(s) Gone could not be listed", str(error))
            else:
                account.call(source.listMessages(each))
        account.call(source.close())

    def test_delta(self) -> None:
        """
        A delta pass (L{IMAPSource.listMessagesSince}) de-duplicates the
        new messages of All Mail against the new messages of the other
        folders, and moves All Mail's UIDNEXT past those it leaves out.
        """
        account = GmailAccount(self)
        _populate(account)
        source = account.source("dedup")
        listed = self.listAll(source, account)
        marks = {}
        folders = account.call(source.listFolders())
        for each in folders:
            account.call(source.listMessages(each))
            marks[each.key] = source.folderStatus(each)
        account.deliver(7, ["INBOX"])
        account.deliver(8, [])
        folders = account.call(source.listFolders())
        new = {}
        for each in folders:
            mark = marks[each.key]
            assert mark is not None
            changes = account.call(
                source.listMessagesSince(each, mark.uidValidity, mark.uidNext, None)
            )
            new[each.key] = len(changes.newMessages)
        account.call(source.close())
        self.assertEqual(new, {"INBOX": 1, SENT: 0, "Work": 0, ALL_MAIL: 1})
        status = source.folderStatus([f for f in folders if f.key == ALL_MAIL][0])
        assert status is not None
        self.assertEqual(status.uidNext, 9)
        self.assertEqual(len(listed), 4)


EXPECTED = {"INBOX": [1, 2, 5], "Work": [2, 4], ALL_MAIL: [3], SENT: [6]}
"""
Where the messages of L{_populate} land: each once.
"""


def destinationOf(account: GmailAccount) -> dict[str, list[int]]:
    """
    Every destination mailbox holding messages, with their numbers.
    """
    held = {name: account.numbers(name) for name in account.mail.mailboxes(USER)}
    return {name: numbers for name, numbers in held.items() if numbers}


class GmailJobTests(SynchronousTestCase):
    """
    A whole job from a Gmail-shaped source: each message lands once.
    """

    expected = EXPECTED

    def destination(self, account: GmailAccount) -> dict[str, list[int]]:
        """
        Every destination mailbox holding messages, with their numbers.
        """
        return destinationOf(account)

    def test_migrated(self) -> None:
        """
        Labelled messages land in their label folders, archived ones in All
        Mail, each once; Starred and Important are not created, the star
        travels as C{\\Flagged}.
        """
        account = GmailAccount(self)
        _populate(account)
        self.assertTrue(account.harness.run(account.job(account.source())))
        self.assertEqual(self.destination(account), self.expected)
        self.assertNotIn(STARRED, account.mail.mailboxes(USER))
        flagged = [m for m in account.mail.mailbox(USER, "Work") if m.body == body(4)]
        self.assertEqual(flagged[0].flags, ("\\Flagged",))
        progress = account.harness.progress
        self.assertEqual((progress.messagesTotal, progress.messagesDone), (7, 7))
        account.harness.finish()

    def test_restarts(self) -> None:
        """
        Attempts cut short by dropped connections, then a second run of a
        new job on the same state store, copy each message once; All Mail's
        de-duplication does not depend on what an earlier attempt copied.
        """
        account = GmailAccount(self, dropAfterAppends=2)
        _populate(account)
        self.assertTrue(account.harness.run(account.job(account.source())))
        self.assertEqual(self.destination(account), self.expected)
        self.assertGreater(account.harness.progress.reconnects, 0)
        self.assertTrue(account.harness.run(account.job(account.source())))
        self.assertEqual(self.destination(account), self.expected)
        account.harness.finish()

    def test_excludedLabelGoesToAllMail(self) -> None:
        """
        A label folder the rules leave out is not listed, so its messages
        in no other copied folder are copied into All Mail: every message
        the job copies lands once.
        """
        account = GmailAccount(self)
        _populate(account)
        job = account.job(account.source(), FolderRules(exclude=("Work",)))
        self.assertTrue(account.harness.run(job))
        self.assertEqual(
            self.destination(account), {"INBOX": [1, 2, 5], ALL_MAIL: [3, 4], SENT: [6]}
        )
        account.harness.finish()

    def test_arrivalDuringPass(self) -> None:
        """
        A message arriving in INBOX after INBOX's listing and before All
        Mail's is not copied into All Mail (its labels name INBOX): the
        next run copies it into INBOX, once, and All Mail's UIDNEXT held
        below it lets that run decide it again; the run after moves on.
        """
        account = GmailAccount(self)
        _populate(account)
        source = arrivingSource(account, lambda: account.deliver(7, ["INBOX"]))
        self.assertTrue(account.harness.run(account.job(source)))
        self.assertEqual(self.destination(account), self.expected)
        self.assertTrue(account.harness.run(account.job(account.source())))
        self.assertEqual(self.destination(account), {**self.expected, "INBOX": [1, 2, 5, 7]})
        self.assertTrue(account.harness.run(account.job(account.source())))
        self.assertEqual(self.destination(account), {**self.expected, "INBOX": [1, 2, 5, 7]})
        mark = account.call(account.harness.store.folderMark(JOB, ALL_MAIL))
        self.assertEqual(mark.uidNext, 8)
        account.harness.finish()

    def test_arrivalArchivedBeforeNextRun(self) -> None:
        """
        A message arriving in INBOX during a pass's listings, after
        INBOX's, and archived before the next run, is copied by that run
        into All Mail, once: not lost.
        """
        account = GmailAccount(self)
        _populate(account)
        source = arrivingSource(account, lambda: account.deliver(7, ["INBOX"]))
        self.assertTrue(account.harness.run(account.job(source)))
        self.assertEqual(self.destination(account), self.expected)
        account.mail.expunge(GMAIL_USER, "INBOX", body(7))
        self.assertTrue(account.harness.run(account.job(account.source())))
        self.assertEqual(self.destination(account), {**self.expected, ALL_MAIL: [3, 7]})
        account.harness.finish()

    def test_decidedNotListedAgain(self) -> None:
        """
        Only All Mail's deferred messages are listed again by the next
        run, not those the pass decided between them: message 8, arriving
        in INBOX during the pass before INBOX's listing, is copied into
        INBOX and left out of All Mail as seen there; message 7, archived
        into All Mail earlier (a lower UID there) and labelled INBOX after
        INBOX's listing, is deferred.  Message 8 archived before the next
        run is not copied into All Mail too; message 7 is copied into
        INBOX by that run, once.
        """
        account = GmailAccount(self)
        _populate(account)

        def beforeInbox() -> None:
            account.deliver(7, [])
            account.deliver(8, ["INBOX"])

        def beforeAllMail() -> None:
            account.mail.append(GMAIL_USER, "INBOX", [(body(7), (), None)])

        source = HookedSource(account.opener(), "gmail at memory", labelViews="dedup", job=JOB)
        source.hooks = {"INBOX": beforeInbox, ALL_MAIL: beforeAllMail}
        self.assertTrue(account.harness.run(account.job(source)))
        self.assertEqual(self.destination(account), {**self.expected, "INBOX": [1, 2, 5, 8]})
        mark = account.call(account.harness.store.folderMark(JOB, ALL_MAIL))
        self.assertEqual((mark.uidNext, mark.deferred), (9, (7,)))
        account.mail.expunge(GMAIL_USER, "INBOX", body(8))
        self.assertTrue(account.harness.run(account.job(account.source())))
        self.assertEqual(self.destination(account), {**self.expected, "INBOX": [1, 2, 5, 7, 8]})
        mark = account.call(account.harness.store.folderMark(JOB, ALL_MAIL))
        self.assertEqual((mark.uidNext, mark.deferred), (9, ()))
        account.harness.finish()

    def test_archivedDuringPass(self) -> None:
        """
        A message listed in INBOX and archived before All Mail is listed
        is left out of All Mail (its X-GM-MSGID was seen in INBOX); gone
        from INBOX before its body is read, it is not copied there either,
        and the next run copies it, once, into All Mail: not lost.
        """
        account = GmailAccount(self)
        _populate(account)
        source = arrivingSource(account, lambda: account.mail.expunge(GMAIL_USER, "INBOX", body(1)))
        account.harness.run(account.job(source))
        self.assertEqual(self.destination(account), {**self.expected, "INBOX": [2, 5]})
        account.harness.run(account.job(account.source()))
        self.assertEqual(
            self.destination(account), {**self.expected, "INBOX": [2, 5], ALL_MAIL: [1, 3]}
        )
        account.harness.finish()

    def test_fetchedMessageIdMatchesFake(self) -> None:
        """
        The fake's X-GM-MSGID is one number per content (the same message
        under two labels has one).
        """
        self.assertEqual(fakeMessageId(body(1)), fakeMessageId(body(1)))
        self.assertNotEqual(fakeMessageId(body(1)), fakeMessageId(body(2)))

    def test_includedView(self) -> None:
        """
        A job whose C{include} rule names Starred (written as Gmail names
        it, brackets and all) copies it, whole, beside INBOX.
        """
        account = GmailAccount(self)
        _populate(account)
        include = ("INBOX", STARRED)
        self.assertTrue(isIncluded(("[Gmail]", "Starred"), FolderRules(include=include)))
        job = account.job(account.source(include=include), FolderRules(include=include))
        self.assertTrue(account.harness.run(job))
        self.assertEqual(self.destination(account), {"INBOX": [1, 2, 5], STARRED: [4]})
        account.harness.finish()


class GmailJobWithoutExtensionTests(SynchronousTestCase):
    """
    A whole job from a Gmail-shaped source without X-GM-EXT-1: the
    archived mail (in All Mail only) lands in C{Archive}, once; or, with
    the archive folder off, is recorded as not migrated.
    """

    expected = {"INBOX": [1, 2, 5], "Work": [2, 4], "Archive": [3], SENT: [6]}

    def account(self, **kwargs: Any) -> GmailAccount:
        account = GmailAccount(self, WITHOUT_EXTENSION, withIds=True, **kwargs)
        _populate(account)
        return account

    def test_archived(self) -> None:
        """
        The message in All Mail only is copied into C{Archive}, each other
        message into its label folders only; All Mail, Starred and
        Important are not created; attempts cut short by dropped
        connections and a second run copy nothing twice.
        """
        account = self.account(dropAfterAppends=2)
        self.assertTrue(account.harness.run(account.job(account.source())))
        self.assertEqual(destinationOf(account), self.expected)
        self.assertGreater(account.harness.progress.reconnects, 0)
        self.assertTrue(account.harness.run(account.job(account.source())))
        self.assertEqual(destinationOf(account), self.expected)
        for view in (ALL_MAIL, STARRED, IMPORTANT):
            self.assertNotIn(view, account.mail.mailboxes(USER))
        account.harness.finish()

    def test_renameWins(self) -> None:
        """
        A rename rule naming All Mail decides where the archived mail goes.
        """
        account = self.account()
        rules = FolderRules(rename=((ALL_MAIL, "Old"),))
        self.assertTrue(account.harness.run(account.job(account.source(), rules)))
        expected = {k: v for k, v in self.expected.items() if k != "Archive"}
        self.assertEqual(destinationOf(account), {**expected, "Old": [3]})
        account.harness.finish()

    def test_archiveOff(self) -> None:
        """
        With the archive folder off, the message in All Mail only is not
        copied but recorded as failed, with why and its Message-ID and
        Subject: the job ends with a failure, no mailbox is created for it,
        and every later run says so again.
        """
        account = self.account()
        for _ in range(2):
            account.harness.run(account.job(account.source(archiveFolder=None)))
            self.assertEqual(
                destinationOf(account),
                {k: v for k, v in self.expected.items() if k != "Archive"},
            )
            self.assertEqual(account.harness.progress.messagesFailed, 1)
        self.assertNotIn("Archive", account.mail.mailboxes(USER))
        self.assertNotIn(ALL_MAIL, account.mail.mailboxes(USER))
        [failure] = account.call(account.harness.store.failures(JOB))
        self.assertEqual(failure.folderKey, ALL_MAIL)
        self.assertEqual(failure.messageId, "<3@gmail.example>")
        # Named to its owner as any message not migrated (issue 27 point 7).
        self.assertEqual(failure.subject, "message 3")
        self.assertIn("found only in [Gmail]/All Mail", failure.failure or "")
        self.assertIn("archive_folder is off", failure.failure or "")
        account.harness.finish()

    def test_arrivalDuringPass(self) -> None:
        """
        A message arriving in INBOX after INBOX's listing and before All
        Mail's is deferred, not copied into Archive: the next run copies
        it into INBOX, once; one that arrived archived is copied into
        Archive by the next run.
        """
        account = self.account()

        def arrive() -> None:
            account.deliver(7, ["INBOX"])
            account.deliver(8, [])

        source = HookedSource(account.opener(), "gmail at memory", labelViews="dedup", job=JOB)
        source.hooks = {ALL_MAIL: arrive}
        self.assertTrue(account.harness.run(account.job(source)))
        self.assertEqual(destinationOf(account), self.expected)
        for _ in range(2):
            self.assertTrue(account.harness.run(account.job(account.source())))
            self.assertEqual(
                destinationOf(account),
                {**self.expected, "INBOX": [1, 2, 5, 7], "Archive": [3, 8]},
            )
        account.harness.finish()

    def test_withoutMessageIds(self) -> None:
        """
        Messages without a Message-ID are recognised by their Date, From,
        To and Subject lines (fetched for them only, after each listing):
        one labelled INBOX is not copied into Archive too, one archived
        is; one with none of those lines is copied into Archive even
        though it is in INBOX too (never taken for another).
        """
        account = self.account()
        labelled = b"Subject: no id 7\r\nFrom: a@example\r\n\r\nHello 7.\r\n"
        archived = b"Subject: no id 8\r\nFrom: a@example\r\n\r\nHello 8.\r\n"
        bare = b"X-Note: 9\r\n\r\nno id 9\r\n"
        for name in ("INBOX", ALL_MAIL):
            account.mail.append(GMAIL_USER, name, [(labelled, (), None), (bare, (), None)])
        account.mail.append(GMAIL_USER, ALL_MAIL, [(archived, (), None)])
        self.assertTrue(account.harness.run(account.job(account.source())))
        inbox = [m.body for m in account.mail.mailbox(USER, "INBOX")]
        archive = [m.body for m in account.mail.mailbox(USER, "Archive")]
        self.assertEqual((inbox.count(labelled), inbox.count(bare)), (1, 1))
        self.assertEqual(archive.count(labelled), 0)
        self.assertEqual((archive.count(archived), archive.count(bare)), (1, 1))
        fallback = [line for line in account.fetchLines() if b"(DATE FROM TO SUBJECT)" in line]
        self.assertTrue(fallback)
        self.assertTrue(all(b"RFC822.SIZE" not in line for line in fallback))
        account.harness.finish()
