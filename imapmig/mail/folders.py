# -*- test-case-name: tests.test_mail_folders -*-
"""
Folder rules, personal namespaces and folder mapping: where each source
folder goes, as sources, jobs, the status site and the commands see it.
Pure functions, no I/O, no Deferreds.  The work units a job cuts its
messages into are L{imapmig.job.units}.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Collection, Sequence

from attrs import frozen

from imapmig.mail.message import SourceFolder


@frozen
class PersonalNamespace:
    """
    The personal namespace of an account (RFC 2342): where its own
    folders live.

    A server with C{NAMESPACE (("INBOX." ".")) NIL NIL} (Courier, Cyrus
    with C{altnamespace: no}) keeps every folder but C{INBOX} under
    C{INBOX.}; most others have the empty prefix.  Folder paths in
    imapmig never hold the prefix: C{INBOX.Sent} there and C{Sent} on a
    server with the empty prefix are both the path C{("Sent",)}.

    @ivar prefix: the prefix every personal mailbox name but C{INBOX}
        starts with (C{""} or e.g. C{"INBOX."}); when not empty it
        usually ends with the delimiter.
    @ivar delimiter: the hierarchy delimiter, or L{None} on a flat server.
    @ivar configured: whether the configuration gave it (a server's
        C{namespace} setting) rather than the server: its delimiter is then
        believed even when L{None}, never replaced by the one LIST shows.
    """

    prefix: str = ""
    delimiter: str | None = None
    configured: bool = False

    def mailbox(self, path: tuple[str, ...]) -> str:
        """
        The mailbox name of the folder C{path}: the prefix, then the
        levels joined with the delimiter (see L{destinationMailbox}).

        C{INBOX} itself never takes the prefix.  Where the prefix is
        C{INBOX} and the delimiter (C{"INBOX."}), the path C{("INBOX",
        "x")} is the mailbox C{INBOX.x}, the same as C{("x",)}: both
        spell the one mailbox such a server has for them.
        """
        joiner = self.delimiter or "_"
        parts = [component.replace(joiner, "_") for component in path]
        if not parts:
            return self.prefix
        if parts[0].upper() == "INBOX":
            parts[0] = "INBOX"
            if len(parts) == 1 or not self._inboxPrefix():
                return joiner.join(parts)
            parts = parts[1:]
        return self.prefix + joiner.join(parts)

    def path(self, mailbox: str) -> tuple[str, ...]:
        """
        The folder path of a mailbox name: the prefix stripped, the rest
        split at the delimiter; the inverse of L{mailbox} for a name it
        gives.  A name outside the prefix is split whole.
        """
        if mailbox.upper() == "INBOX":
            return ("INBOX",)
        stripped = bool(self.prefix) and (
            mailbox.startswith(self.prefix)
            or (self._inboxPrefix() and mailbox.upper().startswith(self.prefix.upper()))
        )
        # INBOX is case-insensitive, and so is an INBOX. prefix.
        rest = mailbox[len(self.prefix) :] if stripped else mailbox
        parts = rest.split(self.delimiter) if self.delimiter else [rest]
        if not stripped and parts[0].upper() == "INBOX":
            parts[0] = "INBOX"
        return tuple(parts)

    def holds(self, mailbox: str) -> bool:
        """
        Whether the mailbox name lies in this namespace: C{INBOX}, or a
        name starting with the prefix (every name, for the empty prefix).
        """
        if mailbox.upper() == "INBOX" or not self.prefix:
            return True
        if mailbox.startswith(self.prefix):
            return True
        return self._inboxPrefix() and mailbox.upper().startswith(self.prefix.upper())

    def _inboxPrefix(self) -> bool:
        """
        Whether the prefix is C{INBOX} followed by the delimiter.
        """
        return (
            self.delimiter is not None
            and self.prefix.upper() == "INBOX" + self.delimiter.upper()
        )


def destinationMailbox(path: tuple[str, ...], namespace: PersonalNamespace) -> str:
    """
    The destination mailbox name for a source folder's hierarchy.

    The components are joined with the destination's hierarchy delimiter,
    behind its personal namespace prefix (C{INBOX} itself takes none); a
    delimiter inside a component (a source folder named C{"a.b"} on a
    server whose delimiter is C{"."}) is replaced by C{"_"}, so the folder
    does not turn into a hierarchy.  A top-level C{INBOX} is spelled in
    upper case, as RFC 3501 treats it case-insensitively.

    @param path: the folder's components, e.g. C{("Archive", "2019")}.
    @param namespace: the destination's personal namespace; a flat server
        (no delimiter) joins the components with C{"_"}.
    """
    return namespace.mailbox(path)


def mailboxesToCreate(
    wanted: Sequence[tuple[str, ...]],
    existing: Collection[str],
    namespace: PersonalNamespace,
) -> list[str]:
    """
    The mailboxes to create, parents before children, so that every folder
    in C{wanted} exists with its whole hierarchy.  The namespace prefix
    itself is never created (C{INBOX.} is C{INBOX}, which exists).

    @param existing: mailbox names the destination already has; C{INBOX}
        always exists.
    """
    have = {name.upper() if name.upper() == "INBOX" else name for name in existing}
    have.add("INBOX")
    result: list[str] = []
    for path in wanted:
        for depth in range(1, len(path) + 1):
            name = namespace.mailbox(path[:depth])
            if name not in have:
                have.add(name)
                result.append(name)
    return result


# Folder rules and mapping.


@frozen
class FolderRules:
    """
    A job's folder rules.

    Patterns and names are folder paths written with C{/} between levels,
    whatever the separators of the source and the destination
    (C{"Archive/2019"}); C{INBOX} matches in any case.  In patterns, C{*}
    matches any run of characters, C{/} included, and C{?} one character
    (C{fnmatch}, case-sensitive); a pattern equal to a folder's name
    matches it whatever it holds (C{"[Gmail]/Starred"}).

    @ivar include: when not empty, only folders matching one of these.
    @ivar exclude: folders matching one of these are left out (exclusion
        wins over inclusion).
    @ivar rename: source path to destination path, applied to the folder
        and its subfolders (renaming C{"Old"} to C{"New"} turns C{"Old/x"}
        into C{"New/x"}); the longest matching source path wins.
    """

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    rename: tuple[tuple[str, str], ...] = ()


def folderName(path: tuple[str, ...]) -> str:
    """
    A folder path as folder rules write it: levels joined with C{/}, a
    top-level C{INBOX} in upper case.
    """
    parts = list(path)
    if parts and parts[0].upper() == "INBOX":
        parts[0] = "INBOX"
    return "/".join(parts)


def _matches(name: str, patterns: Sequence[str]) -> bool:
    # A pattern equal to the name matches it even where fnmatch would read
    # it otherwise: "[Gmail]/Starred" names Gmail's folder, not a folder
    # "G/Starred".
    return any(
        name == _inboxUpper(pattern) or fnmatchcase(name, _inboxUpper(pattern))
        for pattern in patterns
    )


def _inboxUpper(pattern: str) -> str:
    head, sep, tail = pattern.partition("/")
    return "INBOX" + sep + tail if head.upper() == "INBOX" else pattern


def isIncluded(path: tuple[str, ...], rules: FolderRules) -> bool:
    """
    Whether the rules keep the folder C{path}.
    """
    name = folderName(path)
    if rules.include and not _matches(name, rules.include):
        return False
    return not _matches(name, rules.exclude)


def renamedPath(path: tuple[str, ...], rules: FolderRules) -> tuple[str, ...] | None:
    """
    The destination path the rename rules give C{path}, or L{None} when no
    rule applies.
    """
    best: tuple[int, tuple[str, ...]] | None = None
    name = folderName(path)
    for source, target in rules.rename:
        source = folderName(tuple(source.split("/")))
        if name == source or name.startswith(source + "/"):
            rest = name[len(source) :].lstrip("/")
            newPath = tuple(p for p in target.split("/") if p) + (
                tuple(rest.split("/")) if rest else ()
            )
            if best is None or len(source) > best[0]:
                best = (len(source), newPath)
    return None if best is None else best[1]


@frozen
class FolderMapping:
    """
    Where one source folder goes.

    @ivar folder: the source folder.
    @ivar path: the destination folder's hierarchy.
    @ivar mailbox: the destination mailbox name (with the destination's
        delimiter).
    @ivar specialUse: the RFC 6154 use to give the mailbox if it must be
        created (the source folder's use, when the destination has no
        mailbox of that use yet).
    @ivar how: why it goes there, for the log: C{"name"}, C{"rename"},
        C{"special-use"} or C{"archive"} (L{SourceFolder.destination}).
    """

    folder: SourceFolder
    path: tuple[str, ...]
    mailbox: str
    specialUse: str | None
    how: str


def mapFolders(
    folders: Sequence[SourceFolder],
    rules: FolderRules,
    namespace: PersonalNamespace,
    destinationUses: dict[str, str],
) -> tuple[list[FolderMapping], list[SourceFolder]]:
    """
    Map the source folders onto destination mailboxes.

    In order: folders the rules leave out are set aside; a rename rule
    decides the destination path; otherwise a folder with a SPECIAL-USE
    attribute goes to the destination's mailbox of the same use, whatever
    its name (C{"Gesendete Objekte"} with C{\\Sent} lands in the
    destination's C{"Sent"}), the first source folder of each use only (a
    Maildir with both C{Sent} and C{Sent Items} keeps them apart);
    otherwise the folder keeps its path, under the destination's personal
    namespace (L{PersonalNamespace.mailbox}).  Two folders may map onto
    one mailbox (see L{sharedMailboxes}).  A folder the source asks to go
    elsewhere (L{SourceFolder.destination}: a label view's archived mail)
    goes there unless a rename rule names it; one whose messages are not
    migrated (L{SourceFolder.notMigrated}) is in neither list.

    @param namespace: the destination's personal namespace.
    @param destinationUses: the destination's mailboxes by special use
        (C{"\\Sent"} to C{"Sent"}), full names as listed.
    @return: the mappings, in the order of C{folders}, and the folders
        left out.
    """
    mappings: list[FolderMapping] = []
    excluded: list[SourceFolder] = []
    claimed: set[str] = set()
    for folder in folders:
        if not isIncluded(folder.path, rules):
            excluded.append(folder)
        elif folder.notMigrated is None:
            mappings.append(_mapFolder(folder, rules, namespace, destinationUses, claimed))
    return mappings, excluded


def _mapFolder(
    folder: SourceFolder,
    rules: FolderRules,
    namespace: PersonalNamespace,
    destinationUses: dict[str, str],
    claimed: set[str],
) -> FolderMapping:
    """
    Where one included folder goes (L{mapFolders}).

    @param claimed: the special uses a folder went to the destination's
        mailbox of already; a use this folder claims is added.
    """
    renamed = renamedPath(folder.path, rules)
    if renamed is not None:
        mailbox = namespace.mailbox(renamed)
        return FolderMapping(folder, renamed, mailbox, folder.specialUse, "rename")
    if folder.destination is not None:
        mailbox = namespace.mailbox(folder.destination)
        return FolderMapping(folder, folder.destination, mailbox, None, "archive")
    use = folder.specialUse
    if use is not None and use in destinationUses and use not in claimed:
        claimed.add(use)
        mailbox = destinationUses[use]
        return FolderMapping(folder, namespace.path(mailbox), mailbox, None, "special-use")
    if use in claimed:
        # Another source folder of this use went to the destination's
        # mailbox of that use: this one stays a folder of its own.
        use = None
    return FolderMapping(folder, folder.path, namespace.mailbox(folder.path), use, "name")


def sharedMailboxes(mappings: Sequence[FolderMapping]) -> dict[str, list[FolderMapping]]:
    """
    The mailboxes more than one source folder maps onto, each with those
    mappings in order: C{INBOX/x} and C{x} onto C{INBOX.x} on a server
    whose prefix is C{INBOX.}, a folder and a rename onto the same path.
    Their messages are merged in that mailbox (each message keeps its own
    record, by source folder); the caller logs it.
    """
    byMailbox: dict[str, list[FolderMapping]] = {}
    for mapping in mappings:
        byMailbox.setdefault(mapping.mailbox, []).append(mapping)
    return {mailbox: group for mailbox, group in byMailbox.items() if len(group) > 1}
