# -*- test-case-name: tests.test_sources_mbox -*-
"""
Mailbox files in the mbox family (mboxrd, mboxo, mboxcl, mboxcl2), one file
per folder, as a L{imapmig.sources.IMessageSource}.

Files and folders
=================
The source's path is either one mbox file, which is the single folder
C{INBOX} (key C{""}), or a directory of mbox files, as Thunderbird,
Evolution, mutt, Apple Mail exports and most archiving tools write them:

  - each regular file is one folder, named after its file name with a
    trailing C{.mbox} or C{.mbx} (in any case) removed.  Names are taken
    as they are on disk (UTF-8; a name that is not UTF-8 is carried in the
    reversible form of L{imapmig.sources.local.carriedName}, and a
    warning names it).  At the top level, a file named C{Inbox} (in any
    case) is C{INBOX};
  - a subdirectory C{X.sbd/} (Thunderbird), C{X.mbox/} or plain C{X/} holds
    the children of folder C{X}: C{X.sbd/child} is the folder
    C{("X", "child")}.  A parent that has no file of its own is not
    invented (the destination side creates it);
  - in a directory C{X.mbox/}, a file named exactly C{mbox} is the folder
    C{X} itself, and C{table_of_contents} is skipped: this is how Apple
    Mail exports a mailbox.  When the source's path is such a directory,
    its C{mbox} file is C{INBOX};
  - names starting with C{.} are skipped, as are Thunderbird's C{.msf}
    index files and the few metadata files Thunderbird keeps beside its
    mailboxes (C{msgFilterRules.dat}, C{popstate.dat}, C{filterlog.html},
    C{junklog.html}, C{feeds.json}, C{feeditems.json},
    C{virtualFolders.dat}).  Symbolic links to files inside the directory
    are followed; to directories inside it not (their target is listed
    where it is);
  - a folder's key is its file's path relative to the directory, with C{/}
    separators (C{Archive.sbd/2019}).  Two files may give the same folder
    name (C{Sent} and C{Sent.mbox}): they stay two folders with distinct
    keys, migrated into the same mailbox.

Top-level folders with a well-known name (C{Sent}, C{Drafts}, C{Trash},
C{Junk}, C{Archive}, ...) carry their RFC 6154 attribute, as for a Maildir.

A file that does not start with C{From } is not an mbox: listing its
messages fails with L{SourceError} naming it (which fails the job).  An
empty file is an empty folder.  Nothing is skipped silently: an entry that
is not a regular file (a FIFO, a socket, a device), or a symbolic link
leading out of the directory (to a file or a directory), to nothing or
into a loop, is listed as a folder (named as a file would be) whose
listing fails with L{SourceError} saying why; so does a file that cannot
be read.  A directory that cannot be listed fails L{listFolders}.  Files
are opened beneath the directory as L{imapmig.sources.local} describes.

Messages
========
A message starts at a line beginning with C{From } (at the start of the
file or after an LF; the rest of that line is the envelope sender and
date) and ends where the next such line starts, or at the end of the file.
Its content is what lies between, with one rule: writers put an empty line
between messages, so content ending with an empty line (C{LF LF}) loses
exactly one LF, and content ending with C{CR LF CR LF} (an mbox with CRLF
line ends) loses one C{CR LF}; content ending with a single line end, or
with none (the last message of a file may have no final newline), is kept
whole.  This applies to the last message of the file too.  (A message whose
own body ends with an empty line therefore loses it: the format cannot tell
the two apart.)

Content-Length (mboxcl, mboxcl2): when a message's header (up to its first
empty line) has a C{Content-Length: N} field, and the C{N} octets after the
empty line end exactly at the end of the file (optionally followed by one
empty line), or right before a C{From } line (optionally after one empty
line), the message is exactly those octets: C{From } lines inside it are
not separators, and nothing in it is unescaped (C{>From } lines an mboxcl
writer escaped stay as written).  Otherwise the field is ignored (it is
often wrong) and the message ends at the next C{From } line.

Quoting (the C{quoting} argument), for messages not delimited by
Content-Length:
  - C{mboxrd} (the default; mutt, Python's C{mailbox}, Dovecot, most
    exporters): every line matching C{>*From } was written with one more
    C{>}; every line starting with one or more C{>} then C{From } loses one
    C{>}.  This is lossless;
  - C{mboxo}: only C{From } lines were escaped, as C{>From }; a line
    starting with exactly C{>From } loses its C{>}, lines with more C{>}
    are kept.  A body line that really was C{>From } cannot be told apart
    and also loses its C{>}.
Nothing else in a message is changed: headers, NUL and 8-bit octets pass
through as they are; line ends become CRLF, as IMAP requires.

Each message's:
  - key is the decimal byte offset of its C{From } line in the file.  It
    stays the same as long as the file is only appended to (the usual case
    for exports and archives); a file rewritten in place (a mail client
    compacting it after deleting messages) gives other keys, and the
    messages would be migrated again;
  - size is the exact number of octets of its content after unescaping and
    before conversion to CRLF;
  - INTERNALDATE comes from the C{From } line: an asctime date such as
    C{Tue Nov 22 10:00:00 2026} (the day may be space-padded, the seconds
    may be missing) followed by the year and an optional time zone in
    either order (C{2026 +0100}, C{CET 2026}, C{2026 UTC}), or a date in
    the C{22 Nov 2026 10:00:00 +0100} order.  A numeric offset or a common
    zone abbreviation (C{UTC}, C{GMT}, C{CET}, C{CEST}, C{EST}, C{PDT},
    ...) is honoured; a date without one, or with one that is unknown or
    ambiguous (C{IST}), is taken as UTC.  Any four-digit year is honoured
    (the one an INTERNALDATE carries), before 1970 and after 2099
    included; a date that cannot be read, or whose year has not four
    digits, leaves the INTERNALDATE to the server;
  - flags come from its header section only (up to its first empty line,
    or the next C{From } line; never its body): C{Status:}
    C{R} is C{\\Seen} (C{O}, "old", is no flag); C{X-Status:} C{A} is
    C{\\Answered}, C{F} C{\\Flagged}, C{T} C{\\Draft}, C{D} C{\\Deleted};
    Thunderbird's C{X-Mozilla-Status:} (hexadecimal) 0x1 is C{\\Seen}, 0x2
    C{\\Answered}, 0x4 C{\\Flagged}, 0x8 C{\\Deleted} (deleted but not yet
    compacted away), 0x1000 the keyword C{$Forwarded}; C{X-Keywords:}
    (Dovecot and others) and C{X-Mozilla-Keys:} (Thunderbird tags) hold
    keywords separated by commas or spaces, kept as they are.  A keyword
    that is not a valid IMAP atom (non-ASCII, or containing one of
    C{( ) { % * " \\ ]} or a control character) is dropped.  Field names
    match in any case; the first C{Status}, C{X-Status} and
    C{X-Mozilla-Status} field counts, keywords come from every keyword
    field, each once (compared case-insensitively).  System flags come
    first, in the order C{\\Draft \\Flagged \\Answered \\Seen \\Deleted},
    then keywords in the order found.

Messages come in file order.

Listing reads each file once, in chunks of 1 MiB, finding separators with
C{bytes.find}; only the C{From} line and the header of each message are
copied out, and at most 256 KiB of a header is examined.  Bodies are read
just before they are sent, one C{pread} each, whole; a message larger than
4 MiB is not held in memory: it is read once to count its size, and sent
from its region of the file a slice at a time, unescaped and converted as
it is read (L{imapmig.sources.mbox.stream}).  Before reading, the source checks
that the message's C{From } line is still the same at its offset, that the
next message's C{From} line is still where it was, and that the file
still holds the whole message: a file rewritten or truncated since the
listing gives L{UnreadableMessage}s rather than wrong messages (a rewrite
that keeps all of these in place cannot be noticed).  Files are
read on the calling thread, with blocking system calls.
"""

