"""
Tests for L{imapmig.job.foldernames}: recognising a refused name, and the
safe spelling a folder falls back to.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.job.foldernames import (
    alreadyExists,
    fallbackMailbox,
    mayBeRefusedForItsName,
    refusedAsInvalidName,
    safeComponent,
    safePath,
)
from imapmig.mail.folders import PersonalNamespace


class SafeSpellingTests(SynchronousTestCase):
    """
    L{safeComponent}, L{safePath} and L{fallbackMailbox}.
    """

    def test_safeComponent(self) -> None:
        """
        Letters and digits of any script in the BMP and a few punctuation
        marks are kept; the delimiter, quotes, backslashes, wildcards and
        emoji become C{_}; spaces at either end too; the result is the
        same every time.
        """
        self.assertEqual(safeComponent('Say "hi"', "."), "Say _hi_")
        self.assertEqual(safeComponent("Back\\slash", "/"), "Back_slash")
        self.assertEqual(safeComponent("Entwürfe (alt)", "."), "Entwürfe (alt)")
        self.assertEqual(safeComponent("a.b/c*%", "."), "a_b_c__")
        self.assertEqual(safeComponent("Party \U0001f389", "."), "Party _")
        self.assertEqual(safeComponent(" x ", "."), "_x_")
        self.assertEqual(safeComponent("", "."), "_")
        self.assertEqual(safeComponent("   ", "."), "___")

    def test_safeComponentDots(self) -> None:
        """
        A level made only of dots, and dots at the start of a level, become
        C{_} one for one (servers refuse C{.}, C{..} and C{.name}); dots
        further in are kept where the delimiter is not a dot.
        """
        self.assertEqual(safeComponent(".", "/"), "_")
        self.assertEqual(safeComponent("..", "/"), "__")
        self.assertEqual(safeComponent(".hidden", "/"), "_hidden")
        self.assertEqual(safeComponent(" .x. ", "/"), "__x._")
        self.assertEqual(safeComponent("v1.2", "/"), "v1.2")
        self.assertEqual(fallbackMailbox(("a", ".."), PersonalNamespace("", "/")), "a/__")

    def test_safePathKeepsInbox(self) -> None:
        """
        A top-level INBOX stays INBOX; deeper levels are spelled safely.
        """
        self.assertEqual(safePath(("inbox", 'a"b'), "."), ("INBOX", "a_b"))

    def test_fallbackMailbox(self) -> None:
        """
        The fallback is the safe path under the namespace; L{None} when the
        name is safe already (nothing to fall back to).
        """
        courier = PersonalNamespace("INBOX.", ".")
        self.assertEqual(fallbackMailbox(('Say "hi"', "x"), courier), "INBOX.Say _hi_.x")
        self.assertIsNone(fallbackMailbox(("Sent",), courier))


class RefusalTests(SynchronousTestCase):
    """
    L{refusedAsInvalidName}.
    """

    def test_invalidName(self) -> None:
        """
        C{[CANNOT]}, and the wordings of Courier, Cyrus and Dovecot without
        a code, are refusals of the name.
        """
        for text in [
            "[CANNOT] Invalid mailbox name",
            "Invalid mailbox name.",
            "Invalid mailbox name",
            "[CANNOT] Mailbox name is not valid mUTF-7",
            "Name must not have '/' characters.",
        ]:
            self.assertTrue(refusedAsInvalidName(text), text)

    def test_otherRefusals(self) -> None:
        """
        Refusals for other reasons are not, even when the text mentions a
        name.
        """
        for text in [
            "[ALREADYEXISTS] Mailbox already exists",
            "[NOPERM] Permission denied for this name",
            "[OVERQUOTA] Quota exceeded",
            "Permission denied",
            "Mailbox already exists",
        ]:
            self.assertFalse(refusedAsInvalidName(text), text)


class MayBeRefusedForItsNameTests(SynchronousTestCase):
    """
    L{mayBeRefusedForItsName}: whether a safe spelling is worth one try.
    """

    def test_sayingSo(self) -> None:
        """
        A refusal that says the name is invalid is one, whatever the name.
        """
        self.assertTrue(mayBeRefusedForItsName("[CANNOT] Invalid mailbox name", "a*b"))
        self.assertTrue(mayBeRefusedForItsName("Invalid mailbox name.", "a*b"))

    def test_withoutCodeOutsideBasicPlane(self) -> None:
        """
        A refusal with no response code of a name with a character outside
        the Basic Multilingual Plane is one (Courier's answer to an emoji).
        """
        self.assertTrue(
            mayBeRefusedForItsName(
                "Error in IMAP command received by server.", "INBOX.Party \U0001f389"
            )
        )

    def test_withoutCodeOtherwise(self) -> None:
        """
        A refusal with no response code that does not say the name is
        invalid is not one for a name within the Basic Multilingual Plane:
        it may be transient, and a fallback is kept for good.
        """
        for name in ["Archive", "Café (alt) #1", "日本語"]:
            self.assertFalse(mayBeRefusedForItsName("Server busy, try again later", name))
            self.assertFalse(
                mayBeRefusedForItsName("Error in IMAP command received by server.", name)
            )

    def test_otherCode(self) -> None:
        """
        A refusal whose code names another reason is not, even for a name
        outside the Basic Multilingual Plane.
        """
        for text in ["[NOPERM] Permission denied", "[OVERQUOTA] Quota exceeded"]:
            self.assertFalse(mayBeRefusedForItsName(text, "a*b"), text)
            self.assertFalse(mayBeRefusedForItsName(text, "Party \U0001f389"), text)


class AlreadyExistsTests(SynchronousTestCase):
    """
    L{alreadyExists}.
    """

    def test_code(self) -> None:
        """
        Only the C{[ALREADYEXISTS]} response code (any case) says the
        mailbox is there; a text saying so without the code is not taken
        on its word.
        """
        self.assertTrue(alreadyExists("[ALREADYEXISTS] Mailbox already exists"))
        self.assertTrue(alreadyExists("[alreadyexists] exists"))
        self.assertFalse(alreadyExists("Mailbox already exists"))
        self.assertFalse(alreadyExists("[CANNOT] Invalid mailbox name"))
        self.assertFalse(alreadyExists("[ALREADYEXISTS"))
