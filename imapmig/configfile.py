# -*- test-case-name: tests.test_configfile -*-
"""
The configuration file read into its YAML document, in bounded time and
memory, every key given once.

YAML's aliases let a file of one kilobyte stand for a tree of millions of
nodes (C{a1: &a1 [*a0, *a0]}, 25 times: 2**25 leaves).  PyYAML builds
such a document as a graph, each alias shared, at once; it is whoever
walks the document as a tree afterwards (the TLS probe, the check for
inline secrets, the section readers) that runs for minutes.  So the
document is refused while it is composed, before anything walks it, if it
holds more than L{MAX_NODES} nodes counting each alias as the nodes it
stands for, nests deeper than L{MAX_DEPTH}, or uses an alias inside its
own anchor (a cycle); a file larger than L{MAX_OCTETS} is refused unread.
A key given twice in one mapping (C{state:} twice: YAML keeps the last)
is refused too, naming both lines.

This module replaces the YAML parsing that the configuration reader
(L{imapmig.config.loadConfig}) and the TLS probe (L{imapmig.access.cleartext})
each did on their own: the daemon now parses its file once, decides on
TLS from the document, and hands the same document to the reader.  It
lives outside L{imapmig.config} because that package's reader imports
Twisted's endpoint parser, which must not be imported before the TLS
decision; it imports only PyYAML and imapmig's leaves.
"""

from __future__ import annotations

import os
import stat
from typing import Any, Callable

import yaml
from attrs import frozen
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.resolver import Resolver

from imapmig.errors import ConfigError, DocumentRefused
from imapmig.access.secrets import accessibleToOthers, describeOpenError

__all__ = [
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_OCTETS",
    "ConfigFile",
    "parseDocument",
    "readConfigFile",
]

MAX_OCTETS = 8 * 1024 * 1024
"""
The largest configuration file read: about 30,000 jobs written inline
(a user list, C{jobs_from}, holds any number of rows).
"""

MAX_NODES = 1_000_000
"""
The most nodes (keys, values, list items) a configuration document may
hold, each alias counted as the nodes it stands for: about 40,000 jobs
written inline, some 400 MB while it is parsed, and a few seconds.
"""

MAX_DEPTH = 50
"""
The deepest nesting of mappings and lists (a configuration needs six).
"""

# A document libyaml refuses is parsed again by the pure-Python parser,
# so that its error is described the same way whichever parser PyYAML
# has; only up to this size (the pure-Python parser reads ~300 KB/s).
_REDESCRIBED_OCTETS = 256 * 1024

_MERGE = "tag:yaml.org,2002:merge"



def _line(mark: Any) -> int:
    return int(mark.line) + 1


def _keyPath(segments: list[str]) -> str:
    path = ""
    for segment in segments:
        path += segment if segment.startswith("[") or not path else f".{segment}"
    return path


def _segment(index: object) -> str | None:
    """
    The key path segment of the node PyYAML composes at C{index}: a
    mapping value's key node, or a list item's index.
    """
    if isinstance(index, ScalarNode):
        return str(index.value)
    if isinstance(index, int):
        return f"[{index}]"
    return None


