/*
 * imapmig.sources._listing: a listed file's size and mtime, and a listed
 * message's date, in C (issue 31).
 *
 * sizeAndMtime(dirFd, name) -> (st_size, st_mtime) or None
 *
 * The same function as imapmig.sources.local.sizeAndMtimePython, which is
 * the reference and the fallback where this extension was not built (no
 * compiler): the status of the file name in the directory dirFd, not
 * following a symbolic link (one fstatat, the GIL released around it), its
 * size and its mtime in seconds as a float, exactly as os.stat's st_size and
 * st_mtime; None when it cannot be had (renamed or deleted since the
 * directory was read, or any other error).  tests.test_sources_local runs
 * both on the same files.
 *
 * A Maildir listing takes one status a file whose name carries no size
 * (no ,S= field), which is most of them: os.stat built an os.stat_result
 * of nineteen fields for the two it needs, each of its three times in
 * seconds, as a float and in nanoseconds (a multiplication and an addition
 * of Python integers each), after parsing its keyword arguments: about 6,600
 * instructions a file, a fifth of the listing's cost a message
 * (bench/results/cpu.md, "Fourth round: the listing").
 *
 * nameFields(unique) -> (date, size)
 *
 * The same as imapmig.sources.local.nameFieldsPython: what a Maildir
 * file's unique name says of the message, its delivery time (the leading
 * integer, as imapmig.sources.maildir.names.leadingTimestamp reads it, as a
 * float) and its size (the first ",S=" field followed by digits, as
 * sizeField reads it), each None where the name does not say.  Python took a
 * partition, four string tests, a float parse and a substring search, about
 * 2,000 instructions a message.
 *
 * utcDatetime(seconds) -> datetime
 *
 * The same as datetime.fromtimestamp(seconds, timezone.utc), which is
 * imapmig.sources.local.utcDatetimePython: a listed message's INTERNALDATE
 * from the seconds since 1970 its name or its mtime gives.  Python's
 * converts the seconds with gmtime (a lock and the time zone's rules), builds
 * a naive datetime, then calls timezone.utc.fromutc on it (its argument
 * parsed), which builds a second one: about 2,900 instructions a message.
 * Here the date is worked out by arithmetic (days to a civil date, as in
 * Howard Hinnant's "chrono-compatible low-level date algorithms") and the
 * datetime built once; the microseconds are rounded half to even as
 * Python's are.  Seconds before 1970 or after the year 9999, or not a
 * number, are handed to Python's function (its result or its error).
 *
 * scannedOf(name, index, irregular, carry) -> tuple or None
 *
 * The same as imapmig.sources.maildir.scan.scannedOfPython: what the scan
 * of a Maildir folder keeps of one entry of cur/ or new/ (its unique part
 * twice, index, name, flag letters and irregular), None for a dotfile; the
 * name is split as imapmig.sources.maildir.names.splitName splits it, and a
 * unique part that is not ASCII or holds a "%" is given to carry
 * (carriedName).  Python took a find, a comparison, three slices and two
 * string tests a file.
 *
 * listedMessages(rows, cls, fields) -> list
 *
 * The messages of a Maildir listing's sorted rows (date or -inf, key,
 * flags, size), as imapmig.sources.maildir's _listedPython makes them: per
 * row an instance of cls (SourceMessage) made as object.__new__ makes it,
 * its four fields (the member descriptors of its slots key, flags,
 * internalDate and size, in that order) set as their __set__ sets them,
 * the date by utcDatetime (None for -inf).  Python took a call of
 * imapmig.mail.message.listedMessage, object.__new__ and four calls of a
 * descriptor's __set__ a message, about 2,000 instructions.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <math.h>
#include <datetime.h>
#include "../_fsname.h"

#if defined(__GNUC__)
#define INLINE inline __attribute__((always_inline))
#else
#define INLINE inline
#endif

/* The first index at or after from where the text holds the ASCII
 * character c, or length: memchr where the text is a byte a character. */
