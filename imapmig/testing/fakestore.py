# -*- test-case-name: tests.test_testing_fakeserver -*-
"""
The accounts of L{imapmig.testing.fakeserver}: users and passwords, each
user's mailboxes with their messages, UIDVALIDITY and UIDNEXT,
subscriptions, and what Gmail would show of them (labels, message ids).
Several fake server connections share one L{FakeMailStore}.  Taken out of
C{fakeserver.py}, which keeps the connection.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Sequence

from attrs import frozen

from imapmig.testing.imapsyntax import canonicalName, quote

@frozen
class StoredMessage:
    """
    A message as the fake server stored it.

    @ivar internalDate: the APPEND date-time as sent, without its quotes,
        or L{None} if the client gave none.
    """

    body: bytes
    flags: tuple[str, ...]
    internalDate: str | None
    uid: int


class _Mailbox:
    def __init__(self, uidValidity: int) -> None:
        self.uidValidity = uidValidity
        self.uidNext = 1
        self.messages: list[StoredMessage] = []


class FakeMailStore:
    """
    The accounts of a fake server: users and passwords, each user's
    mailboxes (C{INBOX} from the start), their UIDVALIDITY, and
    subscriptions.  Several L{FakeIMAPServer} connections may share one.
    """

    def __init__(
        self,
        users: dict[str, str],
        delimiter: str = ".",
        prefix: str = "",
        namespaceText: bytes | None = None,
        refuseCreate: Callable[[str], bytes | None] = lambda name: None,
    ) -> None:
        """
        @param users: user name to password.
        @param delimiter: the hierarchy delimiter LIST shows.
        @param prefix: the personal namespace's prefix (C{"INBOX."} as on
            Courier): CREATE refuses a name outside it, but C{INBOX},
            with C{NO Invalid mailbox name}, as Courier does.
        @param namespaceText: what NAMESPACE answers after C{* NAMESPACE }
            (where the server advertises NAMESPACE); by default the
            personal namespace of C{prefix} and C{delimiter}, no others.
        @param refuseCreate: called with each name to CREATE; a reply
            such as C{b"NO [CANNOT] Invalid mailbox name"} refuses it.
        """
        self.delimiter = delimiter
        self.prefix = prefix
        self.namespaceText = namespaceText
        # A reply such as b"NO Not now" refuses NAMESPACE (tests set it).
        self.namespaceRefusal: bytes | None = None
        self.refuseCreate = refuseCreate
        # Mailbox name to the SPECIAL-USE attribute LIST shows for it
        # (C{"\\All"} for Gmail's C{[Gmail]/All Mail}); tests set it.
        self.specialUse: dict[str, str] = {}
        # Whether SELECT and EXAMINE send UIDNEXT (Gmail does); tests set it.
        self.announceUIDNext = False
        # Called with the user and the items of each UID FETCH; a reply
        # such as b"NO [OVERQUOTA] ..." refuses it (tests set it).
        self.refuseFetch: Callable[[str, bytes], bytes | None] = lambda user, items: None
        self._passwords = dict(users)
        self._mailboxes: dict[str, dict[str, _Mailbox]] = {user: {} for user in users}
        self._subscriptions: dict[str, list[str]] = {user: [] for user in users}
        self._nextUIDValidity = 1
        for user in users:
            self.create(user, "INBOX")

    def authenticate(self, user: str, password: str) -> bool:
        """
        Whether C{password} is C{user}'s.
        """
        return user in self._passwords and self._passwords[user] == password

    def create(self, user: str, name: str) -> bool:
        """
        Create mailbox C{name} (not its parents).

        @return: C{False} if it already exists.
        """
        boxes = self._mailboxes[user]
        name = canonicalName(name)
        if name in boxes:
            return False
        boxes[name] = _Mailbox(self._nextUIDValidity)
        self._nextUIDValidity += 1
        return True

    def outsidePrefix(self, name: str) -> bool:
        """
        Whether C{name} lies outside the personal namespace's prefix (no
        name does when there is none; C{INBOX} never does).
        """
        return bool(self.prefix) and name.upper() != "INBOX" and not name.startswith(self.prefix)

    def subscribe(self, user: str, name: str) -> None:
        """
        Subscribe C{user} to C{name}.
        """
        name = canonicalName(name)
        if name not in self._subscriptions[user]:
            self._subscriptions[user].append(name)

    def append(
        self, user: str, name: str, messages: Sequence[tuple[bytes, tuple[str, ...], str | None]]
    ) -> tuple[int, list[int]]:
        """
        Store C{(body, flags, internalDate)} messages in an existing mailbox.

        @return: the mailbox's UIDVALIDITY and the new messages' UIDs.
        """
        box = self._mailboxes[user][canonicalName(name)]
        uids = []
        for body, flags, internalDate in messages:
            box.messages.append(StoredMessage(body, flags, internalDate, box.uidNext))
            uids.append(box.uidNext)
            box.uidNext += 1
        return box.uidValidity, uids

    def expunge(self, user: str, name: str, body: bytes) -> None:
        """
        Remove the messages of content C{body} from C{user}'s mailbox
        C{name} (as Gmail does when a label is taken off a message).
        """
        box = self._mailboxes[user][canonicalName(name)]
        box.messages = [m for m in box.messages if m.body != body]

    def renumber(self, user: str, name: str) -> int:
        """
        Give C{user}'s mailbox C{name} a new UIDVALIDITY and its messages
        UIDs from 1, as a server that rebuilt its index does.

        @return: the new UIDVALIDITY.
        """
        box = self._mailboxes[user][canonicalName(name)]
        box.uidValidity = self._nextUIDValidity
        self._nextUIDValidity += 1
        box.messages = [
            StoredMessage(m.body, m.flags, m.internalDate, uid)
            for uid, m in enumerate(box.messages, 1)
        ]
        box.uidNext = len(box.messages) + 1
        return box.uidValidity

    def mailbox(self, user: str, name: str) -> list[StoredMessage]:
        """
        The messages of C{user}'s mailbox C{name}, in UID order.

        @raise KeyError: no such mailbox.
        """
        return list(self._mailboxes[user][canonicalName(name)].messages)

    def mailboxes(self, user: str) -> list[str]:
        """
        C{user}'s mailbox names (decoded), in creation order.
        """
        return list(self._mailboxes[user])

    def uidNext(self, user: str, name: str) -> int:
        """
        The UIDNEXT of C{user}'s mailbox C{name}.
        """
        return self._mailboxes[user][canonicalName(name)].uidNext

    def uidValidity(self, user: str, name: str) -> int:
        """
        The UIDVALIDITY of C{user}'s mailbox C{name}.
        """
        return self._mailboxes[user][canonicalName(name)].uidValidity

    def gmailLabels(self, user: str, body: bytes) -> list[bytes]:
        """
        The C{X-GM-LABELS} of a message as Gmail would show them: one per
        mailbox holding the same content but those whose SPECIAL-USE is
        C{\\All}, C{INBOX} as C{\\Inbox}, a special-use mailbox as its
        system label (C{\\Sent}, C{\\Starred}, ...), any other by its
        quoted name in modified UTF-7.
        """
        return [
            _gmailLabel(name, self.specialUse.get(name))
            for name, box in self._mailboxes[user].items()
            if self.specialUse.get(name) != "\\All" and any(m.body == body for m in box.messages)
        ]

    def subscriptions(self, user: str) -> list[str]:
        """
        The mailboxes C{user} subscribed to, in order.
        """
        return list(self._subscriptions[user])


_SYSTEM_LABELS = {
    "\\Sent": b"\\Sent",
    "\\Drafts": b"\\Draft",
    "\\Important": b"\\Important",
    "\\Flagged": b"\\Starred",
    "\\Junk": b"\\Spam",
    "\\Trash": b"\\Trash",
}


def _gmailLabel(name: str, use: str | None) -> bytes:
    """
    The Gmail label of mailbox C{name} of SPECIAL-USE C{use}: C{\\Inbox},
    a system label, or its quoted name in modified UTF-7.
    """
    if name == "INBOX":
        return b"\\Inbox"
    if use in _SYSTEM_LABELS:
        return _SYSTEM_LABELS[use]
    return quote(name.encode("imap4-utf-7"))


def gmailMessageId(body: bytes) -> int:
    """
    The C{X-GM-MSGID} the fake gives a message: one number per content,
    so the same message stored in two mailboxes (two Gmail labels) has
    the same one, as on Gmail.
    """
    return int.from_bytes(hashlib.sha256(body).digest()[:7], "big")
