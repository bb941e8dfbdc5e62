/*
 * imapmig.mail._octets's conversion of a message's octets to CRLF line
 * ends and the facts found on the way (convertOctets, _crlf.h), apart from
 * the module and its reading of files (_octets.c).  The same function as
 * imapmig.mail.octets.crlfAndFactsPython: every LF not preceded by a CR
 * gets one, and what was found of the octets (NUL, 8-bit, bare CR, bare
 * LF, a CR at the end of a piece) comes back as bit flags.
 *
 * A first pass, read-only (findFacts), finds the facts and counts the LFs
 * that need a CR, 32 octets a step where the processor has AVX2 (checked
 * when the module is imported), else 16 (SSE2, which every x86-64 has);
 * the NUL and 8-bit octets are or'ed into two vectors looked at once at
 * the end, and only a step holding a CR or an LF is looked at further.  A
 * body that needs no CR (CRLF throughout, or no LF at all) is returned as
 * the same object, uncopied.
 *
 * The first pass stops at the first LF that needs a CR, and from there
 * the rest is converted in blocks of 64 as if it held no CR
 * (convertLifted: what a Maildir's LF-only message holds), each block
 * stored whole and, at each LF in it, a CR and the rest of its half
 * stored one octet further; a CR found on the way (or the room guessed for
 * the output short) voids that, and the body is converted by the two
 * passes: the first, not stopped, then one that copies it into a bytes
 * object of the final size, adding the CRs (convert).  Without SSE2
 * (aarch64 and the rest: OCTETS_PORTABLE) the first pass stops at the
 * first LF (memchr) if it needs a CR, and the blocks take eight octets a
 * step in a 64-bit word (liftWords); the two passes go one octet a step.
 *
 * The first version (fe1a9e9) took 16 octets a step everywhere: about 3.9
 * instructions an octet; the one before this file's (convertFused,
 * 5f8f8ca) 0.75 with AVX2, 3.06 with SSE2 and 32.9 octet by octet of the
 * realistic corpus's LF-only messages; this one 0.51, 1.13 and 3.7
 * (bench/results/cpu.md, "Round 5").
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include "_crlf.h"

/* OCTETS_PORTABLE: no SSE2 or AVX2, as on a processor other than x86-64
 * (tests.test_mail_octets builds it so to test that path). */
#if defined(__SSE2__) && !defined(OCTETS_PORTABLE)
#include <emmintrin.h>
#define OCTETS_SSE2 1
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(OCTETS_PORTABLE)
#include <immintrin.h>
#define OCTETS_AVX2 1
#define AVX2 __attribute__((target("avx2,popcnt,bmi")))
#endif
/* Without SSE2 (aarch64, OCTETS_PORTABLE), eight octets a step in a
 * 64-bit word where the octets' order in it is known. */
#if !defined(OCTETS_SSE2) && defined(__GNUC__) && defined(__BYTE_ORDER__) \
    && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define OCTETS_WORDS 1
#endif
#if defined(OCTETS_SSE2) || defined(OCTETS_WORDS)
#define OCTETS_LIFT 1
#endif

/* Whether this processor has AVX2 (set by crlfInit). */
static int haveAVX2 = 0;

int
crlfInit(void)
{
#ifdef OCTETS_AVX2
    __builtin_cpu_init();
    haveAVX2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt")
        && __builtin_cpu_supports("bmi");
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
 * notes a CR followed by something else than LF; with stop, returns 1
 * instead, s untouched, where an LF has no CR.
 */
static INLINE int
lineEnds(uint32_t lfs, uint32_t crs, unsigned int w, Scan *s, int popcnt, int stop)
{
    uint64_t crBefore = ((uint64_t)crs << 1) | s->prevCR;
    uint32_t bare = lfs & ~(uint32_t)crBefore;
    if (stop && bare) {
        return 1;
    }
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
    return 0;
}

#ifdef OCTETS_SSE2
/*
 * 16 octets a step, from i while 16 are left; returns where it stopped:
 * with stop, before the first step holding an LF that needs a CR.
 */
static Py_ssize_t
scanSSE2(const unsigned char *p, Py_ssize_t i, Py_ssize_t n, Scan *s, int stop)
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
            if (lineEnds(lfs, crs, 16, s, 0, stop)) {
                break;
            }
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
            if (lineEnds(lfs, crs, 32, s, 1, stop)) {
                break;
            }
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
 * it), then 16 with SSE2 (every x86-64 has it), then one.  With stop, it
 * stops at the first step holding an LF that needs a CR, where the rest
 * is looked at as it is converted (convertLifted): *fuseAt.
 */
