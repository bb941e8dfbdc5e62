"""
Tests of the source tree's own bookkeeping: what its modules say of their
tests.
"""

from __future__ import annotations

import re
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

ROOT = Path(__file__).parent.parent

_HEADER = re.compile(r"test-case-name:\s*([\w.,\s]+?)\s*-\*-")


class TestCaseNameTests(SynchronousTestCase):
    """
    A module's C{test-case-name} header names the test modules that test
    it (trial runs them for the module, editors jump to them).
    """

    def test_namedModulesExist(self) -> None:
        """
        Every test module a C{test-case-name} header of imapmig, bench or
        the plugin names exists (four named modules that did not).
        """
        missing = []
        for folder in ("imapmig", "bench", "twisted"):
            for path in sorted((ROOT / folder).rglob("*.py")):
                head = "\n".join(path.read_text("utf-8").splitlines()[:3])
                match = _HEADER.search(head)
                if match is None:
                    continue
                for name in match.group(1).split(","):
                    module = ROOT / (name.strip().replace(".", "/") + ".py")
                    if not module.exists():
                        missing.append(f"{path.relative_to(ROOT)}: {name.strip()}")
        self.assertEqual(missing, [])

    def test_everyModuleWithLogicNamesItsTests(self) -> None:
        """
        Every module of imapmig that defines a function or a class names
        its test modules in a C{test-case-name} header (a face that only
        re-exports, or a package's C{__init__}, need not).
        """
        unnamed = []
        for path in sorted((ROOT / "imapmig").rglob("*.py")):
            text = path.read_text("utf-8")
            if not re.search(r"^\s*(async def|def|class) ", text, re.M):
                continue
            if _HEADER.search("\n".join(text.splitlines()[:3])) is None:
                unnamed.append(str(path.relative_to(ROOT)))
        self.assertEqual(unnamed, [])