class _BoundedComposer(Composer):
    """
    PyYAML's composer, counting: the nodes of the document as a tree
    (L{MAX_NODES}), its depth (L{MAX_DEPTH}); and noting every key given
    twice in one mapping.  Its methods are PyYAML's names.
    """

    # Provided by the parser the composer is mixed with.
    peek_event: Callable[[], Any]

    def __init__(self) -> None:
        Composer.__init__(self)
        self.expanded = 0
        self.depth = 0
        # The nodes an anchor stands for, by its node, once composed.
        self.weights: dict[Node, int] = {}
        # The key path of the node being composed.
        self.path: list[str] = []
        self.duplicates: list[tuple[str, Any, Any]] = []

    def count(self, nodes: int, mark: Any) -> None:
        self.expanded += nodes
        if self.expanded > MAX_NODES:
            raise DocumentRefused(
                f"the document holds more than {MAX_NODES:,} nodes (keys, values and"
                " list items, each alias counted as the nodes it stands for); write large"
                " fleets as a user list (jobs_from), and aliases of small mappings only",
                mark,
            )

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            self._countAlias(event)
            return Composer.compose_node(self, parent, index)
        # PyYAML passes a mapping value's key node as its index.
        segment = _segment(index)
        if segment is not None:
            self.path.append(segment)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise DocumentRefused(
                f"the document nests deeper than {MAX_DEPTH} levels", event.start_mark
            )
        before = self.expanded
        self.count(1, event.start_mark)
        node = Composer.compose_node(self, parent, index)
        self.depth -= 1
        if segment is not None:
            self.path.pop()
        if event.anchor is not None and node is not None:
            self.weights[node] = self.expanded - before
        return node

    def _countAlias(self, event: AliasEvent) -> None:
        """
        Count an alias as the nodes its anchor stands for; an alias inside
        its own anchor is refused.
        """
        anchored = self.anchors.get(event.anchor)
        if anchored is None:
            return
        weight = self.weights.get(anchored)
        if weight is None:
            raise DocumentRefused(
                f"the alias *{event.anchor} is used inside its own anchor"
                f" &{event.anchor} (line {_line(anchored.start_mark)}): a"
                " configuration cannot be recursive",
                event.start_mark,
            )
        self.count(weight, event.start_mark)

    def compose_mapping_node(self, anchor: Any) -> MappingNode:
        node = Composer.compose_mapping_node(self, anchor)
        first: dict[tuple[str, str], Any] = {}
        for key, _ in node.value:
            if not isinstance(key, ScalarNode) or key.tag == _MERGE:
                # A merge (<<: *defaults) may be overridden: not a duplicate.
                continue
            earlier = first.setdefault((key.tag, key.value), key.start_mark)
            if earlier is not key.start_mark:
                self.duplicates.append(
                    (_keyPath([*self.path, str(key.value)]), earlier, key.start_mark)
                )
        return node


class _PureLoader(
    yaml.reader.Reader,
    yaml.scanner.Scanner,
    yaml.parser.Parser,
    _BoundedComposer,
    SafeConstructor,
    Resolver,
):
    """
    PyYAML's pure-Python safe loader, bounded.
    """

    def __init__(self, stream: bytes) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        _BoundedComposer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)


_FastLoader: type[_BoundedComposer] | None = None
if getattr(yaml, "__with_libyaml__", False):
    from yaml.cyaml import CParser  # type: ignore[attr-defined]

    class _CLoader(_BoundedComposer, CParser, SafeConstructor, Resolver):
        """
        libyaml's parser (~4 times faster than the pure-Python one) under
        the bounded composer: libyaml's own composer would build the
        whole graph before anything could count it.
        """

        def __init__(self, stream: bytes) -> None:
            CParser.__init__(self, stream)
            _BoundedComposer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    _FastLoader = _CLoader