static Scan
findFacts(const unsigned char *p, Py_ssize_t n, int afterCR, int wide, int stop,
          Py_ssize_t *fuseAt)
{
    Scan s = {0, 0, (unsigned int)afterCR};
    Py_ssize_t i = 0;
    (void)wide;
    (void)stop;
    *fuseAt = -1;
#ifdef OCTETS_AVX2
    if (wide && haveAVX2) {
        i = scanAVX2(p, i, n, &s, stop);
        if (stop && i + 32 <= n) {
            *fuseAt = i;
            return s;
        }
    }
#endif
#ifdef OCTETS_SSE2
    /* (Each a copy with stop fixed: the steps of a body in CRLF are not
     * slowed by the test.) */
    i = stop ? scanSSE2(p, i, n, &s, 1) : scanSSE2(p, i, n, &s, 0);
    if (stop && i + 16 <= n) {
        *fuseAt = i;
        return s;
    }
#elif defined(OCTETS_WORDS)
    /* Stopped at the first LF when it needs a CR (the C library's memchr
     * is quick everywhere); a body whose first LF has one, the two
     * passes. */
    const unsigned char *first = stop && n > 0 ? memchr(p, '\n', (size_t)n) : NULL;
    if (first != NULL && (first == p ? !afterCR : first[-1] != '\r')) {
        scanOctets(p, 0, first - p, &s);
        *fuseAt = first - p;
        return s;
    }
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

/*
 * The one pass where the first found an LF that needs a CR at i
 * (convertLifted): from there the octets are converted in blocks of 64 as
 * if they held no CR at all (what a Maildir's LF-only message holds), the
 * facts found on the way, and whether that was so: a body with a CR after
 * i is converted again by the two passes (findFacts, convert).
 *
 * Each block is stored whole; then at each LF (its bit in the block's
 * mask), a CR is written where the LF went and the rest of the block
 * stored again one octet further from the LF on, each store overwriting
 * what the one before wrote beyond the block.  So a block costs a few
 * instructions, and an LF a few more, however the LFs fall.  A block
 * reads the 64 octets after it (its last LF's store), and writes up to
 * 191 octets from where its output starts: the loop stops short of either
 * end (limit, end).
 *
 * What a block finds goes into *found: LIFT_CR where it saw a CR (the
 * result is void), FACT_EIGHT_BIT, FACT_NUL and LIFT_NUL_UNSURE where the
 * AVX2 steps' one signed minimum of all octets (below 0: 8-bit; 0: NUL,
 * unless 8-bit octets hid it) leaves the NUL unknown.
 */
#define LIFT_CR 0x100
#define LIFT_NUL_UNSURE 0x200

/*
 * How many blocks of 64 from i can be converted before limit, and before
 * the room left (end - out) could run short: each block writes 128 octets
 * at most, and up to 160 from where its output starts.
 */
static INLINE Py_ssize_t
blocksFitting(Py_ssize_t i, Py_ssize_t limit, const unsigned char *out,
              const unsigned char *end)
{
    Py_ssize_t blocks = (limit - i) / 64, room = end - out;
    if (room < 192) {
        return 0;
    }
    Py_ssize_t fit = (room - 192) / 128 + 1;
    return blocks < fit ? blocks : fit;
}

#ifdef OCTETS_AVX2
/* The place of the lowest bit set in m (not 0): tzcnt, without the xor
 * GCC puts before it for processors where its output register is read. */
AVX2 static INLINE size_t
lowestBit(uint64_t m)
{
    uint64_t at;
    __asm__("tzcnt %q1, %0" : "=r"(at) : "r"(m) : "cc");
    return (size_t)at;
}

AVX2 static Py_ssize_t
liftAVX2(const unsigned char *p, Py_ssize_t i, Py_ssize_t limit, unsigned char **to,
         const unsigned char *end, unsigned int *found)
{
    const __m256i lf = _mm256_set1_epi8('\n');
    const __m256i cr = _mm256_set1_epi8('\r');
    const __m256i zero = _mm256_setzero_si256();
    __m256i least = _mm256_set1_epi8(1), crs = zero;
    unsigned char *out = *to;
    for (Py_ssize_t blocks; (blocks = blocksFitting(i, limit, out, end)) > 0;) {
        const unsigned char *q = p + i, *last = q + 64 * blocks;
        for (; q < last; q += 64) {
            __m256i a = _mm256_loadu_si256((const __m256i *)q);
            __m256i b = _mm256_loadu_si256((const __m256i *)(q + 32));
            least = _mm256_min_epi8(_mm256_min_epi8(a, b), least);
            crs = _mm256_or_si256(crs, _mm256_or_si256(_mm256_cmpeq_epi8(a, cr),
                                                       _mm256_cmpeq_epi8(b, cr)));
            uint64_t lfsA = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(a, lf));
            uint64_t lfsB = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(b, lf));
            /* Half a block stored, then at each of its LFs a CR and the
             * rest of the half one octet further (each store overwriting
             * what the one before wrote beyond its piece); then the other
             * half after the first's CRs.  (The empty asm keeps out one
             * register stepped at each LF, not a copy and a count.) */
            _mm256_storeu_si256((__m256i *)out, a);
            for (; lfsA; lfsA = _blsr_u64(lfsA)) {
                size_t at = lowestBit(lfsA);
                out[at] = '\r';
                _mm256_storeu_si256((__m256i *)(out + at + 1),
                                    _mm256_loadu_si256((const __m256i *)(q + at)));
                out++;
                __asm__("" : "+r"(out));
            }
            _mm256_storeu_si256((__m256i *)(out + 32), b);
            for (; lfsB; lfsB = _blsr_u64(lfsB)) {
                size_t at = lowestBit(lfsB);
                out[at + 32] = '\r';
                _mm256_storeu_si256((__m256i *)(out + at + 33),
                                    _mm256_loadu_si256((const __m256i *)(q + at + 32)));
                out++;
                __asm__("" : "+r"(out));
            }
            out += 64;
        }
        i += 64 * blocks;
    }
    unsigned int negative = (unsigned int)_mm256_movemask_epi8(least);
    unsigned int nul = (unsigned int)_mm256_movemask_epi8(_mm256_cmpeq_epi8(least, zero));
    *found |= (_mm256_testz_si256(crs, crs) ? 0 : LIFT_CR) | (negative ? FACT_EIGHT_BIT : 0)
        | (nul ? FACT_NUL : 0) | (negative && !nul ? LIFT_NUL_UNSURE : 0);
    *to = out;
    return i;
}
#endif

