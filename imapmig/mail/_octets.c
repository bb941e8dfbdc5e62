/*
 * imapmig.mail._octets: the one pass over a message's octets (issue 31),
 * and the per-message work around it that Python did at a cost many times
 * the pass's own on a small message.
 *
 * crlfAndFacts(data, afterCR=False, last=True) -> (converted, facts)
 * readListed(messages, locate, descriptors, largest, flags, notRead, bodies,
 *            facts) -> missed: a batch of message files read, each in one
 *     read(2) into one buffer reused from file to file, and converted from
 *     there into its body (imapmig.sources.messagefile.readListedFiles).
 * withInternalDate(prefix, when) -> bytes: an APPEND's date argument
 *     (imapmig.mail.message.withInternalDatePython).
 *
 * The same function as imapmig.mail.octets.crlfAndFactsPython, which is the
 * reference and the fallback where this extension was not built (no
 * compiler): every LF not preceded by a CR gets one, and what was found of
 * the octets on the way (NUL, 8-bit, bare CR, bare LF, a CR at the end of a
 * piece) comes back as bit flags.  tests.test_mail_octets runs both on the
 * same bodies.
 *
 * A first pass, read-only, finds the facts and counts the LFs that need a
 * CR; a body that needs none (already CRLF throughout, or no LF at all) is
 * returned as the same object, uncopied.  Otherwise a second pass copies it
 * into a bytes object of the final size, adding the CRs.  With AVX2 the
 * first pass stops at the first LF that needs a CR, and from there one pass
 * finds the facts and converts (convertFused), into room guessed and
 * trimmed at the end: an octet is looked at once.  On x86-64 the
 * passes take 32 octets a step where the processor has AVX2 (checked when
 * the module is imported), else 16 (SSE2, which every x86-64 has); the NUL
 * and 8-bit octets are or'ed into two vectors looked at once at the end,
 * and only a step holding a CR or an LF is looked at further.  Elsewhere,
 * and for the last octets of a body, one octet a step.
 *
 * The first version (fe1a9e9) took 16 octets a step everywhere, looked at
 * every step holding an LF, an 8-bit octet or a NUL, and counted LFs with
 * libgcc's __popcountdi2: about 3.9 instructions an octet, more than the
 * passes it replaced (bench/results/cpu.md, "Fourth round").
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <limits.h>
#include <datetime.h>
#include "../_fsname.h"

/* OCTETS_PORTABLE: octet by octet only, as on a processor other than
 * x86-64 (tests.test_mail_octets builds it so to test that path). */
#if defined(__SSE2__) && !defined(OCTETS_PORTABLE)
#include <emmintrin.h>
#define OCTETS_SSE2 1
#endif
#if defined(__GNUC__)
#define INLINE inline __attribute__((always_inline))
#else
#define INLINE inline
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(OCTETS_PORTABLE)
#include <immintrin.h>
#define OCTETS_AVX2 1
#define AVX2 __attribute__((target("avx2,popcnt")))
#endif

/* The facts (imapmig.mail.octets names them). */
#define FACT_NUL 1
#define FACT_EIGHT_BIT 2
#define FACT_BARE_CR 4
#define FACT_BARE_LF 8
#define FACT_ENDS_CR 16

/* Whether this processor has AVX2 (set when the module is imported). */
static int haveAVX2 = 0;

/*
 * What the first pass found so far: the facts, the LFs that need a CR,
 * whether the octet before the next one is a CR.
 */
typedef struct {
    unsigned int facts;
    Py_ssize_t bareLF;
    unsigned int prevCR;
} Scan;

/* Octet by octet: p[i..n) into s. */
static void
scanOctets(const unsigned char *p, Py_ssize_t i, Py_ssize_t n, Scan *s)
{
    unsigned int cr = s->prevCR, found = 0;
    Py_ssize_t lfs = 0;
    for (; i < n; i++) {
        unsigned char c = p[i];
        if (c == '\n') {
            lfs += !cr;
        }
        else {
            if (cr) {
                found |= FACT_BARE_CR;
            }
            if (c == 0) {
                found |= FACT_NUL;
            }
            else if (c & 0x80) {
                found |= FACT_EIGHT_BIT;
            }
        }
        cr = (c == '\r');
    }
    s->prevCR = cr;
    s->facts |= found;
    s->bareLF += lfs;
}

/*
 * The line ends of one step of w octets (w <= 32): lfs and crs their bit
 * masks, s->prevCR the CR before them.  Counts the LFs without a CR and
 * notes a CR followed by something else than LF.
 */