static INLINE Py_ssize_t
findChar(int kind, const void *data, Py_ssize_t from, Py_ssize_t length, char c)
{
    if (kind == PyUnicode_1BYTE_KIND) {
        const char *start = (const char *)data;
        const char *found = memchr(start + from, c, (size_t)(length - from));
        return found == NULL ? length : found - start;
    }
    while (from < length && PyUnicode_READ(kind, data, from) != (Py_UCS4)c) {
        from++;
    }
    return from;
}

/* 10000-01-01T00:00:00Z: the first second a datetime cannot hold. */
#define END_OF_9999 253402300800.0

PyDoc_STRVAR(sizeAndMtime_doc,
             "sizeAndMtime(dirFd, name, /)\n--\n\n"
             "The size and mtime (seconds, a float) of the file name in the directory\n"
             "dirFd, not following a symbolic link, as os.stat's st_size and st_mtime;\n"
             "None when it cannot be had.");

static PyObject *
sizeAndMtime(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "sizeAndMtime takes exactly 2 arguments");
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (fd < INT_MIN || fd > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "sizeAndMtime: dirFd out of range");
        return NULL;
    }
    int dirFd = (int)fd;
    PyObject *name = args[1];
    if (!PyUnicode_Check(name)) {
        PyErr_SetString(PyExc_TypeError, "sizeAndMtime: name must be str");
        return NULL;
    }
    PyObject *encoded;
    const char *path;
    int named = fsName(name, &encoded, &path);
    if (named < 0) {
        /* A name the file system encoding cannot take (a lone surrogate
         * surrogateescape does not map): as the Python twin, which gets a
         * ValueError from os.stat, no status. */
        if (!PyErr_ExceptionMatches(PyExc_ValueError)) {
            return NULL;
        }
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (named == 0) {
        /* An embedded NUL: no such file can be listed. */
        Py_XDECREF(encoded);
        Py_RETURN_NONE;
    }
    struct stat status;
    int result;
    Py_BEGIN_ALLOW_THREADS
    result = fstatat(dirFd, path, &status, AT_SYMLINK_NOFOLLOW);
    Py_END_ALLOW_THREADS
    Py_XDECREF(encoded);
    if (result != 0) {
        Py_RETURN_NONE;
    }
    /* As CPython's fill_time computes st_mtime. */
    double mtime = status.st_mtim.tv_sec + status.st_mtim.tv_nsec * 1e-9;
    PyObject *pair = PyTuple_New(2);
    PyObject *size = PyLong_FromLongLong((long long)status.st_size);
    PyObject *when = PyFloat_FromDouble(mtime);
    if (pair == NULL || size == NULL || when == NULL) {
        Py_XDECREF(pair);
        Py_XDECREF(size);
        Py_XDECREF(when);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, size);
    PyTuple_SET_ITEM(pair, 1, when);
    return pair;
}

PyDoc_STRVAR(utcDatetime_doc,
             "utcDatetime(seconds, /)\n--\n\n"
             "datetime.fromtimestamp(seconds, timezone.utc).");

/* As CPython's _PyTime_RoundHalfEven. */
static double
roundHalfEven(double x)
{
    double rounded = round(x);
    if (fabs(x - rounded) == 0.5) {
        rounded = 2.0 * round(x / 2.0);
    }
    return rounded;
}

