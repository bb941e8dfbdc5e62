"""
Tests for L{imapmig.log.logfields}.
"""

from __future__ import annotations

from typing import cast

from twisted.logger import ILogObserver, Logger, LogLevel, capturedLogs
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from imapmig.log.logfields import FieldsLogger, withFields


class WithFieldsTests(SynchronousTestCase):
    """
    L{withFields} makes a logger whose events carry fixed fields.
    """

    def test_fields(self) -> None:
        """
        Every event carries the fields, with the namespace and source of
        the logger it was made from; a field the call names wins.
        """
        source = object()
        logger = withFields(Logger("imapmig.x", source), {"job": "alice", "mailbox": "INBOX"})
        with capturedLogs() as events:
            logger.warn("{server} says BYE", server="s")
            logger.info("other", mailbox="Sent")
        first, second = events
        self.assertEqual(
            (first["job"], first["mailbox"], first["server"], first["log_level"]),
            ("alice", "INBOX", "s", LogLevel.warn),
        )
        self.assertEqual((first["log_namespace"], first["log_source"]), ("imapmig.x", source))
        self.assertEqual((second["job"], second["mailbox"]), ("alice", "Sent"))

    def test_failure(self) -> None:
        """
        L{Logger.failure} events carry the fields too.
        """
        logger = withFields(Logger("imapmig.x"), {"job": "bob"})
        with capturedLogs() as events:
            logger.failure("broke", Failure(ValueError("x")))
        [event] = events
        self.assertEqual(event["job"], "bob")
        self.assertIsInstance(event["log_failure"].value, ValueError)
        self.flushLoggedErrors(ValueError)

    def test_noFields(self) -> None:
        """
        Without fields the logger is returned as it is.
        """
        logger = Logger("imapmig.x")
        self.assertIs(withFields(logger, {}), logger)
        self.assertIsInstance(withFields(logger, {"job": "a"}), FieldsLogger)

    def test_observer(self) -> None:
        """
        The events go to the observer of the logger the new one was made
        from, not to the global publisher.
        """
        events: list[dict[str, object]] = []
        observer = cast(ILogObserver, events.append)
        logger = withFields(Logger("imapmig.x", observer=observer), {"job": "carol"})
        with capturedLogs() as published:
            logger.info("hello")
        self.assertEqual(published, [])
        [event] = events
        self.assertEqual(event["job"], "carol")
