"""
Tests for L{imapmig.mail.folders}: folder mapping, namespaces and folder
rules.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.mail.folders import (
    FolderMapping,
    FolderRules,
    PersonalNamespace,
    destinationMailbox,
    folderName,
    isIncluded,
    mailboxesToCreate,
    mapFolders,
    renamedPath,
    sharedMailboxes,
)
from imapmig.mail.message import SourceFolder


def NS(delimiter: str | None, prefix: str = "") -> PersonalNamespace:
    return PersonalNamespace(prefix, delimiter)


class FolderMappingTests(SynchronousTestCase):
    """
    Source hierarchies become destination mailbox names.
    """

    def test_delimiter(self) -> None:
        """
        Components are joined with the destination's delimiter.
        """
        self.assertEqual(destinationMailbox(("Archive", "2019"), NS(".")), "Archive.2019")
        self.assertEqual(destinationMailbox(("Archive", "2019"), NS("/")), "Archive/2019")

    def test_delimiterInsideComponent(self) -> None:
        """
        A delimiter inside a component is replaced, so it does not create
        hierarchy.
        """
        self.assertEqual(destinationMailbox(("a.b", "c"), NS(".")), "a_b.c")
        self.assertEqual(destinationMailbox(("a.b", "c"), NS("/")), "a.b/c")

    def test_inbox(self) -> None:
        """
        INBOX is spelled in upper case whatever the source's case.
        """
        self.assertEqual(destinationMailbox(("Inbox",), NS(".")), "INBOX")
        self.assertEqual(destinationMailbox(("inbox", "x"), NS("/")), "INBOX/x")

    def test_flatServer(self) -> None:
        """
        Without a delimiter, components are joined with underscores.
        """
        self.assertEqual(destinationMailbox(("a", "b"), NS(None)), "a_b")

    def test_mailboxesToCreate(self) -> None:
        """
        Missing mailboxes are listed parents first, once each; existing ones
        and INBOX are not.
        """
        self.assertEqual(
            mailboxesToCreate(
                [("INBOX",), ("Archive", "2019"), ("Archive", "2020"), ("Lists", "a", "b")],
                {"Archive", "inbox"},
                NS("."),
            ),
            ["Archive.2019", "Archive.2020", "Lists", "Lists.a", "Lists.a.b"],
        )


class PersonalNamespaceTests(SynchronousTestCase):
    """
    L{PersonalNamespace}: destination names under a prefix, and folder
    paths back from them.
    """

    courier = PersonalNamespace("INBOX.", ".")

    def test_prefixed(self) -> None:
        """
        Every folder but INBOX goes under the prefix, levels joined with
        the delimiter.
        """
        self.assertEqual(self.courier.mailbox(("Sent",)), "INBOX.Sent")
        self.assertEqual(self.courier.mailbox(("Archive", "2019")), "INBOX.Archive.2019")
        self.assertEqual(self.courier.mailbox(("inbox",)), "INBOX")
        self.assertEqual(NS("/", "Mail/").mailbox(("a", "b")), "Mail/a/b")

    def test_inboxChildrenUnderInboxPrefix(self) -> None:
        """
        Under an C{INBOX.} prefix, a source's C{INBOX/x} is C{INBOX.x}
        (not C{INBOX.INBOX.x}), the same mailbox as C{x}; under another
        prefix INBOX's children stay below INBOX.
        """
        self.assertEqual(self.courier.mailbox(("INBOX", "x")), "INBOX.x")
        self.assertEqual(self.courier.mailbox(("Inbox", "x", "y")), "INBOX.x.y")
        self.assertEqual(NS("/", "Mail/").mailbox(("INBOX", "x")), "INBOX/x")

    def test_pathRoundTrip(self) -> None:
        """
        L{PersonalNamespace.path} strips the prefix (C{INBOX.} in any case)
        and splits at the delimiter; a name outside the prefix is split
        whole; mapping the path back gives the name.
        """
        self.assertEqual(self.courier.path("INBOX.Sent"), ("Sent",))
        self.assertEqual(self.courier.path("inbox.Sent.old"), ("Sent", "old"))
        self.assertEqual(self.courier.path("Inbox"), ("INBOX",))
        self.assertEqual(self.courier.path("Other"), ("Other",))
        self.assertEqual(NS(".").path("inbox.x"), ("INBOX", "x"))
        for name in ("INBOX.Sent", "INBOX.a.b", "INBOX"):
            self.assertEqual(self.courier.mailbox(self.courier.path(name)), name)

    def test_holds(self) -> None:
        """
        INBOX and names under the prefix are in the namespace; with the
        empty prefix, every name is.
        """
        self.assertTrue(self.courier.holds("INBOX"))
        self.assertTrue(self.courier.holds("INBOX.Sent"))
        self.assertFalse(self.courier.holds("shared.bob"))
        self.assertTrue(NS("/").holds("anything"))

    def test_mailboxesToCreateUnderPrefix(self) -> None:
        """
        The prefix itself is never created (INBOX exists); folders and
        their parents are created under it.
        """
        self.assertEqual(
            mailboxesToCreate(
                [("INBOX",), ("INBOX", "x"), ("Archive", "2019")], {"INBOX"}, self.courier
            ),
            ["INBOX.x", "INBOX.Archive", "INBOX.Archive.2019"],
        )

    def test_specialUseStripsPrefix(self) -> None:
        """
        A destination special-use mailbox (a full name) becomes a path
        without the prefix, so it is not created again under it.
        """
        sent = SourceFolder(("Gesendet",), "s", "\\Sent")
        mappings, _ = mapFolders([sent], FolderRules(), self.courier, {"\\Sent": "INBOX.Sent"})
        self.assertEqual(mappings[0].path, ("Sent",))
        self.assertEqual(mappings[0].mailbox, "INBOX.Sent")
        self.assertEqual(mailboxesToCreate([m.path for m in mappings], {"INBOX.Sent"}, self.courier), [])

    def test_sharedMailboxes(self) -> None:
        """
        Two source folders that map onto one mailbox are reported, in
        order; folders with mailboxes of their own are not.
        """
        child = SourceFolder(("INBOX", "x"), "INBOX.x")
        top = SourceFolder(("x",), "x")
        other = SourceFolder(("y",), "y")
        mappings, _ = mapFolders([child, top, other], FolderRules(), self.courier, {})
        shared = sharedMailboxes(mappings)
        self.assertEqual(list(shared), ["INBOX.x"])
        self.assertEqual([m.folder for m in shared["INBOX.x"]], [child, top])


class FolderRulesTests(SynchronousTestCase):
    """
    Include and exclude patterns, and renames.
    """

    def test_folderName(self) -> None:
        """
        Rules see paths joined with C{/}, a top-level INBOX in upper case.
        """
        self.assertEqual(folderName(("inbox", "a.b", "c")), "INBOX/a.b/c")
        self.assertEqual(folderName(("Archive",)), "Archive")

    def test_includeExclude(self) -> None:
        """
        Without include patterns everything is kept; exclusion wins over
        inclusion; C{*} crosses levels; INBOX matches in any case.
        """
        self.assertTrue(isIncluded(("A",), FolderRules()))
        rules = FolderRules(include=("Archive*", "inbox"), exclude=("Archive/2019/*",))
        self.assertTrue(isIncluded(("INBOX",), rules))
        self.assertTrue(isIncluded(("Archive",), rules))
        self.assertTrue(isIncluded(("Archive", "2020", "Q1"), rules))
        self.assertTrue(isIncluded(("Archive", "2019"), rules))
        self.assertFalse(isIncluded(("Archive", "2019", "Q1"), rules))
        self.assertFalse(isIncluded(("Trash",), rules))
        self.assertFalse(isIncluded(("Spam",), FolderRules(exclude=("Spam",))))

    def test_rename(self) -> None:
        """
        A rename applies to the folder and its subfolders; the longest
        matching source wins; other folders are not renamed.
        """
        rules = FolderRules(
            rename=(("Old", "New/Place"), ("Old/Keep", "Kept"), ("inbox/x", "X"))
        )
        self.assertEqual(renamedPath(("Old",), rules), ("New", "Place"))
        self.assertEqual(renamedPath(("Old", "a", "b"), rules), ("New", "Place", "a", "b"))
        self.assertEqual(renamedPath(("Old", "Keep", "z"), rules), ("Kept", "z"))
        self.assertEqual(renamedPath(("INBOX", "x"), rules), ("X",))
        self.assertIsNone(renamedPath(("Older",), rules))


class MapFoldersTests(SynchronousTestCase):
    """
    L{mapFolders}: rules, renames, special use, then names.
    """

    def test_order(self) -> None:
        """
        Excluded folders are set aside; a rename wins over special use;
        a folder with a use the destination has lands in that mailbox
        whatever its name; others keep their path, joined with the
        destination's delimiter, and carry their use for creation.
        """
        sent = SourceFolder(("Gesendete Objekte",), "s", "\\Sent")
        drafts = SourceFolder(("Entwürfe",), "d", "\\Drafts")
        junk = SourceFolder(("Spam",), "j", "\\Junk")
        trash = SourceFolder(("Papierkorb",), "t", "\\Trash")
        plain = SourceFolder(("Archiv", "2019"), "a")
        skipped = SourceFolder(("Tmp",), "x")
        mappings, excluded = mapFolders(
            [sent, drafts, junk, trash, plain, skipped],
            FolderRules(exclude=("Tmp",), rename=(("Papierkorb", "Old Trash"),)),
            NS("/"),
            {"\\Sent": "Sent", "\\Drafts": "Drafts", "\\Trash": "Trash"},
        )
        self.assertEqual(excluded, [skipped])
        self.assertEqual(
            mappings,
            [
                FolderMapping(sent, ("Sent",), "Sent", None, "special-use"),
                FolderMapping(drafts, ("Drafts",), "Drafts", None, "special-use"),
                FolderMapping(junk, ("Spam",), "Spam", "\\Junk", "name"),
                FolderMapping(trash, ("Old Trash",), "Old Trash", "\\Trash", "rename"),
                FolderMapping(plain, ("Archiv", "2019"), "Archiv/2019", None, "name"),
            ],
        )

    def test_specialUseNestedDestination(self) -> None:
        """
        A destination special-use mailbox below another level keeps its
        hierarchy in the mapping's path.
        """
        sent = SourceFolder(("Sent",), "s", "\\Sent")
        mappings, _ = mapFolders([sent], FolderRules(), NS("."), {"\\Sent": "INBOX.Sent"})
        self.assertEqual(mappings[0].path, ("INBOX", "Sent"))
        self.assertEqual(mappings[0].mailbox, "INBOX.Sent")

    def test_oneFolderPerUse(self) -> None:
        """
        Only the first source folder of a use goes to the destination's
        mailbox of that use; a second one keeps its own name (and no use
        to create it with).
        """
        sent = SourceFolder(("Sent",), "s", "\\Sent")
        items = SourceFolder(("Sent Items",), "i", "\\Sent")
        mappings, _ = mapFolders([sent, items], FolderRules(), NS("/"), {"\\Sent": "Gesendet"})
        self.assertEqual(
            [(m.mailbox, m.specialUse, m.how) for m in mappings],
            [("Gesendet", None, "special-use"), ("Sent Items", None, "name")],
        )
