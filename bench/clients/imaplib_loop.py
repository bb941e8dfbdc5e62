# -*- test-case-name: tests.test_bench -*-
"""
The one-by-one C{imaplib} loop, as a user would write it: log in, create
each folder, then C{imap.append(folder, flags, date, body)} for every file.

    python -m bench.clients.imaplib_loop --host H --port P --user U \\
        --password PW --maildir DIR [--nodelay]

C{--nodelay} sets C{TCP_NODELAY} on the socket after connecting; without
it, imaplib's separate C{send} of the literal's closing CRLF waits for the
server's delayed ACK (Nagle).  Prints C{{"messages": N, "octets": N}} as JSON.
"""

from __future__ import annotations

import argparse
import imaplib
import json
import socket
import sys

from bench.clients.maildir import folders, messages


def main(argv: list[str] | None = None) -> int:
    """
    Append every message of the Maildir; return the exit status.

    @param argv: the command-line arguments (C{sys.argv[1:]} by default).
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--maildir", required=True)
    parser.add_argument("--nodelay", action="store_true")
    args = parser.parse_args(argv)

    imap = imaplib.IMAP4(args.host, args.port)
    if args.nodelay:
        imap.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    imap.login(args.user, args.password)
    count = octets = 0
    for name, directory in folders(args.maildir):
        if name != "INBOX":
            imap.create(name)
        for message in messages(directory):
            with open(message.path, "rb") as f:
                body = f.read()
            flags = "(" + " ".join(message.flags) + ")"
            date = imaplib.Time2Internaldate(message.mtime)
            typ, data = imap.append(name, flags, date, body)
            if typ != "OK":
                sys.stderr.write(f"APPEND {message.path} failed: {typ} {data!r}\n")
                return 1
            count += 1
            octets += len(body)
    imap.logout()
    print(json.dumps({"messages": count, "octets": octets}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
