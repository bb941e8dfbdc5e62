# -*- test-case-name: tests.test_state,tests.test_state_contract -*-
"""
What the store records of each source folder (its L{FolderMark}, for
delta passes) and of each destination folder created under another name
(L{FolderFallback}); and L{IFolderMarks}, the store's role that keeps
them.

Taken out of C{imapmig/state/__init__.py}, which held every role of the
store in one 25-method interface.
"""

from __future__ import annotations

from attrs import frozen
from twisted.internet.defer import Deferred
from zope.interface import Interface


@frozen
class FolderMark:
    """
    Where a pass over one source folder got to, so that the next pass can
    ask only for what changed since (a delta pass).

    @ivar uidValidity: the source folder's UIDVALIDITY; when it changes,
        the mark no longer applies.
    @ivar uidNext: the source folder's UIDNEXT: every message with a lower
        UID was seen, but those of L{deferred}.
    @ivar highestModSeq: the source folder's HIGHESTMODSEQ (CONDSTORE), or
        L{None} if the source does not have one.
    @ivar messages: how many messages the folder held.
    @ivar deferred: UIDs below L{uidNext}, ascending, that the pass left
        undecided and the next pass lists again (a label view's deferred
        messages: L{imapmig.sources.labelviews}); usually none.
    @ivar fingerprint: a local source folder's state as its source tells
        it (a Maildir's C{cur/} and C{new/}: inode, mtime and ctime in
        nanoseconds, size;
        L{imapmig.sources.maildir.MaildirSource.fingerprint}): the same at
        the next pass, nothing in it changed; L{None} for an IMAP
        folder (its UIDs say it), or a mark recorded before there were
        fingerprints.  A local folder's mark has a L{uidValidity} and
        L{uidNext} of 0.
    @ivar octets: the folder's octets as listed, all its messages copied,
        so that a pass that finds the folder unchanged counts them without
        reading their records; L{None} in marks recorded before.
    """

    uidValidity: int
    uidNext: int
    highestModSeq: int | None
    messages: int
    deferred: tuple[int, ...] = ()
    fingerprint: str | None = None
    octets: int | None = None


@frozen
class FolderFallback:
    """
    A destination folder created under a safe spelling because the server
    refused its name (L{imapmig.job.foldernames}).

    @ivar mailbox: the mailbox name the folder would have had.
    @ivar fallback: the mailbox it was created as, and messages go to.
    @ivar reason: the server's refusal of C{mailbox}.
    """

    mailbox: str
    fallback: str
    reason: str


class IFolderMarks(Interface):
    """
    Each job's folder marks and folder fallbacks.
    """

    def folderMark(job: str, folderKey: str) -> "Deferred[FolderMark | None]":
        """
        The mark recorded for C{folderKey} of C{job}, or L{None} if there is
        none.
        """

    def recordFolderMark(job: str, folderKey: str, mark: FolderMark) -> "Deferred[None]":
        """
        Record C{mark} for C{folderKey} of C{job} in one transaction,
        replacing any earlier mark.
        """

    def forgetFolder(job: str, folderKey: str) -> "Deferred[None]":
        """
        Delete the mark of C{folderKey} of C{job}, if any, so that the next
        pass over it is a full one.  Its messages' outcomes are kept.
        """

    def recordFolderFallback(job: str, fallback: FolderFallback) -> "Deferred[None]":
        """
        Record, in one transaction, that C{job}'s mailbox
        C{fallback.mailbox} lives under the name C{fallback.fallback},
        replacing an earlier record for that mailbox.
        """

    def folderFallbacks(job: str) -> "Deferred[list[FolderFallback]]":
        """
        The fallback names recorded for C{job}, by mailbox.
        """
