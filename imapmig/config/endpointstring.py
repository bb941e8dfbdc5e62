# -*- test-case-name: tests.test_endpointstring -*-
"""
Twisted's endpoint strings (C{tcp:8025:interface=127.0.0.1}) split into
their arguments, for the checks that read them: the configuration's, and
the status site's question whether its listener reaches beyond loopback.
"""

from __future__ import annotations

__all__ = ["splitEndpoint"]


def splitEndpoint(description: str) -> tuple[list[str], dict[str, str]]:
    """
    Split an endpoint string the way Twisted's parser does: C{:} separates
    arguments, the first C{=} of an argument separates a keyword from its
    value, and a backslash makes the next character literal (C{\\:}).

    @return: the positional arguments (the prefix first, if C{description}
        has one) and the keyword
        arguments.
    @raise ValueError: the string ends with a lone backslash.
    """
    args: list[str] = []
    kwargs: dict[str, str] = {}
    # The argument being read: its keyword, once its "=" is seen, and the
    # characters read so far.
    keyword: str | None = None
    current = ""

    def endArgument() -> None:
        if keyword is None:
            args.append(current)
        else:
            kwargs[keyword] = current

    characters = iter(description)
    for c in characters:
        if c == ":":
            endArgument()
            keyword, current = None, ""
        elif c == "=" and keyword is None:
            keyword, current = current, ""
        elif c == "\\":
            try:
                current += next(characters)
            except StopIteration:
                raise ValueError("it ends with a lone backslash") from None
        else:
            current += c
    endArgument()
    return args, kwargs
