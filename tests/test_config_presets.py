# -*- test-case-name: tests.test_config_presets -*-
"""
Tests for L{imapmig.config.presets}, L{imapmig.config.sizes} and the
C{preset}, C{label_views} and C{max_message_size} keys of a server.
"""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from imapmig.config import parseConfig
from imapmig.config.model import ServerConfig
from imapmig.config.presets import PRESETS, Preset, presetNames, withPreset
from imapmig.config.sizes import parseSize
from tests.test_config import ConfigTestCase


class PresetConfigTests(ConfigTestCase):
    """
    A server's C{preset} fills the keys the file leaves out.
    """

    def server(self, entry: dict[str, Any]) -> ServerConfig:
        """
        Load the test document with C{entry} as its server C{new}.
        """
        document = self.document()
        document["servers"]["new"] = entry
        [server] = parseConfig(document, self.configPath).servers
        return server

    def test_gmailDefaults(self) -> None:
        """
        C{preset: gmail} without an endpoint connects to imap.gmail.com:993
        with implicit TLS, and de-duplicates label views.
        """
        server = self.server({"preset": "gmail"})
        self.assertEqual(server.preset, "gmail")
        self.assertEqual(server.endpoint, "tls:imap.gmail.com:993")
        self.assertTrue(server.implicitTLS)
        self.assertFalse(server.starttls)
        self.assertEqual(server.tlsHostname, "imap.gmail.com")
        self.assertEqual(server.labelViews, "dedup")
        self.assertIsNone(server.maxMessageSize)
        # Not a loopback host: COMPRESS where offered, as for any remote server.
        self.assertTrue(server.compress)

    def test_microsoft365Defaults(self) -> None:
        """
        C{preset: microsoft365} connects to outlook.office365.com:993 with
        implicit TLS and caps messages at 35 MiB (36,700,160 octets).
        """
        server = self.server({"preset": "microsoft365"})
        self.assertEqual(server.preset, "microsoft365")
        self.assertEqual(server.endpoint, "tls:outlook.office365.com:993")
        self.assertEqual(server.tlsHostname, "outlook.office365.com")
        self.assertEqual(server.maxMessageSize, 36700160)
        self.assertEqual(server.labelViews, "auto")

    def test_writtenKeysWin(self) -> None:
        """
        Every key written beside the preset overrides the preset's value.
        """
        server = self.server(
            {
                "preset": "microsoft365",
                "endpoint": "tcp:127.0.0.1:1143",
                "starttls": "off",
                "max_message_size": "10MB",
                "label_views": "copy",
            }
        )
        self.assertEqual(server.endpoint, "tcp:127.0.0.1:1143")
        self.assertFalse(server.starttls)
        self.assertEqual(server.maxMessageSize, 10_000_000)
        self.assertEqual(server.labelViews, "copy")
        gmail = self.server({"preset": "gmail", "label_views": "copy"})
        self.assertEqual(gmail.labelViews, "copy")

    def test_noPreset(self) -> None:
        """
        Without a preset nothing changes: no size cap, label views C{auto}.
        """
        server = self.server({"endpoint": "tcp:mail.example.org:143"})
        self.assertIsNone(server.preset)
        self.assertEqual(server.labelViews, "auto")
        self.assertIsNone(server.maxMessageSize)

    def test_unknownPreset(self) -> None:
        """
        An unknown preset is one problem naming the file, the key and the
        known presets.
        """
        document = self.document()
        document["servers"]["new"]["preset"] = "gmial"
        self.assertOnlyProblem(
            document,
            "servers.new.preset",
            "unknown preset 'gmial' (known presets: gmail, microsoft365)",
        )

    def test_presetNotAString(self) -> None:
        """
        A preset that is not a string is refused.
        """
        document = self.document()
        document["servers"]["new"]["preset"] = 365
        self.assertOnlyProblem(document, "servers.new.preset", "expected a string")

    def test_badLabelViews(self) -> None:
        """
        C{label_views} is one of auto, dedup and copy.
        """
        document = self.document()
        document["servers"]["new"]["label_views"] = "skip"
        self.assertOnlyProblem(
            document, "servers.new.label_views", "use auto (the default) or dedup, copy"
        )

    def test_archiveFolder(self) -> None:
        """
        C{archive_folder} is C{Archive} by default (and the C{gmail}
        preset's), a folder path as written, or C{off} (quoted or, as YAML
        reads an unquoted one, false): none.
        """
        self.assertEqual(self.server({"preset": "gmail"}).archiveFolder, "Archive")
        self.assertEqual(
            self.server({"endpoint": "tcp:mail.example.org:143"}).archiveFolder, "Archive"
        )
        for written, read in [("Mail/Archiv", "Mail/Archiv"), ("off", None), (False, None)]:
            server = self.server({"preset": "gmail", "archive_folder": written})
            self.assertEqual(server.archiveFolder, read)

    def test_badArchiveFolder(self) -> None:
        """
        C{archive_folder} must be a folder name with no empty level, no
        IMAP wildcard and no control character, or C{off}; each problem
        names the key.
        """
        for written, problem in [
            (True, "must be a folder name or 'off'"),
            ("", "'' has an empty level"),
            ("Mail//Archive", "'Mail//Archive' has an empty level"),
            ("/Archive", "'/Archive' has an empty level"),
            ("Arch*", "'Arch*' holds '*': not in a folder name"),
            ("Arch\nive", "holds '\\n'"),
        ]:
            document = self.document()
            document["servers"]["new"]["archive_folder"] = written
            self.assertOnlyProblem(document, "servers.new.archive_folder", problem)

    def test_badMaxMessageSize(self) -> None:
        """
        C{max_message_size} must be a size.
        """
        document = self.document()
        document["servers"]["new"]["max_message_size"] = "big"
        self.assertOnlyProblem(
            document, "servers.new.max_message_size", "'big' is not a size in octets"
        )


