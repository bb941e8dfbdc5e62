"""
Tests of the source tree's own bookkeeping: what its modules say of their
tests, and which way its imports run.
"""

from __future__ import annotations

import ast
import os
import re
from functools import cache
from pathlib import Path
from typing import Any, Iterator
from unittest import SkipTest

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


LAYERS: tuple[tuple[str, ...], ...] = (
    # The leaves every layer uses (imapmig: the package, for its version).
    ("imapmig", "errors", "units"),
    ("log", "state", "access", "progress"),
    # The message and folder rules (over the state store's name limits),
    # and the reading of secret-bearing configuration files.
    ("mail", "configfile"),
    ("config",),
    # What a job's sides and its machine use: the wire, tokens, the job
    # queue's interface (a lease is an input of the machine), the rates
    # and daily budgets.
    ("imap", "oauth", "queue", "throttle"),
    ("sources",),
    ("job",),
    # The scheduler runs the jobs' machines; the status site reads it.
    ("schedule",),
    ("status",),
    ("daemon", "testing"),
    ("commands",),
    # The faces the entry points name (twistd, the console scripts).
    ("cli", "demo", "loglevels", "tap"),
)
"""
The layers of imapmig, lowest first: a subpackage or top module of
C{imapmig/} imports at run time only from layers below its own.
"""


def _layer(module: str) -> str | None:
    """
    The layer name of an imapmig module: its subpackage, or its top
    module, or C{"imapmig"} for the package itself; L{None} outside.
    """
    parts = module.split(".")
    if parts[0] != "imapmig":
        return None
    if len(parts) == 1:
        return "imapmig"
    package = ROOT / "imapmig" / parts[1]
    if package.is_dir() or package.with_suffix(".py").exists():
        return parts[1]
    # A name the package defines (from imapmig import __version__).
    return "imapmig"


def _typeChecking(test: ast.expr) -> bool:
    """
    Whether an C{if} tests C{TYPE_CHECKING} (or C{typing.TYPE_CHECKING}).
    """
    return any(
        (isinstance(node, ast.Name) and node.id == "TYPE_CHECKING")
        or (isinstance(node, ast.Attribute) and node.attr == "TYPE_CHECKING")
        for node in ast.walk(test)
    )


