# -*- test-case-name: tests.test_sources_maildir,tests.test_sources_mbox,tests.test_sources_eml,tests.test_sources_imap -*-
"""
Where messages come from.  Every source provides L{IMessageSource}: it lists
folders and messages cheaply, and reads bodies in bounded batches just
before they are sent, so memory stays bounded whatever the source size.
"""

from __future__ import annotations

from typing import Sequence

from twisted.internet.defer import Deferred
from zope.interface import Interface

from imapmig.mail.message import MessageBody, SourceFolder, SourceMessage


class IMessageSource(Interface):
    """
    A mail store to migrate from.
    """

    def listFolders() -> "Deferred[Sequence[SourceFolder]]":
        """
        Every folder of the source, parents before children.

        @raise imapmig.errors.SourceError: (as a failure) the source cannot
            be read at all.
        """

    def listMessages(folder: SourceFolder) -> "Deferred[Sequence[SourceMessage]]":
        """
        The messages of C{folder}, without their bodies, in a stable order
        (oldest first where the source knows).

        Nothing is skipped silently: an entry that stands for a message but
        cannot be read (a file that is not a regular file, a symbolic link
        leading out of the source) is listed, and L{readBodies} gives an
        L{imapmig.mail.message.UnreadableMessage} with the reason for it.

        @raise imapmig.errors.SourceError: (as a failure) the folder cannot
            be listed (gone, no permission, not what it should be); never
            an empty listing instead.
        """

    def readBodies(
        folder: SourceFolder, messages: Sequence[SourceMessage]
    ) -> "Deferred[Sequence[MessageBody]]":
        """
        The bodies of C{messages}, in the same order, with CRLF line endings;
        a body that cannot be read is an L{imapmig.mail.message.UnreadableMessage}
        carrying the reason, never an exception.
        """