static INLINE void
lineEnds(uint32_t lfs, uint32_t crs, unsigned int w, Scan *s, int popcnt)
{
    uint64_t crBefore = ((uint64_t)crs << 1) | s->prevCR;
    uint32_t bare = lfs & ~(uint32_t)crBefore;
    if (popcnt) {
        s->bareLF += __builtin_popcount(bare);
    }
    else {
        for (; bare; bare &= bare - 1) {
            s->bareLF++;
        }
    }
    if (crBefore & ~(uint64_t)lfs & (((uint64_t)1 << w) - 1)) {
        s->facts |= FACT_BARE_CR;
    }
    s->prevCR = (unsigned int)(crBefore >> w) & 1;
}

#ifdef OCTETS_SSE2
/* 16 octets a step, from i while 16 are left; returns where it stopped. */
static Py_ssize_t
scanSSE2(const unsigned char *p, Py_ssize_t i, Py_ssize_t n, Scan *s)
{
    const __m128i lf = _mm_set1_epi8('\n');
    const __m128i cr = _mm_set1_epi8('\r');
    const __m128i zero = _mm_setzero_si128();
    __m128i high = zero, nul = zero;
    for (; i + 16 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
        high = _mm_or_si128(high, v);
        nul = _mm_or_si128(nul, _mm_cmpeq_epi8(v, zero));
        uint32_t lfs = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, lf));
        uint32_t crs = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, cr));
        if (lfs | crs | s->prevCR) {
            lineEnds(lfs, crs, 16, s, 0);
        }
    }
    s->facts |= (_mm_movemask_epi8(high) ? FACT_EIGHT_BIT : 0)
        | (_mm_movemask_epi8(nul) ? FACT_NUL : 0);
    return i;
}
#endif

#ifdef OCTETS_AVX2
/*
 * 32 octets a step, from i while 32 are left; returns where it stopped:
 * with stop, before the first step holding an LF that needs a CR.
 */
AVX2 static Py_ssize_t
scanAVX2(const unsigned char *p, Py_ssize_t i, Py_ssize_t n, Scan *s, int stop)
{
    const __m256i lf = _mm256_set1_epi8('\n');
    const __m256i cr = _mm256_set1_epi8('\r');
    const __m256i zero = _mm256_setzero_si256();
    __m256i high = zero, nul = zero;
    for (; i + 32 <= n; i += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(p + i));
        high = _mm256_or_si256(high, v);
        nul = _mm256_or_si256(nul, _mm256_cmpeq_epi8(v, zero));
        uint32_t lfs = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, lf));
        uint32_t crs = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, cr));
        if (lfs | crs | s->prevCR) {
            if (stop && (lfs & ~((crs << 1) | s->prevCR))) {
                break;
            }
            lineEnds(lfs, crs, 32, s, 1);
        }
    }
    s->facts |= (_mm256_movemask_epi8(high) ? FACT_EIGHT_BIT : 0)
        | (_mm256_movemask_epi8(nul) ? FACT_NUL : 0);
    return i;
}
#endif

/*
 * The first pass over p[0..n), the octet before p[0] being a CR when
 * afterCR: 32 octets a step with AVX2 (when wide and the processor has
 * it), then 16 with SSE2 (every x86-64 has it), then one.
 */
static Scan
findFacts(const unsigned char *p, Py_ssize_t n, int afterCR, int wide, Py_ssize_t *fuseAt)
{
    Scan s = {0, 0, (unsigned int)afterCR};
    Py_ssize_t i = 0;
    (void)wide;
    *fuseAt = -1;
#ifdef OCTETS_AVX2
    if (wide && haveAVX2) {
        i = scanAVX2(p, i, n, &s, 1);
        if (i + 32 <= n) {
            /* The steps stopped where an LF needs a CR: the rest is
             * looked at as it is converted (convertFused). */
            *fuseAt = i;
            return s;
        }
        i = scanAVX2(p, i, n, &s, 0);
    }
#endif
#ifdef OCTETS_SSE2
    i = scanSSE2(p, i, n, &s);
#endif
    scanOctets(p, i, n, &s);
    if (s.bareLF) {
        s.facts |= FACT_BARE_LF;
    }
    return s;
}

/*
 * The second pass copies p[i..n) to out, a CR before every LF not
 * preceded by one (*prevCR: whether the octet before p[i] is a CR); out
 * has room for exactly the octets left plus those CRs.
 *
 * Each piece between LFs is copied with one store of a whole step from
 * where the piece starts: what it writes beyond the piece is overwritten
 * by the next store.  With two steps of input left at least, such a store
 * stays within both the input and the output (the output left is never
 * shorter than the input left).
 */
