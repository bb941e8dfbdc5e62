# -*- test-case-name: tests.test_imap_session,tests.test_session_batches -*-
"""
Pipelined batches of mailbox commands on one connection, between APPEND
pipelines: CREATE and SUBSCRIBE, SELECT of each mailbox, UID STORE of
flags; one round trip for a whole batch, each refusal judged apart, and
the commands behind a lost connection abandoned quietly
(L{imapmig.imap.errormap.abandonedOnError}).

Split from imapmig/imap/session.py, whose IMAPSession (716 lines) held
these beside listing and reading; IMAPSession's methods of the same names
ask L{MailboxBatches}.
"""

from __future__ import annotations

from typing import Collection, Mapping, Sequence

from twisted.logger import Logger

from imapmig.errors import CommandFailed
from imapmig.imap.client import MigrationIMAP4Client
from imapmig.imap.errormap import abandonedOnError, eachSettled, mapped
from imapmig.imap.mailboxes import MailboxState, openedState
from imapmig.imap.mailboxname import encodeMailboxName
from imapmig.imap.outgoing import SendDeadline


class MailboxBatches:
    """
    Pipelined batches of mailbox commands on one logged-in connection,
    with no other command in flight.
    """

    def __init__(self, client: MigrationIMAP4Client, description: str, log: Logger) -> None:
        """
        @param client: the connection.
        @param description: who the session is, for log events.
        @param log: the session's logger (with its fields).
        """
        self._client = client
        self._description = description
        self._log = log

    async def createMailboxes(
        self,
        mailboxes: Sequence[str],
        uses: Mapping[str, str] | None = None,
        subscribe: Collection[str] | None = None,
    ) -> dict[str, str]:
        """
        Create and subscribe C{mailboxes}, in order (parents first), with
        every command pipelined: one round trip in all, not two per mailbox.

        @param uses: the RFC 6154 use to give some of them (C{CREATE name
            (USE (\\Sent))}, RFC 6154 CREATE-SPECIAL-USE); L{None} where the
            server does not offer it.
        @param subscribe: the ones to subscribe to (by default all).
        @return: the mailboxes that could not be created, each with the
            server's reply; a refused SUBSCRIBE is only logged.
        """
        client = self._client
        if not uses:
            uses = {}
        creates = [
            (name, client.sendPipelined(_createCommand(name, uses.get(name))))
            for name in mailboxes
        ]
        subscribes = [
            (name, client.sendPipelined(b"SUBSCRIBE " + encodeMailboxName(name)))
            for name in mailboxes
            if subscribe is None or name in subscribe
        ]
        failed: dict[str, str] = {}

        def createRefused(name: str, refusal: CommandFailed) -> None:
            failed[name] = refusal.text

        def subscribeRefused(name: str, refusal: CommandFailed) -> None:
            if name not in failed:
                self._subscribeRefused(name, refusal)

        with abandonedOnError(d for _, d in creates + subscribes):
            await eachSettled("CREATE", creates, createRefused)
            await eachSettled("SUBSCRIBE", subscribes, subscribeRefused)
        return failed

    async def subscribeMailboxes(self, mailboxes: Sequence[str]) -> None:
        """
        Subscribe to C{mailboxes}, pipelined; a refusal is only logged.
        """
        client = self._client
        pending = [
            (name, client.sendPipelined(b"SUBSCRIBE " + encodeMailboxName(name)))
            for name in mailboxes
        ]
        await eachSettled("SUBSCRIBE", pending, self._subscribeRefused)

    def _subscribeRefused(self, mailbox: str, refusal: CommandFailed) -> None:
        """
        Log that the server refused to subscribe to C{mailbox}.
        """
        self._log.warn(
            "{session}: cannot subscribe to {mailbox!r}: {why}",
            session=self._description,
            mailbox=mailbox,
            why=refusal.text,
        )

    async def selectEach(
        self, mailboxes: Sequence[str]
    ) -> dict[str, MailboxState | CommandFailed]:
        """
        SELECT each of C{mailboxes}, every command pipelined: one round trip
        in all, not one per mailbox.  The last one is left selected.  Only
        between APPEND pipelines, with no other command in flight.

        @return: each mailbox's state, or the server's refusal.
        """
        client = self._client
        pending = [
            (name, client.sendPipelinedCollecting(b"SELECT " + encodeMailboxName(name)))
            for name in mailboxes
        ]
        states: dict[str, MailboxState | CommandFailed] = {}
        with abandonedOnError(d for _, d in pending):
            for name, d in pending:
                try:
                    lines, _ = await mapped("SELECT", d)
                except CommandFailed as e:
                    states[name] = e
                    continue
                exists, codes, permanentFlags = openedState(lines)
                states[name] = MailboxState(
                    name, exists, codes.get(b"UIDVALIDITY"), permanentFlags, codes.get(b"UIDNEXT")
                )
        return states

    async def storeFlags(
        self,
        mailbox: str,
        changes: Sequence[tuple[int, tuple[str, ...]]],
        deadline: SendDeadline | None = None,
    ) -> int:
        """
        SELECT C{mailbox} and set each message's flags exactly (C{UID STORE
        uid FLAGS.SILENT (...)}), every command pipelined.

        @param changes: C{(uid, flags)} pairs.
        @param deadline: past it no C{UID STORE} is written (a fleet's
            daemon's send deadline, checked once the SELECT is answered);
            L{None}: none.
        @return: how many the server accepted; a refusal is logged.
        @raise CommandFailed: the SELECT was refused.
        @raise LeaseLost: the deadline had passed: nothing was stored.
        """
        await mapped(
            "SELECT", self._client.sendCollecting(b"SELECT", encodeMailboxName(mailbox))
        )
        if deadline is not None:
            deadline.check("a UID STORE")
        client = self._client
        pending = [
            (
                uid,
                client.sendPipelined(
                    b"UID STORE %d FLAGS.SILENT (%s)"
                    % (uid, " ".join(flags).encode("ascii"))
                ),
            )
            for uid, flags in changes
        ]

        def refused(uid: int, refusal: CommandFailed) -> None:
            self._log.warn(
                "{session}: cannot set the flags of UID {uid} in {mailbox!r}: {why}",
                session=self._description,
                uid=uid,
                mailbox=mailbox,
                why=refusal.text,
            )

        return await eachSettled("UID STORE", pending, refused)


def _createCommand(name: str, use: str | None) -> bytes:
    """
    The CREATE command of mailbox C{name}, with the RFC 6154 C{use} to
    give it (C{CREATE name (USE (\\Sent))}), if any.
    """
    command = b"CREATE " + encodeMailboxName(name)
    if use is None:
        return command
    return command + b" (USE (" + use.encode("ascii") + b"))"
