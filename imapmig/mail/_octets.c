/*
 * imapmig.mail._octets: the one pass over a message's octets (issue 31).
 *
 * crlfAndFacts(data, afterCR=False, last=True) -> (converted, facts)
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
 * into a bytes object of the final size, adding the CRs.  On x86-64 both
 * passes take 16 octets a step (SSE2, which every x86-64 has); elsewhere,
 * and for the last octets of a body, one octet a step.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#define OCTETS_SSE2 1
#endif

/* The facts (imapmig.mail.octets names them). */
#define FACT_NUL 1
#define FACT_EIGHT_BIT 2
#define FACT_BARE_CR 4
#define FACT_BARE_LF 8
#define FACT_ENDS_CR 16

/*
 * Octet by octet: the facts of p[i..n) and the LFs in it that need a CR.
 * *prevCR: whether the octet before p[i] is a CR (in and out).
 */
static void
scanOctets(const unsigned char *p, Py_ssize_t i, Py_ssize_t n, int *prevCR,
           unsigned int *facts, Py_ssize_t *bareLF)
{
    int cr = *prevCR;
    unsigned int found = 0;
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
    *prevCR = cr;
    *facts |= found;
    *bareLF += lfs;
}

/*
 * The first pass: the facts of p[0..n) and the number of LFs that need a
 * CR, the octet before p[0] being a CR when afterCR.  *endsCR: whether the
 * last octet seen (or that CR, for an empty piece) is a CR.
 */
static Py_ssize_t
findFacts(const unsigned char *p, Py_ssize_t n, int afterCR, unsigned int *facts, int *endsCR)
{
    Py_ssize_t bareLF = 0, i = 0;
    int prevCR = afterCR;
    unsigned int found = 0;
#ifdef OCTETS_SSE2
    const __m128i lf = _mm_set1_epi8('\n');
    const __m128i cr = _mm_set1_epi8('\r');
    const __m128i zero = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
        __m128i isLF = _mm_cmpeq_epi8(v, lf);
        __m128i isCR = _mm_cmpeq_epi8(v, cr);
        __m128i isNUL = _mm_cmpeq_epi8(v, zero);
        /* The high bit of each octet: an LF, a CR, a NUL or an 8-bit one. */
        unsigned int any = (unsigned int)_mm_movemask_epi8(
            _mm_or_si128(_mm_or_si128(isLF, isCR), _mm_or_si128(isNUL, v)));
        if (any == 0) {
            /* The common step: nothing to note but the CR before it, if
             * any, not followed by an LF. */
            if (prevCR) {
                found |= FACT_BARE_CR;
                prevCR = 0;
            }
            continue;
        }
        unsigned int lfs = (unsigned int)_mm_movemask_epi8(isLF);
        unsigned int crs = (unsigned int)_mm_movemask_epi8(isCR);
        if (_mm_movemask_epi8(isNUL)) {
            found |= FACT_NUL;
        }
        if (_mm_movemask_epi8(v)) {
            found |= FACT_EIGHT_BIT;
        }
        /* Bit k: the octet before octet k is a CR (bit 16: octet 15 is). */
        unsigned int crBefore = (crs << 1) | (unsigned int)prevCR;
        bareLF += __builtin_popcount(lfs & ~crBefore);
        if (crBefore & ~lfs & 0xFFFF) {
            found |= FACT_BARE_CR;
        }
        prevCR = (int)(crBefore >> 16);
    }
#endif
    scanOctets(p, i, n, &prevCR, &found, &bareLF);
    if (bareLF) {
        found |= FACT_BARE_LF;
    }
    *facts = found;
    *endsCR = prevCR;
    return bareLF;
}

/*
 * The second pass: p[0..n) into out, a CR before every LF not preceded by
 * one; out holds exactly n plus the count of those LFs.
 */
static void
convert(const unsigned char *p, Py_ssize_t n, int afterCR, unsigned char *out)
{
    Py_ssize_t i = 0;
    int prevCR = afterCR;
#ifdef OCTETS_SSE2
    const __m128i lf = _mm_set1_epi8('\n');
    const __m128i cr = _mm_set1_epi8('\r');
    /*
     * Each piece between LFs is copied with one 16-octet store from where
     * the piece starts: what it writes beyond the piece is overwritten by
     * the next store.  With 32 octets of input left at least, such a store
     * stays within both the input and the output (the output is never
     * shorter than the input left).
     */
    for (; i + 32 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
        unsigned int lfs = (unsigned int)_mm_movemask_epi8(_mm_cmpeq_epi8(v, lf));
        unsigned int crs = (unsigned int)_mm_movemask_epi8(_mm_cmpeq_epi8(v, cr));
        unsigned int bare = lfs & ~((crs << 1) | (unsigned int)prevCR);
        prevCR = (int)(crs >> 15);
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

static PyObject *
crlfAndFacts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
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
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    unsigned int facts = 0;
    int endsCR = 0;
    Py_ssize_t bareLF = findFacts(p, n, afterCR, &facts, &endsCR);
    if (endsCR) {
        facts |= last ? FACT_BARE_CR : FACT_ENDS_CR;
    }
    PyObject *converted;
    if (bareLF == 0) {
        converted = Py_NewRef(data);
    }
    else {
        if (bareLF > PY_SSIZE_T_MAX - n) {
            return PyErr_NoMemory();
        }
        converted = PyBytes_FromStringAndSize(NULL, n + bareLF);
        if (converted == NULL) {
            return NULL;
        }
        convert(p, n, afterCR, (unsigned char *)PyBytes_AS_STRING(converted));
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

static PyMethodDef octetsMethods[] = {
    {"crlfAndFacts", (PyCFunction)(void (*)(void))crlfAndFacts, METH_FASTCALL, crlfAndFacts_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef octetsModule = {
    PyModuleDef_HEAD_INIT,
    "imapmig.mail._octets",
    "The one pass over a message's octets in C (see imapmig.mail.octets).",
    0,
    octetsMethods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__octets(void)
{
    return PyModuleDef_Init(&octetsModule);
}
