# -*- test-case-name: tests.test_job -*-
"""
The destination account's mailboxes as a job finds them: their names,
subscriptions and special uses, and the personal namespace new ones go in.
"""

from __future__ import annotations

from attrs import frozen

from imapmig.imap.mailboxes import ListedMailbox
from imapmig.imap.session import IMAPSession
from imapmig.mail.plan import PersonalNamespace


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
            if not session.knowsNamespaces:
                # No NAMESPACE: the empty prefix, and LIST's delimiter
                # below, without a LIST "" "" of its own.
                namespace = PersonalNamespace()
            else:
                namespace = (await session.namespaces()).personalNamespace()
        listed = await session.listFolders()
        if namespace.delimiter is None and not namespace.configured:
            delimiter = next((m.delimiter for m in listed if m.delimiter), None)
            if delimiter is None:
                delimiter = await session.hierarchyDelimiter()
            namespace = PersonalNamespace(namespace.prefix, delimiter)
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
