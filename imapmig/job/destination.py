# -*- test-case-name: tests.test_job -*-
"""
Preparing the destination account for a job's messages: where each source
folder goes, the mailboxes to create and subscribe, and what each target
mailbox is (UIDVALIDITY, UIDNEXT, PERMANENTFLAGS) and already holds.

Every command of the preparation is pipelined where the protocol allows:
CREATE, SUBSCRIBE and SELECT of every target go in one flight.  In a
fleet, each flight that changes the destination (CREATE and SUBSCRIBE, a
delta pass's UID STOREs) is written only before the daemon's send
deadline (L{SendDeadline.check}): past it the preparation fails with
L{LeaseLost<imapmig.errors.LeaseLost>}, which abandons the job as the
APPEND pipeline's check does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypeVar

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from imapmig.errors import CommandFailed
from imapmig.mail.fidelity import decideFlags
from imapmig.imap.mailboxes import MailboxState
from imapmig.imap.outgoing import SendDeadline
from imapmig.imap.session import IMAPSession
from imapmig.job.view import DestinationView
from imapmig.mail.message import SourceFolder, SourceMessage
from imapmig.job.foldernames import FolderNameFallback, alreadyExists
from imapmig.mail.folders import (
    FolderMapping,
    FolderRules,
    mailboxesToCreate,
    sharedMailboxes,
)
from imapmig.job.presence import OFF, PresenceIndex, holdsOthers, indexMailbox
from imapmig.sources.imaplisting import FlagChange
from imapmig.state import IStateStore, MessageOutcome
from imapmig.units import Count

_T = TypeVar("_T")
_U = TypeVar("_U")

log = Logger()


@dataclass
class FolderToCopy:
    """
    A listed source folder: what is left to copy of it; on a delta pass the
    flag changes of messages already copied; the records of its messages in
    the destination, and those of them that account for messages the
    source still lists.
    """

    folder: SourceFolder
    pending: list[SourceMessage]
    flagChanges: Sequence[FlagChange]
    recorded: dict[str, MessageOutcome]
    accounted: list[MessageOutcome]


@dataclass
class TargetMailbox:
    """
    What the job knows of one destination mailbox it appends to.

    @ivar uidValidity: its UIDVALIDITY, or L{None} when unknown.
    @ivar uidFloor: a UID at or below the one the next message will get
        (UIDNEXT at SELECT, raised by every APPENDUID), or L{None}.
    @ivar permanentFlags: its PERMANENTFLAGS, or L{None} when unknown.
    @ivar presence: what it already holds that no record accounts for.
    @ivar messages: how many it holds (EXISTS at SELECT), plus the messages
        of the units the attempt has sent to it since: its batches are
        sized by it (L{imapmig.imap.outgoing.PipelineSettings.batchFor}).
    """

    uidValidity: int | None = None
    uidFloor: int | None = None
    permanentFlags: frozenset[str] | None = None
    presence: PresenceIndex | None = None
    messages: int = 0


@dataclass
class PreparedDestination:
    """
    The destination, ready for the job's messages.

    @ivar plans: each folder's mapping and what is left to copy of it.
    @ivar uncreatable: mailboxes that could not be created, with why.
    @ivar targets: every mailbox messages go to.
    """

    plans: list[tuple[FolderMapping, list[SourceMessage]]]
    uncreatable: dict[str, str]
    targets: dict[str, TargetMailbox] = field(default_factory=dict)


@dataclass(frozen=True)
class MailboxesCreated:
    """
    What L{DestinationPreparation.create} did for a job's folders while
    their messages were listed.

    @ivar folders: the folders, in order.
    @ivar view: the destination as listed after the mailboxes of special
        uses were created.
    @ivar mappings: where each folder goes, in the order of C{folders}.
    @ivar uncreatable: mailboxes that could not be created, with why.
    @ivar present: those created, or found existing.
    @ivar states: each mailbox of C{mappings} as its SELECT showed it.
    """

    folders: tuple[SourceFolder, ...]
    view: DestinationView
    mappings: list[FolderMapping]
    uncreatable: dict[str, str]
    present: frozenset[str]
    states: dict[str, MailboxState | CommandFailed]


@dataclass(frozen=True)
class _Claimed:
    """
    What L{DestinationPreparation._claimUses} did: the destination as
    listed after, the folders' mappings onto it, and the mailboxes its
    flight could not create, created (or found existing) and selected.
    """

    view: DestinationView
    mappings: list[FolderMapping]
    uncreatable: dict[str, str] = field(default_factory=dict)
    present: frozenset[str] = frozenset()
    states: dict[str, MailboxState | CommandFailed] = field(default_factory=dict)


def _targetNames(plans: Sequence[tuple[FolderMapping, Sequence[SourceMessage]]]) -> list[str]:
    """
    The mailboxes messages go to: those of the plans with anything to
    copy, in order.
    """
    return sorted({mapping.mailbox for mapping, pending in plans if pending})


def _creations(
    view: DestinationView, mappings: Sequence[FolderMapping]
) -> tuple[list[str], dict[str, str], set[str]]:
    """
    What C{mappings} need created in the destination C{view} shows:
    the mailboxes missing (parents first), the special uses of those that
    have one, and the mailboxes whose source folder is subscribed.
    """
    # A mailbox the destination has needs no parent created (a
    # special-use mailbox outside the namespace prefix, say).
    missing = mailboxesToCreate(
        [m.path for m in mappings if m.mailbox not in view.existing],
        view.existing,
        view.namespace,
    )
    creating = set(missing)
    uses = {m.mailbox: m.specialUse for m in mappings if m.specialUse is not None}
    toSubscribe = {m.mailbox for m in mappings if m.folder.subscribed}
    return missing, {name: uses[name] for name in uses if name in creating}, toSubscribe


async def bothOf(first: Deferred[_T], second: Deferred[_U]) -> tuple[_T, _U]:
    """
    The results of two commands (or runs of commands) already sent
    together, once both have their replies.  If either failed, the first
    failure is raised and the other's is consumed, not left unhandled.
    """
    sent: list[Deferred[Any]] = [first, second]
    results: list[tuple[bool, Any]] = await DeferredList(sent, consumeErrors=True)
    for ok, value in results:
        if not ok:
            value.raiseException()
    return results[0][1], results[1][1]


class DestinationPreparation:
    """
    Prepares one job's destination over one session.
    """

    def __init__(
        self,
        jobName: str,
        session: IMAPSession,
        rules: FolderRules,
        identity: str,
        store: IStateStore | None = None,
        nameFallback: bool = True,
        deadline: SendDeadline | None = None,
    ) -> None:
        """
        @param rules: the job's folder rules (only C{rename} matters here).
        @param identity: the job's identity check (L{imapmig.job.presence}).
        @param store: where folder fallbacks are recorded and read back
            (L{imapmig.job.foldernames}); L{None}: not recorded.
        @param nameFallback: whether a folder whose name the destination
            refuses is created under a safe spelling (the job's
            C{folder_name_fallback}).
        @param deadline: past it nothing that changes the destination is
            written (a fleet's daemon's send deadline); L{None}: none.
        """
        self._job = jobName
        self._deadline = deadline
        self._session = session
        self._renames = FolderRules(rename=rules.rename)
        self._identity = identity
        self._store = store
        self._nameFallback = nameFallback
        self._recorded: dict[str, str] = {}

    def _map(
        self, folders: Sequence[SourceFolder], view: DestinationView
    ) -> list[FolderMapping]:
        """
        Map C{folders} onto the mailboxes of C{view}, through the fallbacks
        earlier runs recorded.
        """
        return view.mapped(folders, self._renames, self._recorded)[0]

    async def create(
        self,
        folders: Sequence[SourceFolder],
        selected: Callable[[SourceFolder], bool] = lambda folder: True,
    ) -> MailboxesCreated:
        """
        Map C{folders} to mailboxes, create and subscribe what is missing,
        and SELECT the mailboxes of the C{selected} folders (for their
        PERMANENTFLAGS); all this needs is the folders.  The CREATEs, the
        SUBSCRIBEs and the SELECTs go in one flight: one round trip in all.

        On a first run it is done while the folders' messages are listed
        (every folder with messages then has them left to copy, so every
        one is selected), and L{prepare}, given what this returns, sends
        nothing more but the SELECT of a target this did not select.
        """
        view = await DestinationView.read(self._session)
        if self._nameFallback:
            self._recorded = await self._fallback(view).recorded()
        claimed = await self._claimUses(view, folders, selected)
        view, mappings = claimed.view, claimed.mappings
        # What the claims' flight did not create or select (nothing, unless
        # a folder shares its use with one claimed).
        creating = Deferred.fromCoroutine(
            self._createMailboxes(
                view, [m for m in mappings if m.mailbox not in claimed.uncreatable]
            )
        )
        selecting = Deferred.fromCoroutine(
            self._session.selectEach(
                sorted({m.mailbox for m in mappings if selected(m.folder)} - claimed.states.keys())
            )
        )
        (uncreatable, present), states = await bothOf(creating, selecting)
        return MailboxesCreated(
            tuple(folders),
            view,
            mappings,
            claimed.uncreatable | uncreatable,
            claimed.present | present,
            claimed.states | states,
        )

    async def prepare(
        self, listings: Sequence[FolderToCopy], created: MailboxesCreated | None = None
    ) -> PreparedDestination:
        """
        Map the listed folders to mailboxes, create and subscribe what is
        missing (L{create}), apply a delta pass's flag changes, SELECT every
        target and index what it already holds.

        @param created: what L{create} did for the same folders while they
            were listed; L{None}, or for other folders (one could not be
            listed), and all of it is done here, selecting only the
            mailboxes of folders with messages left to copy.
        """
        sourceFolders = [listing.folder for listing in listings]
        if created is None or list(created.folders) != sourceFolders:
            pending = {listing.folder.key for listing in listings if listing.pending}
            created = await self.create(sourceFolders, lambda folder: folder.key in pending)
        view, uncreatable, present = created.view, created.uncreatable, created.present
        plans, accounted = await self._planFolders(created.mappings, listings)
        names = _targetNames(plans)
        states = dict(created.states)
        unselected = [name for name in names if name not in states]
        if unselected:
            states.update(await self._session.selectEach(unselected))
        if uncreatable and self._nameFallback:
            # What this flight created counts as existing: a fallback that
            # names one of them (Bad*Name to a Bad_Name the source
            # has too) goes there, as it will on every later run.
            plans, uncreatable, states = await self._fallback(view).fallBackPlans(
                plans, uncreatable, states, view.existing | present
            )
            names = _targetNames(plans)
        # Logged once the fallbacks are known: two refused names may fall
        # back to one safe spelling.
        self._logShared([mapping for mapping, _ in plans])
        prepared = PreparedDestination(plans, uncreatable)
        for mailbox in names:
            if mailbox not in uncreatable:
                target = prepared.targets[mailbox] = self._selected(mailbox, states[mailbox])
                if mailbox in view.existing:
                    target.presence = await self._present(
                        mailbox, states[mailbox], accounted.get(mailbox, [])
                    )
        return prepared

    def _fallback(self, view: DestinationView) -> FolderNameFallback:
        """
        The job's folder name fallbacks in the destination C{view} shows.
        """
        return FolderNameFallback(self._job, self._session, view.namespace, self._store, self._deadline)

    async def _claimUses(
        self,
        view: DestinationView,
        sourceFolders: Sequence[SourceFolder],
        selected: Callable[[SourceFolder], bool],
    ) -> _Claimed:
        """
        Map C{sourceFolders}; a folder with a use the destination lacks
        has its mailbox created first: the server may give it the use (by
        its configuration, or CREATE-SPECIAL-USE), and then every folder
        of that use goes there, as it will on every later run and for
        verify.  The destination is listed again right behind those
        CREATEs, and the folders mapped onto what it lists.

        A claim changes where the other folders of its use go, and with
        what use their mailboxes are created, never where a folder without
        a use goes: in the same flight go the CREATEs of those folders'
        mailboxes (unless earlier runs recorded fallbacks, which follow
        what exists), and after the LIST the SELECTs of the C{selected}
        folders' mailboxes that then exist.  One round trip, where the
        claims once took one of their own before the rest's.

        @return: the destination as then listed, the mappings onto it,
            and what the flight created, could not create and selected.
        """
        mappings = self._map(sourceFolders, view)
        claiming: dict[str, FolderMapping] = {}
        for mapping in mappings:
            if mapping.specialUse is not None and mapping.mailbox not in view.existing:
                claiming.setdefault(mapping.specialUse, mapping)
        if not claiming:
            return _Claimed(view, mappings)
        flying = list(claiming.values())
        if not self._recorded:
            flying += [m for m in mappings if m.specialUse is None]
        exist = view.existing | {m.mailbox for m in flying}
        # Written in this order: CREATEs (and SUBSCRIBEs), LIST, SELECTs.
        creating = Deferred.fromCoroutine(self._createMailboxes(view, flying))
        listed = Deferred.fromCoroutine(DestinationView.read(self._session, view.namespace))
        selecting = Deferred.fromCoroutine(
            self._session.selectEach(
                sorted({m.mailbox for m in mappings if selected(m.folder) and m.mailbox in exist})
            )
        )
        (uncreatable, present), (view, states) = await bothOf(
            creating, Deferred.fromCoroutine(bothOf(listed, selecting))
        )
        return _Claimed(view, self._map(sourceFolders, view), uncreatable, present, states)

    async def _planFolders(
        self, mappings: Sequence[FolderMapping], listings: Sequence[FolderToCopy]
    ) -> tuple[list[tuple[FolderMapping, list[SourceMessage]]], dict[str, list[MessageOutcome]]]:
        """
        Pair each listed folder's mapping with what is left to copy of it
        (logging where a folder goes other than by its name), and apply a
        delta pass's flag changes.

        @return: the plans, and the records accounting for listed
            messages, by mailbox.
        """
        plans: list[tuple[FolderMapping, list[SourceMessage]]] = []
        accounted: dict[str, list[MessageOutcome]] = {}
        for mapping, listing in zip(mappings, listings):
            if mapping.how != "name":
                log.info(
                    "Job {job}: folder {folder} goes to {mailbox} ({how})",
                    job=self._job,
                    folder="/".join(listing.folder.path),
                    mailbox=mapping.mailbox,
                    how=mapping.how,
                )
            plans.append((mapping, listing.pending))
            accounted.setdefault(mapping.mailbox, []).extend(listing.accounted)
            if listing.flagChanges:
                await self._applyFlagChanges(
                    mapping.mailbox, listing.flagChanges, listing.recorded
                )
        return plans, accounted

    def _selected(self, mailbox: str, state: MailboxState | CommandFailed) -> TargetMailbox:
        """
        A target mailbox as its SELECT showed it; one that could not be
        selected is logged, and known by nothing.
        """
        if isinstance(state, CommandFailed):
            log.warn(
                "Job {job}: cannot SELECT {mailbox!r} ({why}); its keywords go unchecked",
                job=self._job,
                mailbox=mailbox,
                why=state.text,
            )
            return TargetMailbox()
        return TargetMailbox(
            state.uidValidity, state.uidNext, state.permanentFlags, messages=state.exists
        )

    async def _present(
        self,
        mailbox: str,
        state: MailboxState | CommandFailed,
        accounted: Sequence[MessageOutcome],
    ) -> PresenceIndex | None:
        """
        Index what an existing target mailbox holds that no record
        accounts for (L{imapmig.job.presence}), when the job checks
        identity and the SELECT does not show it holds nothing else.
        """
        if self._identity == OFF:
            return None
        placed = [(r.uidValidity, r.uid) for r in accounted if r.uid is not None]
        if not isinstance(state, CommandFailed) and not holdsOthers(
            state.exists, state.uidValidity, placed
        ):
            return None
        index = await indexMailbox(self._session, mailbox, self._identity, placed)
        if index is not None:
            log.info(
                "Job {job}: {mailbox} already holds {messages} no record"
                " accounts for; those found in the source will not be appended again",
                job=self._job,
                mailbox=mailbox,
                count=len(index),
                messages=Count(len(index), "message"),
            )
        return index

    def _logShared(self, mappings: Sequence[FolderMapping]) -> None:
        """
        Log each mailbox more than one source folder goes to: their
        messages are merged there (each keeps its own record).
        """
        for mailbox, group in sharedMailboxes(mappings).items():
            log.warn(
                "Job {job}: folders {folders} all go to {mailbox!r}; their messages are"
                " merged there",
                job=self._job,
                folders=", ".join(repr("/".join(m.folder.path)) for m in group),
                mailbox=mailbox,
            )

    async def _createMailboxes(
        self, view: DestinationView, mappings: Sequence[FolderMapping]
    ) -> tuple[dict[str, str], frozenset[str]]:
        """
        Create the destination mailboxes C{mappings} need that C{view} does
        not show (parents first, with their use where the server can), and
        subscribe those whose source folder is subscribed.  A mailbox whose
        CREATE says it exists already (C{[ALREADYEXISTS]}: made since the
        LIST) is there to use.

        @return: the mailboxes that could not be created, with why; and
            those created, or found existing.
        """
        missing, uses, toSubscribe = _creations(view, mappings)
        unsubscribed = sorted((toSubscribe & view.existing) - view.subscribed)
        if self._deadline is not None and (missing or unsubscribed):
            self._deadline.check("a CREATE or SUBSCRIBE")
        # Every command is written before the first reply is awaited.
        creating = Deferred.fromCoroutine(
            self._session.createMailboxes(missing, uses, subscribe=toSubscribe)
        )
        subscribing = Deferred.fromCoroutine(self._session.subscribeMailboxes(unsubscribed))
        refused, _ = await bothOf(creating, subscribing)
        uncreatable = {name: why for name, why in refused.items() if not alreadyExists(why)}
        for name in missing:
            if name not in refused:
                log.info("Job {job}: created mailbox {mailbox!r}", job=self._job, mailbox=name)
        return uncreatable, frozenset(missing) - frozenset(uncreatable)

    async def _applyFlagChanges(
        self,
        mailbox: str,
        changes: Sequence[FlagChange],
        recorded: dict[str, MessageOutcome],
    ) -> None:
        """
        Set the flags of destination copies to their source's current
        flags (a delta pass with CONDSTORE).
        """
        session = self._session
        examined = await session.examine(mailbox)
        stores: list[tuple[int, tuple[str, ...]]] = []
        for change in changes:
            outcome = recorded.get(change.key)
            if (
                outcome is None
                or outcome.uid is None
                or outcome.uidValidity != examined.uidValidity
            ):
                continue
            stores.append((outcome.uid, decideFlags(change.flags, None).kept))
        if stores:
            applied = await session.storeFlags(mailbox, stores, self._deadline)
            log.info(
                "Job {job}: {count} flag changes applied in {mailbox}",
                job=self._job,
                count=applied,
                mailbox=mailbox,
            )
