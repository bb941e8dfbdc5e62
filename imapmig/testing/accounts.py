# -*- test-case-name: tests.test_testing_accounts -*-
"""
An account of a private server read and changed the way another mail
client would, with L{imaplib}, outside any reactor: what the tests use to
check what a migration left, whichever server it is (L{AccountReader},
which L{imapmig.testing.dovecot}, L{imapmig.testing.cyrus} and
L{imapmig.testing.courier} share).  Taken out of C{dovecot.py}, where it
lived although every private server uses it.

Like the servers' modules, everything here is synchronous and blocking.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from imaplib import IMAP4, Time2Internaldate
from typing import Sequence

from attrs import frozen

import twisted.mail.imap4  # noqa: F401  (registers the 'imap4-utf-7' codec)

_FETCH_CHUNK = 250
_SYSTEM_FLAGS = ("\\Draft", "\\Flagged", "\\Answered", "\\Seen", "\\Deleted")
_MONTHS = {
    name: number
    for number, name in enumerate(
        "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), start=1
    )
}
_LIST_LINE = re.compile(rb'^\((?P<attributes>[^)]*)\) (?P<delimiter>NIL|"(?:\\.|[^"\\])*") ')
_FETCH_UID = re.compile(rb"\bUID (\d+)")
_FETCH_FLAGS = re.compile(rb"\bFLAGS \(([^)]*)\)")
_FETCH_INTERNALDATE = re.compile(rb'\bINTERNALDATE "([^"]+)"')


@frozen
class IMAPUser:
    """
    An account of a private server (Dovecot, Cyrus, Courier).

    @ivar name: the login name, also the name of its home directory.
    @ivar password: the plain-text password.
    """

    name: str
    password: str


@frozen
class FetchedMessage:
    """
    A message as a private Dovecot stores it, read back by
    L{DovecotInstance.fetchAll}.

    @ivar flags: the message's flags and keywords, C{\\Recent} left out,
        in a fixed order whatever the server's: system flags as
        L{imapmig.testing.corpus.CorpusMessage} orders them (C{\\Draft},
        C{\\Flagged}, C{\\Answered}, C{\\Seen}, C{\\Deleted}), then
        keywords sorted.
    @ivar internalDate: the INTERNALDATE, timezone-aware.
    @ivar body: the full message, as C{BODY.PEEK[]} returns it (CRLF).
    """

    flags: tuple[str, ...]
    internalDate: datetime
    body: bytes


class AccountReader:
    """
    Reading and changing an account of a private server the way another
    mail client would, with L{imaplib}, outside any reactor: what the tests
    use to check what a migration left, whichever server it is.  A
    subclass says how to log in (L{imapClient}).
    """

    def imapClient(self, user: str) -> IMAP4:
        """
        An L{imaplib} client logged in as C{user}; the caller logs it out.
        """
        raise NotImplementedError()

    def listMailboxes(self, user: str) -> list[tuple[tuple[str, ...], str, str]]:
        """
        The mailboxes of C{user}, as C{LIST "" "*"} shows them.

        @param user: the login name.
        @return: one C{(attributes, delimiter, name)} per mailbox, the name
            decoded from modified UTF-7.
        """
        client = self.imapClient(user)
        try:
            return _listAll(client)
        finally:
            client.logout()

    def fetchAll(
        self, user: str, bodyItem: str = "BODY.PEEK[]"
    ) -> dict[str, list[FetchedMessage]]:
        """
        Read every message of every selectable mailbox of C{user}, in UID
        order, without setting C{\\Seen}.

        @param user: the login name.
        @param bodyItem: the FETCH item giving the body: C{BODY.PEEK[]}
            (what Dovecot serves: a NUL as C{0x80}), or C{BINARY.PEEK[]}
            (RFC 3516: the NUL as stored, but base64 and quoted-printable
            parts decoded).
        @return: the messages by the full decoded mailbox name the server
            shows (hierarchy joined with its delimiter, with its personal
            prefix: C{"Archive.2019"}, C{"INBOX.Sent"} on Courier).
        """
        client = self.imapClient(user)
        result: dict[str, list[FetchedMessage]] = {}
        try:
            for attributes, _delimiter, name in _listAll(client):
                lowered = {a.lower() for a in attributes}
                if "\\noselect" in lowered or "\\nonexistent" in lowered:
                    continue
                byUID = _fetchMailbox(client, name, bodyItem)
                result[name] = [byUID[uid] for uid in sorted(byUID)]
        finally:
            client.logout()
        return result

    def fetchMailbox(
        self, user: str, mailbox: str, bodyItem: str = "BODY.PEEK[]"
    ) -> dict[int, FetchedMessage]:
        """
        Read every message of one mailbox of C{user}, without setting
        C{\\Seen}.

        @param user: the login name.
        @param mailbox: the decoded mailbox name, hierarchy joined with the
            server's delimiter.
        @param bodyItem: as for L{fetchAll}.
        @return: the messages by UID.
        """
        client = self.imapClient(user)
        try:
            return _fetchMailbox(client, mailbox, bodyItem)
        finally:
            client.logout()

    def uidValidity(self, user: str, mailbox: str) -> int:
        """
        The UIDVALIDITY of one mailbox of C{user}.

        @param user: the login name.
        @param mailbox: the decoded mailbox name.
        """
        client = self.imapClient(user)
        try:
            typ, data = client.select(quoteMailbox(mailbox), readonly=True)
            _check(typ, data, f"EXAMINE {mailbox}")
            typ, data = client.response("UIDVALIDITY")
            value = data[0]
            if not isinstance(value, bytes):
                raise IMAP4.error(f"no UIDVALIDITY for {mailbox!r}")
            return int(value)
        finally:
            client.logout()

    def appendMessage(
        self,
        user: str,
        mailbox: str,
        body: bytes,
        flags: Sequence[str] = (),
        internalDate: datetime | None = None,
    ) -> tuple[int, int]:
        """
        Append one message to a mailbox of C{user}, exactly as given:
        unlike L{IMAP4.append}, the body's line endings are not touched (a
        bare CR stays a bare CR).

        @param user: the login name.
        @param mailbox: the decoded mailbox name; it must exist.
        @param body: the message, normally with CRLF line endings.
        @param flags: its flags and keywords.
        @param internalDate: its INTERNALDATE, timezone-aware; the server's
            clock when L{None}.
        @return: the mailbox's UIDVALIDITY and the message's UID, from the
            server's C{APPENDUID} (UIDPLUS).
        """
        client = self.imapClient(user)
        try:
            return _appendExact(client, mailbox, body, flags, internalDate)
        finally:
            client.logout()

    def createMailbox(self, user: str, mailbox: str) -> None:
        """
        Create a mailbox of C{user} (the full name, prefix included).
        """
        client = self.imapClient(user)
        try:
            typ, data = client.create(quoteMailbox(mailbox))
            _check(typ, data, f"CREATE {mailbox}")
        finally:
            client.logout()


def _quote(name: str) -> str:
    """
    An IMAP quoted string of the modified-UTF-7 form of C{name}.
    """
    encoded = name.encode("imap4-utf-7").decode("ascii")
    return '"' + encoded.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _unquote(value: bytes) -> bytes:
    if value.startswith(b'"') and value.endswith(b'"') and len(value) >= 2:
        return re.sub(rb"\\(.)", rb"\1", value[1:-1])
    return value


def _check(typ: str, data: Sequence[object], what: str) -> None:
    if typ != "OK":
        raise IMAP4.error(f"{what} failed: {typ} {data!r}")


def _listAll(client: IMAP4) -> list[tuple[tuple[str, ...], str, str]]:
    """
    Run C{LIST "" "*"} and parse every reply.
    """
    typ, data = client.list('""', "*")
    _check(typ, data, "LIST")
    return [_listEntry(item) for item in data if item is not None]


def _listEntry(item: object) -> tuple[tuple[str, ...], str, str]:
    """
    One mailbox of a LIST reply as imaplib gives it (the line, or the line
    and the name's literal): its attributes, delimiter and decoded name.
    """
    line, literal = (item[0], item[1]) if isinstance(item, tuple) else (item, None)
    assert isinstance(line, bytes)
    match = _LIST_LINE.match(line)
    if match is None:
        raise IMAP4.error(f"unparsable LIST reply {line!r}")
    attributes = tuple(match.group("attributes").decode("ascii").split())
    delimiterField = match.group("delimiter")
    delimiter = "" if delimiterField == b"NIL" else _unquote(delimiterField).decode("ascii")
    rawName = bytes(literal) if literal is not None else _unquote(line[match.end() :])
    return attributes, delimiter, rawName.decode("imap4-utf-7")


def quoteMailbox(name: str) -> str:
    """
    A mailbox argument for an L{imaplib} command: C{name} (decoded, e.g.
    C{"Entwürfe"}) in modified UTF-7, as an IMAP quoted string.

    @param name: the decoded mailbox name.
    """
    return _quote(name)


_APPENDUID = re.compile(rb"\[APPENDUID (\d+) (\d+)\]", re.IGNORECASE)


def _appendExact(
    client: IMAP4,
    mailbox: str,
    body: bytes,
    flags: Sequence[str],
    internalDate: datetime | None,
) -> tuple[int, int]:
    """
    C{APPEND} C{body} unchanged (L{IMAP4.append} would rewrite every CR
    and LF as CRLF) and return the C{APPENDUID} response code's values.
    """
    arguments = [_quote(mailbox)]
    if flags:
        arguments.append("(" + " ".join(flags) + ")")
    if internalDate is not None:
        arguments.append(Time2Internaldate(internalDate))
    # typeshed types it str, but imaplib sends bytes as they are.
    client.literal = body  # type: ignore[assignment]
    typ, data = client._simple_command("APPEND", *arguments)
    _check(typ, data, f"APPEND to {mailbox}")
    match = _APPENDUID.search(b" ".join(bytes(d) for d in data if isinstance(d, bytes)))
    if match is None:
        raise IMAP4.error(f"no APPENDUID in the reply to APPEND: {data!r}")
    return int(match.group(1)), int(match.group(2))


def _fetchMailbox(
    client: IMAP4, name: str, bodyItem: str = "BODY.PEEK[]"
) -> dict[int, FetchedMessage]:
    """
    Read every message of mailbox C{name} in chunks.

    @return: the messages by UID.
    """
    typ, data = client.select(_quote(name), readonly=True)
    _check(typ, data, f"EXAMINE {name}")
    typ, data = client.uid("SEARCH", "ALL")
    _check(typ, data, f"UID SEARCH in {name}")
    uids = sorted(int(u) for chunk in data if chunk for u in bytes(chunk).split())
    messages: dict[int, FetchedMessage] = {}
    for start in range(0, len(uids), _FETCH_CHUNK):
        chunk = uids[start : start + _FETCH_CHUNK]
        typ, data = client.uid(
            "FETCH", f"{chunk[0]}:{chunk[-1]}", f"(UID FLAGS INTERNALDATE {bodyItem})"
        )
        _check(typ, data, f"UID FETCH in {name}")
        messages.update(_parseFetch(data))
    return messages


def _parseFetch(data: Sequence[object]) -> dict[int, FetchedMessage]:
    """
    Turn imaplib's FETCH reply items into messages by UID.
    """
    return dict(_fetchedMessage(meta, body) for meta, body in _fetchResponses(data))


def _fetchResponses(data: Sequence[object]) -> list[tuple[bytes, bytes]]:
    """
    The metadata and body of each message of imaplib's FETCH reply items.

    imaplib gives each message with a literal as a C{(line, literal)} pair
    followed by the rest of the response line as bytes; the metadata is
    those two lines only, never the body.
    """
    responses: list[tuple[bytes, bytes]] = []
    lineOpen = False
    for item in data:
        if isinstance(item, tuple):
            responses.append((bytes(item[0]), bytes(item[1])))
            lineOpen = True
        elif isinstance(item, bytes) and lineOpen:
            meta, body = responses[-1]
            responses[-1] = (meta + b" " + item, body)
            lineOpen = False
    return responses


def _fetchedMessage(meta: bytes, body: bytes) -> tuple[int, FetchedMessage]:
    """
    A message's UID and what was fetched of it, from its metadata.
    """
    uid = _FETCH_UID.search(meta)
    flags = _FETCH_FLAGS.search(meta)
    date = _FETCH_INTERNALDATE.search(meta)
    if uid is None or flags is None or date is None:
        raise IMAP4.error(f"incomplete FETCH reply {meta!r}")
    return int(uid.group(1)), FetchedMessage(
        flags=_canonicalFlags(flags.group(1).decode("utf-8").split()),
        internalDate=_parseInternalDate(date.group(1).decode("ascii")),
        body=body,
    )


def _canonicalFlags(flags: Sequence[str]) -> tuple[str, ...]:
    """
    C{flags} without C{\\Recent}, in a fixed order: the system flags in
    Maildir letter order (C{\\Draft}, C{\\Flagged}, C{\\Answered},
    C{\\Seen}, C{\\Deleted}, as L{imapmig.testing.corpus} lists them),
    then keywords sorted.
    """
    byName = {flag.lower(): flag for flag in flags}
    byName.pop("\\recent", None)
    system = tuple(byName.pop(flag.lower()) for flag in _SYSTEM_FLAGS if flag.lower() in byName)
    return system + tuple(sorted(byName.values()))


def _parseInternalDate(value: str) -> datetime:
    """
    Parse an RFC 3501 date-time such as C{" 7-Jul-2019 10:00:00 +0200"}.
    """
    day, month, rest = value.strip().split("-", 2)
    year, clock, zone = rest.split(" ")
    hour, minute, second = (int(x) for x in clock.split(":"))
    sign = -1 if zone[0] == "-" else 1
    offset = timedelta(hours=int(zone[1:3]), minutes=int(zone[3:5])) * sign
    return datetime(
        int(year), _MONTHS[month], int(day), hour, minute, second, tzinfo=timezone(offset)
    )
