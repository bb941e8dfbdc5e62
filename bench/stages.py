"""
The per-message cost of each stage of a Maildir-to-IMAP copy, in
callgrind instructions, with no server: where C{bench.instructions} counts
a whole run, this says which stage the instructions per message are spent
in.

    .venv/bin/python -m bench.stages TREE [CORPUS]

It runs the imapmig in TREE six times under callgrind, in-process, on
CORPUS (default C{small-5000-seed1}, under C{bench/work/corpus}), each run
one stage further: 0 the imports and set-up alone; 1 the folders and
messages listed; 2 the bodies read (read steps of 50); 3 prepared
(C{MessagePreparation}); 4 the APPEND pipeline (its bytes to a
C{StringTransport}, a tagged C{OK [APPENDUID]} parsed for every command);
5 the outcomes recorded (C{PipelineOutcomes}, C{OutcomeRecorder}, the
SQLite store and its journal).  Each stage's cost is the difference to the
run before it, divided by the messages.  Nothing replaced it: no bench
split a run by stage.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from typing import Any

STAGES = ("set-up", "list", "read", "prepare", "pipeline", "record")


def _result(d: Any) -> Any:
    box: list[Any] = []
    d.addBoth(box.append)
    return box[0]


def runStages(maildir: str, stages: int) -> int:
    """
    Run the first C{stages} stages on the Maildir C{maildir} with the
    imapmig first on C{sys.path}; return the messages recorded.
    """
    from twisted.internet.task import Clock
    from twisted.internet.testing import StringTransport

    from imapmig.imap.client import MigrationIMAP4Client
    from imapmig.imap.outgoing import LiteralMode, PipelineSettings
    from imapmig.imap.pipeline import AppendPipeline
    from imapmig.job.preparation import DestinationTraits, MessagePreparation
    from imapmig.job.recording import OutcomeRecorder, PipelineOutcomes, Target
    from imapmig.job.units import WorkUnit, chunks
    from imapmig.progress import JobProgress
    from imapmig.sources.maildir import MaildirSource
    from imapmig.state.sqlite import SQLiteStateStore

    class Sink:
        def messagesAppended(self, *args: object) -> None:
            pass

        def messageRefused(self, *args: object) -> None:
            pass

    clock = Clock()
    source = MaildirSource(maildir)
    folders = _result(source.listFolders()) if stages >= 1 else []
    work = tempfile.mkdtemp(dir="/dev/shm")
    store = SQLiteStateStore(os.path.join(work, "state.sqlite"), clock.seconds)
    progress = JobProgress("bench", clock.seconds)
    recorder = OutcomeRecorder("bench", store, progress, clock, 2000, 1.0)
    preparation = MessagePreparation(recorder, False)
    client = MigrationIMAP4Client(clock)
    transport = StringTransport()
    client.makeConnection(transport)  # type: ignore[no-untyped-call]
    client.dataReceived(b"* OK [CAPABILITY IMAP4rev1 LITERAL+ MULTIAPPEND UIDPLUS] ready\r\n")
    outcomes: Any = PipelineOutcomes(recorder, {}) if stages >= 5 else Sink()
    settings = PipelineSettings(LiteralMode.PLUS, 50, 1 << 20, 200, 8 << 20)
    pipeline = AppendPipeline(client, settings, outcomes)
    uid = 1
    for folder in folders:
        messages = _result(source.listMessages(folder))
        if stages < 2:
            continue
        unit = WorkUnit(folder, folder.key or "INBOX", tuple(messages))
        ticket = None
        if stages >= 5:
            ticket = _result(recorder.journal(unit.mailbox, 1, 1, folder.key, messages))
        target = Target(folder.key, unit.mailbox, ticket)
        pipeline.selectMailbox(unit.mailbox)
        for chunk in chunks(messages, 50, 1 << 20):
            bodies = _result(source.readBodies(folder, chunk))
            if stages < 3:
                continue
            outgoing = preparation.prepare(unit, target, chunk, bodies, DestinationTraits(False, None))
            if stages < 4:
                continue
            pipeline.enqueue(outgoing)
            transport.clear()
            replies = []
            for tag, command in list(pipeline._inFlight.items()):
                n = len(command.messages)
                replies.append(b"%s OK [APPENDUID 1 %d:%d] done\r\n" % (tag, uid, uid + n - 1))
                uid += n
            client.dataReceived(b"".join(replies))
    if stages >= 5:
        _result(recorder.flush())
    return uid - 1


def count(tree: str, maildir: str, stages: int, out: str) -> tuple[int, int]:
    """
    The instructions of a run of the first C{stages} stages of the imapmig
    in C{tree}, its profile written to C{out}, and the messages it sent.
    """
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
         "-m", "bench.stages", "--run", tree, maildir, str(stages)],  # fmt: skip
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"),
        check=True,
        capture_output=True,
    )
    with open(out) as f:
        match = re.search(r"^summary: (\d+)$", f.read(), re.MULTILINE)
    assert match is not None, "callgrind wrote no summary"
    return int(match.group(1)), int(run.stdout.split()[-1])


def main() -> None:
    if sys.argv[1] == "--run":
        sys.path.insert(0, sys.argv[2])
        print(runStages(sys.argv[3], int(sys.argv[4])))
        return
    tree = os.path.abspath(sys.argv[1])
    corpus = sys.argv[2] if len(sys.argv) > 2 else "small-5000-seed1"
    here = os.path.dirname(os.path.abspath(__file__))
    maildir = os.path.join(here, "work", "corpus", corpus, "Maildir")
    profiles = tempfile.mkdtemp(prefix="stages-")
    runs = [count(tree, maildir, stage, os.path.join(profiles, f"{stage}.cg")) for stage in range(6)]
    messages = runs[-1][1]
    print(f"{tree} {corpus}, {messages:,} messages; profiles in {profiles}")
    print(f"{STAGES[0]:9s} {runs[0][0]:13,} instructions")
    for stage in range(1, 6):
        perMessage = (runs[stage][0] - runs[stage - 1][0]) / messages
        print(f"{STAGES[stage]:9s} {perMessage:13,.0f} instructions per message")


if __name__ == "__main__":
    main()