def _runTimeImports(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """
    The modules a module's code imports when it runs (anywhere in it,
    functions included), each with its line: not those under C{if
    TYPE_CHECKING:}.
    """
    checking: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _typeChecking(node.test):
            checking.update(id(inner) for inner in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                yield f"{node.module}.{alias.name}", node.lineno


@cache
def layerImports() -> dict[tuple[str, str], list[str]]:
    """
    Every run-time import of one layer of imapmig by another, as
    C{(importer, imported)}, each with where it is (C{path:line}).
    """
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted((ROOT / "imapmig").rglob("*.py")):
        relative = path.relative_to(ROOT).with_suffix("")
        importer = _layer(".".join(relative.parts).removesuffix(".__init__"))
        for module, line in _runTimeImports(ast.parse(path.read_text("utf-8"))):
            imported = _layer(module)
            where = f"{relative}.py:{line}"
            if imported is not None and importer is not None and imported != importer:
                found = edges.setdefault((importer, imported), [])
                if where not in found:
                    found.append(where)
    return edges


def _cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """
    The strongly connected components of more than one layer, each sorted.
    """
    graph: dict[str, set[str]] = {}
    for importer, imported in edges:
        graph.setdefault(importer, set()).add(imported)
        graph.setdefault(imported, set())
    order: list[str] = []
    seen: set[str] = set()
    for start in sorted(graph):
        # Depth first, by an explicit stack: finishing order.
        stack = [(start, iter(sorted(graph[start])))] if start not in seen else []
        seen.add(start)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                order.append(node)
            elif child not in seen:
                seen.add(child)
                stack.append((child, iter(sorted(graph[child]))))
    reverse: dict[str, set[str]] = {node: set() for node in graph}
    for node, targets in graph.items():
        for target in targets:
            reverse[target].add(node)
    components: list[list[str]] = []
    assigned: set[str] = set()
    for node in reversed(order):
        if node in assigned:
            continue
        component, pending = [], [node]
        assigned.add(node)
        while pending:
            current = pending.pop()
            component.append(current)
            for source in reverse[current] - assigned:
                assigned.add(source)
                pending.append(source)
        if len(component) > 1:
            components.append(sorted(component))
    return sorted(components)


class ImportLayerTests(SynchronousTestCase):
    """
    Imports run one way, down the declared L{LAYERS}, and never in a
    circle (C{if TYPE_CHECKING:} imports aside, as they never run).
    """

    maxDiff = None

    def test_noCycle(self) -> None:
        """
        No two layers of imapmig import each other at run time, directly
        or through others (job/ and schedule/ did).
        """
        edges = layerImports()
        found = [
            f"{importer} -> {imported} ({', '.join(edges[importer, imported])})"
            for component in _cycles(edges)
            for importer in component
            for imported in component
            if (importer, imported) in edges
        ]
        self.assertEqual(found, [])

    def test_noUpwardImport(self) -> None:
        """
        Each layer imports only from layers below its own in L{LAYERS},
        and every layer of imapmig is declared there.
        """
        rank = {name: index for index, layer in enumerate(LAYERS) for name in layer}
        edges = layerImports()
        undeclared = sorted({name for edge in edges for name in edge} - set(rank))
        self.assertEqual(undeclared, [])
        upward = [
            f"{importer} -> {imported} ({', '.join(where)})"
            for (importer, imported), where in sorted(edges.items())
            if rank[imported] >= rank[importer]
        ]
        self.assertEqual(upward, [])

    def test_declaredLayersExist(self) -> None:
        """
        Every layer L{LAYERS} names is a subpackage or top module of
        imapmig, so the order cannot go stale.
        """
        stale = [
            name
            for layer in LAYERS
            for name in layer
            if name != "imapmig"
            and not (ROOT / "imapmig" / name).is_dir()
            and not (ROOT / "imapmig" / f"{name}.py").exists()
        ]
        self.assertEqual(stale, [])


class SizeTests(SynchronousTestCase):
    """
    Rooms small enough to live in, measured by radon (the measure of
    cyclomatic complexity Twisted's neighbours are compared by): no
    function above 15, no class above 500 lines, no module above 800, and
    a mean complexity of at most 2.8 over imapmig/ (3.46 before the
    layout by role; txtorcon 2.55, treq 1.64).
    """

    def setUp(self) -> None:
        try:
            from radon.complexity import cc_visit
        except ImportError:
            why = "radon is not installed (make setup installs it with the dev extras)"
            if os.environ.get("CI") == "true":
                self.fail(why)
            raise SkipTest(why)
        self.blocks: list[tuple[str, Any]] = []
        self.lengths: dict[str, int] = {}
        for path in sorted((ROOT / "imapmig").rglob("*.py")):
            text = path.read_text("utf-8")
            name = str(path.relative_to(ROOT))
            self.lengths[name] = len(text.splitlines())
            self.blocks += [(name, block) for block in cc_visit(text)]

    def test_functions(self) -> None:
        """
        No function or method is above complexity 15.
        """
        over = [
            f"{name}:{block.lineno} {block.name} {block.complexity}"
            for name, block in self.blocks
            if not hasattr(block, "methods") and block.complexity > MOST_COMPLEX
        ]
        self.assertEqual(over, [])

    def test_classesAndModules(self) -> None:
        """
        No class is above 500 lines, no module above 800.
        """
        over = [
            f"{name}:{block.lineno} {block.name} {block.endline - block.lineno + 1} lines"
            for name, block in self.blocks
            if hasattr(block, "methods") and block.endline - block.lineno + 1 > LONGEST_CLASS
        ]
        over += [f"{name} {lines} lines" for name, lines in self.lengths.items() if lines > LONGEST_MODULE]
        self.assertEqual(over, [])

    def test_mean(self) -> None:
        """
        The mean complexity of every block (function, method and class, as
        C{radon cc -a} counts them) is at most 2.8.
        """
        mean = sum(block.complexity for _, block in self.blocks) / len(self.blocks)
        self.assertLessEqual(round(mean, 3), MEAN_COMPLEXITY)


MOST_COMPLEX = 15
LONGEST_CLASS = 500
LONGEST_MODULE = 800
MEAN_COMPLEXITY = 2.8
