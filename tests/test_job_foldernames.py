"""
Tests for L{imapmig.job.foldernames}: recognising a refused name, and the
safe spelling a folder falls back to.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from imapmig.job.foldernames import (
    fallbackMailbox,
    mayBeRefusedForItsName,
    refusedAsInvalidName,
    safeComponent,
    safePath,
)
from imapmig.plan import PersonalNamespace


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
        A refusal that says the name is invalid is one.
        """
        self.assertTrue(mayBeRefusedForItsName("[CANNOT] Invalid mailbox name"))
        self.assertTrue(mayBeRefusedForItsName("Invalid mailbox name."))

    def test_withoutCode(self) -> None:
        """
        A refusal with no response code says nothing either way (Courier's
        answer to a name outside the Basic Multilingual Plane), so it is
        one.
        """
        self.assertTrue(mayBeRefusedForItsName("Error in IMAP command received by server."))

    def test_otherCode(self) -> None:
        """
        A refusal whose code names another reason is not.
        """
        for text in ["[NOPERM] Permission denied", "[OVERQUOTA] Quota exceeded"]:
            self.assertFalse(mayBeRefusedForItsName(text), text)
