# -*- test-case-name: tests.test_journald -*-
"""
Log events written to journald natively: one datagram per event, in
journald's native protocol, written by hand (no new dependency).

Each event becomes a journal entry with these fields:

  - C{MESSAGE}: the event's text (L{twisted.logger.formatEvent}), with a
    failure's traceback appended;
  - C{PRIORITY}: from its level (critical 2, error 3, warn 4, info 6,
    debug 7);
  - C{SYSLOG_IDENTIFIER=imapmig};
  - C{MESSAGE_ID}: the event type, a stable 128-bit id (L{messageID}: the
    same format string in the same module always gives the same id);
  - C{IMAPMIG_NAMESPACE}: the logger's namespace (C{imapmig.job.joblog});
  - C{JOB}, C{MAILBOX}, C{SERVER}, C{ACCOUNT}: from the event's keyword
    fields, as L{FIELD_SOURCES} maps them, when it has them.

Field values other than C{MESSAGE} are short (L{FIELD_LIMIT}) and
escaped: peer data reaches them only as an excerpt.

The protocol (systemd's C{sd_journal_sendv} and
U{https://systemd.io/JOURNAL_NATIVE_PROTOCOL/}): a datagram of fields,
each C{KEY=value\\n}, or, when the value holds a newline (a traceback),
C{KEY\\n}, its length as a 64-bit little-endian integer, the value and
C{\\n}.  A datagram too big for the socket (C{EMSGSIZE}) is written to a
sealed memory file whose descriptor is sent instead (C{SCM_RIGHTS}), as
C{sd_journal_sendv} does; if that fails too, the message is cut, with a
note saying so.

Writing never raises into the daemon and never blocks the reactor (the
socket does not block).  An entry journald cannot take now (its queue is
full: C{EAGAIN}) waits in a bounded backlog (L{BACKLOG} entries) that a
thread of the observer sends, in order, as journald catches up (and for
at most L{EXIT_FLUSH} seconds at exit); an entry that finds the backlog
full is dropped and counted, and the count is reported once, in an
entry of its own, when the socket takes entries again.  An event the
socket cannot take at all (journald is gone: no socket, connection
refused) is written as text to standard error instead (which systemd
also connects to the journal), and the number of events written that
way is reported once the socket works again.
"""

from __future__ import annotations

import array
import atexit
import errno
import fcntl
import os
import socket
import struct
import sys
import threading
import uuid
from collections import deque
from functools import lru_cache
from typing import IO, Callable, Iterable, Mapping

from twisted.logger import (
    ILogObserver,
    LogEvent,
    LogLevel,
    formatEvent,
    formatEventAsClassicLogText,
)
from zope.interface import implementer

__all__ = [
    "BACKLOG",
    "EXIT_FLUSH",
    "FIELD_LIMIT",
    "FIELD_SOURCES",
    "IDENTIFIER",
    "JOURNAL_SOCKET",
    "JournalLogObserver",
    "MESSAGE_ID_NAMESPACE",
    "SOCKET_VARIABLE",
    "TRUNCATED_MESSAGE_LIMIT",
    "encodeFields",
    "journalFields",
    "journalSocketPath",
    "messageID",
    "priorityOf",
]

JOURNAL_SOCKET = "/run/systemd/journal/socket"
"""
Where journald listens for native datagrams.
"""

SOCKET_VARIABLE = "IMAPMIG_JOURNAL_SOCKET"
"""
The environment variable naming another socket (for tests).
"""

IDENTIFIER = "imapmig"
"""
C{SYSLOG_IDENTIFIER} of every entry (C{journalctl -t imapmig}).
"""

MESSAGE_ID_NAMESPACE = uuid.UUID("fbe61910-a46c-43df-8770-7fdbb3221882")
"""
The UUID namespace of imapmig's message ids (L{messageID}); never changed,
or every id changes.
"""

FIELD_SOURCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("JOB", ("job",)),
    ("MAILBOX", ("mailbox", "folder")),
    ("SERVER", ("server",)),
    ("ACCOUNT", ("user",)),
)
"""
Which keyword field of an event gives each journal field: the first of
the names the event has.  C{job} is the job's name wherever imapmig logs
one; C{mailbox} the destination mailbox, else C{folder} the source
folder; C{server} the server's name as configured under C{servers} (the
C{server} label of C{/metrics}), and C{user} the account's user name on
it (L{imapmig.log.logfields}).
"""

