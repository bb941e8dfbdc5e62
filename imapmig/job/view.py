# -*- test-case-name: tests.test_job -*-
"""
The destination account's mailboxes as a job finds them: their names,
subscriptions and special uses, and the personal namespace new ones go in.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from attrs import frozen

from imapmig.imap.mailboxes import ListedMailbox
from imapmig.imap.session import IMAPSession
from imapmig.job.foldernames import withRecordedFallbacks
from imapmig.mail.folders import FolderMapping, FolderRules, PersonalNamespace, mapFolders
from imapmig.mail.message import SourceFolder


@frozen
class DestinationView:
    """
    The destination's mailboxes as LIST shows them, and where new ones go.

    @ivar namespace: its personal namespace (NAMESPACE, or the
        configuration's override), with LIST's delimiter where NAMESPACE
        gave none (a configured one is believed, flat or not).
    @ivar existing: every mailbox (C{INBOX} spelled so).
    @ivar subscribed: the subscribed ones.
    @ivar uses: a selectable mailbox per special use.
    @ivar listed: the mailboxes as LIST showed them.
    """

    namespace: PersonalNamespace
    existing: frozenset[str]
    subscribed: frozenset[str]
    uses: dict[str, str]
    listed: tuple[ListedMailbox, ...] = ()

    @classmethod
    async def read(
        cls, session: IMAPSession, namespace: PersonalNamespace | None = None
    ) -> DestinationView:
        """
        LIST the destination's mailboxes.

        @param namespace: its personal namespace if already known; else it
            is asked (L{IMAPSession.namespaces}).
        """
        if namespace is None:
            namespace = await _personalNamespace(session)
        listed = await session.listFolders()
        if namespace.delimiter is None and not namespace.configured:
            namespace = PersonalNamespace(namespace.prefix, await _delimiter(session, listed))
        return cls.fromListed(namespace, listed)

    @classmethod
    def fromListed(
        cls, namespace: PersonalNamespace, listed: Sequence[ListedMailbox]
    ) -> DestinationView:
        """
        The view of the mailboxes C{listed}, new ones going in
        C{namespace}: the first selectable mailbox of each special use
        stands for it.
        """
        uses: dict[str, str] = {}
        for m in listed:
            if m.specialUse is not None and m.selectable:
                uses.setdefault(m.specialUse, m.name)
        return cls(
            namespace,
            frozenset("INBOX" if m.name.upper() == "INBOX" else m.name for m in listed),
            frozenset(m.name for m in listed if m.subscribed),
            uses,
            tuple(listed),
        )

    def mapped(
        self, folders: Sequence[SourceFolder], rules: FolderRules, recorded: Mapping[str, str]
    ) -> tuple[list[FolderMapping], list[SourceFolder]]:
        """
        C{folders} mapped onto this destination as the migration maps them
        (L{mapFolders}: the rules, the namespace, the special uses), each
        mailbox an earlier run fell back from replaced by its fallback
        (L{withRecordedFallbacks}); and the folders the rules leave out.

        @param recorded: fallback mailbox by refused mailbox, as the state
            store records them (empty not to follow them).
        """
        mappings, excluded = mapFolders(folders, rules, self.namespace, self.uses)
        mappings = withRecordedFallbacks(mappings, recorded, self.existing, self.namespace)
        return mappings, excluded


async def _personalNamespace(session: IMAPSession) -> PersonalNamespace:
    """
    The destination's personal namespace as NAMESPACE gives it; without
    NAMESPACE, the empty prefix (and LIST's delimiter, found later),
    without a LIST "" "" of its own.
    """
    if not session.knowsNamespaces:
        return PersonalNamespace()
    return (await session.namespaces()).personalNamespace()


async def _delimiter(session: IMAPSession, listed: Sequence[ListedMailbox]) -> str | None:
    """
    The hierarchy delimiter the listed mailboxes show, or, when none
    shows one, the one the server gives (C{LIST "" ""}).
    """
    delimiter = next((m.delimiter for m in listed if m.delimiter), None)
    if delimiter is None:
        delimiter = await session.hierarchyDelimiter()
    return delimiter
