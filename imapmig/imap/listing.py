# -*- test-case-name: tests.test_imap_session,tests.test_imap_namespace,tests.test_imap_fetch -*-
"""
What an account's mailboxes are, as LIST, LSUB and NAMESPACE tell on one
connection: L{MailboxListing}, which L{imapmig.imap.session.IMAPSession}'s
C{listMailboxes}, C{hierarchyDelimiter}, C{namespaces} and C{listFolders}
ask.

Split from imapmig/imap/session.py, whose IMAPSession (716 lines) held
these with the commands that change mailboxes and read messages.
"""

from __future__ import annotations

from typing import Sequence

from attrs import evolve
from twisted.logger import Logger

from imapmig.errors import CommandFailed, ProtocolError
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.errormap import mapped, retold
from imapmig.imap.syntax import Value
from imapmig.imap.mailboxes import (
    ListedMailbox,
    MailboxInfo,
    listedMailbox,
    listRows,
    mailboxInfo,
)
from imapmig.imap.namespace import ServerNamespaces, namespaceResponse
from imapmig.mail.folders import PersonalNamespace


class MailboxListing:
    """
    LIST, LSUB and NAMESPACE on one logged-in connection.
    """

    def __init__(self, client: MigrationIMAP4Client, description: str, log: Logger) -> None:
        """
        @param client: the connection.
        @param description: who the session is, for log events and errors.
        @param log: the session's logger (with its fields).
        """
        self._client = client
        self._description = description
        self._log = log

    async def mailboxes(self) -> list[MailboxInfo]:
        """
        Every mailbox (C{LIST "" "*"}).
        """
        lines = await self._collect("LIST", b'"" "*"')
        return [mailboxInfo(row) for row in self._rows(lines, b"LIST")]

    async def hierarchyDelimiter(self) -> str | None:
        """
        The hierarchy delimiter of the personal namespace (C{LIST "" ""}),
        or L{None} for a flat server.
        """
        lines = await self._collect("LIST", b'"" ""')
        for row in self._rows(lines, b"LIST"):
            info = mailboxInfo(row)
            if info.delimiter:
                return info.delimiter
        return None

    async def namespaces(
        self, capabilities: frozenset[bytes], override: PersonalNamespace | None
    ) -> ServerNamespaces:
        """
        The account's namespaces: the NAMESPACE response (RFC 2342) where
        the server offers it, else the empty prefix with the delimiter of
        C{LIST "" ""}.  The configuration's override, if any, replaces the
        personal namespace only (marked configured), so that other users'
        and shared mailboxes are still known; where the server does not
        offer NAMESPACE, or its response is malformed (one warning), the
        override alone; where it refuses NAMESPACE, the override alone
        too (one warning).

        @param capabilities: the server's.
        @param override: the personal namespace the configuration gives
            the server, or L{None}.
        @raise ProtocolError: the NAMESPACE response is missing or
            malformed, and there is no override.
        @raise CommandFailed: the server refused the command, and there is
            no override.
        """
        announced = b"NAMESPACE" in capabilities
        if override is not None:
            return await self._overridden(evolve(override, configured=True), announced)
        if not announced:
            return ServerNamespaces(personal=(await self._topNamespace(),))
        namespaces = await self._announcedNamespaces(False)
        assert namespaces is not None
        if not namespaces.personal:
            # No personal namespace (NIL): folders are still created at
            # the top, with LIST's delimiter.
            namespaces = evolve(namespaces, personal=(await self._topNamespace(),))
        return namespaces

    async def _overridden(
        self, override: PersonalNamespace, announced: bool
    ) -> ServerNamespaces:
        """
        C{override} as the personal namespace, with the other users' and
        shared namespaces of the NAMESPACE response where the server
        C{announced} NAMESPACE and the response can be believed.
        """
        namespaces = await self._announcedNamespaces(True) if announced else None
        if namespaces is None:
            return ServerNamespaces(personal=(override,))
        return evolve(namespaces, personal=(override,))

    async def _topNamespace(self) -> PersonalNamespace:
        """
        The empty prefix, with the delimiter of C{LIST "" ""}.
        """
        return PersonalNamespace("", await self.hierarchyDelimiter())

    async def _announcedNamespaces(self, overridden: bool) -> ServerNamespaces | None:
        """
        The NAMESPACE response; where C{overridden} (the configuration
        names the personal namespace), L{None} when the server refuses the
        command or its response is malformed (one warning each).

        @raise CommandFailed: the server refused, and not C{overridden}.
        @raise ProtocolError: the response is malformed, and not
            C{overridden}.
        """
        try:
            lines, _ = await mapped("NAMESPACE", self._client.sendCollecting(b"NAMESPACE"))
        except CommandFailed as e:
            if not overridden:
                raise
            # The override is there for a server whose NAMESPACE cannot be
            # believed; one that offers it and then refuses it is one.
            self._log.warn(
                "{session}: the server refused NAMESPACE ({status} {text}); believing the"
                " configured namespace alone (other users' and shared namespaces unknown)",
                session=self._description,
                status=e.status,
                text=e.text,
            )
            return None
        try:
            return namespaceResponse(lines)
        except ProtocolError as e:
            if not overridden:
                raise retold(
                    e,
                    f"{self._description}: {e}; a namespace: setting for this server"
                    " in the configuration replaces the personal namespace it announces",
                ) from None
            self._log.warn(
                "{session}: {problem}; believing the configured namespace alone"
                " (other users' and shared namespaces unknown)",
                session=self._description,
                problem=str(e),
            )
            return None

    async def folders(self, capabilities: frozenset[bytes]) -> list[ListedMailbox]:
        """
        Every mailbox with its attributes and subscription: one C{LIST ""
        "*" RETURN (SUBSCRIBED SPECIAL-USE)} where the server has
        LIST-EXTENDED (C{SPECIAL-USE} only where it has SPECIAL-USE),
        else C{LIST "" "*"} and C{LSUB "" "*"}.  Mailboxes that cannot be
        selected (C{\\Noselect}, C{\\NonExistent}) are listed too.

        @param capabilities: the server's.
        @raise CommandFailed: the server refused.
        """
        if b"LIST-EXTENDED" in capabilities:
            return await self._listExtended(b"SPECIAL-USE" in capabilities)
        return await self._listAndLsub()

    async def _listExtended(self, specialUse: bool) -> list[ListedMailbox]:
        """
        L{folders} by one C{LIST "" "*" RETURN (SUBSCRIBED ...)}, with
        C{SPECIAL-USE} where the server has it (C{specialUse}).
        """
        options = b"SUBSCRIBED SPECIAL-USE" if specialUse else b"SUBSCRIBED"
        lines = await self._collect("LIST", b'"" "*" RETURN (' + options + b")")
        return [listedMailbox(row, None) for row in self._rows(lines, b"LIST")]

    async def _listAndLsub(self) -> list[ListedMailbox]:
        """
        L{folders} by C{LIST "" "*"} and C{LSUB "" "*"}.
        """
        lines = await self._collect("LIST", b'"" "*"')
        subscribedLines = await self._collect("LSUB", b'"" "*"')
        subscribed = {
            listedMailbox(row, False).name for row in self._rows(subscribedLines, b"LSUB")
        }
        listed = [listedMailbox(row, False) for row in self._rows(lines, b"LIST")]
        return [
            evolve(mailbox, subscribed=True) if mailbox.name in subscribed else mailbox
            for mailbox in listed
        ]

    async def _collect(self, command: str, arguments: bytes) -> list[bytes]:
        """
        The untagged responses to C{command} (C{LIST} or C{LSUB}) with
        C{arguments}.
        """
        lines, _ = await mapped(command, self._client.sendCollecting(command.encode(), arguments))
        return lines

    def _rows(self, lines: Sequence[bytes], keyword: bytes) -> list[list[Value]]:
        """
        The C{keyword} (LIST or LSUB) rows of C{lines} (L{listRows}).
        """
        return listRows(lines, keyword, self._description, self._log)
