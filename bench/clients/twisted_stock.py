# -*- test-case-name: tests.test_bench -*-
# mypy: disallow-untyped-calls=False
# (IMAP4Client's methods are not annotated; this is a stock-API user.)
"""
Twisted's stock C{IMAP4Client}, one C{append} after another, as a user of
C{twisted.mail.imap4} would write it: connect, log in, create each folder,
then C{await client.append(folder, file, flags, date)} for every file.

    python -m bench.clients.twisted_stock --host H --port P --user U \\
        --password PW --maildir DIR

C{IMAP4Client.login} would negotiate STARTTLS, which Dovecot offers on its
plain port; the other clients of the benchmark talk in clear text, so this
one sends the LOGIN command itself (C{sendCommand}, a public method).  The
bodies get CRLF line endings, as IMAP requires (imaplib does the same).
Prints C{{"messages": N, "octets": N}} as JSON.
"""

from __future__ import annotations

import argparse
import imaplib
import io
import json
import sys
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.interfaces import IReactorTCP
from twisted.internet.task import react
from twisted.mail import imap4

from bench.clients.maildir import folders, messages


class GreetedClient(imap4.IMAP4Client):
    """
    An C{IMAP4Client} whose L{greeted} fires with the server's greeting.
    """

    def __init__(self) -> None:
        imap4.IMAP4Client.__init__(self)
        self.greeted: Deferred[object] = Deferred()

    def serverGreeting(self, caps: object) -> None:
        """
        Fire L{greeted}.
        """
        self.greeted.callback(caps)


async def migrate(reactor: IReactorTCP, args: argparse.Namespace) -> dict[str, int]:
    """
    Append every message of C{args.maildir}, one after another.

    @param reactor: the reactor to connect with.
    @param args: the parsed command line.
    @return: the counts to print.
    """
    client = GreetedClient()
    await connectProtocol(TCP4ClientEndpoint(reactor, args.host, args.port), client)
    await client.greeted
    login = b'"%s" "%s"' % (args.user.encode("utf-8"), args.password.encode("utf-8"))
    await client.sendCommand(imap4.Command(b"LOGIN", login))
    count = octets = 0
    for name, directory in folders(args.maildir):
        if name != "INBOX":
            await client.create(name)
        for message in messages(directory):
            with open(message.path, "rb") as f:
                body = f.read().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
            # append() quotes the date it is given: pass it unquoted.
            date = imaplib.Time2Internaldate(message.mtime).strip('"')
            await client.append(name, io.BytesIO(body), message.flags, date)
            count += 1
            octets += len(body)
    await client.logout()
    return {"messages": count, "octets": octets}


def main(argv: list[str] | None = None) -> None:
    """
    Run the migration in a reactor and print the counts.

    @param argv: the command-line arguments (C{sys.argv[1:]} by default).
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--maildir", required=True)
    args = parser.parse_args(argv)

    async def run(reactor: Any) -> None:
        result = await migrate(reactor, args)
        print(json.dumps(result))

    react(lambda reactor: Deferred.fromCoroutine(run(reactor)))


if __name__ == "__main__":
    main(sys.argv[1:])
