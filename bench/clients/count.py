# -*- test-case-name: tests.test_bench -*-
"""
Count the messages of an account: C{LIST "" "*"}, then C{STATUS MESSAGES}
of every selectable mailbox.  Run after each benchmark run, in the client's
network namespace, to verify that every message arrived.

    python -m bench.clients.count --host H --port P --user U --password PW

Prints C{{"messages": N, "mailboxes": {NAME: N, ...}}} as JSON.  With
C{--user} given more than once (the fleet part's accounts, all with one
password), one connection after the other: C{{"messages": TOTAL,
"accounts": {USER: N, ...}}}.
"""

from __future__ import annotations

import argparse
import imaplib
import json
import re
import sys

_LIST_LINE = re.compile(rb'^\((?P<attributes>[^)]*)\) (?:NIL|"(?:\\.|[^"\\])*") (?P<name>.*)$')
_STATUS_MESSAGES = re.compile(rb"\(.*\bMESSAGES (\d+)")


def countMessages(imap: imaplib.IMAP4) -> dict[str, int]:
    """
    The number of messages in each selectable mailbox.

    @param imap: a logged-in connection.
    @return: counts by mailbox name (as the server sends it).
    """
    typ, data = imap.list('""', "*")
    if typ != "OK":
        raise imaplib.IMAP4.error(f"LIST failed: {data!r}")
    result: dict[str, int] = {}
    for item in data:
        if not isinstance(item, bytes):
            continue
        match = _LIST_LINE.match(item)
        if match is None or b"\\noselect" in match.group("attributes").lower():
            continue
        name = match.group("name").decode("ascii")
        typ, status = imap.status(name, "(MESSAGES)")
        found = _STATUS_MESSAGES.search(status[0]) if typ == "OK" and status[0] else None
        if found is None:
            raise imaplib.IMAP4.error(f"STATUS {name} failed: {status!r}")
        result[name.strip('"')] = int(found.group(1))
    return result


def main(argv: list[str] | None = None) -> int:
    """
    Print the counts; return the exit status.

    @param argv: the command-line arguments (C{sys.argv[1:]} by default).
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", required=True, action="append")
    parser.add_argument("--password", required=True)
    args = parser.parse_args(argv)
    accounts: dict[str, int] = {}
    counts: dict[str, int] = {}
    for user in args.user:
        imap = imaplib.IMAP4(args.host, args.port)
        imap.login(user, args.password)
        counts = countMessages(imap)
        imap.logout()
        accounts[user] = sum(counts.values())
    if len(args.user) == 1:
        print(json.dumps({"messages": sum(counts.values()), "mailboxes": counts}))
    else:
        print(json.dumps({"messages": sum(accounts.values()), "accounts": accounts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