#ifdef OCTETS_AVX2
AVX2 static Py_ssize_t
convertAVX2(const unsigned char *p, Py_ssize_t i, Py_ssize_t n, unsigned int *prevCR,
            unsigned char **to)
{
    const __m256i lf = _mm256_set1_epi8('\n');
    const __m256i cr = _mm256_set1_epi8('\r');
    unsigned char *out = *to;
    unsigned int before = *prevCR;
    for (; i + 64 <= n; i += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(p + i));
        uint32_t lfs = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, lf));
        uint32_t crs = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, cr));
        uint32_t bare = lfs & ~((crs << 1) | before);
        before = crs >> 31;
        if (bare == 0) {
            _mm256_storeu_si256((__m256i *)out, v);
            out += 32;
            continue;
        }
        unsigned int start = 0;
        do {
            unsigned int at = (unsigned int)__builtin_ctz(bare);
            bare &= bare - 1;
            _mm256_storeu_si256((__m256i *)out, _mm256_loadu_si256((const __m256i *)(p + i + start)));
            out += at - start;
            *out++ = '\r';
            start = at;
        } while (bare);
        _mm256_storeu_si256((__m256i *)out, _mm256_loadu_si256((const __m256i *)(p + i + start)));
        out += 32 - start;
    }
    *prevCR = before;
    *to = out;
    return i;
}
#endif

static void convert(const unsigned char *p, Py_ssize_t n, int afterCR, unsigned char *out,
                    int wide);

#ifdef OCTETS_AVX2
/* What the one pass (convertFused) carries from one block to the next. */
typedef struct {
    __m256i high;          /* the octets or'ed: 8-bit where a high bit is set */
    __m256i least;         /* the least octet at each place: NUL where one is 0 */
    uint64_t before;       /* the octet before the next block is a CR */
    unsigned int found;    /* FACT_BARE_CR where a CR is followed by no LF */
} Fused;

/*
 * One block of 64 octets at q converted to out, of which the first length
 * are the message's (valid: their bits); returns where out ends.  The 64
 * octets after the block must be readable, and out must have room for 192
 * octets: the block and its CRs (128 at most) and the 64 a store reaches
 * beyond.
 *
 * Both halves are stored first; then at each LF that needs a CR, the CR is
 * written where the LF was and the rest of the block stored again one
 * octet further (each store overwrites what the one before wrote beyond).
 * A block with no CR, and no CR before it, takes no CR masks: LF-only text.
 */
AVX2 static INLINE unsigned char *
fusedBlock(const unsigned char *q, uint64_t valid, unsigned int length, unsigned char *out,
           Fused *f)
{
    const __m256i lf = _mm256_set1_epi8('\n');
    const __m256i cr = _mm256_set1_epi8('\r');
    __m256i a = _mm256_loadu_si256((const __m256i *)q);
    __m256i b = _mm256_loadu_si256((const __m256i *)(q + 32));
    f->high = _mm256_or_si256(f->high, _mm256_or_si256(a, b));
    f->least = _mm256_min_epu8(f->least, _mm256_min_epu8(a, b));
    uint64_t lfs = ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(a, lf))
                    | ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(b, lf)) << 32))
        & valid;
    __m256i crA = _mm256_cmpeq_epi8(a, cr), crB = _mm256_cmpeq_epi8(b, cr);
    uint64_t bare = lfs;
    __m256i anyCR = _mm256_or_si256(crA, crB);
    if (f->before | (uint64_t)!_mm256_testz_si256(anyCR, anyCR)) {
        uint64_t crs = ((uint64_t)(uint32_t)_mm256_movemask_epi8(crA)
                        | ((uint64_t)(uint32_t)_mm256_movemask_epi8(crB) << 32))
            & valid;
        uint64_t crBefore = (crs << 1) | f->before;
        bare = lfs & ~crBefore;
        if (crBefore & ~lfs & valid) {
            f->found |= FACT_BARE_CR;
        }
        f->before = (crs >> (length - 1)) & 1;
    }
    _mm256_storeu_si256((__m256i *)out, a);
    _mm256_storeu_si256((__m256i *)(out + 32), b);
    unsigned int added = 0;
    while (bare) {
        unsigned int at = (unsigned int)__builtin_ctzll(bare);
        bare &= bare - 1;
        unsigned char *to = out + at + added;
        *to = '\r';
        added++;
        _mm256_storeu_si256((__m256i *)(to + 1), _mm256_loadu_si256((const __m256i *)(q + at)));
        _mm256_storeu_si256((__m256i *)(to + 33),
                            _mm256_loadu_si256((const __m256i *)(q + at + 32)));
    }
    return out + length + added;
}

