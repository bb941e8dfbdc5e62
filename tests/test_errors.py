"""
Tests for L{imapmig.errors}: the one hierarchy of imapmig's errors, the
problems a configuration error shows, and excerpts of peer data.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from OpenSSL import SSL
from twisted.trial.unittest import SynchronousTestCase

from imapmig import errors
from imapmig.errors import (
    SHOWN_PROBLEMS,
    CommandFailed,
    ConfigError,
    ImapmigError,
    PermanentError,
    QuotaExceeded,
    TransientError,
    escapedExcerpt,
)


class HierarchyTests(SynchronousTestCase):
    """
    Every error imapmig raises on purpose is an L{ImapmigError}, and
    every error that says whether to retry is transient or permanent,
    never both.
    """

    def test_oneHierarchy(self) -> None:
        """
        Each exception class of L{imapmig.errors} derives from
        L{ImapmigError} but L{Stopped}, a L{BaseException} on purpose; none
        is both transient and permanent.
        """
        classes = [
            value
            for value in vars(errors).values()
            if isinstance(value, type)
            and issubclass(value, BaseException)
            and value.__module__ == errors.__name__
        ]
        self.assertGreater(len(classes), 10)
        # Stopped (a stop signal) must unwind through every except
        # Exception: it alone is a BaseException outside the hierarchy.
        outside = [kind for kind in classes if not issubclass(kind, Exception)]
        self.assertEqual(outside, [errors.Stopped])
        for kind in classes:
            if kind in outside:
                continue
            self.assertTrue(issubclass(kind, ImapmigError), kind)
            self.assertFalse(
                issubclass(kind, TransientError) and issubclass(kind, PermanentError), kind
            )

    def test_everyExceptionHere(self) -> None:
        """
        No module of imapmig but L{imapmig.errors} defines an exception
        class (25 were defined beside their users), but for one that must
        also be OpenSSL's C{SSL.Error}: it stays beside the TLS code, which
        alone loads OpenSSL, and still joins the hierarchy (an
        L{ImapmigError}).
        """
        root = Path(errors.__file__).parent
        elsewhere = []
        for path in sorted(root.rglob("*.py")):
            if path.name == "__main__.py" or path == Path(errors.__file__):
                continue
            parts = path.relative_to(root.parent).with_suffix("").parts
            module = ".".join(parts).removesuffix(".__init__")
            tree = ast.parse(path.read_text("utf-8"))
            names = [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
            if not names:
                continue
            loaded = importlib.import_module(module)
            for name in names:
                value = getattr(loaded, name, None)
                if not (isinstance(value, type) and issubclass(value, BaseException)):
                    continue
                if not (issubclass(value, SSL.Error) and issubclass(value, ImapmigError)):
                    elsewhere.append(f"{module}.{name}")
        self.assertEqual(elsewhere, [])

    def test_quotaIsTransient(self) -> None:
        """
        L{QuotaExceeded} is transient, so that code unaware of pausing
        still treats it as "not now"; its text and code are kept.
        """
        error = QuotaExceeded("over quota", "[OVERQUOTA] full", "OVERQUOTA")
        self.assertIsInstance(error, TransientError)
        self.assertEqual(
            (str(error), error.text, error.code), ("over quota", "[OVERQUOTA] full", "OVERQUOTA")
        )

    def test_commandFailed(self) -> None:
        """
        L{CommandFailed} keeps the command, status, code and text, and
        says them in its message.
        """
        error = CommandFailed("CREATE", "NO", "ALREADYEXISTS", "Mailbox exists")
        self.assertEqual(
            (error.command, error.status, error.code, error.text, str(error)),
            ("CREATE", "NO", "ALREADYEXISTS", "Mailbox exists", "CREATE: NO Mailbox exists"),
        )


class ConfigErrorTests(SynchronousTestCase):
    """
    L{ConfigError} keeps every problem and shows a bounded number.
    """

    def test_fewProblemsShownAll(self) -> None:
        """
        Up to L{SHOWN_PROBLEMS} problems are all shown, one a line.
        """
        problems = [f"f.yaml: k{n}: unknown key" for n in range(SHOWN_PROBLEMS)]
        error = ConfigError(problems)
        self.assertEqual(error.shown(), problems)
        self.assertEqual(str(error), "\n".join(problems))

    def test_manyProblemsCounted(self) -> None:
        """
        Past L{SHOWN_PROBLEMS}, the first are shown and one line counts
        the rest; C{problems} keeps them all.
        """
        problems = [f"p{n}" for n in range(SHOWN_PROBLEMS + 7)]
        error = ConfigError(problems)
        shown = error.shown()
        self.assertEqual(shown[:-1], problems[:SHOWN_PROBLEMS])
        self.assertEqual(
            shown[-1], f"... and 7 more problems, not shown: fix the first {SHOWN_PROBLEMS} first"
        )
        self.assertEqual(len(error.problems), SHOWN_PROBLEMS + 7)


class ExcerptTests(SynchronousTestCase):
    """
    L{escapedExcerpt} makes peer data fit for a log line.
    """

    def test_escaped(self) -> None:
        """
        Printable ASCII is kept, a backslash doubled, the rest escaped.
        """
        self.assertEqual(escapedExcerpt(b"OK fine"), "OK fine")
        self.assertEqual(
            escapedExcerpt(b"a\\b\r\n\x00\xff\t\x1b]0;"), "a\\\\b\\r\\n\\x00\\xff\\t\\x1b]0;"
        )

    def test_bounded(self) -> None:
        """
        At most C{limit} octets are looked at; a cut excerpt ends with
        C{...}.
        """
        self.assertEqual(escapedExcerpt(b"x" * 81), "x" * 80 + "...")
        self.assertEqual(escapedExcerpt(b"x" * 80), "x" * 80)
        self.assertEqual(escapedExcerpt(b"abcdef", limit=3), "abc...")
        self.assertEqual(escapedExcerpt(b"\xff" * 10_000), "\\xff" * 80 + "...")


class SchedulingErrorTests(SynchronousTestCase):
    """
    The errors of the job queue, the admin's controls, the grants and the
    daily budgets, moved into L{imapmig.errors}, keep the kind every
    C{except} that catches them expects.
    """

    def test_kinds(self) -> None:
        """
        A used-up daily budget is a L{QuotaExceeded} (the job pauses), an
        impossible grant permanent, a connection not granted now
        transient; an unknown job and a refused control say why.
        """
        reached = errors.DailyLimitReached("budget used up", 86400.0)
        self.assertIsInstance(reached, QuotaExceeded)
        self.assertEqual((reached.resumeAt, reached.budget, reached.text), (86400.0, None, ""))
        self.assertIsInstance(errors.GrantImpossible("limit 1"), PermanentError)
        self.assertIsInstance(errors.ConnectionNotGranted("busy"), TransientError)
        self.assertEqual(str(errors.UnknownJob("nwe")), "no job named 'nwe'")
        refused = errors.ControlRefused("not paused")
        self.assertEqual((str(refused), refused.reason), ("not paused", "not paused"))
        self.assertIsInstance(errors.LeaseLost("taken over"), ImapmigError)
