"""
Tests for L{imapmig.mail.octets}: the one pass over a message's octets, in
C (L{imapmig.mail._octets}) and in Python (L{crlfAndFactsPython}, its
fallback), run on the same bodies and compared with each other, with the
conversion the code did before (C{toCRLF}, C{_crlfPiece}), and with the
facts found independently.
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
import subprocess
import sys
import sysconfig
from typing import Callable

from hypothesis import HealthCheck, given, settings, strategies as st
from twisted.trial.unittest import SkipTest, SynchronousTestCase

from imapmig.mail import octets
from imapmig.mail.octets import (
    BARE_CR,
    BARE_LF,
    EIGHT_BIT,
    ENDS_CR,
    NUL,
    crlfAndFactsPython,
)

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

Converter = Callable[[bytes, bool, bool], tuple[bytes, int]]


def compiledConverter(name: str = "crlfAndFacts") -> Converter:
    """
    The C extension's function C{name}; the test is skipped where it was
    not built (failed under C{CI=true}: C{make venv} builds it in place).
    """
    try:
        from imapmig.mail import _octets
    except ImportError:
        message = "imapmig.mail._octets is not built (python setup.py build_ext --inplace)"
        if os.environ.get("CI") == "true":
            raise AssertionError(message)
        raise SkipTest(message)
    converter: Converter = getattr(_octets, name)
    return converter


def toCRLFBefore(body: bytes) -> bytes:
    """
    C{imapmig.mail.message.toCRLF} as it was before the one pass (at
    8cdd7af): the reference for the converted octets.
    """
    if 13 not in body:
        return body.replace(b"\n", b"\r\n")
    lf = body.count(b"\n")
    if body.count(b"\r\n") == lf:
        return body
    return body.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def pieceBefore(chunk: bytes, afterCR: bool) -> bytes:
    """
    C{imapmig.mail.message._crlfPiece} as it was before (at 8cdd7af): the
    reference for a streamed message's pieces.
    """
    if 13 not in chunk:
        piece = chunk.replace(b"\n", b"\r\n")
    else:
        piece = chunk.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    if afterCR and chunk[:1] == b"\n":
        piece = piece[1:]
    return piece


READER_TESTS = (
    "tests.test_sources_maildir.ReadBodiesTests",
    "tests.test_sources_mbox.ReadBodiesTests",
    "tests.test_sources_mbox.StreamingTests",
    "tests.test_sources_eml",
    "tests.test_sources_messagefile",
    "tests.test_sources_imap.BodyTests",
    "tests.test_message",
    "tests.test_fidelity.NeedsBinaryTests",
    "tests.test_job_preparation",
)
"""
The test classes and modules run again without the C extension
(L{FallbackTests.test_sameTestsWithoutExtension}).
"""

_BARE_CR = re.compile(rb"\r(?!\n)")
_BARE_LF = re.compile(rb"(?<!\r)\n")


def factsOf(body: bytes) -> int:
    """
    The facts of a whole body, found independently of the code tested.
    """
    facts = 0
    if b"\0" in body:
        facts |= NUL
    if any(octet > 0x7F for octet in body):
        facts |= EIGHT_BIT
    if _BARE_CR.search(body):
        facts |= BARE_CR
    if _BARE_LF.search(body):
        facts |= BARE_LF
    return facts


def streamed(convert: Converter, pieces: list[bytes]) -> tuple[bytes, int]:
    """
    A message given to C{convert} piece by piece, as L{StreamedBody} does:
    the pieces converted and joined, and their facts or'ed together (less
    L{ENDS_CR}), checking each piece's L{ENDS_CR} on the way.
    """
    converted = []
    facts = 0
    afterCR = False
    for index, piece in enumerate(pieces):
        last = index == len(pieces) - 1
        out, found = convert(piece, afterCR, last)
        endsCR = (piece[-1:] == b"\r") if piece else afterCR
        assert bool(found & ENDS_CR) == (endsCR and not last), (pieces, index, found)
        converted.append(out)
        afterCR = bool(found & ENDS_CR)
        facts |= found & ~ENDS_CR
    return b"".join(converted), facts


# Bodies made of these, weighted towards line ends and runs of plain text
# (long enough, joined, to cross the C pass's 16- and 32-octet steps).
_PARTS = st.sampled_from(
    [b"\r", b"\n", b"\r\n", b"\r\n", b"\0", b"\x80", b"\xff", b"a", b"Hello, world",
     b"x" * 15, b"y" * 16, b"z" * 17, b"q" * 31, b"w" * 33]
)  # fmt: skip
bodies = st.lists(_PARTS, max_size=60).map(b"".join)


def checkBody(
    testCase: SynchronousTestCase, convert: Converter, body: bytes, cuts: bool = True
) -> None:
    """
    C{convert} gives C{body} converted as before and its facts, whole;
    given with C{last=False}, a CR at its end as L{ENDS_CR}; and (with
    C{cuts}) in two pieces cut at every edge, the same.
    """
    expected = (toCRLFBefore(body), factsOf(body))
    testCase.assertEqual(convert(body, False, True), expected, body)
    out, found = convert(body, False, False)
    testCase.assertEqual(out, expected[0])
    if body[-1:] == b"\r":
        # Its facts less what the CR at its end would be, were it the last.
        testCase.assertEqual(found, factsOf(body[:-1] + b"x") | ENDS_CR)
    else:
        testCase.assertEqual(found, expected[1])
    for cut in range(len(body) + 1 if cuts else 0):
        testCase.assertEqual(streamed(convert, [body[:cut], body[cut:]]), expected, (body, cut))


class ReferenceTests(SynchronousTestCase):
    """
    L{crlfAndFactsPython}, the reference and the fallback, against the
    conversion before and the facts found independently.
    """

    def setUp(self) -> None:
        self.convert: Converter = crlfAndFactsPython

    def test_examples(self) -> None:
        """
        Bare LF gets a CR; CRLF, a bare CR, NUL and 8-bit octets stay;
        each is noted.
        """
        convert = self.convert
        self.assertEqual(convert(b"", False, True), (b"", 0))
        self.assertEqual(convert(b"a\nb\n", False, True), (b"a\r\nb\r\n", BARE_LF))
        self.assertEqual(convert(b"a\r\nb\r\n", False, True), (b"a\r\nb\r\n", 0))
        self.assertEqual(convert(b"a\rb\r\n", False, True), (b"a\rb\r\n", BARE_CR))
        self.assertEqual(convert(b"a\r", False, True), (b"a\r", BARE_CR))
        self.assertEqual(convert(b"a\r", False, False), (b"a\r", ENDS_CR))
        self.assertEqual(convert(b"\n", True, True), (b"\n", 0))
        self.assertEqual(convert(b"b", True, True), (b"b", BARE_CR))
        self.assertEqual(convert(b"", True, True), (b"", BARE_CR))
        self.assertEqual(convert(b"", True, False), (b"", ENDS_CR))
        self.assertEqual(convert(b"\0\n", False, True), (b"\0\r\n", NUL | BARE_LF))
        self.assertEqual(convert(b"\xc3\xa9\r\n", False, True), (b"\xc3\xa9\r\n", EIGHT_BIT))

    def test_uncopied(self) -> None:
        """
        A body that needs no CR added (CRLF throughout, or no LF) is
        returned as the same object.
        """
        for body in (b"a\r\nb\r\n" * 40, b"no line end at all" * 10, b"bare\rCR\r\n" * 9):
            self.assertIs(self.convert(body, False, True)[0], body)

    def test_everySmallBody(self) -> None:
        """
        Every body of up to 6 octets of CR, LF, NUL, 0x80 and a letter,
        whole and cut at every edge.
        """
        alphabet = [b"\r", b"\n", b"\0", b"\x80", b"a"]
        level = [b""]
        for _ in range(6):
            level = [body + octet for body in level for octet in alphabet]
            for body in level:
                checkBody(self, self.convert, body)

    @settings(
        max_examples=400,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
    )
    @given(body=bodies)
    def test_anyBody(self, body: bytes) -> None:
        """
        Any body, whole, as a piece that is not the last, and in two pieces
        cut at every edge.
        """
        checkBody(self, self.convert, body)

    @settings(
        max_examples=200,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
    )
    @given(body=bodies, cuts=st.lists(st.integers(min_value=0, max_value=700), max_size=6))
    def test_anyPieces(self, body: bytes, cuts: list[int]) -> None:
        """
        Any body in any number of pieces (empty ones included) gives what
        it gives whole; each piece converts as the code before converted
        it.
        """
        edges = sorted(min(cut, len(body)) for cut in cuts)
        pieces = [body[a:b] for a, b in zip([0] + edges, edges + [len(body)])]
        self.assertEqual(streamed(self.convert, pieces), (toCRLFBefore(body), factsOf(body)))
        afterCR = False
        for piece in pieces:
            if piece:
                self.assertEqual(self.convert(piece, afterCR, False)[0], pieceBefore(piece, afterCR))
                afterCR = piece[-1:] == b"\r"

    def test_largeBodies(self) -> None:
        """
        Bodies of 100 KB, with line ends, NUL and 8-bit octets at random
        places and at every place of a 32-octet step.
        """
        rng = random.Random(31)
        for _ in range(40):
            made = bytearray(rng.choice(b"abcdefgh ") for _ in range(100_000))
            for _ in range(rng.randrange(0, 3000)):
                made[rng.randrange(len(made))] = rng.choice(b"\r\n\n\n\n\0\x80")
            body = bytes(made)
            self.assertEqual(self.convert(body, False, True), (toCRLFBefore(body), factsOf(body)))
        for place in range(64):
            for special in (b"\r", b"\n", b"\r\n", b"\0", b"\xfe", b"\n\r"):
                checkBody(self, self.convert, b"m" * place + special + b"n" * (70 - place))

    def test_manyLineEnds(self) -> None:
        """
        Bodies with more LFs needing a CR than one in 16 octets (more
        than the C pass guesses its output's room from), from the start
        or after a long stretch without, and CRLF bodies with such a
        stretch in them.
        """
        for run in (b"\n", b"a\n", b"\r\n\n", b"\n\r", b"abcdefghijklmn\n", b"\x80\n\0"):
            for before in (b"", b"x" * 200, b"x\r\n" * 100):
                for count in (1, 31, 32, 33, 500, 5000):
                    checkBody(self, self.convert, before + run * count, cuts=False)
                    checkBody(self, self.convert, before + run * count + b"tail" * 30, cuts=False)

    def test_blockEdges(self) -> None:
        """
        Bodies of LF-only text around the C pass's edges (its steps of 16
        and 32, its blocks of 64, the last 128 octets it takes from a
        padded copy) with a CR, LF, CRLF, NUL or 8-bit octet at every
        place, and an LF early on or none.
        """
        for size in (15, 16, 17, 63, 64, 65, 127, 128, 129, 191, 192, 193, 257):
            for start in (b"a\n", b"", b"\n", b"\r\n"):
                for place in range(size):
                    for special in (b"\r", b"\n", b"\r\n", b"\0", b"\xfe"):
                        body = start + b"m" * place + special + b"n" * (size - place)
                        checkBody(self, self.convert, body, cuts=False)

    def test_nulBesideEightBit(self) -> None:
        """
        A NUL at the same place of a 32-octet step as an 8-bit octet, or
        at another, before or after it, in LF-only text: both are found.
        """
        lines = b"".join(b"line %d of some text\n" % number for number in range(80))
        for eight in (40, 100, 300, 700):
            for nul in (eight + 32, eight + 64, eight - 32, eight + 1, eight + 320, None):
                body = bytearray(lines)
                body[eight] = 0xE9
                if nul is not None:
                    body[nul] = 0
                checkBody(self, self.convert, bytes(body), cuts=False)

    def test_crAfterLFs(self) -> None:
        """
        LF-only text with a CR far on, or just before or at the first LF
        that needs one, or at its very end, converts as any other body.
        """
        text = b"abcdefghij\n" * 300
        for place in (0, 1, 15, 16, 31, 32, 63, 64, 65, 1000, 3299, 3300):
            for octet in (b"\r", b"\r\n", b"\n\r"):
                checkBody(self, self.convert, text[:place] + octet + text[place:], cuts=False)
        for before in (b"x" * 31 + b"\r", b"x" * 15 + b"\r", b"x" * 63 + b"\r"):
            checkBody(self, self.convert, before + b"\n" + text, cuts=False)
            checkBody(self, self.convert, before + b"q\n" + text, cuts=False)

    def test_denseLineEnds(self) -> None:
        """
        Long bodies with more LFs needing a CR than one in 8 octets (the
        room the C pass guesses for a long body) convert as any other.
        """
        for run in (b"\n", b"a\n", b"abcdef\n", b"\x80\n"):
            body = b"start\n" + run * (40_000 // len(run))
            self.assertEqual(self.convert(body, False, True), (toCRLFBefore(body), factsOf(body)))


class CompiledTests(ReferenceTests):
    """
    The C extension passes the same tests as its reference, and agrees
    with it on every body they make.
    """

    def setUp(self) -> None:
        self.convert = compiledConverter()

    def test_agrees(self) -> None:
        """
        The C and the Python function give the same results on random
        bodies, whole and in pieces.
        """
        rng = random.Random(8)
        python = crlfAndFactsPython
        for _ in range(3000):
            body = bytes(rng.choice(b"\r\n\0\x80ab") for _ in range(rng.randrange(0, 90)))
            for afterCR in (False, True):
                for last in (False, True):
                    self.assertEqual(
                        self.convert(body, afterCR, last), python(body, afterCR, last), body
                    )

    def test_agreesLonger(self) -> None:
        """
        The C and the Python function give the same results on a seeded
        corpus of longer bodies: mostly text with LF line ends, and some
        CRLF, bare CR, NUL and 8-bit octets at varying rates.
        """
        rng = random.Random(5)
        python = crlfAndFactsPython
        for _ in range(400):
            rate = rng.choice([0, 0.001, 0.01, 0.1])
            octets = []
            for _ in range(rng.randrange(0, 3000)):
                if rng.random() < rate:
                    octets.append(rng.choice(b"\r\0\x80\xff"))
                else:
                    octets.append(rng.choice(b"abcdefghij klmnop\n"))
            body = bytes(octets)
            for afterCR in (False, True):
                for last in (False, True):
                    self.assertEqual(
                        self.convert(body, afterCR, last), python(body, afterCR, last), body
                    )

    def test_onlyBytes(self) -> None:
        """
        Anything but C{bytes} is refused with a L{TypeError}, as is a call
        with no argument or too many.
        """
        convert: Callable[..., object] = self.convert
        self.assertRaises(TypeError, convert, bytearray(b"a\n"))
        self.assertRaises(TypeError, convert, "a\n")
        self.assertRaises(TypeError, convert)
        self.assertRaises(TypeError, convert, b"", False, True, 1)

    def test_inUse(self) -> None:
        """
        Where the extension is built, it is what
        L{imapmig.mail.octets.crlfAndFacts} is.
        """
        self.assertIs(octets.crlfAndFacts, self.convert)
        self.assertTrue(octets.compiled)


class CompiledBaselineTests(CompiledTests):
    """
    The C extension's steps for a processor without AVX2 (SSE2 on x86-64)
    pass the same tests, wherever the tests run.
    """

    def setUp(self) -> None:
        self.convert = compiledConverter("crlfAndFactsBaseline")

    def test_inUse(self) -> None:
        """
        L{imapmig.mail.octets.crlfAndFacts} is the extension's other
        function, which takes the AVX2 steps where the processor has them.
        """
        self.assertIsNot(octets.crlfAndFacts, self.convert)
        self.assertIs(octets.crlfAndFacts, compiledConverter())


def portableConverter(testCase: SynchronousTestCase) -> Converter:
    """
    The C extension built with C{OCTETS_PORTABLE} (no SSE2 or AVX2: eight
    octets a step in a 64-bit word, and octet by octet, as on a processor
    other than x86-64) into a temporary directory, loaded
    beside the one in use; skipped without a C compiler (failed under
    C{CI=true}).
    """
    if _portable:
        return _portable[0]
    compiler = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    built = os.path.join(testCase.mktemp(), "_octets" + sysconfig.get_config_var("EXT_SUFFIX"))
    os.makedirs(os.path.dirname(built))
    command = [
        *compiler.split(), "-shared", "-fPIC", "-O2", "-DOCTETS_PORTABLE",
        f"-I{sysconfig.get_paths()['include']}",
        os.path.join(CHECKOUT, "imapmig", "mail", "_octets.c"),
        os.path.join(CHECKOUT, "imapmig", "mail", "_crlf.c"), "-o", built,
    ]  # fmt: skip
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=120)
    except (OSError, subprocess.CalledProcessError) as e:
        if os.environ.get("CI") == "true":
            raise AssertionError(f"cannot build the portable C pass: {e}")
        raise SkipTest(f"cannot build the portable C pass: {e}")
    spec = importlib.util.spec_from_file_location("imapmig.mail._octets", built)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    testCase.assertEqual(module.AVX2, 0)
    converter: Converter = module.crlfAndFacts
    _portable.append(converter)
    return converter


_portable: list[Converter] = []
"""
The portable build, once built (L{portableConverter}).
"""


class CompiledPortableTests(CompiledTests):
    """
    The C extension's octet-by-octet steps (a processor other than
    x86-64) pass the same tests.
    """

    def setUp(self) -> None:
        self.convert = portableConverter(self)

    def test_inUse(self) -> None:
        """
        The portable build is not what L{imapmig.mail.octets} uses here.
        """
        self.assertIsNot(octets.crlfAndFacts, self.convert)


class FallbackTests(SynchronousTestCase):
    """
    Without the extension, L{imapmig.mail.octets} serves its Python
    function.
    """

    def test_withoutExtension(self) -> None:
        """
        When C{imapmig.mail._octets} cannot be imported,
        L{imapmig.mail.octets.crlfAndFacts} is L{crlfAndFactsPython}.
        """
        script = (
            "import sys\n"
            "sys.modules['imapmig.mail._octets'] = None\n"
            "from imapmig.mail import octets\n"
            "print(octets.compiled, octets.crlfAndFacts is octets.crlfAndFactsPython,"
            " octets.crlfAndFacts(b'a\\nb'))\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", script],
            cwd=CHECKOUT,
            env=dict(os.environ, PYTHONPATH=CHECKOUT),
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.assertEqual((result.stdout, result.stderr), ("False True (b'a\\r\\nb', 8)\n", ""))

    def test_sameTestsWithoutExtension(self) -> None:
        """
        The tests of what calls L{imapmig.mail.octets.crlfAndFacts} (the
        readers that carry the facts, the streamed pieces, the
        preparation's literal8 decision) pass with the Python function
        as they pass with the C one: they are run here again in a
        process where the extension cannot be imported.
        """
        script = (
            "import sys\n"
            "sys.modules['imapmig.mail._octets'] = None\n"
            "from imapmig.mail import octets\n"
            "assert not octets.compiled\n"
            "from twisted.scripts.trial import run\n"
            "sys.argv = ['trial', *sys.argv[1:]]\n"
            "run()\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", script, *READER_TESTS],
            cwd=CHECKOUT,
            env=dict(os.environ, PYTHONPATH=CHECKOUT),
            capture_output=True,
            text=True,
            timeout=900,
        )
        self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])
        self.assertIn("PASSED", result.stdout)