/*
 * The one pass where the AVX2 steps found an LF that needs a CR at i:
 * p[0..i) copied as it is, then from i the facts found and the octets
 * converted in the same blocks of 64 (fusedBlock), the last octets (fewer
 * than 128) from a copy padded with octets that are none of LF, CR, NUL or
 * 8-bit; into a bytes object sized by a guess (an LF a CR in 16 octets,
 * plus what the stores reach beyond), trimmed at the end.  When that room
 * runs short, the rest is counted first (findFacts's steps), the object
 * sized exactly, and the rest converted (convert).  s: the facts of
 * p[0..i), then of all of p.
 *
 * The version before (a step of 32 octets, the CR masks of every step, a
 * store per piece between LFs, the last octets one at a time) took 1.31
 * instructions an octet of the realistic corpus's messages.
 */
AVX2 static PyObject *
convertFused(const unsigned char *p, Py_ssize_t n, Py_ssize_t i, Scan *s)
{
    Py_ssize_t room = n + (n - i) / 16 + 448;
    PyObject *result = PyBytes_FromStringAndSize(NULL, room);
    if (result == NULL) {
        return NULL;
    }
    unsigned char *start = (unsigned char *)PyBytes_AS_STRING(result);
    unsigned char *out = start + i, *end = start + room;
    memcpy(start, p, (size_t)i);
    Fused f = {_mm256_setzero_si256(), _mm256_set1_epi8((char)0xff), s->prevCR, 0};
    /* Four blocks a turn while there is room for them (each takes 128
     * octets at most and needs 192), then one. */
    for (; i + 320 <= n && end - out >= 192 + 3 * 128; i += 256) {
        out = fusedBlock(p + i, ~(uint64_t)0, 64, out, &f);
        out = fusedBlock(p + i + 64, ~(uint64_t)0, 64, out, &f);
        out = fusedBlock(p + i + 128, ~(uint64_t)0, 64, out, &f);
        out = fusedBlock(p + i + 192, ~(uint64_t)0, 64, out, &f);
    }
    for (; i + 128 <= n && end - out >= 192; i += 64) {
        out = fusedBlock(p + i, ~(uint64_t)0, 64, out, &f);
    }
    Py_ssize_t left = n - i;
    if (left < 128 && end - out >= 2 * left + 192) {
        /* Each block needs 192 octets of room: the first from out, the
         * second from where the first ends, 2 * 64 further at most. */
        unsigned char tail[256];
        memset(tail, 'a', sizeof tail);
        memcpy(tail, p + i, (size_t)left);
        for (Py_ssize_t t = 0; t < left; t += 64) {
            unsigned int length = (unsigned int)(left - t < 64 ? left - t : 64);
            uint64_t valid = length == 64 ? ~(uint64_t)0 : (((uint64_t)1 << length) - 1);
            out = fusedBlock(tail + t, valid, length, out, &f);
        }
        i = n;
    }
    const __m256i zero = _mm256_setzero_si256();
    s->facts |= f.found | FACT_BARE_LF | (_mm256_movemask_epi8(f.high) ? FACT_EIGHT_BIT : 0)
        | (_mm256_movemask_epi8(_mm256_cmpeq_epi8(f.least, zero)) ? FACT_NUL : 0);
    Py_ssize_t done = out - start, size = done;
    Scan rest = {0, 0, (unsigned int)f.before};
    if (i < n) {
        Py_ssize_t j = scanAVX2(p, i, n, &rest, 0);
        j = scanSSE2(p, j, n, &rest);
        scanOctets(p, j, n, &rest);
        size = done + (n - i) + rest.bareLF;
    }
    if (size != room) {
        if (_PyBytes_Resize(&result, size) < 0) {
            return NULL;
        }
        start = (unsigned char *)PyBytes_AS_STRING(result);
    }
    if (i < n) {
        convert(p + i, n - i, (int)f.before, start + done, 1);
    }
    s->facts |= rest.facts;
    s->prevCR = rest.prevCR;
    return result;
}
#endif

