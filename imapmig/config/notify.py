# -*- test-case-name: tests.test_webhook -*-
"""
Read C{notify:}: where the daemon's notifications go (L{imapmig.daemon.webhook}).

    notify:
      webhook_url: https://hooks.example/imapmig   # required
      token_file: /etc/imapmig/webhook.token       # optional: Authorization: Bearer
      stalled_after: 1800                          # seconds, or off; default 3600

A section of its own, beside L{imapmig.config.servers}'s: nothing else
reads these keys.
"""

from __future__ import annotations

from imapmig.config.accounts import urlProblem
from imapmig.config.model import NotifyConfig
from imapmig.config.reader import ConfigReader, Key, Step, isOff, keyNames
from imapmig.access.secrets import Secret

__all__ = ["NOTIFY_KEYS", "NotifyReader"]

_DEFAULT_STALLED_AFTER = 3600.0


def webhookURLProblem(url: str) -> str | None:
    """
    Why C{url} cannot be a webhook, or L{None}: it must be
    C{https://HOST/...}, or C{http://} to a loopback address (the token
    and the notifications never cross a network in the clear); no user
    or password in it (the token goes in C{token_file}).
    """
    problem = urlProblem(url, "give the receiver's token in notify.token_file, not in the URL")
    if problem is None and not _printableASCII(url):
        return "a URL holds no spaces or characters outside ASCII (percent-encode them)"
    return problem


def _printableASCII(url: str) -> bool:
    """
    Whether C{url} holds only printable ASCII, without spaces.
    """
    return url.isascii() and not any(c.isspace() or not c.isprintable() for c in url)


class NotifyReader(ConfigReader):
    """
    Reads the C{notify} section.
    """

    def _readNotify(self, value: object) -> NotifyConfig | None:
        """
        Read C{notify}: a mapping of L{NOTIFY_KEYS}; L{None} when it has a
        problem (each recorded with its key).
        """
        values = self._readSection(value, "notify", _NOTIFY_TABLE)
        if values is None:
            return None
        # False: off.
        values["stalledAfter"] = values["stalledAfter"] or None
        return NotifyConfig(**values)

    def _readWebhookURL(self, value: object, path: str) -> str | None:
        """
        Read C{notify.webhook_url}: a URL L{webhookURLProblem} accepts.
        """
        return self._accepted(self._readString(value, path), path, webhookURLProblem)

    def _readStalledAfter(self, value: object, path: str) -> float | bool | None:
        """
        Read C{notify.stalled_after}: seconds (at least 60), or C{off}
        (C{False}).
        """
        if isOff(value):
            return False
        seconds = self._readSeconds(value, path)
        if seconds is not None and seconds < 60:
            self._problem(path, f"must be at least 60 seconds (or off), not {value}")
            return None
        return seconds

    def _readWebhookToken(self, value: object, path: str) -> Secret | None:
        """
        Read C{notify.token_file}: the receiver's bearer token, the file's
        first line stripped, from a file only its owner may read.
        """
        resolved = self._readPath(value, path)
        token = self._accepted(
            self._readSecretFile(resolved, path, "webhook token"),
            path,
            lambda token: _webhookTokenProblem(token, resolved),
        )
        return None if token is None else Secret(token)


def _webhookTokenProblem(token: str, resolved: str | None) -> str | None:
    """
    Why C{token}, read from C{resolved}, cannot be the webhook's token,
    or L{None}: it must be printable, on one line.
    """
    # A line ending is not printable.
    if not token or not token.isprintable():
        return f"webhook token file {resolved} holds no printable token"
    return None


_NOTIFY_TABLE: tuple[Step, ...] = (
    Key("webhook_url", NotifyReader._readWebhookURL, "webhookURL",
        missing="missing: the URL notifications are posted to"),
    Key("token_file", NotifyReader._readWebhookToken, "token"),
    Key("stalled_after", NotifyReader._readStalledAfter, "stalledAfter",
        default=_DEFAULT_STALLED_AFTER),
)  # fmt: skip
NOTIFY_KEYS = keyNames(_NOTIFY_TABLE)
