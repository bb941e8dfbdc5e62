# -*- test-case-name: tests.test_logfields -*-
"""
Loggers whose every event carries fixed fields: the job a connection
works for and the account it is logged in to, so that what the IMAP
layer logs about a server (a C{BYE}, a protocol error, a reply deadline)
is found by C{journalctl JOB=alice} and C{jq 'select(.job == "alice")'}
with the job's own lines.

The fields are named and typed as C{/metrics} labels its series: C{job}
(the job's name), C{server} (the server's name as configured under
C{servers}, never its endpoint) and C{user} (the account's user name),
each a string; counts are integers.  A line's text may still say
C{"alice at tcp:imap.example:143"}: that is a field of its own
(L{AccountName.description}), not C{server}.
"""

from __future__ import annotations

from typing import Mapping

from attrs import frozen
from twisted.logger import ILogObserver, Logger, LogLevel

__all__ = ["AccountName", "FieldsLogger", "withFields"]


@frozen
class AccountName:
    """
    An account as log lines name it.

    @ivar server: the server's name under C{servers} (the C{server} label
        of C{/metrics}).
    @ivar user: the account's user name.
    @ivar endpoint: the server's endpoint string, for the text.
    """

    server: str
    user: str
    endpoint: str

    @property
    def description(self) -> str:
        """
        The account as a line's text names it: C{"alice at tcp:imap.example:143"}.
        """
        return f"{self.user} at {self.endpoint}"

    def fields(self) -> dict[str, object]:
        """
        The C{server} and C{user} fields of its events.
        """
        return {"server": self.server, "user": self.user}


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