FIELD_LIMIT = 200
"""
The most characters of a value C{JOB}, C{MAILBOX}, C{SERVER} or
C{ACCOUNT} holds; longer ones are cut (with C{" ..."}).
"""

TRUNCATED_MESSAGE_LIMIT = 32 * 1024
"""
The octets of C{MESSAGE} kept when an entry too big for a datagram cannot
be sent through a memory file either.
"""

BACKLOG = 10_000
"""
The most entries waiting for a busy journal socket; more are dropped (and
counted).
"""

EXIT_FLUSH = 2.0
"""
Seconds the process waits at exit for the backlog to be sent.
"""

SEND_BUFFER = 8 * 1024 * 1024
"""
The send buffer asked for, as C{sd_journal_sendv} does (the kernel may
give less: C{net.core.wmem_max}); it bounds a datagram's size.
"""

_PRIORITIES = {
    LogLevel.critical: 2,
    LogLevel.error: 3,
    LogLevel.warn: 4,
    LogLevel.info: 6,
    LogLevel.debug: 7,
}

# The backlog's thread's pauses while journald is behind, in seconds.
_FIRST_PAUSE = 0.005
_LAST_PAUSE = 0.2

# A datagram the socket cannot take now.
_BUSY = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS})


def journalSocketPath(environ: Mapping[str, str] = os.environ) -> str:
    """
    The journal socket to write to: C{IMAPMIG_JOURNAL_SOCKET} if set,
    else L{JOURNAL_SOCKET}.
    """
    return environ.get(SOCKET_VARIABLE) or JOURNAL_SOCKET


@lru_cache(maxsize=1024)
def messageID(namespace: str, format: str | None) -> str:
    """
    The C{MESSAGE_ID} of the events a logger in C{namespace} logs with
    C{format}: a UUID 5 in L{MESSAGE_ID_NAMESPACE} over both, as 32
    lower-case hex digits (journald's form).  It stays the same across
    runs, hosts and versions as long as the format string and the module
    logging it do.

    @param namespace: the event's C{log_namespace}.
    @param format: its C{log_format} (L{None} for an event without one).
    @note: cached: an event type's id is computed once.
    """
    return uuid.uuid5(MESSAGE_ID_NAMESPACE, f"{namespace}\n{format or ''}").hex


def priorityOf(level: LogLevel | None) -> int:
    """
    The syslog priority of a log level (info for an event without one).
    """
    return _PRIORITIES.get(level, 6) if level is not None else 6


def _short(value: object) -> str:
    """
    C{value} as a short, printable field value: at most L{FIELD_LIMIT}
    characters, control and other unprintable characters escaped.
    """
    text = value if isinstance(value, str) else str(value)
    cut = len(text) > FIELD_LIMIT
    text = text[:FIELD_LIMIT]
    if not text.isprintable():
        text = "".join(map(_printable, text))
    return text + " ..." if cut else text


def _printable(c: str) -> str:
    """
    The character C{c}, escaped (C{\\xHH} or C{\\uHHHH}) if it is not
    printable.
    """
    if c.isprintable():
        return c
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def _message(event: LogEvent) -> str:
    """
    The event's text, a failure's traceback appended.
    """
    text = formatEvent(event)
    traceback = tracebackOf(event)
    if traceback is not None:
        text = f"{text}\n{traceback}".rstrip("\n")
    return text


def tracebackOf(event: LogEvent) -> str | None:
    """
    The traceback of the failure C{event} carries, if it carries one.
    """
    failure = event.get("log_failure")
    if failure is None:
        return None
    try:
        return str(failure.getTraceback())
    except Exception:
        return "(unable to obtain traceback)"


def journalFields(event: LogEvent) -> list[tuple[str, str]]:
    """
    The journal fields of C{event}, in the order they are written.
    """
    namespace = str(event.get("log_namespace", "") or "")
    fields = [
        ("MESSAGE", _message(event)),
        ("PRIORITY", str(priorityOf(event.get("log_level")))),
        ("SYSLOG_IDENTIFIER", IDENTIFIER),
        ("MESSAGE_ID", messageID(namespace, event.get("log_format"))),
        ("IMAPMIG_NAMESPACE", _short(namespace)),
    ]
    for key, names in FIELD_SOURCES:
        value = _firstGiven(event, names)
        if value is not None:
            fields.append((key, _short(value)))
    return fields