static PyObject *
utcDatetime(PyObject *module, PyObject *seconds)
{
    (void)module;
    double value = PyFloat_AsDouble(seconds);
    if (value == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    if (!(value >= 0.0 && value < END_OF_9999)) {
        return PyObject_CallMethod((PyObject *)PyDateTimeAPI->DateTimeType, "fromtimestamp", "OO",
                                   seconds, PyDateTime_TimeZone_UTC);
    }
    /* As CPython's _PyTime_DoubleToDenominator, half to even. */
    double whole;
    double fraction = roundHalfEven(modf(value, &whole) * 1e6);
    if (fraction >= 1e6) {
        fraction -= 1e6;
        whole += 1.0;
    }
    long long t = (long long)whole;
    int us = (int)fraction;
    if (t >= (long long)END_OF_9999) {
        return PyObject_CallMethod((PyObject *)PyDateTimeAPI->DateTimeType, "fromtimestamp", "OO",
                                   seconds, PyDateTime_TimeZone_UTC);
    }
    long long days = t / 86400;
    int secs = (int)(t % 86400);
    /* Days since 1970-01-01 to a civil date (Hinnant's civil_from_days,
     * days >= 0 here). */
    long long z = days + 719468;
    long long era = z / 146097;
    long long doe = z - era * 146097;
    long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    long long mp = (5 * doy + 2) / 153;
    int day = (int)(doy - (153 * mp + 2) / 5 + 1);
    int month = (int)(mp < 10 ? mp + 3 : mp - 9);
    int year = (int)(yoe + era * 400 + (month <= 2));
    return PyDateTimeAPI->DateTime_FromDateAndTime(year, month, day, secs / 3600, secs / 60 % 60,
                                                   secs % 60, us, PyDateTime_TimeZone_UTC,
                                                   PyDateTimeAPI->DateTimeType);
}

PyDoc_STRVAR(listedMessages_doc,
             "listedMessages(rows, cls, fields, /)\n--\n\n"
             "The messages of a Maildir listing's rows (date or -inf, key, flags, size):\n"
             "instances of cls with the four member descriptors fields (key, flags,\n"
             "internalDate, size) set.");

static PyObject *
listedMessages(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_Check(args[0]) || !PyType_Check(args[1]) || !PyTuple_Check(args[2])
        || PyTuple_GET_SIZE(args[2]) != 4) {
        PyErr_SetString(PyExc_TypeError, "listedMessages(rows: list, cls: type, fields: 4-tuple)");
        return NULL;
    }
    PyObject *rows = args[0];
    PyTypeObject *cls = (PyTypeObject *)args[1];
    PyObject *fields[4];
    descrsetfunc set[4];
    for (int i = 0; i < 4; i++) {
        fields[i] = PyTuple_GET_ITEM(args[2], i);
        set[i] = Py_TYPE(fields[i])->tp_descr_set;
        if (set[i] == NULL) {
            PyErr_SetString(PyExc_TypeError, "listedMessages: a field is not a data descriptor");
            return NULL;
        }
    }
    Py_ssize_t count = PyList_GET_SIZE(rows);
    PyObject *messages = PyList_New(count);
    if (messages == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 4
            || !PyFloat_Check(PyTuple_GET_ITEM(row, 0))) {
            PyErr_SetString(PyExc_TypeError, "listedMessages: a row is not (float, key, flags, size)");
            goto failed;
        }
        PyObject *when = PyTuple_GET_ITEM(row, 0);
        PyObject *date;
        if (PyFloat_AS_DOUBLE(when) == -Py_HUGE_VAL) {
            date = Py_NewRef(Py_None);
        }
        else {
            date = utcDatetime(module, when);
            if (date == NULL) {
                goto failed;
            }
        }
        PyObject *message = cls->tp_alloc(cls, 0);
        if (message == NULL) {
            Py_DECREF(date);
            goto failed;
        }
        PyList_SET_ITEM(messages, i, message);
        int problem = set[0](fields[0], message, PyTuple_GET_ITEM(row, 1)) < 0
                      || set[1](fields[1], message, PyTuple_GET_ITEM(row, 2)) < 0
                      || set[2](fields[2], message, date) < 0
                      || set[3](fields[3], message, PyTuple_GET_ITEM(row, 3)) < 0;
        Py_DECREF(date);
        if (problem) {
            goto failed;
        }
    }
    return messages;
failed:
    Py_DECREF(messages);
    return NULL;
}

PyDoc_STRVAR(scannedOf_doc,
             "scannedOf(name, index, irregular, carry, /)\n--\n\n"
             "(unique, unique, index, name, letters, irregular) of a Maildir entry,\n"
             "None for a dotfile; carry(unique) where unique is not ASCII or holds a %.");

/* Where the last "<mark>2," in the text starts; -1 if nowhere. */
static Py_ssize_t
lastInfo(int kind, const void *data, Py_ssize_t length, Py_UCS4 mark)
{
    for (Py_ssize_t i = length - 3; i >= 0; i--) {
        if (PyUnicode_READ(kind, data, i) == mark && PyUnicode_READ(kind, data, i + 1) == '2'
            && PyUnicode_READ(kind, data, i + 2) == ',') {
            return i;
        }
    }
    return -1;
}