static void
convert(const unsigned char *p, Py_ssize_t n, int afterCR, unsigned char *out, int wide)
{
    Py_ssize_t i = 0;
    unsigned int prevCR = (unsigned int)afterCR;
    (void)wide;
#ifdef OCTETS_AVX2
    if (wide && haveAVX2) {
        i = convertAVX2(p, i, n, &prevCR, &out);
    }
#endif
#ifdef OCTETS_SSE2
    const __m128i lf = _mm_set1_epi8('\n');
    const __m128i cr = _mm_set1_epi8('\r');
    for (; i + 32 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
        unsigned int lfs = (unsigned int)_mm_movemask_epi8(_mm_cmpeq_epi8(v, lf));
        unsigned int crs = (unsigned int)_mm_movemask_epi8(_mm_cmpeq_epi8(v, cr));
        unsigned int bare = lfs & ~((crs << 1) | prevCR);
        prevCR = crs >> 15;
        if (bare == 0) {
            _mm_storeu_si128((__m128i *)out, v);
            out += 16;
            continue;
        }
        unsigned int start = 0;
        do {
            unsigned int at = (unsigned int)__builtin_ctz(bare);
            bare &= bare - 1;
            _mm_storeu_si128((__m128i *)out, _mm_loadu_si128((const __m128i *)(p + i + start)));
            out += at - start;
            *out++ = '\r';
            start = at;
        } while (bare);
        _mm_storeu_si128((__m128i *)out, _mm_loadu_si128((const __m128i *)(p + i + start)));
        out += 16 - start;
    }
#endif
    for (; i < n; i++) {
        unsigned char c = p[i];
        if (c == '\n' && !prevCR) {
            *out++ = '\r';
        }
        *out++ = c;
        prevCR = (c == '\r');
    }
}

PyDoc_STRVAR(crlfAndFacts_doc,
"crlfAndFacts(data, afterCR=False, last=True) -> (converted, facts)\n\n"
"data with a CR before every LF not preceded by one (data itself when no\n"
"LF needs one), and the facts found on the way.  See\n"
"imapmig.mail.octets.crlfAndFacts.");

PyDoc_STRVAR(crlfAndFactsBaseline_doc,
"crlfAndFactsBaseline(data, afterCR=False, last=True) -> (converted, facts)\n\n"
"crlfAndFacts without its AVX2 steps (SSE2 on x86-64, else octet by\n"
"octet), for the tests: what a processor without AVX2 runs.");

/*
 * p[0..n) converted, the octet before p[0] a CR when afterCR; its facts in
 * *facts.  When no LF needs a CR the result is data itself (uncopied) if
 * data is given, else a new bytes object holding p[0..n).
 */
static PyObject *
convertOctets(PyObject *data, const unsigned char *p, Py_ssize_t n, int afterCR, int last,
              int wide, unsigned int *facts)
{
    Py_ssize_t fuseAt;
    Scan s = findFacts(p, n, afterCR, wide, &fuseAt);
    PyObject *converted;
#ifdef OCTETS_AVX2
    if (fuseAt >= 0) {
        converted = convertFused(p, n, fuseAt, &s);
        if (converted == NULL) {
            return NULL;
        }
    }
    else
#endif
    if (s.bareLF == 0) {
        converted = data != NULL ? Py_NewRef(data)
                                 : PyBytes_FromStringAndSize((const char *)p, n);
        if (converted == NULL) {
            return NULL;
        }
    }
    else {
        if (s.bareLF > PY_SSIZE_T_MAX - n) {
            return PyErr_NoMemory();
        }
        converted = PyBytes_FromStringAndSize(NULL, n + s.bareLF);
        if (converted == NULL) {
            return NULL;
        }
        convert(p, n, afterCR, (unsigned char *)PyBytes_AS_STRING(converted), wide);
    }
    *facts = s.facts;
    if (s.prevCR) {
        *facts |= last ? FACT_BARE_CR : FACT_ENDS_CR;
    }
    return converted;
}

static PyObject *
crlfAndFactsOf(PyObject *const *args, Py_ssize_t nargs, int wide)
{
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "crlfAndFacts() takes 1 to 3 positional arguments");
        return NULL;
    }
    PyObject *data = args[0];
    if (!PyBytes_Check(data)) {
        PyErr_Format(PyExc_TypeError, "crlfAndFacts() needs bytes, not %.100s",
                     Py_TYPE(data)->tp_name);
        return NULL;
    }
    int afterCR = 0, last = 1;
    if (nargs > 1 && (afterCR = PyObject_IsTrue(args[1])) < 0) {
        return NULL;
    }
    if (nargs > 2 && (last = PyObject_IsTrue(args[2])) < 0) {
        return NULL;
    }
    unsigned int facts;
    PyObject *converted = convertOctets(data, (const unsigned char *)PyBytes_AS_STRING(data),
                                        PyBytes_GET_SIZE(data), afterCR, last, wide, &facts);
    if (converted == NULL) {
        return NULL;
    }
    PyObject *result = PyTuple_New(2);
    PyObject *found = PyLong_FromLong((long)facts);
    if (result == NULL || found == NULL) {
        Py_XDECREF(result);
        Py_XDECREF(found);
        Py_DECREF(converted);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, converted);
    PyTuple_SET_ITEM(result, 1, found);
    return result;
}

/* The facts of a body not looked at (imapmig.mail.octets.UNKNOWN). */
#define FACT_UNKNOWN 128

