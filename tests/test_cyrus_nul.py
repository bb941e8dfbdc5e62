"""
Integration test: a NUL octet into a real Cyrus IMAP, in a message's body
and in its header (docs/servers.md, "Servers tested", says which Cyrus
stores and which it refuses, and what imapmig records).
"""

from __future__ import annotations

import os

from twisted.internet import reactor
from twisted.trial.unittest import SynchronousTestCase, TestCase

from imapmig.testing.cyrus import startCyrus
from imapmig.testing.accounts import IMAPUser
from imapmig.testing.dovecot import requireDovecot
from tests.support import (
    SOURCE_TREE,
    freshUser,
    migrate,
    newDirectory,
    reportJobs,
    sharedDovecot,
)
from tests.test_servers_integration import _serverEntry, _writeConfig

HEADER_NUL = (
    b"From: a@example.org\r\nTo: b@example.org\r\nSubject: before\0after\r\n"
    b"Message-ID: <header-nul@example.org>\r\nDate: Mon, 7 Dec 2026 10:00:00 +0000\r\n"
    b"\r\nA NUL in the Subject.\r\n"
)
BODY_NUL = (
    b"From: a@example.org\r\nTo: b@example.org\r\nSubject: body\r\n"
    b"Message-ID: <body-nul@example.org>\r\nDate: Mon, 7 Dec 2026 10:00:00 +0000\r\n"
    b"\r\nbefore NUL\0after NUL\r\n"
)


class CyrusNULTests(TestCase):
    """
    What Cyrus does with NUL octets imapmig sends it in a literal8
    (BINARY), and what imapmig records.
    """

    async def test_headerRefusedBodyStored(self) -> None:
        """
        Cyrus stores a NUL in the body exactly, and refuses a message with
        a NUL in its header (C{NO Message contains NUL characters}):
        imapmig records that message as failed with Cyrus's reason, and
        the job completes.
        """
        instance = startCyrus(self, users=(IMAPUser("alice", "alice-pw"),))
        directory = newDirectory(self)
        eml = os.path.join(directory, "eml")
        os.makedirs(eml)
        for name, octets in [("header.eml", HEADER_NUL), ("body.eml", BODY_NUL)]:
            with open(os.path.join(eml, name), "wb") as f:
                f.write(octets)
        config = _writeConfig(
            self,
            {"cyrus": _serverEntry(instance)},
            [("nul", {"eml_dir": eml}, "cyrus", instance.user("alice"))],
        )
        await migrate(self, reactor, config, timeout=180)
        report = reportJobs(self, config, ["nul"])["nul"]
        self.assertEqual((report["copied"], report["failed"]), (1, 1), report)
        (failure,) = report["failures"]
        self.assertIn("Message contains NUL characters", failure["reason"], failure)
        bodies = [m.body for ms in instance.fetchAll("alice").values() for m in ms]
        self.assertEqual(bodies, [BODY_NUL])

    async def test_dovecotStoresBoth(self) -> None:
        """
        Dovecot, for comparison, takes both (and serves each NUL as
        C{0x80} in C{BODY[]}).
        """
        requireDovecot(self)
        instance = sharedDovecot()
        user = freshUser(instance)
        directory = newDirectory(self)
        eml = os.path.join(directory, "eml")
        os.makedirs(eml)
        for name, octets in [("header.eml", HEADER_NUL), ("body.eml", BODY_NUL)]:
            with open(os.path.join(eml, name), "wb") as f:
                f.write(octets)
        config = _writeConfig(
            self,
            {"dovecot": _serverEntry(instance)},
            [("nul", {"eml_dir": eml}, "dovecot", IMAPUser(user.name, user.password))],
        )
        await migrate(self, reactor, config, timeout=180)
        report = reportJobs(self, config, ["nul"])["nul"]
        self.assertEqual((report["copied"], report["failed"]), (2, 0), report)
        bodies = sorted(m.body for ms in instance.fetchAll(user.name).values() for m in ms)
        self.assertEqual(
            bodies, sorted(octets.replace(b"\0", b"\x80") for octets in (HEADER_NUL, BODY_NUL))
        )


class ServersTableTests(SynchronousTestCase):
    """
    The "Servers tested" table of docs/servers.md says what the tests above
    find.
    """

    def test_nulRow(self) -> None:
        """
        The C{NUL octets} row's Cyrus cell says that a NUL in a header is
        refused with Cyrus's words, and the next row what imapmig records.
        """
        with open(os.path.join(SOURCE_TREE, "docs", "servers.md"), encoding="utf-8") as f:
            lines = f.read().splitlines()
        (row,) = [n for n, line in enumerate(lines) if line.startswith("| NUL octets |")]
        cyrus = lines[row].split(" | ")[2]
        self.assertIn("in a header: refused, `NO Message contains NUL characters`", cyrus)
        self.assertIn(
            "recorded as failed, `refused by server: NO Message contains NUL characters`",
            lines[row + 1].split(" | ")[2],
        )