def _position(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def describeYAMLError(error: yaml.MarkedYAMLError) -> str:
    """
    Describe a YAML syntax error in one line: where, what, and where the
    construct it interrupted began.
    """
    mark = error.problem_mark or error.context_mark
    what = error.problem or error.context or "syntax error"
    context = _interrupted(error, mark) if error.problem and error.context else ""
    return f"{_at(mark)}invalid YAML: {what}{context}"


def _at(mark: Any) -> str:
    """
    Where a YAML error is (C{"line 3, column 5: "}), if it says.
    """
    return "" if mark is None else f"{_position(mark)}: "


def _interrupted(error: yaml.MarkedYAMLError, mark: Any) -> str:
    """
    The construct a YAML syntax error interrupted, and where it began if
    not at C{mark}, the error's own position.
    """
    if error.context_mark is not None and error.context_mark is not mark:
        return f" ({error.context} at {_position(error.context_mark)})"
    return f" ({error.context})"


def _load(loaderClass: Any, content: bytes) -> tuple[object, list[tuple[str, Any, Any]]]:
    loader = loaderClass(content)
    try:
        node = loader.get_single_node()
        document = None if node is None else loader.construct_document(node)
        return document, loader.duplicates
    finally:
        loader.dispose()


def _parse(content: bytes) -> tuple[object, list[tuple[str, Any, Any]]]:
    """
    Parse C{content} with libyaml when PyYAML has it; a document it refuses
    is parsed again by the pure-Python parser, for the same description
    of the error (line, column and wording) whichever parser PyYAML has.

    @raise yaml.YAMLError: not valid YAML.
    @raise DocumentRefused: past a bound.
    """
    if _FastLoader is not None:
        try:
            return _load(_FastLoader, content)
        except yaml.YAMLError:
            if len(content) > _REDESCRIBED_OCTETS:
                raise
    return _load(_PureLoader, content)


def _where(first: Any, second: Any) -> str:
    if first.line == second.line:
        return f"line {first.line + 1}, columns {first.column + 1} and {second.column + 1}"
    return f"lines {first.line + 1} and {second.line + 1}"


def parseDocument(content: bytes, path: str) -> object:
    """
    Parse the configuration C{content} (read from C{path}) as
    C{yaml.safe_load} would, within L{MAX_NODES} and L{MAX_DEPTH}, every
    key given once per mapping.

    @return: the document (L{None} for an empty one).
    @raise ConfigError: invalid YAML, past a bound (one problem), or keys
        given twice (one problem each, naming the key's path and both
        lines).
    """
    try:
        document, duplicates = _parse(content)
    except DocumentRefused as e:
        raise ConfigError([f"{path}: line {_line(e.mark)}: {e.message}"]) from None
    except yaml.MarkedYAMLError as e:
        raise ConfigError([f"{path}: {describeYAMLError(e)}"]) from None
    except yaml.YAMLError as e:
        # e.g. a ReaderError (bad encoding): its text spans lines.
        oneLine = " ".join(str(e).split())
        raise ConfigError([f"{path}: invalid YAML: {oneLine}"]) from None
    if duplicates:
        raise ConfigError(_duplicateProblems(path, duplicates))
    return document


def _duplicateProblems(path: str, duplicates: list[tuple[str, Any, Any]]) -> list[str]:
    """
    One problem for each key given twice, naming its path and both places.
    """
    return [
        f"{path}: {key}: given twice, on {_where(first, second)}; YAML would"
        " silently keep the second: give it once"
        for key, first, second in duplicates
    ]


@frozen
class ConfigFile:
    """
    A configuration file as read.

    @ivar document: its YAML document (L{None} for an empty file).
    @ivar looseFileMode: its mode if group or others may read it (an
        inline password is then a problem), else L{None}.
    """

    document: object
    looseFileMode: int | None


# Why a configuration file cannot be read, by the error opening it raises.
_OPEN_PROBLEMS: tuple[tuple[type[OSError], str], ...] = (
    (FileNotFoundError, "no such file"),
    (IsADirectoryError, "is a directory, not a file"),
)


def readConfigFile(path: str) -> ConfigFile:
    """
    Read the configuration file at C{path} (L{parseDocument}), refusing one
    larger than L{MAX_OCTETS} unread.

    @raise ConfigError: it cannot be read, or L{parseDocument} refuses it.
    """
    try:
        with open(path, "rb") as f:
            # fstat of the file read: its mode decides whether it may hold
            # an inline password.
            mode = os.fstat(f.fileno()).st_mode
            loose = accessibleToOthers(f.fileno(), mode)
            content = f.read(MAX_OCTETS + 1)
    except OSError as e:
        raise ConfigError([f"{path}: {describeOpenError(e, _OPEN_PROBLEMS)}"]) from None
    if len(content) > MAX_OCTETS:
        raise ConfigError(
            [
                f"{path}: larger than {MAX_OCTETS // (1024 * 1024)} MiB: write large fleets"
                " as a user list (jobs_from)"
            ]
        )
    return ConfigFile(parseDocument(content, path), stat.S_IMODE(mode) if loose else None)