from __future__ import annotations

from typing import Sequence

from twisted.internet.defer import Deferred, succeed
from zope.interface import implementer

from imapmig.errors import SourceError
from imapmig.mail.message import MessageBody, SourceFolder, SourceMessage
from imapmig.sources import IMessageSource
from imapmig.sources.local import carriedName, settled, unreadableAll
from imapmig.sources.mbox.dates import parseFromLineDate
from imapmig.sources.mbox.folders import findFolders
from imapmig.sources.mbox.quoting import MboxQuoting
from imapmig.sources.mbox.reading import fromLineAt, readMessages
from imapmig.sources.mbox.scan import MboxFile, MessageIndex, scanFile

__all__ = ["MboxSource", "MboxQuoting", "parseFromLineDate"]


@implementer(IMessageSource)
class MboxSource:
    """
    Messages from one mbox file, or from a directory tree of mbox files,
    one folder per file.  The module's documentation states the rules.

    @ivar path: the file or directory.
    @ivar quoting: how C{From } lines inside messages were escaped.
    """

    def __init__(self, path: str, quoting: MboxQuoting | str = MboxQuoting.MBOXRD) -> None:
        """
        @param path: an mbox file, or a directory of mbox files.
        @param quoting: an L{MboxQuoting}, or its value (C{"mboxrd"},
            C{"mboxo"}).
        @raise ValueError: C{quoting} is neither.
        """
        self.path = path
        try:
            self.quoting = MboxQuoting(quoting)
        except ValueError:
            raise ValueError(
                f"unknown mbox quoting {quoting!r}: expected 'mboxrd' or 'mboxo'"
            ) from None
        self._files: dict[str, MboxFile] = {}
        self._indexes: dict[str, MessageIndex] = {}

    def listFolders(self) -> Deferred[Sequence[SourceFolder]]:
        """
        Every folder: C{INBOX} first, then the others sorted, parents before
        children.

        @return: a Deferred that fails with L{SourceError} when the path
            does not exist or cannot be read, or is a directory without any
            mbox file.
        """
        return settled(self._findFolders)

    def _findFolders(self) -> Sequence[SourceFolder]:
        """
        Every folder (L{listFolders}), remembering each one's file.
        """
        folders, self._files = findFolders(self.path)
        return folders

    def _fileOf(self, folder: SourceFolder) -> MboxFile:
        """
        The file of C{folder}, looking for the folders first if that was
        not done yet.

        @raise SourceError: no folder has that key.
        """
        if folder.key not in self._files:
            _, self._files = findFolders(self.path)
        file = self._files.get(folder.key)
        if file is None:
            raise SourceError(f"no mbox folder {folder.key!r} in {carriedName(self.path)}")
        return file

    def _scan(self, folder: SourceFolder) -> Sequence[SourceMessage]:
        """
        List C{folder}'s messages and remember where they lie.

        @raise SourceError: the file is gone, unreadable or not an mbox.
        """
        messages, index = scanFile(self.path, self._fileOf(folder), self.quoting)
        self._indexes[folder.key] = index
        return messages

    def listMessages(self, folder: SourceFolder) -> Deferred[Sequence[SourceMessage]]:
        """
        The messages of C{folder}, in file order.

        @return: a Deferred that fails with L{SourceError}, naming the
            file, when it is gone, cannot be read, or is not an mbox.
        """
        return settled(self._scan, folder)

    def fromLine(self, folder: SourceFolder, key: str) -> bytes | None:
        """
        The C{From } line at the start of the message keyed C{key}, as it
        is in the file (at most 1,000 octets, without its line end), for
        a check that reads its date independently (L{imapmig.commands.expected});
        L{None} when the key is not an offset or the file or line cannot
        be read there.
        """
        if not (key.isascii() and key.isdigit()):
            return None
        try:
            return fromLineAt(self.path, self._fileOf(folder), int(key))
        except SourceError:
            return None

    def readBodies(
        self, folder: SourceFolder, messages: Sequence[SourceMessage]
    ) -> Deferred[Sequence[MessageBody]]:
        """
        Read the bodies of C{messages}, in order, unescaped, with CRLF line
        endings.

        Messages not found in the last listing of the folder (or when there
        was none, as after a restart) are looked for by listing the folder
        again, once per call.  A message that cannot be read (the file is
        gone, unreadable, truncated, or rewritten so that the message's
        C{From} line, or the next one, is no longer where it was) is an
        L{UnreadableMessage} saying why.
        """
        if not messages:
            return succeed([])
        located = self._locate(folder, messages)
        if isinstance(located, str):
            return succeed(unreadableAll(located, messages))
        index, positions = located
        return succeed(readMessages(self.path, index, messages, positions, self.quoting))

    def _locate(
        self, folder: SourceFolder, messages: Sequence[SourceMessage]
    ) -> tuple[MessageIndex, list[int]] | str:
        """
        Where C{messages} lie: the folder's index, listing the folder again
        when there is none or some message is not in it.

        @return: the index and each message's place in it (-1 where it is
            not); or why the folder cannot be read, when it has no index.
        """
        index = self._indexes.get(folder.key)
        positions = [] if index is None else index.places(messages)
        if index is None or -1 in positions:
            newIndex, reason = self._rescan(folder)
            if newIndex is None:
                return reason if index is None else (index, positions)
            index, positions = newIndex, newIndex.places(messages)
        return index, positions

    def _rescan(self, folder: SourceFolder) -> tuple[MessageIndex | None, str]:
        """
        List C{folder} again for its index.

        @return: the index, or L{None} and why the folder cannot be read.
        """
        try:
            self._scan(folder)
        except SourceError as e:
            self._indexes.pop(folder.key, None)
            return None, str(e)
        return self._indexes[folder.key], ""