/* A buffer every file of one readListed call is read into, grown as
 * needed: a small message's octets stay in the cache from the read to the
 * conversion, and no buffer is allocated per file but its body. */
typedef struct {
    unsigned char *octets;
    size_t room;
} Scratch;

/* Room for wanted octets in the scratch buffer; 0 when there is no memory
 * for them (the GIL need not be held). */
static int
growScratch(Scratch *scratch, size_t wanted)
{
    if (scratch->room < wanted) {
        unsigned char *grown = PyMem_RawRealloc(scratch->octets, wanted);
        if (grown == NULL) {
            return 0;
        }
        scratch->octets = grown;
        scratch->room = wanted;
    }
    return 1;
}

/*
 * The file name relative to dirFd of size octets (0: not listed, its
 * status says, up to largest), read in one
 * read(2) of one octet more into the scratch buffer, converted and its
 * facts found (convertOctets) into a bytes object of its final size.
 * Py_None, with no error set, when it is not read so: a name that is not
 * a str or holds a NUL, a file that cannot be opened (gone, a symbolic
 * link, a socket) or read (a FIFO, a directory), or that has another size
 * than listed (the caller's slower path says why).  The GIL is released
 * once a file, around its open, read and close.
 */
static PyObject *
readOne(int dirFd, PyObject *name, Py_ssize_t size, Py_ssize_t largest, int flags,
        Scratch *scratch, unsigned int *facts)
{
    if (!PyUnicode_Check(name)) {
        Py_RETURN_NONE;
    }
    PyObject *encoded;
    const char *path;
    int named = fsName(name, &encoded, &path);
    if (named < 0) {
        return NULL;
    }
    if (named == 0 || (size_t)size >= (size_t)PY_SSIZE_T_MAX) {
        Py_XDECREF(encoded);
        Py_RETURN_NONE;
    }
    ssize_t got = -1;
    int grown = 1;
    Py_BEGIN_ALLOW_THREADS
    int fd = openat(dirFd, path, flags);
    if (fd >= 0) {
        struct stat status;
        if (size == 0 && fstat(fd, &status) == 0 && S_ISREG(status.st_mode)
            && 0 < status.st_size && status.st_size <= largest) {
            /* Not listed: its status gives it (a FIFO or other special file
             * put in place of the message is not read). */
            size = (Py_ssize_t)status.st_size;
        }
        if (size > 0 && (grown = growScratch(scratch, (size_t)size + 1))) {
            got = read(fd, scratch->octets, (size_t)size + 1);
        }
        close(fd);
    }
    Py_END_ALLOW_THREADS
    Py_XDECREF(encoded);
    if (!grown) {
        return PyErr_NoMemory();
    }
    if (got != (ssize_t)size) {
        /* It grew (an octet more than expected), shrank, is not a regular
         * file at all (a FIFO put in its place reads as empty), or could
         * not be opened or read. */
        Py_RETURN_NONE;
    }
    return convertOctets(NULL, scratch->octets, size, 0, 1, 1, facts);
}

static PyObject *attrKey = NULL, *attrSize = NULL;

/* An int object as a C int; -1 with an error set when it is none. */
static int
asInt(PyObject *number)
{
    long value = PyLong_AsLong(number);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (value < INT_MIN || value > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "Python int too large to convert to C int");
        return -1;
    }
    return (int)value;
}

/*
 * The body of one message for readListed: a new reference to its bytes
 * (facts in *facts), Py_None when its file is not read by readOne, NULL on
 * an error.
 */
static PyObject *
readMessage(PyObject *message, PyObject *locate, PyObject *descriptors, Py_ssize_t largest,
            int flags, Scratch *scratch, unsigned int *facts)
{
    PyObject *sizeObject = PyObject_GetAttr(message, attrSize);
    if (sizeObject == NULL) {
        return NULL;
    }
    Py_ssize_t size = PyLong_AsSsize_t(sizeObject);
    Py_DECREF(sizeObject);
    if (size == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            return NULL;
        }
        /* A size no Py_ssize_t holds (a Maildir name's ",S=" of 20 digits
         * or more): beyond largest, not read here, as the Python twin's
         * 0 <= size <= largest leaves it. */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (size < 0 || size > largest) {
        Py_RETURN_NONE;
    }
    PyObject *key = PyObject_GetAttr(message, attrKey);
    if (key == NULL) {
        return NULL;
    }
    PyObject *located = PyObject_CallOneArg(locate, key);
    Py_DECREF(key);
    if (located == NULL) {
        return NULL;
    }
    PyObject *body = NULL;
    /* (index into descriptors, name, None when a regular file) */
    if (!PyTuple_Check(located) || PyTuple_GET_SIZE(located) != 3
        || PyTuple_GET_ITEM(located, 2) != Py_None) {
        body = Py_NewRef(Py_None);
        goto done;
    }
    Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(located, 0));
    if (index == -1 && PyErr_Occurred()) {
        goto done;
    }
    PyObject *descriptor = (index >= 0 && index < PyList_GET_SIZE(descriptors))
        ? PyList_GET_ITEM(descriptors, index) : Py_None;
    if (descriptor == Py_None) {
        body = Py_NewRef(Py_None);
        goto done;
    }
    int dirFd = asInt(descriptor);
    if (dirFd == -1 && PyErr_Occurred()) {
        goto done;
    }
    body = readOne(dirFd, PyTuple_GET_ITEM(located, 1), size, largest, flags, scratch, facts);
