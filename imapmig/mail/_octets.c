/*
 * imapmig.mail._octets: the one pass over a message's octets (issue 31),
 * and the per-message work around it that Python did at a cost many times
 * the pass's own on a small message.
 *
 * crlfAndFacts(data, afterCR=False, last=True) -> (converted, facts)
 * readListed(messages, locate, descriptors, largest, flags, notRead, bodies,
 *            facts) -> missed: a batch of message files read, each in one
 *     read(2) into one buffer reused from file to file and from call to
 *     call, and converted from there into its body, each file found in the
 *     listing's dicts with no call into Python
 *     (imapmig.sources.messagefile.readListedFiles).
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
 * The pass itself, and its SIMD steps, are in _crlf.c (convertOctets).
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
#include "_crlf.h"

PyDoc_STRVAR(crlfAndFacts_doc,
"crlfAndFacts(data, afterCR=False, last=True) -> (converted, facts)\n\n"
"data with a CR before every LF not preceded by one (data itself when no\n"
"LF needs one), and the facts found on the way.  See\n"
"imapmig.mail.octets.crlfAndFacts.");

PyDoc_STRVAR(crlfAndFactsBaseline_doc,
"crlfAndFactsBaseline(data, afterCR=False, last=True) -> (converted, facts)\n\n"
"crlfAndFacts without its AVX2 steps (SSE2 on x86-64, else octet by\n"
"octet), for the tests: what a processor without AVX2 runs.");

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

/* A buffer every file of a readListed call is read into, grown as needed
 * and kept from call to call (kept: the module's one, see takeScratch): a
 * small message's octets stay in the cache from the read to the
 * conversion, and no buffer is allocated per file but its body.  The first
 * version's buffer lived for one call and grew by realloc, which copied
 * what it held: 596 growths in a realistic run of 5,000 messages, 46,000
 * instructions each, 5,500 a message (bench/results/cpu.md, "round 5,
 * readside"). */
typedef struct {
    unsigned char *octets;
    size_t room;
    int kept;
} Scratch;

/* The module's buffer, kept between calls up to its largest message, and
 * whether a call holds it (the GIL is released while a file is read into
 * it: a call on another thread meanwhile takes a buffer of its own). */
static Scratch keptScratch = {NULL, 0, 1};
static int keptScratchTaken = 0;

/* The buffer for one readListed call (with the GIL held). */
static Scratch
takeScratch(void)
{
    if (keptScratchTaken) {
        Scratch own = {NULL, 0, 0};
        return own;
    }
    keptScratchTaken = 1;
    return keptScratch;
}

/* The end of a readListed call: its buffer kept for the next, or freed
 * (with the GIL held). */
static void
giveScratch(Scratch *scratch)
{
    if (scratch->kept) {
        keptScratch = *scratch;
        keptScratchTaken = 0;
    }
    else {
        PyMem_RawFree(scratch->octets);
    }
}

/* Room for wanted octets (at most limit) in the scratch buffer, what it
 * held not kept: at least twice the room it had, so that a call grows it a
 * few times at most; 0 when there is no memory for them (the GIL need not
 * be held). */