static PyObject *
scannedOf(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "scannedOf(name: str, index, irregular, carry)");
        return NULL;
    }
    PyObject *name = args[0];
    if (PyUnicode_READY(name) < 0) {
        return NULL;
    }
    int kind = PyUnicode_KIND(name);
    const void *data = PyUnicode_DATA(name);
    Py_ssize_t length = PyUnicode_GET_LENGTH(name);
    if (length == 0 || PyUnicode_READ(kind, data, 0) == '.') {
        Py_RETURN_NONE;
    }
    /* splitName: the info starts at the first ":", else at the last "!2,"
     * or ";2,". */
    Py_ssize_t colon = findChar(kind, data, 0, length, ':');
    if (colon == length) {
        colon = lastInfo(kind, data, length, '!');
        if (colon < 0) {
            colon = lastInfo(kind, data, length, ';');
        }
    }
    Py_ssize_t end = colon < 0 ? length : colon;
    int carried = 0;
    if (PyUnicode_IS_ASCII(name)) {
        carried = findChar(kind, data, 0, end, '%') < end;
    }
    else {
        for (Py_ssize_t i = 0; i < end; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            if (c >= 128 || c == '%') {
                carried = 1;
                break;
            }
        }
    }
    PyObject *unique = PyUnicode_Substring(name, 0, end);
    if (unique == NULL) {
        return NULL;
    }
    if (carried) {
        PyObject *carriedUnique = PyObject_CallOneArg(args[3], unique);
        Py_DECREF(unique);
        if (carriedUnique == NULL) {
            return NULL;
        }
        unique = carriedUnique;
    }
    PyObject *letters;
    if (colon >= 0 && colon + 2 < length && PyUnicode_READ(kind, data, colon + 1) == '2'
        && PyUnicode_READ(kind, data, colon + 2) == ',') {
        letters = PyUnicode_Substring(name, colon + 3, length);
        if (letters == NULL) {
            Py_DECREF(unique);
            return NULL;
        }
    }
    else {
        letters = Py_NewRef(Py_None);
    }
    PyObject *scanned = PyTuple_New(6);
    if (scanned == NULL) {
        Py_DECREF(unique);
        Py_DECREF(letters);
        return NULL;
    }
    PyTuple_SET_ITEM(scanned, 0, Py_NewRef(unique));
    PyTuple_SET_ITEM(scanned, 1, unique);
    PyTuple_SET_ITEM(scanned, 2, Py_NewRef(args[1]));
    PyTuple_SET_ITEM(scanned, 3, Py_NewRef(name));
    PyTuple_SET_ITEM(scanned, 4, letters);
    PyTuple_SET_ITEM(scanned, 5, Py_NewRef(args[2]));
    return scanned;
}

PyDoc_STRVAR(nameFields_doc,
             "nameFields(unique, /)\n--\n\n"
             "The delivery time (a float) and the size a Maildir unique name gives,\n"
             "each None where it gives none.");

/* The last second leadingTimestamp honours, plus one: 10000-01-01. */
#define LATEST 253402300800LL

/* The digits of text[start:end], as leadingTimestamp reads a head: at most
 * 12 significant digits, below LATEST; -1 for anything else. */
static INLINE long long
headValue(int kind, const void *data, Py_ssize_t end)
{
    long long value = 0;
    int significant = 0;
    if (end == 0) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < end; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < '0' || c > '9') {
            return -1;
        }
        if (value || c != '0') {
            if (++significant > 12) {
                return -1;
            }
        }
        value = value * 10 + (c - '0');
    }
    return value < LATEST ? value : -1;
}

/* The size of the first ",S=" followed by a digit, or NULL with no error
 * where there is none or it is beyond any file's (2**63 - 1: no off_t holds
 * it, the listing takes the file's size from its status instead). */
