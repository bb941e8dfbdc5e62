/*
 * imapmig.mail._octets's conversion of a message's octets to CRLF line
 * ends and the facts found on the way (convertOctets; see _octets.c and
 * _crlf.h), apart from the module and its reading of files.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include "_crlf.h"

/* OCTETS_PORTABLE: octet by octet only, as on a processor other than
 * x86-64 (tests.test_mail_octets builds it so to test that path). */
#if defined(__SSE2__) && !defined(OCTETS_PORTABLE)
#include <emmintrin.h>
#define OCTETS_SSE2 1
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(OCTETS_PORTABLE)
#include <immintrin.h>
#define OCTETS_AVX2 1
#define AVX2 __attribute__((target("avx2,popcnt")))
#endif

/* Whether this processor has AVX2 (set by crlfInit). */
static int haveAVX2 = 0;

int
crlfInit(void)
{
#ifdef OCTETS_AVX2
    __builtin_cpu_init();
    haveAVX2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
#endif
    return haveAVX2;
}

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

/*
 * p[0..n) converted, the octet before p[0] a CR when afterCR; its facts in
 * *facts.  When no LF needs a CR the result is data itself (uncopied) if
 * data is given, else a new bytes object holding p[0..n).
 */
PyObject *
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
