# -*- test-case-name: tests.test_config_presets -*-
"""
Server presets: C{preset: gmail} and C{preset: microsoft365} on a server
under C{servers}.

A preset is a table of defaults for the server's keys, in the form the
file writes them (C{"500MB"}, not 500000000), so that a preset's value is
read and checked by the same code as a written one.  Every key written in
the file wins over the preset's; a nested mapping (C{per_account}) is
merged one level deep, the file's keys winning there too.

A preset may hold keys the server reader does not know (yet): only the
keys it is told it knows (L{withPreset}'s C{known}) are applied, so a
preset table can name the limits of every slice of issue 17 while the
reader grows to read them.  Each value, and where it comes from, is in
L{PRESETS} and the user documentation.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Collection, Mapping

from attrs import frozen

__all__ = ["PRESETS", "Preset", "presetNames", "withPreset"]


@frozen
class Preset:
    """
    The defaults of one kind of server.

    @ivar name: what C{preset:} says.
    @ivar defaults: server keys to their default values, as YAML would
        give them; C{per_account} maps to a mapping of its own keys.
    @ivar sources: for each key of L{defaults} (C{per_account.KEY} for a
        nested one), where its value comes from.
    """

    name: str
    defaults: Mapping[str, object]
    sources: Mapping[str, str]


_GMAIL = Preset(
    name="gmail",
    defaults=MappingProxyType(
        {
            "endpoint": "tls:imap.gmail.com:993",
            "per_account": MappingProxyType(
                {
                    "max_connections": 15,
                    "daily_upload": "500MB",
                    "daily_download": "2500MB",
                }
            ),
            "label_views": "dedup",
            "archive_folder": "Archive",
        }
    ),
    sources=MappingProxyType(
        {
            "endpoint": "Google's IMAP settings for mail clients: imap.gmail.com,"
            " port 993, SSL (implicit TLS)",
            "per_account.max_connections": "Google Workspace: 15 simultaneous IMAP"
            " connections per account",
            "per_account.daily_upload": "Google Workspace bandwidth limits: about"
            " 500 MB a day of IMAP upload per account",
            "per_account.daily_download": "Google Workspace bandwidth limits: about"
            " 2,500 MB a day of IMAP download per account",
            "label_views": "Gmail's [Gmail]/All Mail, Important and Starred are views"
            " of labels (Google's IMAP extensions, X-GM-EXT-1)",
            "archive_folder": "Gmail's archived mail (in All Mail only) on a server"
            " without X-GM-EXT-1: copied into this folder",
        }
    ),
)

_MICROSOFT365 = Preset(
    name="microsoft365",
    defaults=MappingProxyType(
        {
            "endpoint": "tls:outlook.office365.com:993",
            "per_account": MappingProxyType({"max_connections": 20}),
            "max_message_size": "35MiB",
        }
    ),
    sources=MappingProxyType(
        {
            "endpoint": "Microsoft's POP and IMAP settings for Outlook.com and"
            " Microsoft 365: outlook.office365.com, port 993, SSL/TLS",
            "per_account.max_connections": "Exchange Online throttling: 20 concurrent"
            " IMAP connections per mailbox (Exchange Server's own default,"
            " MaxConnectionsPerUser, is 16)",
            "max_message_size": "Exchange Online's default mailbox message size"
            " limit, 35 MB (36,700,160 octets), also the largest message its IMAP"
            " migration copies; Exchange Online does not advertise APPENDLIMIT",
        }
    ),
)

PRESETS: Mapping[str, Preset] = MappingProxyType(
    {preset.name: preset for preset in (_GMAIL, _MICROSOFT365)}
)
"""
Every preset, by name.
"""


def presetNames() -> tuple[str, ...]:
    """
    The names of the presets, for an error message.
    """
    return tuple(PRESETS)


def withPreset(
    preset: Preset, written: Mapping[str, object], known: Collection[str]
) -> dict[str, object]:
    """
    A server's keys as written, with the preset's defaults for those it
    leaves out.

    @param preset: the server's preset.
    @param written: the server's mapping as the file has it (C{preset}
        itself may be in it; it is kept).
    @param known: the keys the server reader reads: a preset key outside
        them is not applied.
    @return: a new mapping; a nested mapping (C{per_account}) is the
        preset's, updated with the file's, when the file's is a mapping
        (anything else is left for the reader to refuse).
    """
    merged = dict(written)
    for key, default in preset.defaults.items():
        if key in known:
            merged[key] = _withDefault(default, merged.get(key, _ABSENT))
    return merged


_ABSENT = object()


def _withDefault(default: object, written: object) -> object:
    """
    A key's value as the file writes it (C{_ABSENT} if it does not), with
    the preset's C{default}: the default for an absent key, the default
    updated with the file's for a mapping, else the file's.
    """
    if written is _ABSENT:
        return dict(default) if isinstance(default, Mapping) else default
    if isinstance(default, Mapping) and isinstance(written, dict):
        return {**default, **written}
    return written