static INLINE PyObject *
sizeValue(int kind, const void *data, Py_ssize_t length)
{
    for (Py_ssize_t i = findChar(kind, data, 0, length, ','); i + 3 < length;
         i = findChar(kind, data, i + 1, length, ',')) {
        if (PyUnicode_READ(kind, data, i + 1) != 'S' || PyUnicode_READ(kind, data, i + 2) != '=') {
            continue;
        }
        Py_ssize_t end = i + 3;
        while (end < length) {
            Py_UCS4 c = PyUnicode_READ(kind, data, end);
            if (c < '0' || c > '9') {
                break;
            }
            end++;
        }
        if (end == i + 3) {
            continue;
        }
        /* Leading zeros skipped, then at most 19 digits, checked against
         * LLONG_MAX without overflowing. */
        Py_ssize_t j = i + 3;
        while (j < end - 1 && PyUnicode_READ(kind, data, j) == '0') {
            j++;
        }
        if (end - j > 19) {
            return NULL;
        }
        unsigned long long value = 0;
        for (; j < end; j++) {
            value = value * 10 + (unsigned long long)(PyUnicode_READ(kind, data, j) - '0');
        }
        if (value > (unsigned long long)LLONG_MAX) {
            return NULL;
        }
        return PyLong_FromLongLong((long long)value);
    }
    return NULL;
}

static INLINE PyObject *
fieldsOf(PyObject *unique, int kind, const void *data, Py_ssize_t length)
{
    Py_ssize_t dot = findChar(kind, data, 0, length, '.');
    long long when = headValue(kind, data, dot);
    PyObject *date;
    if (when < 0) {
        date = Py_NewRef(Py_None);
    }
    else {
        date = PyFloat_FromDouble((double)when);
        if (date == NULL) {
            return NULL;
        }
    }
    PyObject *size = sizeValue(kind, data, length);
    if (size == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(date);
            return NULL;
        }
        size = Py_NewRef(Py_None);
    }
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(date);
        Py_DECREF(size);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, date);
    PyTuple_SET_ITEM(pair, 1, size);
    return pair;
}

static PyObject *
nameFields(PyObject *module, PyObject *unique)
{
    (void)module;
    if (!PyUnicode_Check(unique)) {
        PyErr_SetString(PyExc_TypeError, "nameFields: unique must be str");
        return NULL;
    }
    if (PyUnicode_READY(unique) < 0) {
        return NULL;
    }
    const void *data = PyUnicode_DATA(unique);
    Py_ssize_t length = PyUnicode_GET_LENGTH(unique);
    /* The common case (Latin-1, ASCII included) with the kind known, so
     * that each read is a byte's. */
    if (PyUnicode_KIND(unique) == PyUnicode_1BYTE_KIND) {
        return fieldsOf(unique, PyUnicode_1BYTE_KIND, data, length);
    }
    return fieldsOf(unique, PyUnicode_KIND(unique), data, length);
}

static int
listingExec(PyObject *module)
{
    (void)module;
    PyDateTime_IMPORT;
    return PyDateTimeAPI == NULL ? -1 : 0;
}

static PyMethodDef listingMethods[] = {
    {"sizeAndMtime", (PyCFunction)(void (*)(void))sizeAndMtime, METH_FASTCALL, sizeAndMtime_doc},
    {"utcDatetime", (PyCFunction)utcDatetime, METH_O, utcDatetime_doc},
    {"nameFields", (PyCFunction)nameFields, METH_O, nameFields_doc},
    {"scannedOf", (PyCFunction)(void (*)(void))scannedOf, METH_FASTCALL, scannedOf_doc},
    {"listedMessages", (PyCFunction)(void (*)(void))listedMessages, METH_FASTCALL,
     listedMessages_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot listingSlots[] = {
    {Py_mod_exec, (void *)listingExec},
    {0, NULL},
};

static struct PyModuleDef listingModule = {
    PyModuleDef_HEAD_INIT,
    "imapmig.sources._listing",
    "A Maildir listing's steps a message in C: a file's size and mtime, what its\n"
    "name says, a message's date, the messages of the sorted rows.",
    0,
    listingMethods,
    listingSlots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__listing(void)
{
    return PyModuleDef_Init(&listingModule);
}