#ifdef OCTETS_SSE2
/* A quarter of a block, v (16 octets from q), as liftHalf. */
static INLINE void
liftQuarter(const unsigned char *q, __m128i v, uint32_t lfs, unsigned char **to)
{
    unsigned char *out = *to;
    _mm_storeu_si128((__m128i *)out, v);
    for (; lfs; lfs &= lfs - 1) {
        size_t at = (size_t)__builtin_ctz(lfs);
        out[at] = '\r';
        _mm_storeu_si128((__m128i *)(out + at + 1), _mm_loadu_si128((const __m128i *)(q + at)));
        out++;
    }
    *to = out + 16;
}

static Py_ssize_t
liftSSE2(const unsigned char *p, Py_ssize_t i, Py_ssize_t limit, unsigned char **to,
         const unsigned char *end, unsigned int *found)
{
    const __m128i lf = _mm_set1_epi8('\n');
    const __m128i cr = _mm_set1_epi8('\r');
    const __m128i zero = _mm_setzero_si128();
    __m128i least = _mm_set1_epi8(1), high = zero, crs = zero;
    unsigned char *out = *to;
    for (Py_ssize_t blocks; (blocks = blocksFitting(i, limit, out, end)) > 0;) {
        const unsigned char *q = p + i, *last = q + 64 * blocks;
        for (; q < last; q += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)q);
            __m128i b = _mm_loadu_si128((const __m128i *)(q + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(q + 32));
            __m128i d = _mm_loadu_si128((const __m128i *)(q + 48));
            high = _mm_or_si128(high, _mm_or_si128(_mm_or_si128(a, b), _mm_or_si128(c, d)));
            least = _mm_min_epu8(least, _mm_min_epu8(_mm_min_epu8(a, b), _mm_min_epu8(c, d)));
            crs = _mm_or_si128(crs, _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(a, cr), _mm_cmpeq_epi8(b, cr)),
                _mm_or_si128(_mm_cmpeq_epi8(c, cr), _mm_cmpeq_epi8(d, cr))));
            liftQuarter(q, a, (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(a, lf)), &out);
            liftQuarter(q + 16, b, (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(b, lf)), &out);
            liftQuarter(q + 32, c, (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(c, lf)), &out);
            liftQuarter(q + 48, d, (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(d, lf)), &out);
        }
        i += 64 * blocks;
    }
    *found |= (_mm_movemask_epi8(crs) ? LIFT_CR : 0)
        | (_mm_movemask_epi8(high) ? FACT_EIGHT_BIT : 0)
        | (_mm_movemask_epi8(_mm_cmpeq_epi8(least, zero)) ? FACT_NUL : 0);
    *to = out;
    return i;
}
#endif

