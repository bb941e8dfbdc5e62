# -*- test-case-name: tests.test_logfields -*-
"""
Loggers whose every event carries fixed fields: the job a connection
works for, so that what the IMAP layer logs about a server (a C{BYE}, a
protocol error, a reply deadline) is found by C{journalctl JOB=alice}
and C{jq 'select(.job == "alice")'} with the job's own lines.
"""

from __future__ import annotations

from typing import Mapping

from twisted.logger import ILogObserver, Logger, LogLevel

__all__ = ["FieldsLogger", "withFields"]


class FieldsLogger(Logger):
    """
    A L{Logger} that adds C{fields} to every event it emits; a field the
    call names itself wins.
    """

    def __init__(
        self,
        namespace: str,
        source: object,
        fields: Mapping[str, object],
        observer: ILogObserver | None = None,
    ) -> None:
        """
        @param fields: the fields every event carries.
        @param observer: where the events go; by default the global log
            publisher, as for any L{Logger}.
        """
        super().__init__(namespace, source, observer)
        self.fields = dict(fields)

    def emit(self, level: LogLevel, format: str | None = None, **kwargs: object) -> None:
        """
        See L{Logger.emit}, with the fixed fields.
        """
        Logger.emit(self, level, format, **{**self.fields, **kwargs})


def withFields(logger: Logger, fields: Mapping[str, object]) -> Logger:
    """
    C{logger} (its namespace, source and observer), adding C{fields} to
    each event; C{logger} itself when there are none.
    """
    if not fields:
        return logger
    return FieldsLogger(logger.namespace, logger.source, fields, logger.observer)