class WithPresetTests(SynchronousTestCase):
    """
    L{withPreset} merges a preset's table into what the file wrote.
    """

    preset = Preset(
        "test",
        {"endpoint": "tls:x:993", "per_account": {"max_connections": 15, "daily_upload": "500MB"}},
        {},
    )

    def test_onlyKnownKeys(self) -> None:
        """
        A preset key the reader does not know is not applied.
        """
        merged = withPreset(self.preset, {"preset": "test"}, ("endpoint", "preset"))
        self.assertEqual(merged, {"preset": "test", "endpoint": "tls:x:993"})

    def test_nestedMerged(self) -> None:
        """
        A nested mapping is merged one level deep, the file's keys winning;
        the preset's own mapping is not changed.
        """
        merged = withPreset(
            self.preset,
            {"per_account": {"daily_upload": "1GB", "bytes_per_second": "1MB"}},
            ("endpoint", "per_account"),
        )
        self.assertEqual(
            merged["per_account"],
            {"max_connections": 15, "daily_upload": "1GB", "bytes_per_second": "1MB"},
        )
        self.assertEqual(
            self.preset.defaults["per_account"], {"max_connections": 15, "daily_upload": "500MB"}
        )

    def test_nestedNotAMapping(self) -> None:
        """
        A nested key the file wrote as something else is left for the
        reader to refuse.
        """
        merged = withPreset(self.preset, {"per_account": 3}, ("per_account",))
        self.assertEqual(merged["per_account"], 3)

    def test_presetTables(self) -> None:
        """
        The presets carry the contract's limits, and say where each value
        comes from.
        """
        self.assertEqual(presetNames(), ("gmail", "microsoft365"))
        gmail = PRESETS["gmail"].defaults
        self.assertEqual(
            dict(gmail["per_account"]),  # type: ignore[call-overload]
            {"max_connections": 15, "daily_upload": "500MB", "daily_download": "2500MB"},
        )
        microsoft = PRESETS["microsoft365"].defaults
        self.assertEqual(
            dict(microsoft["per_account"]),  # type: ignore[call-overload]
            {"max_connections": 20},
        )
        for preset in PRESETS.values():
            keys: set[str] = set()
            for key, value in preset.defaults.items():
                if isinstance(value, dict) or hasattr(value, "items"):
                    keys.update(f"{key}.{nested}" for nested in value)  # type: ignore[attr-defined]
                else:
                    keys.add(key)
            self.assertEqual(keys, set(preset.sources), preset.name)


class SizeTests(SynchronousTestCase):
    """
    L{parseSize} reads sizes with decimal and binary suffixes.
    """

    def test_sizes(self) -> None:
        """
        Integers are octets; KB/MB/GB are powers of 1000, KiB/MiB/GiB of
        1024, in any case.
        """
        for written, size in [
            (35651584, 35651584),
            ("35651584", 35651584),
            ("500MB", 500_000_000),
            ("2500 mb", 2_500_000_000),
            ("35MiB", 36_700_160),
            ("1.5GB", 1_500_000_000),
            ("4KiB", 4096),
        ]:
            self.assertEqual(parseSize(written), (size, ""), written)

    def test_notSizes(self) -> None:
        """
        Anything else is refused, with the reason.
        """
        for written in ["", "MB", "5 XB", "-1", 0, True, 1.5, "1.5", None, "0KB"]:
            size, why = parseSize(written)
            self.assertIsNone(size, written)
            self.assertTrue(why, written)