done:
    Py_DECREF(located);
    return body;
}

PyDoc_STRVAR(readListed_doc,
"readListed(messages, locate, descriptors, largest, flags, notRead, bodies, facts)\n"
"-> missed\n\n"
"Read the listed files of messages, in order, as\n"
"imapmig.sources.messagefile.readListedFile does each, into bodies (a list)\n"
"and their facts into facts (a bytearray); notRead and UNKNOWN where a file\n"
"is not read so.  Returns how many were not.  See\n"
"imapmig.sources.messagefile.readListedFiles.");

static PyObject *
readListed(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "readListed() takes 8 positional arguments");
        return NULL;
    }
    PyObject *locate = args[1], *descriptors = args[2], *notRead = args[5], *bodies = args[6],
             *found = args[7];
    if (!PyList_Check(descriptors) || !PyList_Check(bodies) || !PyByteArray_Check(found)) {
        PyErr_SetString(PyExc_TypeError,
                        "readListed() needs a list of descriptors, a list and a bytearray");
        return NULL;
    }
    Py_ssize_t largest = PyLong_AsSsize_t(args[3]);
    int flags = asInt(args[4]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (attrKey == NULL) {
        attrKey = PyUnicode_InternFromString("key");
        attrSize = PyUnicode_InternFromString("size");
        if (attrKey == NULL || attrSize == NULL) {
            return NULL;
        }
    }
    PyObject *messages = PySequence_Fast(args[0], "readListed() needs a sequence of messages");
    if (messages == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(messages), missed = 0, start, i = 0;
    PyObject **items = PySequence_Fast_ITEMS(messages);
    Scratch scratch = {NULL, 0};
    start = PyByteArray_GET_SIZE(found);
    if (PyByteArray_Resize(found, start + count) < 0) {
        goto fail;
    }
    for (; i < count; i++) {
        unsigned int facts = FACT_UNKNOWN;
        PyObject *body = readMessage(items[i], locate, descriptors, largest, flags, &scratch,
                                     &facts);
        if (body == NULL) {
            goto fail;
        }
        if (body == Py_None) {
            Py_SETREF(body, Py_NewRef(notRead));
            missed++;
            facts = FACT_UNKNOWN;
        }
        int appended = PyList_Append(bodies, body);
        Py_DECREF(body);
        if (appended < 0) {
            goto fail;
        }
        PyByteArray_AS_STRING(found)[start + i] = (char)facts;
    }
    PyMem_RawFree(scratch.octets);
    Py_DECREF(messages);
    return PyLong_FromSsize_t(missed);
fail:
    PyMem_RawFree(scratch.octets);
    Py_DECREF(messages);
    if (PyByteArray_GET_SIZE(found) > start + i) {
        /* A fact for each body appended, as before the error. */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (PyByteArray_Resize(found, start + i) < 0) {
            PyErr_Clear();
        }
        PyErr_Restore(type, value, traceback);
    }
    return NULL;
}

PyDoc_STRVAR(withInternalDate_doc,
"withInternalDate(prefix, when) -> bytes\n\n"
"prefix followed by when as an RFC 3501 date-time with its quotes.  See\n"
"imapmig.mail.message.withInternalDatePython.");

static const char monthNames[12][4] = {
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
};

/* Two decimal digits of 0 <= n < 100 at out. */
static INLINE void
twoDigits(char *out, int n)
{
    out[0] = (char)('0' + n / 10);
    out[1] = (char)('0' + n % 10);
}

/*
 * The offset of when from UTC in whole minutes into *minutes, as
 * formatInternalDate finds it (its seconds truncated, then floored to
 * minutes); 0 for a naive date or UTC, which takes no call.  -1 with an
 * error set when it cannot be had.
 */
static int
offsetMinutes(PyObject *when, long *minutes)
{
    PyObject *zone = PyDateTime_DATE_GET_TZINFO(when);
    *minutes = 0;
    if (zone == Py_None || zone == PyDateTime_TimeZone_UTC) {
        return 0;
    }
    PyObject *offset = PyObject_CallMethod(when, "utcoffset", NULL);
    if (offset == NULL) {
        return -1;
    }
    if (offset == Py_None) {
        Py_DECREF(offset);
        return 0;
    }
    if (!PyDelta_Check(offset)) {
        Py_DECREF(offset);
        PyErr_SetString(PyExc_TypeError, "utcoffset() gave no timedelta");
        return -1;
    }
    long long micro = ((long long)PyDateTime_DELTA_GET_DAYS(offset) * 86400
                       + PyDateTime_DELTA_GET_SECONDS(offset)) * 1000000
        + PyDateTime_DELTA_GET_MICROSECONDS(offset);
    Py_DECREF(offset);
    long long seconds = micro / 1000000;
    *minutes = (long)(seconds >= 0 ? seconds / 60 : -((-seconds + 59) / 60));
    return 0;
}

static PyObject *
withInternalDate(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "withInternalDate() takes 2 positional arguments");
        return NULL;
    }
    PyObject *prefix = args[0], *when = args[1];
    if (!PyBytes_Check(prefix) || !PyDateTime_Check(when)) {
        PyErr_SetString(PyExc_TypeError, "withInternalDate() needs bytes and a datetime");
        return NULL;
    }
    long minutes;
    if (offsetMinutes(when, &minutes) < 0) {
        return NULL;
    }
    /* "DD-Mon-YYYY HH:MM:SS +0000" with its quotes: 28 octets. */
    Py_ssize_t size = PyBytes_GET_SIZE(prefix);
    PyObject *result = PyBytes_FromStringAndSize(NULL, size + 28);
    if (result == NULL) {
        return NULL;
    }
    char *out = PyBytes_AS_STRING(result);
    memcpy(out, PyBytes_AS_STRING(prefix), (size_t)size);
    out += size;
    int year = PyDateTime_GET_YEAR(when);
    out[0] = '"';
    twoDigits(out + 1, PyDateTime_GET_DAY(when));
    out[3] = '-';
    memcpy(out + 4, monthNames[PyDateTime_GET_MONTH(when) - 1], 3);
    out[7] = '-';
    twoDigits(out + 8, year / 100);
    twoDigits(out + 10, year % 100);
    out[12] = ' ';
    twoDigits(out + 13, PyDateTime_DATE_GET_HOUR(when));
    out[15] = ':';
    twoDigits(out + 16, PyDateTime_DATE_GET_MINUTE(when));
    out[18] = ':';
    twoDigits(out + 19, PyDateTime_DATE_GET_SECOND(when));
    out[21] = ' ';
    out[22] = minutes < 0 ? '-' : '+';
    minutes = minutes < 0 ? -minutes : minutes;
    /* A tzinfo's offset is less than a day (datetime checks it). */
    twoDigits(out + 23, (int)(minutes / 60 % 100));
    twoDigits(out + 25, (int)(minutes % 60));
    out[27] = '"';
    return result;
}

