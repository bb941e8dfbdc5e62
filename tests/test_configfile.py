# mypy: disallow-untyped-calls=False
# (trial's assertion methods are unannotated.)
"""
Tests for L{imapmig.configfile}: the configuration's YAML document, parsed
as C{yaml.safe_load} would with libyaml when PyYAML has it, in bounded
time and memory, every key given once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import yaml
from twisted.trial.unittest import SynchronousTestCase

from imapmig import configfile
from imapmig.configfile import MAX_DEPTH, MAX_NODES, parseDocument, readConfigFile
from imapmig.errors import ConfigError, DocumentRefused

EXAMPLE = Path(__file__).parent.parent / "config" / "imapmig.example.yaml"


def aliasBomb(levels: int = 25) -> bytes:
    """
    A YAML document of about a kilobyte that stands for a tree of
    2**C{levels} leaves: each level a list of two aliases of the one
    before.
    """
    lines = ["state: state.sqlite", "bomb:", "  a0: &a0 [x, x]"]
    lines += [f"  a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, levels + 1)]
    return ("\n".join(lines) + "\n").encode()


class ParseTests(SynchronousTestCase):
    """
    L{parseDocument} is C{yaml.safe_load}, faster where libyaml is there.
    """

    def test_libyamlUsed(self) -> None:
        """
        When PyYAML was built with libyaml, its parser is the one used.
        """
        if not yaml.__with_libyaml__:
            self.assertIsNone(configfile._FastLoader)
        else:
            assert configfile._FastLoader is not None
            self.assertTrue(issubclass(configfile._FastLoader, getattr(yaml.cyaml, "CParser")))

    def test_sameDocument(self) -> None:
        """
        The example configuration and a document with every scalar type,
        anchors, aliases and merge keys parse to what C{yaml.safe_load}
        returns.
        """
        content = EXAMPLE.read_bytes() + (
            b"\nextra:\n  n: 12\n  f: 1.5e3\n  b: yes\n  z: ~\n  d: 2024-01-02\n"
            b"  s: '007'\n  o: 0o17\n  l: [a, {b: c}]\n"
            b"  base: &base {x: 1, y: [1, 2]}\n  merged: {<<: *base, x: 2}\n"
            b"  again: *base\n"
        )
        self.assertEqual(parseDocument(content, "f"), yaml.safe_load(content))
        self.assertIsNone(parseDocument(b"", "f"))
        self.assertIsNone(parseDocument(b"# nothing\n", "f"))

    def test_sameError(self) -> None:
        """
        A document that is not valid YAML is described as the pure-Python
        parser describes it, with its positions, naming the file.
        """
        for content, description in (
            (
                b"state: x\njobs:\n  - name: [alice\n",
                "line 4, column 1: invalid YAML: expected ',' or ']', but got"
                " '<stream end>' (while parsing a flow sequence at line 3, column 11)",
            ),
            (
                b"state: x\n  jobs: []\n",
                "line 2, column 7: invalid YAML: mapping values are not allowed here",
            ),
            (
                b"a: b\n\tc: d\n",
                "line 2, column 1: invalid YAML: found character '\\t' that cannot start"
                " any token (while scanning for the next token)",
            ),
        ):
            error = self.assertRaises(ConfigError, parseDocument, content, "/etc/f.yaml")
            self.assertEqual(error.problems, (f"/etc/f.yaml: {description}",))
        for content in (b"key: \xc3\x28\n", b'key: "bell \x07"\n'):
            error = self.assertRaises(ConfigError, parseDocument, content, "f")
            self.assertEqual(len(error.problems), 1)
            self.assertIn("f: invalid YAML: ", error.problems[0])


class BoundsTests(SynchronousTestCase):
    """
    A document is refused while it is composed, before anything walks it,
    once it stands for more than L{MAX_NODES} nodes or nests deeper than
    L{MAX_DEPTH}, or when an alias is used inside its own anchor.
    """

    def test_aliasBomb(self) -> None:
        """
        A one-kilobyte document of 2**25 aliased leaves is refused at once,
        naming the line where it passed the bound (without the bound,
        parsing is instant but a walk of the tree never ends).
        """
        content = aliasBomb()
        self.assertLess(len(content), 1024)
        error = self.assertRaises(ConfigError, parseDocument, content, "/etc/imapmig.yaml")
        [problem] = error.problems
        self.assertTrue(problem.startswith("/etc/imapmig.yaml: line "), problem)
        self.assertIn(f"more than {MAX_NODES:,} nodes", problem)
        self.assertIn("each alias counted as the nodes it stands for", problem)

    def test_pureParserBounded(self) -> None:
        """
        The pure-Python parser, used without libyaml, is bounded the same.
        """
        error = self.assertRaises(
            DocumentRefused, configfile._load, configfile._PureLoader, aliasBomb()
        )
        self.assertIn(f"more than {MAX_NODES:,} nodes", error.message)

    def test_aliasesCounted(self) -> None:
        """
        Aliases of small mappings (merge keys of a shared block, as a long
        job list uses them) are allowed; each counts as the nodes it
        stands for, so a document just under the bound parses and one just
        over it does not.
        """
        content = b"base: &b {connections: 2, identity: off}\njobs:\n" + b"".join(
            b"  - {<<: *b, name: j%d}\n" % i for i in range(1000)
        )
        document = parseDocument(content, "f")
        assert isinstance(document, dict)
        self.assertEqual(len(document["jobs"]), 1000)
        self.assertEqual(document["jobs"][7], {"connections": 2, "identity": False, "name": "j7"})
        # A list of 100 aliases of a list of 10,000 items: 1,010,000
        # nodes.
        items = b", ".join(b"x" for _ in range(10_000))
        big = b"a: &a [" + items + b"]\nb: [" + b", ".join(b"*a" for _ in range(100)) + b"]\n"
        error = self.assertRaises(ConfigError, parseDocument, big, "f")
        self.assertIn("line 2: the document holds more than", error.problems[0])
        fits = b"a: &a [" + items + b"]\nb: [" + b", ".join(b"*a" for _ in range(90)) + b"]\n"
        self.assertEqual(len(parseDocument(fits, "f")["b"]), 90)  # type: ignore[index]

    def test_recursive(self) -> None:
        """
        An alias inside its own anchor (a cycle, which a walk would follow
        for ever) is refused, naming the anchor's line.
        """
        for content in (b"a: &a [*a]\n", b"x: 1\nm: &m\n  k: *m\n"):
            error = self.assertRaises(ConfigError, parseDocument, content, "f")
            [problem] = error.problems
            self.assertIn("is used inside its own anchor", problem)

    def test_depth(self) -> None:
        """
        Nesting deeper than L{MAX_DEPTH} is refused; up to it parses.
        """
        fits = b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1)
        parseDocument(b"a: " + fits, "f")
        deep = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
        error = self.assertRaises(ConfigError, parseDocument, b"a: " + deep, "f")
        self.assertEqual(
            error.problems, (f"f: line 1: the document nests deeper than {MAX_DEPTH} levels",)
        )

    def test_fileSize(self) -> None:
        """
        A file larger than L{configfile.MAX_OCTETS} is refused unread.
        """
        path = os.path.abspath(self.mktemp())
        with open(path, "wb") as f:
            f.write(b"# padding\n" * (configfile.MAX_OCTETS // 10 + 1))
        start = time.monotonic()
        error = self.assertRaises(ConfigError, readConfigFile, path)
        self.assertEqual(
            error.problems,
            (f"{path}: larger than 8 MiB: write large fleets as a user list (jobs_from)",),
        )
        # Generous: the refusal reads no further than the bound.
        self.assertLess(time.monotonic() - start, 30)


class DuplicateKeyTests(SynchronousTestCase):
    """
    A key given twice in one mapping, at any depth, is refused, naming its
    path and both lines.
    """

    def test_topLevel(self) -> None:
        """
        C{state:} twice: YAML alone keeps the second silently.
        """
        content = b"state: /var/lib/a.sqlite\nmax_jobs: 2\nstate: /var/lib/b.sqlite\n"
        self.assertEqual(yaml.safe_load(content)["state"], "/var/lib/b.sqlite")
        error = self.assertRaises(ConfigError, parseDocument, content, "/etc/imapmig.yaml")
        self.assertEqual(
            error.problems,
            (
                "/etc/imapmig.yaml: state: given twice, on lines 1 and 3; YAML would"
                " silently keep the second: give it once",
            ),
        )

    def test_anyDepth(self) -> None:
        """
        Duplicates inside servers, job list items and flow mappings are all
        reported together, each at its path; the same key in two mappings,
        quoted or not, and a merge key overridden are not duplicates.
        """
        content = (
            b"servers:\n"
            b"  dove:\n"
            b"    endpoint: tcp:127.0.0.1:143\n"
            b"    'endpoint': tcp:127.0.0.1:144\n"
            b"defaults: &d {connections: 2}\n"
            b"jobs:\n"
            b"  - name: a\n"
            b"    <<: *d\n"
            b"    connections: 4\n"
            b"  - name: b\n"
            b"    destination: {server: dove, user: b, user: c}\n"
            b"    name: c\n"
        )
        error = self.assertRaises(ConfigError, parseDocument, content, "f")
        self.assertEqual(
            error.problems,
            (
                "f: servers.dove.endpoint: given twice, on lines 3 and 4; YAML would"
                " silently keep the second: give it once",
                "f: jobs[1].destination.user: given twice, on line 11, columns 33 and 42;"
                " YAML would silently keep the second: give it once",
                "f: jobs[1].name: given twice, on lines 10 and 12; YAML would silently"
                " keep the second: give it once",
            ),
        )