def _firstGiven(event: LogEvent, names: Iterable[str]) -> object:
    """
    The value of the first of C{names} that C{event} gives (neither
    L{None} nor empty); L{None} if it gives none.
    """
    for name in names:
        value = event.get(name)
        if value is not None and value != "":
            return value
    return None


def encodeFields(fields: Iterable[tuple[str, str]]) -> bytes:
    """
    C{fields} as one datagram of journald's native protocol.

    @param fields: pairs of a field name (upper-case letters, digits and
        C{_}) and its value; a value holding a newline is written in the
        binary-safe form (its length first).
    """
    parts = []
    for key, value in fields:
        data = value.encode("utf-8", "backslashreplace")
        name = key.encode("ascii")
        if b"\n" in data:
            parts.append(b"%s\n%s%s\n" % (name, struct.pack("<Q", len(data)), data))
        else:
            parts.append(b"%s=%s\n" % (name, data))
    return b"".join(parts)


def _openSocket(sendBuffer: int) -> socket.socket | None:
    """
    A non-blocking datagram socket to send journal entries with, asking
    for a send buffer of C{sendBuffer} octets; L{None} if there can be
    none (every event goes to the fallback).
    """
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
    except OSError:
        return None
    sock.setblocking(False)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sendBuffer)
    except OSError:
        pass
    return sock