#ifdef OCTETS_WORDS
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* The high bit of each octet of w that equals the octet of c (exact, no
 * borrow from one octet to the next). */
static INLINE uint64_t
octetsEqual(uint64_t w, uint64_t c)
{
    uint64_t x = w ^ c;
    return ~(((x & ~HIGHS) + ~HIGHS) | x) & HIGHS;
}

/* The blocks as liftSSE2's, eight octets a step in a word (the first
 * octet its lowest). */
static Py_ssize_t
liftWords(const unsigned char *p, Py_ssize_t i, Py_ssize_t limit, unsigned char **to,
          const unsigned char *end, unsigned int *found)
{
    uint64_t high = 0, nul = 0, crs = 0;
    unsigned char *out = *to;
    for (Py_ssize_t blocks; (blocks = blocksFitting(i, limit, out, end)) > 0;) {
        const unsigned char *q = p + i, *last = q + 64 * blocks;
        for (; q < last; q += 8) {
            uint64_t w, cr;
            memcpy(&w, q, 8);
            cr = w ^ (ONES * '\r');
            /* Whether a word holds a 0 (not where: a borrow may mark the
             * octet after one). */
            high |= w;
            nul |= (w - ONES) & ~w;
            crs |= (cr - ONES) & ~cr;
            uint64_t lfs = octetsEqual(w, ONES * '\n');
            memcpy(out, &w, 8);
            for (; lfs; lfs &= lfs - 1) {
                size_t at = (size_t)__builtin_ctzll(lfs) >> 3;
                out[at] = '\r';
                memcpy(out + at + 1, q + at, 8);
                out++;
            }
            out += 8;
        }
        i += 64 * blocks;
    }
    *found |= (crs & HIGHS ? LIFT_CR : 0) | (high & HIGHS ? FACT_EIGHT_BIT : 0)
        | (nul & HIGHS ? FACT_NUL : 0);
    *to = out;
    return i;
}
#endif

#ifdef OCTETS_LIFT
/* The blocks of p[i..limit): AVX2's, SSE2's or in words. */
static Py_ssize_t
lift(const unsigned char *p, Py_ssize_t i, Py_ssize_t limit, unsigned char **to,
     const unsigned char *end, unsigned int *found, int avx2)
{
    (void)avx2;
#ifdef OCTETS_AVX2
    if (avx2) {
        return liftAVX2(p, i, limit, to, end, found);
    }
#endif
#ifdef OCTETS_SSE2
    return liftSSE2(p, i, limit, to, end, found);
#else
    return liftWords(p, i, limit, to, end, found);
#endif
}

