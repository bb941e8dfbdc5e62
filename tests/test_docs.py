"""
The README and the manual in docs/ hold together: every relative link and
anchor resolves, the README stays a front door (at most 200 lines, the demo
and test commands first), and every YAML example is valid.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from unittest import SkipTest

import yaml
from twisted.trial.unittest import SynchronousTestCase

from imapmig.config import parseConfig
from imapmig.errors import ConfigError

CHECKOUT = Path(__file__).resolve().parent.parent
PAGES = [CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^[ \t]*(```+|~~~+)")
_HEADING = re.compile(r"^(#{1,6}) (.*)$")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_YAML_BLOCK = re.compile(r"^([ \t]*)```ya?ml\n(.*?)^\1```", re.S | re.M)

# What a whole configuration in the manual may name that this machine lacks:
# its files, directories and systemd credentials.
_ABSENT = re.compile(r"does not exist|no such (file|directory)|CREDENTIALS_DIRECTORY is not set")


def prose(text: str) -> list[str]:
    """
    The lines of C{text} outside fenced code blocks.
    """
    lines: list[str] = []
    fence = ""
    for line in text.splitlines():
        match = _FENCE.match(line)
        if match:
            mark = match.group(1)[:3]
            if not fence:
                fence = mark
            elif mark == fence:
                fence = ""
            continue
        if not fence:
            lines.append(line)
    return lines


def anchors(page: Path) -> set[str]:
    """
    The anchors GitHub gives the headings of C{page}: lower case, every
    character but letters, digits, C{-}, C{_} and spaces dropped, spaces
    made C{-}, a repeated one suffixed C{-1}, C{-2}, ...
    """
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose(page.read_text("utf-8")):
        heading = _HEADING.match(line)
        if heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(2).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def yamlBlocks(page: Path) -> list[tuple[int, str]]:
    """
    The C{```yaml} blocks of C{page}: the line each starts on and its text
    (a block in a list item unindented).
    """
    text = page.read_text("utf-8")
    blocks = []
    for match in _YAML_BLOCK.finditer(text):
        indent = len(match.group(1))
        body = "\n".join(line[indent:] for line in match.group(2).splitlines())
        blocks.append((text[: match.start()].count("\n") + 1, body))
    return blocks


class LinkTests(SynchronousTestCase):
    """
    Every relative link in README.md and docs/*.md names a file that
    exists, and its C{#anchor} a heading of that page.
    """

    def broken(self, page: Path) -> list[str]:
        """
        The relative links of C{page} that do not resolve.
        """
        broken = []
        for line in prose(page.read_text("utf-8")):
            for target in _LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue
                path, _, anchor = target.partition("#")
                resolved = (page.parent / path).resolve() if path else page
                if not resolved.exists():
                    broken.append(f"{page.name}: {target}: no such file")
                elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                    broken.append(f"{page.name}: {target}: no such heading")
        return broken

    def test_linksResolve(self) -> None:
        """
        No page has a broken relative link or anchor.
        """
        self.assertEqual([problem for page in PAGES for problem in self.broken(page)], [])

    def test_brokenFound(self) -> None:
        """
        The check finds a link to a missing page and to a missing heading.
        """
        page = Path(self.mktemp() + ".md")
        page.write_text("# Title\n\n[a](#title) [b](#nowhere) [c](missing.md) [d](https://x/#y)\n")
        self.assertEqual(
            self.broken(page),
            [f"{page.name}: #nowhere: no such heading", f"{page.name}: missing.md: no such file"],
        )

    def test_everyPageInTheIndex(self) -> None:
        """
        The manual's index and the README's table of contents name every
        page of docs/.
        """
        index = (CHECKOUT / "docs" / "README.md").read_text("utf-8")
        readme = (CHECKOUT / "README.md").read_text("utf-8")
        for page in PAGES[1:]:
            if page.name != "README.md":
                self.assertIn(f"]({page.name})", index)
                self.assertIn(f"](docs/{page.name})", readme)


class ReadmeTests(SynchronousTestCase):
    """
    README.md is the front door.
    """

    def test_short(self) -> None:
        """
        It is at most 200 lines.
        """
        self.assertLessEqual(len((CHECKOUT / "README.md").read_text("utf-8").splitlines()), 200)

    def test_commandsFirst(self) -> None:
        """
        Its first two commands are the demo and the test suite, both on its
        first screen (within its first 30 lines).
        """
        lines = (CHECKOUT / "README.md").read_text("utf-8").splitlines()
        commands = [n for n, line in enumerate(lines) if line.startswith("apt-get update")]
        self.assertEqual(
            [lines[n] for n in commands[:2]],
            [
                "apt-get update && apt-get install -y make && make demo",
                "apt-get update && apt-get install -y make && make test",
            ],
        )
        self.assertLess(commands[1], 30)

    def test_firstConfigurationIsTheMinimalOne(self) -> None:
        """
        The README's first migration's configuration is config/imapmig.yaml,
        the one make install writes, without its comment lines.
        """
        ((_, block),) = yamlBlocks(CHECKOUT / "README.md")
        minimal = (CHECKOUT / "config" / "imapmig.yaml").read_text("utf-8").splitlines()
        self.assertEqual(block.splitlines(), [line for line in minimal if not line.startswith("#")])
        self.assertLessEqual(len(block.splitlines()), 10)


class YamlExampleTests(SynchronousTestCase):
    """
    The YAML examples of README.md and docs/*.md. Every block parses as
    YAML (most are fragments: a section or a job, shown alone); a block
    that is a whole configuration (a mapping with C{servers} and C{jobs})
    is also read by the daemon's own reader, L{parseConfig}, and must have
    no problem but the absence here of the files, directories and systemd
    credentials it names.
    """

    def test_everyBlockParses(self) -> None:
        """
        Every C{```yaml} block is YAML, and there are some.
        """
        count = 0
        for page in PAGES:
            for line, block in yamlBlocks(page):
                try:
                    yaml.safe_load(block)
                except yaml.YAMLError as e:
                    self.fail(f"{page.name} line {line}: {e}")
                count += 1
        self.assertGreater(count, 10)

    def test_wholeConfigurationsRead(self) -> None:
        """
        Every whole configuration is one the daemon accepts, files aside;
        the README's first migration and the configuration reference's
        overview are among them.
        """
        whole = []
        for page in PAGES:
            for line, block in yamlBlocks(page):
                document = yaml.safe_load(block)
                if not (isinstance(document, dict) and {"servers", "jobs"} <= set(document)):
                    continue
                whole.append(page.name)
                try:
                    parseConfig(document, f"{page.name} line {line}")
                except ConfigError as e:
                    self.assertEqual(
                        [problem for problem in e.problems if not _ABSENT.search(problem)], []
                    )
        self.assertIn("README.md", whole)
        self.assertIn("configuration.md", whole)

    def test_problemsFound(self) -> None:
        """
        The check above can fail: a whole configuration naming an unknown
        server has a problem that is not an absent file.
        """
        document = {
            "state": "/nonexistent/state.sqlite",
            "servers": {"new": {"endpoint": "tcp:mail.example.org:143"}},
            "jobs": [
                {
                    "name": "a",
                    "source": {"server": "old", "user": "a", "password_file": "/nonexistent/a"},
                    "destination": {"server": "new", "user": "a", "password_file": "/nonexistent/a"},
                }
            ],
        }
        error = self.assertRaises(ConfigError, parseConfig, document, "x.yaml")
        self.assertEqual(
            [problem for problem in error.problems if not _ABSENT.search(problem)],
            ["x.yaml: jobs[0].source.server: no server named 'old' (servers: new)"],
        )


def _manpages() -> ModuleType:
    """
    C{docs/manpages.py}, the build of the manual pages, as a module.
    """
    spec = importlib.util.spec_from_file_location("manpages", CHECKOUT / "docs" / "manpages.py")
    assert spec is not None and spec.loader is not None
    if "manpages" not in sys.modules:
        module = importlib.util.module_from_spec(spec)
        sys.modules["manpages"] = module
        spec.loader.exec_module(module)
    return sys.modules["manpages"]


class ManPageTests(SynchronousTestCase):
    """
    The manual pages in man/ are built from docs/ by docs/manpages.py.
    """

    def test_current(self) -> None:
        """
        Each page in man/ is what docs/ builds now (a change to a page of
        docs/ it draws on without C{python docs/manpages.py} fails here).
        """
        manpages = _manpages()
        for page in manpages.PAGES:
            self.assertEqual(page.path.read_text("utf-8"), manpages.build(page), page.path)

    def test_staleFound(self) -> None:
        """
        The comparison can fail: a page built from a changed docs/ differs.
        """
        manpages = _manpages()
        page = manpages.PAGES[0]
        with tempfile.TemporaryDirectory() as scratch:
            docs = Path(scratch)
            for source in page.sources:
                name = source.partition("#")[0]
                text = (CHECKOUT / "docs" / name).read_text("utf-8")
                (docs / name).write_text(text.replace("writing nothing", "writing all"), "utf-8")
            self.assertNotEqual(page.path.read_text("utf-8"), manpages.build(page, docs))

    def test_rendersCleanly(self) -> None:
        """
        groff reads every page (tables through tbl) without an error; only
        its warnings about a wide table or a long word are allowed.
        """
        if shutil.which("groff") is None:
            if os.environ.get("CI") == "true":
                self.fail("groff is not installed (Debian's groff-base, with man-db)")
            raise SkipTest("groff is not installed")
        for page in _manpages().PAGES:
            result = subprocess.run(
                ["groff", "-k", "-t", "-man", "-ww", "-z", "-Tutf8", str(page.path)],
                capture_output=True, text=True, timeout=60,
            )
            problems = [
                line for line in result.stderr.splitlines()
                if not re.search(r"cannot adjust|can't break|wider than line width|^warning: file", line)
            ]
            self.assertEqual((result.returncode, problems), (0, []), page.path)

    def test_inline(self) -> None:
        """
        Markdown's inline markup becomes roff's fonts; hyphens and
        backslashes are escaped; a link keeps its text, and an outside one
        its address.
        """
        inline = _manpages().inline
        self.assertEqual(inline("run `make install` **now**"), "run \\fBmake install\\fR \\fBnow\\fR")
        self.assertEqual(inline("see [Logs](operations.md#logs)"), "see Logs")
        self.assertEqual(inline("[RFC](https://x.org/a-b)"), "RFC <https://x.org/a\\-b>")
        self.assertEqual(inline("a *b* c\\d"), "a \\fIb\\fR c\\ed")