@implementer(ILogObserver)
class JournalLogObserver:
    """
    An observer writing each event it is given to the journal (see the
    module's description).

    An entry the socket cannot take at once (journald is behind) waits in
    a backlog of at most C{backlog} entries, which a thread of its own
    sends, in order, as journald reads: the thread that logged (the
    reactor's) never waits.  Entries logged while others wait join them.

    @ivar dropped: events dropped (the backlog full, or the socket refusing
        them), not yet reported.
    @ivar diverted: events written to the fallback instead, not yet
        reported.
    """

    def __init__(
        self,
        path: str,
        fallback: IO[str] | None = None,
        sendBuffer: int = SEND_BUFFER,
        sendmsg: Callable[..., int] | None = None,
        backlog: int = BACKLOG,
    ) -> None:
        """
        @param path: the journal socket (L{journalSocketPath}).
        @param fallback: where an event goes as text when the socket is
            unusable (the process's standard error as it is now; not the
            log-redirected C{sys.stderr} of a running daemon).
        @param sendBuffer: the socket's send buffer to ask for, which
            bounds a datagram (L{SEND_BUFFER}).
        @param sendmsg: the socket's C{sendmsg}, replaced by tests to
            fail as a kernel may.
        @param backlog: the most entries waiting for the socket.
        """
        self._path = path
        self._fallback = fallback if fallback is not None else sys.stderr
        self._backlogLimit = backlog
        self._lock = threading.Condition()
        self._backlog: deque[tuple[LogEvent, list[tuple[str, str]]]] = deque()
        self._sender: threading.Thread | None = None
        self._closed = False
        self.dropped = 0
        self.diverted = 0
        self._socket = _openSocket(sendBuffer)
        if sendmsg is None and self._socket is not None:
            sendmsg = self._socket.sendmsg
        self._sendmsg: Callable[..., int] | None = sendmsg

    @property
    def waiting(self) -> int:
        """
        How many entries wait in the backlog.
        """
        with self._lock:
            return len(self._backlog)

    def flush(self, timeout: float) -> bool:
        """
        Wait until the backlog is sent, at most C{timeout} seconds (at exit:
        the last entries, often the most telling, are not lost to a slow
        journald).

        @return: whether it was.
        """
        with self._lock:
            return self._lock.wait_for(lambda: not self._backlog, timeout)

    def close(self) -> None:
        """
        Close the socket (events given afterwards go to the fallback) and
        stop the backlog's thread; what still waits is dropped.
        """
        with self._lock:
            self._closed = True
            self._lock.notify_all()
            sock, self._socket, self._sendmsg = self._socket, None, None
        atexit.unregister(self._flushAtExit)
        if sock is not None:
            sock.close()

    def __call__(self, event: LogEvent) -> None:
        """
        Write C{event} to the journal, or leave it in the backlog, or count
        it, or write it to the fallback; never raise, never wait.
        """
        try:
            self._observe(event)
        except Exception:
            # A bug here must not reach the code that logged: count it.
            with self._lock:
                self.dropped += 1

    def _observe(self, event: LogEvent) -> None:
        fields = journalFields(event)
        with self._lock:
            if self._backlog:
                self._queue(event, fields)
                return
            # Claimed here, so that two threads logging at once report them once.
            dropped, diverted = self.dropped, self.diverted
            self.dropped = self.diverted = 0
        if dropped or diverted:
            self._reportClaimed(dropped, diverted)
        self._sendOrKeep(event, fields)

    def _sendOrKeep(self, event: LogEvent, fields: list[tuple[str, str]]) -> None:
        """
        Send an entry, or leave it in the backlog if the socket is busy,
        or write it to the fallback if the socket is unusable.
        """
        outcome = self._send(fields)
        if outcome == "busy":
            with self._lock:
                self._queue(event, fields)
        elif outcome == "unusable":
            with self._lock:
                self.diverted += 1
            self._writeFallback(event)

    def _reportClaimed(self, dropped: int, diverted: int) -> None:
        """
        Tell the journal of the events it missed, claimed from the counts;
        give them back to the counts if it could not be told.
        """
        if not self._reportLosses(dropped, diverted):
            with self._lock:
                self.dropped += dropped
                self.diverted += diverted

    def _queue(self, event: LogEvent, fields: list[tuple[str, str]]) -> None:
        """
        Leave an entry in the backlog for its thread (started if need be),
        or drop it if the backlog is full.  Called with the lock held.
        """
        if len(self._backlog) >= self._backlogLimit or self._closed:
            self.dropped += 1
            return
        self._backlog.append((event, fields))
        if self._sender is None:
            self._sender = threading.Thread(
                target=self._sendBacklog, name="imapmig journal", daemon=True
            )
            self._sender.start()
            atexit.register(self._flushAtExit)
        self._lock.notify_all()

    def _sendBacklog(self) -> None:
        """
        The backlog's thread: send each waiting entry in turn, trying again
        while journald is behind (after 5 ms, doubling up to 200 ms), until
        the observer is closed.

        It polls rather than blocks in C{sendmsg}: a send blocked on a full
        queue would not end when the observer is closed.
        """
        pause = _FIRST_PAUSE
        while (entry := self._nextEntry()) is not None:
            event, fields = entry
            try:
                outcome = self._send(fields)
            except Exception:
                outcome = "failed"
            if outcome == "busy":
                with self._lock:
                    self._lock.wait_for(lambda: self._closed, pause)
                pause = min(pause * 2, _LAST_PAUSE)
                continue
            pause = _FIRST_PAUSE
            if outcome == "unusable":
                self._writeFallback(event)
            self._sent(outcome)

    def _nextEntry(self) -> tuple[LogEvent, list[tuple[str, str]]] | None:
        """
        The backlog's first entry, once there is one; L{None} once the
        observer is closed (the backlog is then dropped).

        The entry is left in the backlog while it is sent: later entries
        queue behind it, in order.
        """
        with self._lock:
            self._lock.wait_for(lambda: self._backlog or self._closed)
            if self._closed:
                self._backlog.clear()
                self._lock.notify_all()
                return None
            return self._backlog[0]

    def _sent(self, outcome: str) -> None:
        """
        The backlog's first entry is done with (L{_send}'s C{outcome}, or
        C{"failed"}): take it out, and count it if it was lost.
        """
        with self._lock:
            if self._backlog:
                self._backlog.popleft()
            if outcome == "failed":
                self.dropped += 1
            elif outcome == "unusable":
                self.diverted += 1
            self._lock.notify_all()

    def _flushAtExit(self) -> None:
        self.flush(EXIT_FLUSH)

    def _reportLosses(self, dropped: int, diverted: int) -> bool:
        """
        Tell the journal of the events it missed.

        @return: whether it was told.
        """
        parts = []
        if dropped:
            parts.append(f"{_events(dropped)} dropped: the journal socket was busy")
        if diverted:
            parts.append(
                f"{_events(diverted)} written to standard error: the journal socket was unusable"
            )
        fields = [
            ("MESSAGE", "; ".join(parts)),
            ("PRIORITY", str(priorityOf(LogLevel.warn))),
            ("SYSLOG_IDENTIFIER", IDENTIFIER),
            ("MESSAGE_ID", messageID(__name__, "log events lost")),
            ("IMAPMIG_NAMESPACE", __name__),
            ("IMAPMIG_DROPPED", str(dropped)),
            ("IMAPMIG_DIVERTED", str(diverted)),
        ]
        return self._send(fields) == "sent"

    def _send(self, fields: list[tuple[str, str]]) -> str:
        """
        Send one entry, without waiting.

        @return: C{"sent"}; C{"busy"} when the socket cannot take it now;
            C{"unusable"} when it cannot take it at all.
        """
        sendmsg = self._sendmsg
        if sendmsg is None:
            return "unusable"
        datagram = encodeFields(fields)
        try:
            sendmsg([datagram], [], 0, self._path)
            return "sent"
        except OSError as e:
            if e.errno != errno.EMSGSIZE:
                return _outcomeOf(e)
        return self._sendLarge(sendmsg, datagram, fields)

    def _sendLarge(
        self, sendmsg: Callable[..., int], datagram: bytes, fields: list[tuple[str, str]]
    ) -> str:
        """
        Send an entry too big for a datagram: as a memory file
        (L{_sendMemoryFile}), else truncated (L{_sendTruncated}).

        @return: as L{_send}.
        """
        try:
            return self._sendMemoryFile(sendmsg, datagram)
        except OSError as e:
            if e.errno in _BUSY:
                return "busy"
        except AttributeError:
            # No memory files here (os.memfd_create is Linux's).
            pass
        return self._sendTruncated(sendmsg, fields)

    def _sendMemoryFile(self, sendmsg: Callable[..., int], datagram: bytes) -> str:
        """
        Send C{datagram} as a sealed memory file, as C{sd_journal_sendv}
        does with an entry too big for a datagram.

        @raise OSError: it could not be sent (memory files are not
            supported, or the socket refused it).
        """
        fd = os.memfd_create("journal-data", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            view = memoryview(datagram)
            while view:
                view = view[os.write(fd, view) :]
            fcntl.fcntl(
                fd,
                fcntl.F_ADD_SEALS,
                fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL,
            )
            sendmsg(
                [],
                [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))],
                0,
                self._path,
            )
            return "sent"
        finally:
            os.close(fd)

    def _sendTruncated(self, sendmsg: Callable[..., int], fields: list[tuple[str, str]]) -> str:
        """
        Send the entry with its C{MESSAGE} cut to L{TRUNCATED_MESSAGE_LIMIT}
        octets and a note saying so.
        """
        cut = [(key, _truncated(value) if key == "MESSAGE" else value) for key, value in fields]
        try:
            sendmsg([encodeFields(cut)], [], 0, self._path)
            return "sent"
        except OSError as e:
            return _outcomeOf(e)

    def _writeFallback(self, event: LogEvent) -> None:
        """
        Write C{event} as twistd's text line to the fallback file.
        """
        text = formatEventAsClassicLogText(event)
        if not text:
            return
        try:
            self._fallback.write(text)
            self._fallback.flush()
        except (OSError, ValueError):
            pass


def _events(count: int) -> str:
    """
    C{"1 log event was"}, C{"2 log events were"}.
    """
    return f"{count} log {'event was' if count == 1 else 'events were'}"


def _outcomeOf(error: OSError) -> str:
    """
    What a send that failed with C{error} came to (see
    L{JournalLogObserver._send}): C{"busy"} or C{"unusable"}.
    """
    return "busy" if error.errno in _BUSY else "unusable"


def _truncated(message: str) -> str:
    """
    C{message} cut to L{TRUNCATED_MESSAGE_LIMIT} octets, with a note
    saying so, if it is longer.
    """
    data = message.encode("utf-8", "backslashreplace")
    if len(data) <= TRUNCATED_MESSAGE_LIMIT:
        return message
    return (
        data[:TRUNCATED_MESSAGE_LIMIT].decode("utf-8", "ignore")
        + f"\n[imapmig: message truncated from {len(data):,} octets:"
        " too big for the journal socket]"
    )