/*
 * p[0..n) converted where the first pass (findFacts, s) stopped at i, an
 * LF that needs a CR in the 16 or 32 octets from there: p[0..i) copied,
 * then the blocks (lift) of the rest while 128 octets are left, then the
 * rest (fewer than 128) from a copy padded with octets that are none of
 * LF, CR, NUL or 8-bit; into a bytes object sized by a guess (every
 * octet an LF for a small body, one in 8 for a larger), trimmed at the
 * end.  NULL and *redo where that does not hold (a CR from i on, or
 * before it; the guess short): the caller converts with the two passes.
 *
 * The version before (convertFused, 5f8f8ca) found the CRs of every block
 * and took its LFs' masks apart from them: 0.75 instructions an octet of
 * the realistic corpus's messages (callgrind).
 */
static PyObject *
convertLifted(const unsigned char *p, Py_ssize_t n, Py_ssize_t i, Scan *s, int avx2,
              int *redo)
{
    Py_ssize_t rest = n - i, from = i;
    *redo = 1;
    if (s->prevCR || n > PY_SSIZE_T_MAX / 4) {
        return NULL;
    }
    Py_ssize_t room = n + (rest <= 16384 ? rest : rest / 8) + 320;
    PyObject *result = PyBytes_FromStringAndSize(NULL, room);
    if (result == NULL) {
        *redo = 0;
        return NULL;
    }
    unsigned char *start = (unsigned char *)PyBytes_AS_STRING(result);
    unsigned char *out = start + i, *end = start + room;
    unsigned int found = 0;
    memcpy(start, p, (size_t)i);
    i = lift(p, i, n - 64, &out, end, &found, avx2);
    Py_ssize_t left = n - i;
    if (left < 128) {
        unsigned char tail[256];
        Py_ssize_t padded = (left + 63) & ~(Py_ssize_t)63;
        memcpy(tail, p + i, (size_t)left);
        memset(tail + left, 'a', sizeof tail - (size_t)left);
        if (lift(tail, 0, padded, &out, end, &found, avx2) == padded) {
            out -= padded - left;
            i = n;
        }
    }
    if (i < n || (found & LIFT_CR)) {
        Py_DECREF(result);
        return NULL;
    }
    *redo = 0;
    if ((found & LIFT_NUL_UNSURE) && !(found & FACT_NUL)
        && memchr(p + from, 0, (size_t)(n - from)) != NULL) {
        found |= FACT_NUL;
    }
    s->facts |= FACT_BARE_LF | (found & (FACT_NUL | FACT_EIGHT_BIT));
    if (_PyBytes_Resize(&result, out - start) < 0) {
        return NULL;
    }
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
 * p[0..n) converted by the two passes (s: findFacts's, not stopped): data
 * itself or a copy of p[0..n) where no LF needs a CR.
 */
static PyObject *
convertPassed(PyObject *data, const unsigned char *p, Py_ssize_t n, int afterCR, int wide,
              const Scan *s)
{
    if (s->bareLF == 0) {
        return data != NULL ? Py_NewRef(data) : PyBytes_FromStringAndSize((const char *)p, n);
    }
    if (s->bareLF > PY_SSIZE_T_MAX - n) {
        return PyErr_NoMemory();
    }
    PyObject *converted = PyBytes_FromStringAndSize(NULL, n + s->bareLF);
    if (converted != NULL) {
        convert(p, n, afterCR, (unsigned char *)PyBytes_AS_STRING(converted), wide);
    }
    return converted;
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
    Scan s = findFacts(p, n, afterCR, wide, 1, &fuseAt);
    PyObject *converted;
#ifdef OCTETS_LIFT
    if (fuseAt >= 0) {
        int redo;
        converted = convertLifted(p, n, fuseAt, &s, wide && haveAVX2, &redo);
        if (converted == NULL && redo) {
            /* A CR from fuseAt on (or just before), or the room guessed
             * short: the two passes. */
            s = findFacts(p, n, afterCR, wide, 0, &fuseAt);
            converted = convertPassed(data, p, n, afterCR, wide, &s);
        }
    }
    else
#endif
    {
        converted = convertPassed(data, p, n, afterCR, wide, &s);
    }
    if (converted == NULL) {
        return NULL;
    }
    *facts = s.facts;
    if (s.prevCR) {
        *facts |= last ? FACT_BARE_CR : FACT_ENDS_CR;
    }
    return converted;
}
