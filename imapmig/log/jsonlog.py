# -*- test-case-name: tests.test_jsonlog -*-
"""
Log events as JSON lines (C{IMAPMIG_LOG_FORMAT=json}): one JSON object per
line, for C{jq} and log shippers.

Each object holds C{time} (ISO 8601, UTC, with milliseconds: C{"2026-11-26T04:10:00.123Z"}),
C{level} (C{debug}, C{info}, C{warn}, C{error}, C{critical}), C{namespace}
(the logger's: C{imapmig.job.joblog}), C{message} (the event's text),
C{id} (the event type's C{MESSAGE_ID}, as in the journal:
L{imapmig.log.journald.messageID}), C{failure} (a failure's traceback, only
when the event carries one), and the event's own keyword fields (C{job},
C{mailbox}, C{copied}, ...) under their names: as they are when JSON can
hold them, else as a short C{repr}.  A field named like one of the
object's own keys is written with C{_} appended (C{time_}).

Why not L{twisted.logger.jsonFileLogObserver}: it writes JSON text
sequences (RFC 7464: each record prefixed by the record separator
C{\\x1e}), which C{jq} reads only with C{--seq} and line-based shippers
do not read at all; it writes every key of the event, Twisted's own
(C{log_logger}, C{log_source}, ...) included, and an object it cannot
serialise as C{{"unpersistable": true}}; its records are made to be read
back into events (L{twisted.logger.eventsFromJSONLogFile}), not read by
an admin.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from typing import IO, Any

from twisted.logger import FileLogObserver, LogEvent, formatEvent

from imapmig.log.journald import messageID, tracebackOf

__all__ = ["RESERVED", "REPR_LIMIT", "eventAsJSONLine", "jsonLinesLogObserver"]

RESERVED = frozenset({"time", "level", "namespace", "message", "id", "failure"})
"""
The keys every object may hold besides the event's own fields.
"""

REPR_LIMIT = 80
"""
The most characters of the C{repr} standing for a value JSON cannot hold.
"""

# The keys of an event from twisted.python.log (log.msg, log.err) that
# only repeat what the object says (its text is the message).
_LEGACY = frozenset(
    {"message", "time", "system", "isError", "format", "logLevel", "failure", "why"}
)

# Plain JSON values, written as they are.
_SCALARS = (str, int, float, bool, type(None))


def _value(value: object) -> Any:
    """
    C{value} as JSON holds it, or a short C{repr} of it.
    """
    if isinstance(value, _SCALARS) and not (isinstance(value, float) and not math.isfinite(value)):
        return value
    if isinstance(value, (list, tuple, dict)):
        try:
            return json.loads(json.dumps(value, allow_nan=False))
        except (TypeError, ValueError):
            pass
    return _shortRepr(value)


def _shortRepr(value: object) -> str:
    """
    The C{repr} of C{value}, cut to L{REPR_LIMIT} characters.
    """
    text = repr(value)
    return text if len(text) <= REPR_LIMIT else text[: REPR_LIMIT - 4] + " ..."


def _time(event: LogEvent) -> str:
    """
    The event's time, ISO 8601 in UTC with milliseconds.
    """
    when = datetime.fromtimestamp(float(event.get("log_time") or 0.0), timezone.utc)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def eventAsJSONLine(event: LogEvent) -> str:
    """
    C{event} as one line of JSON, its newline included.
    """
    level = event.get("log_level")
    namespace = str(event.get("log_namespace", "") or "")
    record: dict[str, Any] = {
        "time": _time(event),
        "level": level.name if level is not None else "info",
        "namespace": namespace,
        "message": formatEvent(event),
        "id": messageID(namespace, event.get("log_format")),
    }
    traceback = tracebackOf(event)
    if traceback is not None:
        record["failure"] = traceback
    record.update(_ownFields(event, _LEGACY if namespace == "log_legacy" else frozenset()))
    return json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"


def _ownFields(event: LogEvent, skipped: frozenset[str]) -> dict[str, Any]:
    """
    The event's own keyword fields but C{skipped}, by the names the
    object gives them, their values as JSON holds them.
    """
    return {
        key + "_" if key in RESERVED else key: _value(value)
        for key, value in event.items()
        if isinstance(key, str) and not key.startswith("log_") and key not in skipped
    }


def jsonLinesLogObserver(outFile: IO[str]) -> FileLogObserver:
    """
    An observer writing each event to C{outFile} as a JSON line
    (L{eventAsJSONLine}), flushed at once.
    """
    return FileLogObserver(outFile, eventAsJSONLine)