static int
growScratch(Scratch *scratch, size_t wanted, size_t limit)
{
    if (scratch->room < wanted) {
        size_t room = scratch->room * 2 > wanted ? scratch->room * 2 : wanted;
        if (room > limit) {
            room = wanted;
        }
        PyMem_RawFree(scratch->octets);
        scratch->octets = PyMem_RawMalloc(room);
        scratch->room = scratch->octets == NULL ? 0 : room;
        return scratch->octets != NULL;
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
        if (size > 0
            && (grown = growScratch(scratch, (size_t)size + 1, (size_t)largest + 1))) {
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
 * Where the file of key is by a listing's table (a tuple: per subdirectory a
 * dict of key to file name, cur/ first, then a dict of the keys whose entry
 * is not a regular file), as imapmig.sources.maildir.scan.FolderFiles.locate
 * finds it, with no call into Python and no tuple made: 1 with its
 * subdirectory's index in *index and a new reference to its name in *name,
 * 0 when it was not listed or is not a regular file, -1 on an error.
 */
static int
lookUp(PyObject *table, PyObject *key, Py_ssize_t *index, PyObject **name)
{
    PyObject *names = PyTuple_GET_SIZE(table) == 2 ? PyTuple_GET_ITEM(table, 0) : NULL;
    PyObject *irregular = names == NULL ? NULL : PyTuple_GET_ITEM(table, 1);
    if (names == NULL || !PyTuple_Check(names) || !PyDict_Check(irregular)) {
        PyErr_SetString(PyExc_TypeError, "readListed() needs a table of (names, irregular)");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        PyObject *subdirectory = PyTuple_GET_ITEM(names, i);
        if (!PyDict_Check(subdirectory)) {
            PyErr_SetString(PyExc_TypeError, "readListed() needs a dict per subdirectory");
            return -1;
        }
        PyObject *found = PyDict_GetItemWithError(subdirectory, key);
        if (found == NULL) {
            if (PyErr_Occurred()) {
                return -1;
            }
            continue;
        }
        if (PyDict_GET_SIZE(irregular) > 0) {
            int listed = PyDict_Contains(irregular, key);
            if (listed != 0) {
                return listed < 0 ? -1 : 0;
            }
        }
        *index = i;
        *name = Py_NewRef(found);
        return 1;
    }
    return 0;
}

/* The same as lookUp, by a locate callable's answer (index, name, None when
 * a regular file), or None. */
static int
located(PyObject *locate, PyObject *key, Py_ssize_t *index, PyObject **name)
{
    PyObject *where = PyObject_CallOneArg(locate, key);
    if (where == NULL) {
        return -1;
    }
    int found = 0;
    if (PyTuple_Check(where) && PyTuple_GET_SIZE(where) == 3
        && PyTuple_GET_ITEM(where, 2) == Py_None) {
        *index = PyLong_AsSsize_t(PyTuple_GET_ITEM(where, 0));
        if (*index == -1 && PyErr_Occurred()) {
            found = -1;
        }
        else {
            *name = Py_NewRef(PyTuple_GET_ITEM(where, 1));
            found = 1;
        }
    }
    Py_DECREF(where);
    return found;
}

/*
 * The body of one message for readListed: a new reference to its bytes
 * (facts in *facts), Py_None when its file is not read by readOne, NULL on
 * an error.  locate is a listing's table (lookUp) or a callable (located).
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
        /* A size no Py_ssize_t holds: beyond largest, not read here, as
         * the Python twin's 0 <= size <= largest leaves it. */
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
    Py_ssize_t index = 0;
    PyObject *name = NULL;
    int found = PyTuple_Check(locate) ? lookUp(locate, key, &index, &name)
                                      : located(locate, key, &index, &name);
    Py_DECREF(key);
    if (found <= 0) {
        return found < 0 ? NULL : Py_NewRef(Py_None);
    }
    PyObject *body = NULL;
    PyObject *descriptor = (index >= 0 && index < PyList_GET_SIZE(descriptors))
        ? PyList_GET_ITEM(descriptors, index) : Py_None;
    if (descriptor == Py_None) {
        body = Py_NewRef(Py_None);
    }
    else {
        int dirFd = asInt(descriptor);
        if (!(dirFd == -1 && PyErr_Occurred())) {
            body = readOne(dirFd, name, size, largest, flags, scratch, facts);
        }
    }
    Py_DECREF(name);
    return body;
}

PyDoc_STRVAR(readListed_doc,
"readListed(messages, locate, descriptors, largest, flags, notRead, bodies, facts)\n"
"-> missed\n\n"
"Read the listed files of messages, where locate (a listing's table or a\n"
"callable) says they are, in order, as\n"
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
    Scratch scratch = takeScratch();
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
    giveScratch(&scratch);
    Py_DECREF(messages);
    return PyLong_FromSsize_t(missed);
fail:
    giveScratch(&scratch);
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
    int haveAVX2 = crlfInit();
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
