# -*- test-case-name: tests.test_sources_imap -*-
"""
Which mailboxes of an IMAP source are its folders, and under what path.

A mailbox in the account's personal namespace is a folder whose path is
its name without the personal prefix (C{INBOX.Sent} on Courier and C{Sent}
on Dovecot are both C{("Sent",)}); mailboxes in other users' or shared
namespaces, or outside the prefix, are left out unless an C{include}
folder rule names them explicitly.  Pure functions: no I/O.
"""

from __future__ import annotations

from typing import Sequence

from imapmig.imap.namespace import ServerNamespaces
from imapmig.imap.mailboxes import ListedMailbox
from imapmig.mail.message import SourceFolder
from imapmig.mail.folders import FolderRules, PersonalNamespace, isIncluded

__all__ = ["LEFT_OUT_SHOWN", "folderPath", "namesExplicitly", "namespacePath", "sourceFolders"]

LEFT_OUT_SHOWN = 5
"""
How many of the mailboxes left out of a source (L{sourceFolders}) its log
line names; it counts them all.
"""

# What makes a level of an include pattern a wildcard.
_WILDCARDS = frozenset("*?[")


def folderPath(name: str, delimiter: str | None) -> tuple[str, ...]:
    """
    A folder's path from its decoded name: the levels between hierarchy
    delimiters, C{INBOX} (in any case) as C{"INBOX"} at the top.
    """
    path = name.split(delimiter) if delimiter else [name]
    if path[0].upper() == "INBOX":
        path[0] = "INBOX"
    return tuple(path)


def namespacePath(
    spaces: ServerNamespaces, name: str, delimiter: str | None
) -> tuple[str, ...] | None:
    """
    The folder path of a listed mailbox in the personal namespace: its
    name without the personal prefix, split at the delimiter (C{INBOX.Sent}
    on Courier and C{Sent} on Dovecot are both C{("Sent",)}); or L{None}
    for a mailbox outside it (another user's, shared, or not under the
    prefix).

    @param delimiter: the delimiter LIST gave the mailbox, used where the
        server's namespace has none (a configured one is believed, so
        L{None} there keeps the name whole).
    """
    if spaces.foreignKind(name) is not None:
        return None
    personal = spaces.personalNamespace()
    if not personal.holds(name):
        return None
    if personal.delimiter is None and not personal.configured:
        personal = PersonalNamespace(personal.prefix, delimiter)
    return personal.path(name)


def namesExplicitly(patterns: Sequence[str], path: tuple[str, ...]) -> bool:
    """
    Whether one of the C{include} patterns names the folder C{path}
    explicitly: it matches, and its first level has no wildcard
    (C{"shared/*"} names the folders below C{shared}; C{"*"} names none).
    """
    return any(
        isIncluded(path, FolderRules(include=(pattern,)))
        for pattern in patterns
        if _WILDCARDS.isdisjoint(pattern.split("/", 1)[0])
    )


def sourceFolders(
    listed: Sequence[ListedMailbox], spaces: ServerNamespaces, include: Sequence[str]
) -> tuple[list[SourceFolder], dict[str, bytes], dict[str, list[str]]]:
    """
    The folders of a source account from what LIST showed: its selectable
    mailboxes in the personal namespace, and those outside it that an
    C{include} pattern names explicitly (L{namesExplicitly}); INBOX first,
    then by path.

    @param listed: the account's mailboxes.
    @param spaces: its namespaces.
    @param include: the job's C{include} folder patterns.
    @return: the folders (each keyed by its mailbox name); each mailbox's
        name as sent on the wire, by name; and the mailboxes left out, by
        where they are (C{"in the shared namespace"}, C{"outside the
        personal namespace"}, ...), for the log.
    """
    folders = []
    wireNames = {}
    leftOut: dict[str, list[str]] = {}
    for mailbox in listed:
        if not mailbox.selectable:
            continue
        path = _pathOf(mailbox, spaces, include)
        if path is None:
            leftOut.setdefault(_whereOutside(spaces, mailbox.name), []).append(mailbox.name)
            continue
        folders.append(
            SourceFolder(
                path=path,
                key=mailbox.name,
                specialUse=mailbox.specialUse,
                subscribed=mailbox.subscribed,
            )
        )
        wireNames[mailbox.name] = mailbox.wireName
    folders.sort(key=lambda f: (f.path[0] != "INBOX", f.path, f.key))
    return folders, wireNames, leftOut


def _pathOf(
    mailbox: ListedMailbox, spaces: ServerNamespaces, include: Sequence[str]
) -> tuple[str, ...] | None:
    """
    The folder path of C{mailbox}: in the personal namespace
    (L{namespacePath}), or outside it where an C{include} pattern names it
    explicitly (L{namesExplicitly}); else L{None}.
    """
    path = namespacePath(spaces, mailbox.name, mailbox.delimiter)
    if path is not None:
        return path
    path = folderPath(mailbox.name, mailbox.delimiter)
    return path if namesExplicitly(include, path) else None


def _whereOutside(spaces: ServerNamespaces, name: str) -> str:
    """
    Where the mailbox C{name}, outside the personal namespace, is, for
    the log.
    """
    kind = spaces.foreignKind(name)
    return f"in the {kind} namespace" if kind else "outside the personal namespace"