static PyObject *
crlfAndFacts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    return crlfAndFactsOf(args, nargs, 1);
}

static PyObject *
crlfAndFactsBaseline(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    return crlfAndFactsOf(args, nargs, 0);
}

static PyMethodDef octetsMethods[] = {
    {"crlfAndFacts", (PyCFunction)(void (*)(void))crlfAndFacts, METH_FASTCALL, crlfAndFacts_doc},
    {"crlfAndFactsBaseline", (PyCFunction)(void (*)(void))crlfAndFactsBaseline, METH_FASTCALL,
     crlfAndFactsBaseline_doc},
    {"readListed", (PyCFunction)(void (*)(void))readListed, METH_FASTCALL, readListed_doc},
    {"withInternalDate", (PyCFunction)(void (*)(void))withInternalDate, METH_FASTCALL,
     withInternalDate_doc},
    {NULL, NULL, 0, NULL},
};

static int
octetsExec(PyObject *module)
{
#ifdef OCTETS_AVX2
    __builtin_cpu_init();
    haveAVX2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
#endif
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) {
        return -1;
    }
    return PyModule_AddIntConstant(module, "AVX2", haveAVX2);
}

static PyModuleDef_Slot octetsSlots[] = {
    {Py_mod_exec, (void *)octetsExec},
    {0, NULL},
};

static struct PyModuleDef octetsModule = {
    PyModuleDef_HEAD_INIT,
    "imapmig.mail._octets",
    "The one pass over a message's octets in C (see imapmig.mail.octets).",
    0,
    octetsMethods,
    octetsSlots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__octets(void)
{
    return PyModuleDef_Init(&octetsModule);
}
