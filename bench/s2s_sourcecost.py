"""
What each kind of command a server-to-server copy sends costs the source
Dovecot, in CPU seconds (issue 17, point 6; a diagnostic, not a benchmark
row).

    python -m bench.s2s_sourcecost [CORPUS]

Starts a private source Dovecot on tmpfs as C{--parts s2s} does, loads
CORPUS (default C{realistic-5000-seed1}) into one account, reads it once
(Dovecot builds its indexes), then runs each sequence below on a fresh
imaplib connection and prints the source instance's CPU over it (every
process, with its reaped children: L{bench.scale_probe.treeCPU}): the
listing with and without C{RFC822.SIZE} (and once more, its sizes
cached), C{EXAMINE}, the bodies fetched whole per folder and in steps, and
C{BINARY.PEEK[]} of the bodies holding 0x80 (one command per body, one per
folder, and its first 0 octets only), and of every body.
"""

from __future__ import annotations

import imaplib
import os
import re
import shutil
import sys
import tempfile
import time
from typing import Callable

from bench.s2s_instructions import _server, _warm
from bench.scale_probe import dovecotMaster, treeCPU
from bench.servers import PASSWORD

Sequence_ = Callable[[imaplib.IMAP4, list[str]], None]


def main() -> None:
    corpusName = sys.argv[1] if len(sys.argv) > 1 else "realistic-5000-seed1"
    work = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work")
    corpus = os.path.join(work, "corpus", corpusName, "Maildir")
    base = tempfile.mkdtemp(prefix="s2s-sourcecost-", dir="/dev/shm")
    source = _server(base, "source", 2)
    candidates: dict[str, list[int]] = {}
    try:
        source.start()
        user = source.freshAccount()
        source.loadMaildir(user, corpus)
        _warm(source, user)
        master = dovecotMaster(os.path.join(base, "source"))

        def measure(name: str, sequence: Sequence_) -> None:
            client = imaplib.IMAP4(source.host, source.port)
            client.login(user, PASSWORD)
            _, listed = client.list()
            folders = [line.rsplit(b' "." ', 1)[-1].decode() for line in listed
                       if isinstance(line, bytes)]  # fmt: skip
            before = treeCPU(master)
            sequence(client, folders)
            client.logout()
            # Let the master reap the imap process, whose time then counts
            # in its cutime.
            time.sleep(0.3)
            print(f"{name:60} source CPU {treeCPU(master) - before:.3f} s", flush=True)

        def listing(items: str) -> Sequence_:
            def run(client: imaplib.IMAP4, folders: list[str]) -> None:
                for folder in folders:
                    if client.select(folder, readonly=True)[0] == "OK":
                        client.uid("FETCH", "1:*", items)

            return run

        def bodies(step: int | None) -> Sequence_:
            def run(client: imaplib.IMAP4, folders: list[str]) -> None:
                for folder in folders:
                    if client.select(folder, readonly=True)[0] != "OK":
                        continue
                    if step is None:
                        _, data = client.uid("FETCH", "1:*", "(UID BODY.PEEK[])")
                        for item in data:
                            if isinstance(item, tuple) and b"\x80" in item[1]:
                                found = re.search(rb"UID (\d+)", item[0])
                                assert found is not None
                                candidates.setdefault(folder, []).append(int(found.group(1)))
                        continue
                    _, data = client.uid("SEARCH", "ALL")
                    uids = [int(uid) for uid in (data[0] or b"").split()]
                    for first in range(0, len(uids), step):
                        last = uids[min(first + step, len(uids)) - 1]
                        client.uid("FETCH", f"{uids[first]}:{last}", "(UID BODY.PEEK[])")

            return run

        def binary(each: bool, item: str = "BINARY.PEEK[]") -> Sequence_:
            def run(client: imaplib.IMAP4, folders: list[str]) -> None:
                for folder, uids in candidates.items():
                    client.select(folder, readonly=True)
                    if each:
                        for uid in uids:
                            client.uid("FETCH", str(uid), f"(UID {item})")
                    else:
                        client.uid("FETCH", ",".join(map(str, uids)), f"(UID {item})")

            return run

        def examine(times: int) -> Sequence_:
            def run(client: imaplib.IMAP4, folders: list[str]) -> None:
                # Each EXAMINE answers READ-ONLY, which imaplib refuses to
                # see outside a select(readonly=True) unless told.
                client.is_readonly = True
                for _ in range(times):
                    for folder in folders:
                        client._simple_command("EXAMINE", folder, "(CONDSTORE)")

            return run

        measure("listing: UID FETCH 1:* (UID FLAGS INTERNALDATE)", listing("(UID FLAGS INTERNALDATE)"))
        measure("listing: UID FETCH 1:* (UID FLAGS INTERNALDATE RFC822.SIZE)",
                listing("(UID FLAGS INTERNALDATE RFC822.SIZE)"))  # fmt: skip
        measure("the same listing again (the sizes now cached)",
                listing("(UID FLAGS INTERNALDATE RFC822.SIZE)"))  # fmt: skip
        measure("EXAMINE (CONDSTORE) of each folder, 20 times", examine(20))
        measure("bodies: one UID FETCH 1:* per folder", bodies(None))
        print(f"bodies holding 0x80: {sum(map(len, candidates.values()))}")
        measure("bodies: a UID FETCH per 50 messages", bodies(50))
        measure("bodies: a UID FETCH per 150 messages", bodies(150))
        measure("BINARY.PEEK[] of the bodies holding 0x80, a command each", binary(True))
        measure("BINARY.PEEK[] of the bodies holding 0x80, a command per folder", binary(False))
        measure("BINARY.PEEK[]<0.0> of the same, a command per folder",
                binary(False, "BINARY.PEEK[]<0.0>"))  # fmt: skip
        measure("BINARY.PEEK[] of every body, a command per folder", listing("(UID BINARY.PEEK[])"))
    finally:
        source.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
