# -*- test-case-name: tests.test_status_exposure,tests.test_webhook -*-
"""
Text without filesystem paths, for readers who may not see them: the status
site's unauthenticated pages and the webhook's payloads.  One rule for both
(it replaces C{status._http.withoutPaths} and C{webhook.redactPaths}, which
differed).

This module is a leaf: it imports nothing of imapmig's.
"""

from __future__ import annotations

import re

__all__ = ["PATH_SHOWN", "withoutPaths"]

_QUOTED_PATH = re.compile(r"""(['"])~?/[^'"]*\1""")
_PATH = re.compile(r"""(?<![\w.~:/\\-])(?:~|\.{1,2})?/[^\s'"<>]*""")
_AFTER_PATH = ".,:;)]}"

PATH_SHOWN = "[path]"
"""
What a reader who may not see paths is shown for one (L{withoutPaths}).
"""


def withoutPaths(text: str) -> str:
    """
    C{text} (an error, a failed message's reason) fit for a page anyone
    who reaches the status site may read, or a webhook's payload: each
    filesystem path in it (the state database's, a source file's; absolute,
    from C{~}, C{./} or C{../}; quoted with spaces, or up to the next blank)
    replaced by L{PATH_SHOWN}.  The log keeps the whole text.  A slash
    inside a word (C{INBOX/Sent}, C{50/s}, C{https://...}, an endpoint's
    C{host:port}) is not a path.
    """
    if "/" not in text:
        return text
    text = _QUOTED_PATH.sub(lambda match: match[1] + PATH_SHOWN + match[1], text)

    def shown(match: re.Match[str]) -> str:
        path = match[0]
        kept = path.rstrip(_AFTER_PATH)
        return PATH_SHOWN + path[len(kept):]

    return _PATH.sub(shown, text)
