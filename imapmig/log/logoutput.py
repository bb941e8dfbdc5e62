# -*- test-case-name: tests.test_logoutput -*-
"""
Where and how the daemon writes its log: the environment variable
C{IMAPMIG_LOG_FORMAT} says, for both launchers (C{imapmig-daemon} and
C{twistd --logger=imapmig.log.loglevels.twistdLogObserver}):

  - C{text}: twistd's text lines on standard output
    (C{2026-11-26T04:10:00+0000 [imapmig.job.joblog#info] Job alice started: ...});
  - C{json}: JSON lines on standard output (L{imapmig.log.jsonlog});
  - C{journal}: native journal entries with priorities and fields
    (L{imapmig.log.journald}), to C{IMAPMIG_JOURNAL_SOCKET} or
    C{/run/systemd/journal/socket}.

Without it: C{journal} when the process runs under systemd with its
output connected to the journal (C{JOURNAL_STREAM} names the device and
inode of its standard output or error, as systemd sets it) and the
journal socket exists; C{text} otherwise.  Any other value is a
configuration error.

The level filter (C{IMAPMIG_LOG_LEVEL}, L{imapmig.log.loglevels}) stays in
front of every format.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import IO, Iterable, Mapping

from twisted.logger import ILogObserver, textFileLogObserver

# The journal's and JSON's modules are imported only by a daemon that
# writes them: the text format, the default, starts without them.

__all__ = [
    "FORMATS",
    "FORMAT_VARIABLE",
    "connectedToJournal",
    "formatFromEnvironment",
    "observerFor",
    "observerFromEnvironment",
]

FORMAT_VARIABLE = "IMAPMIG_LOG_FORMAT"

FORMATS = ("text", "json", "journal")
"""
The values C{IMAPMIG_LOG_FORMAT} takes.
"""


def connectedToJournal(environ: Mapping[str, str], streams: Iterable[IO[str]]) -> bool:
    """
    Whether systemd connected one of C{streams} to the journal:
    C{JOURNAL_STREAM} (C{DEVICE:INODE}, in decimal) names its file.

    A process that inherited C{JOURNAL_STREAM} but writes elsewhere (its
    output redirected to a file or a terminal) does not match.
    """
    expected = environ.get("JOURNAL_STREAM", "")
    return bool(expected) and any(_fileID(stream) == expected for stream in streams)


def _fileID(stream: IO[str]) -> str | None:
    """
    C{DEVICE:INODE} of C{stream}'s file, as C{JOURNAL_STREAM} gives it;
    L{None} if it has none (closed, or not a file).
    """
    try:
        status = os.fstat(stream.fileno())
    except (OSError, ValueError):
        return None
    return f"{status.st_dev}:{status.st_ino}"


def _isSocket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def formatFromEnvironment(
    environ: Mapping[str, str] = os.environ,
    streams: Iterable[IO[str]] = (),
) -> str:
    """
    The log format C{environ} asks for (see the module's description).

    @param streams: the process's standard output and error, which
        C{JOURNAL_STREAM} may name.
    @return: one of L{FORMATS}.
    @raise ValueError: C{IMAPMIG_LOG_FORMAT} is none of them; the message
        says which are.
    """
    value = environ.get(FORMAT_VARIABLE, "").strip().lower()
    if value:
        if value not in FORMATS:
            raise ValueError(
                f"{FORMAT_VARIABLE}: unknown log format {environ[FORMAT_VARIABLE]!r}"
                f" (one of: {', '.join(FORMATS)})"
            )
        return value
    return "journal" if _journalListens(environ, streams) else "text"


def _journalListens(environ: Mapping[str, str], streams: Iterable[IO[str]]) -> bool:
    """
    Whether systemd connected one of C{streams} to the journal, and the
    journal's socket is there to write entries to.
    """
    if not connectedToJournal(environ, streams):
        return False
    from imapmig.log.journald import journalSocketPath

    return _isSocket(journalSocketPath(environ))


def observerFor(
    logFormat: str,
    out: IO[str],
    err: IO[str],
    environ: Mapping[str, str] = os.environ,
) -> ILogObserver:
    """
    The observer writing events in C{logFormat} (unfiltered).

    @param out: where C{text} and C{json} go.
    @param err: where a journal entry goes as text when the journal socket
        is unusable (the process's real standard error, not the
        log-redirected C{sys.stderr} of a daemon that began logging).
    @param environ: for the journal socket's path (L{journalSocketPath}).
    """
    if logFormat == "journal":
        from imapmig.log.journald import JournalLogObserver, journalSocketPath

        return JournalLogObserver(journalSocketPath(environ), err)
    if logFormat == "json":
        from imapmig.log.jsonlog import jsonLinesLogObserver

        return jsonLinesLogObserver(out)
    return textFileLogObserver(out)


def observerFromEnvironment(
    environ: Mapping[str, str] = os.environ,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
) -> ILogObserver:
    """
    The observer C{environ} asks for (L{formatFromEnvironment},
    L{observerFor}), writing to this process's standard output and error
    unless told otherwise.

    @raise ValueError: see L{formatFromEnvironment}.
    """
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    return observerFor(formatFromEnvironment(environ, (out, err)), out, err, environ)
