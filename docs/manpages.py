"""
Build the manual pages imapmig(1), imapmig.yaml(5) and imapmig-daemon(8)
in C{man/} from the manual's Markdown pages in C{docs/}, so that both say
the same thing and the units' C{Documentation=} can name them.

Run it from the top of the source tree after changing a page it draws on
(L{PAGES}); C{tests.test_docs} fails while C{man/} is behind C{docs/}::

    .venv/bin/python docs/manpages.py

It reads the subset of Markdown the manual is written in: headings,
paragraphs, bullet lists, fenced blocks, pipe tables, inline code, bold,
emphasis and links.  Nothing else replaced it: Debian's pandoc would, at
200 MB installed, for one build step that this page does in its stead.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class ManPage:
    """
    One manual page: its name and section, what its NAME line says, its
    synopsis lines, and the C{docs/} pages (or C{page.md#heading} sections
    of them) its body is drawn from.
    """

    name: str
    section: int
    summary: str
    synopsis: tuple[str, ...]
    sources: tuple[str, ...]

    @property
    def path(self) -> Path:
        """
        Where the built page is kept: C{man/manN/NAME.N}.
        """
        return ROOT / "man" / f"man{self.section}" / f"{self.name}.{self.section}"


PAGES = (
    ManPage(
        "imapmig",
        1,
        "plan, report and verify IMAP migrations",
        (
            "imapmig plan --config FILE [--job NAME]... [--json]",
            "imapmig report --config FILE [--job NAME]... [--json | --csv] [--failures]",
            "imapmig verify --config FILE [--job NAME]... [--report FILE]",
            "imapmig state copy --from FILE|URI --to URI|FILE [--config FILE] [--replace]",
            "imapmig state load-jobs --config FILE [--fleet NAME]",
        ),
        ("planning-and-verifying.md", "failure-handling.md#outcomes-and-reports", "state-copy.md", "state-load-jobs.md"),
    ),
    ManPage(
        "imapmig.yaml",
        5,
        "the configuration of the imapmig migration daemon",
        ("/etc/imapmig/imapmig.yaml",),
        ("configuration.md",),
    ),
    ManPage(
        "imapmig-daemon",
        8,
        "the imapmig migration daemon",
        (
            "imapmig-daemon --config FILE [--check-config [--connect]]",
            "twistd -n imapmig --config FILE",
        ),
        ("install.md", "operations.md", "fleet.md", "fleet-database.md"),
    ),
)

_FENCE = re.compile(r"^(\s*)(`{3,})")
_BULLET = re.compile(r"^(\s*)[-*] (.*)")
_NUMBERED = re.compile(r"^(\s*)(\d+)\. (.*)")
_HEADING = re.compile(r"^(#{1,6}) (.*)")
_TABLE_RULE = re.compile(r"^\|?\s*:?-{3,}")
_INLINE = re.compile(
    r"(?P<code>(`+)(?P<codetext>.+?)\2)"
    r"|(?P<image>!\[(?P<alt>[^\]]*)\]\([^)]*\))"
    r"|(?P<link>\[(?P<linktext>[^\]]+)\]\((?P<target>[^)\s]+)\))"
    r"|(?P<bold>\*\*(?P<boldtext>.+?)\*\*)"
    r"|(?P<em>(?<![\w*])\*(?P<emtext>[^*\s][^*]*?)\*(?![\w*]))"
)


def escape(text: str) -> str:
    """
    C{text} as roff prints it: backslashes and hyphens escaped.
    """
    return text.replace("\\", "\\e").replace("-", "\\-")


def inline(text: str) -> str:
    """
    One line of Markdown's inline markup as roff: code and bold in bold,
    emphasis in italics, a link as its text (and its address, if it leaves
    the manual), an image as its description, HTML tags dropped.
    """
    out = []
    end = 0
    for match in _INLINE.finditer(text):
        out.append(escape(re.sub(r"<[^>]+>", "", text[end : match.start()])))
        out.append(_inlineSpan(match))
        end = match.end()
    out.append(escape(re.sub(r"<[^>]+>", "", text[end:])))
    return "".join(out)


def _inlineSpan(match: re.Match[str]) -> str:
    """
    One matched span of L{_INLINE} as roff.
    """
    if match.group("code"):
        return f"\\fB{escape(match.group('codetext').strip())}\\fR"
    if match.group("image"):
        return escape(match.group("alt"))
    if match.group("link"):
        text = inline(match.group("linktext"))
        target = match.group("target")
        return f"{text} <{escape(target)}>" if target.startswith("http") else text
    if match.group("bold"):
        return f"\\fB{inline(match.group('boldtext'))}\\fR"
    return f"\\fI{inline(match.group('emtext'))}\\fR"


def request(line: str) -> str:
    """
    A text line that roff will not take for a request (one starting with
    a dot or an apostrophe).
    """
    return "\\&" + line if line.startswith((".", "'")) else line


def slug(heading: str) -> str:
    """
    GitHub's anchor for C{heading}.
    """
    text = re.sub(r"[^\w\- ]", "", heading.lower())
    return text.replace(" ", "-")


def section(markdown: str, anchor: str) -> str:
    """
    The part of C{markdown} under the heading whose anchor is C{anchor},
    down to the next heading of the same or a higher level.
    """
    lines = markdown.splitlines()
    for start, line in enumerate(lines):
        match = _HEADING.match(line)
        if match and slug(match.group(2)) == anchor:
            level = len(match.group(1))
            for end in range(start + 1, len(lines)):
                other = _HEADING.match(lines[end])
                if other and len(other.group(1)) <= level and not _inFence(lines, end):
                    return "\n".join(lines[start:end])
            return "\n".join(lines[start:])
    raise ValueError(f"no heading with the anchor #{anchor}")


def _inFence(lines: list[str], index: int) -> bool:
    """
    Whether line C{index} of C{lines} is inside a fenced block.
    """
    return sum(1 for line in lines[:index] if _FENCE.match(line)) % 2 == 1


def blocks(markdown: str) -> Iterator[tuple[str, list[str]]]:
    """
    C{markdown} cut into its blocks, each a kind (C{heading1}..C{heading6},
    C{fence}, C{table}, C{bullet}, C{paragraph}) and its lines.
    """
    lines = markdown.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.strip() or line.lstrip().startswith("<!--"):
            index += 1
            continue
        kind, taken = _block(lines, index)
        yield kind, lines[index : index + taken]
        index += taken


def _block(lines: list[str], index: int) -> tuple[str, int]:
    """
    The kind of the block starting at line C{index} and how many lines it
    takes.
    """
    line = lines[index]
    heading = _HEADING.match(line)
    if heading:
        return f"heading{len(heading.group(1))}", 1
    fence = _FENCE.match(line)
    if fence:
        close = next(
            (n for n in range(index + 1, len(lines)) if lines[n].strip().startswith(fence.group(2))),
            len(lines) - 1,
        )
        return "fence", close - index + 1
    if line.startswith("|"):
        return "table", _runLength(lines, index, lambda text: text.startswith("|"))
    if _BULLET.match(line) or _NUMBERED.match(line):
        return "bullet", _runLength(lines, index, _continuesItem)
    return "paragraph", _runLength(lines, index, _continuesParagraph)


def _runLength(lines: list[str], index: int, continues: Callable[[str], bool]) -> int:
    """
    How many lines from C{index} on belong to the block there: the first
    and those that C{continues}.
    """
    end = index + 1
    while end < len(lines) and continues(lines[end]):
        end += 1
    return end - index


def _continuesItem(line: str) -> bool:
    """
    Whether C{line} goes on a bullet list: another item or an indented
    continuation.
    """
    return bool(_BULLET.match(line) or _NUMBERED.match(line) or line.startswith("  "))


def _continuesParagraph(line: str) -> bool:
    """
    Whether C{line} goes on a paragraph.
    """
    return bool(line.strip()) and not (
        _HEADING.match(line) or _FENCE.match(line) or line.startswith("|") or _BULLET.match(line)
    )



def render(kind: str, lines: list[str]) -> list[str]:
    """
    One block as roff lines.
    """
    if kind.startswith("heading"):
        return _heading(int(kind[-1]), lines[0])
    return _RENDERERS[kind](lines)


def _heading(level: int, line: str) -> list[str]:
    """
    A heading: C{.SH} for the page's top two levels, C{.SS} below.
    """
    text = inline(line.lstrip("#").strip())
    if level <= 2:
        return [f".SH {text.upper()}" if level == 1 else f".SH {text}"]
    return [f".SS {text}"]


def _fence(lines: list[str]) -> list[str]:
    """
    A fenced block, printed as it is, indented.
    """
    body = lines[1:-1] if len(lines) > 1 else []
    return [".PP", ".RS 4", ".nf", *(request(escape(text)) for text in body), ".fi", ".RE"]


def _table(lines: list[str]) -> list[str]:
    """
    A pipe table as a C{tbl} table, its header row in bold.
    """
    rows = [_cells(text) for text in lines if not _TABLE_RULE.match(text)]
    width = max(len(row) for row in rows)
    out = [".PP", ".na", ".TS", "tab(\x07) allbox;", " ".join("l" for _ in range(width)) + "."]
    for row in rows:
        cells = row + [""] * (width - len(row))
        out.append("\x07".join(f"T{{\n{request(inline(cell))}\nT}}" for cell in cells))
    out += [".TE", ".ad"]
    return out


def _cells(line: str) -> list[str]:
    """
    The cells of one pipe table row (a pipe inside backquotes is text).
    """
    cells, current, quoted = [], "", False
    for char in line.strip().strip("|"):
        if char == "`":
            quoted = not quoted
        if char == "|" and not quoted:
            cells.append(current.strip())
            current = ""
        else:
            current += char
    cells.append(current.strip())
    return [cell.replace("\\|", "|") for cell in cells]


def _bullets(lines: list[str]) -> list[str]:
    """
    A list: one C{.IP} per item, its continuation lines joined to it.
    """
    items: list[tuple[str, int, list[str]]] = []
    for text in lines:
        item = _BULLET.match(text) or _NUMBERED.match(text)
        if item is None and items:
            items[-1][2].append(text.strip())
            continue
        if item is None:
            items.append(("", 0, [text.strip()]))
            continue
        mark = "\\(bu" if _BULLET.match(text) else f"{item.group(2)}."
        items.append((mark, len(item.group(1)) // 2, [item.groups()[-1]]))
    out: list[str] = []
    for mark, depth, words in items:
        out += [f".IP {mark} {4 + 2 * depth}", request(inline(" ".join(words)))]
    return out


def _paragraph(lines: list[str]) -> list[str]:
    """
    A paragraph: C{.PP} and its text, on one line (roff fills it).
    """
    return [".PP", request(inline(" ".join(text.strip() for text in lines)))]


_RENDERERS = {"fence": _fence, "table": _table, "bullet": _bullets, "paragraph": _paragraph}


def build(page: ManPage, docs: Path = ROOT / "docs") -> str:
    """
    The roff source of C{page}.
    """
    out = [
        f'.TH "{page.name.upper()}" "{page.section}" "" "imapmig" "imapmig manual"',
        ".SH NAME",
        f"{escape(page.name)} \\- {escape(page.summary)}",
        ".SH SYNOPSIS",
    ]
    for line in page.synopsis:
        out += [".PP", f"\\fB{escape(line)}\\fR"]
    for source in page.sources:
        fileName, _, anchor = source.partition("#")
        markdown = (docs / fileName).read_text("utf-8")
        if anchor:
            markdown = section(markdown, anchor)
        for kind, lines in blocks(markdown):
            out += render(kind, lines)
    others = [f"\\fB{other.name}\\fR({other.section})" for other in PAGES if other != page]
    out += [".SH SEE ALSO", ", ".join(others + ["\\fBtwistd\\fR(1)", "\\fBsystemd.exec\\fR(5)"])]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    """
    Write every page of L{PAGES} into C{man/}; with C{--check}, write
    nothing and exit 1 if one is not what its sources build.
    """
    stale = []
    for page in PAGES:
        text = build(page)
        if "--check" in argv:
            if not page.path.exists() or page.path.read_text("utf-8") != text:
                stale.append(str(page.path.relative_to(ROOT)))
            continue
        page.path.parent.mkdir(parents=True, exist_ok=True)
        page.path.write_text(text, "utf-8")
    for name in stale:
        sys.stderr.write(f"{name} is behind docs/: run python docs/manpages.py\n")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
