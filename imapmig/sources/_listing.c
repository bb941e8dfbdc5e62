/*
 * imapmig.sources._listing: a listed file's size and mtime, and a listed
 * message's date, in C (issue 31).
 *
 * Directory(fd).scan(...): a turn of a Maildir folder's scan (below), with
 * the status of the files whose names lack a date or a size taken in the
 * same pass: as imapmig.sources.local.sizeAndMtimePython gives it (one
 * fstatat, not following a symbolic link, its size and its mtime in seconds
 * as a float, exactly as os.stat's st_size and st_mtime), the GIL released
 * once a turn.
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
 * twice, index, name, flag letters, irregular, and the date and size its
 * unique part gives as nameFields reads them), None for a dotfile; the
 * name is split as imapmig.sources.maildir.names.splitName splits it, and a
 * unique part that is not ASCII or holds a "%" is given to carry
 * (carriedName).  Python took a find, a comparison, three slices and two
 * string tests a file.
 *
 * Directory(fd), its scan(index, turn, carry, classify, first, duplicates,
 * status) -> int
 *
 * The same as imapmig.sources.maildir.scan.DirectoryPython: a folder's cur/
 * or new/, read a turn of entries at a time (a duplicate of fd read with
 * readdir from its start, as os.scandir(fd) reads it), each entry kept in
 * first (per unique part, its first file) or duplicates (per unique part
 * met again, all its files).  A regular file (d_type DT_REG, or DT_UNKNOWN
 * and its status says so) is kept as scannedOf makes it, with the date and
 * size its status gives where its name lacks them and status is true; any
 * other entry (a dotfile aside) as classify(name, is a symbolic link or
 * None where not known) makes it.  The turn's names are read, and then the
 * status of those which need one taken, each with the GIL released once;
 * no os.DirEntry is made.  os.scandir and a DirEntry, is_file, scannedOf
 * and a dict's test a file, then an fstatat with the GIL released and
 * acquired a file in the listing's next step, cost about 3,800
 * instructions a message (bench/results/cpu.md, "Round 6, the listing").
 *
 * rowsOf(scanned, flags, flagsOf, keywords) -> list
 *
 * The same as imapmig.sources.maildir._rowsPython: what a Maildir listing
 * sorts of each scanned file, (date or -inf, key, flags, size or 0), the
 * flags of letters met first worked out by flagsOf(letters, keywords) and
 * kept in flags.
 *
 * addFiles(scanned, names, irregulars) -> None
 *
 * The same as imapmig.sources.maildir.scan.addFilesPython: where a
 * listing's scanned files are, for its reads (FolderFiles.add).
 *
 * datesRepeat(rows) -> bool
 *
 * The same as imapmig.sources.maildir._datesRepeatPython: whether two
 * neighbouring rows of a run sorted by date have the same date (then the
 * run is sorted again as tuples).  Python took a list of the dates and a
 * comparison by operator.eq a row, about 600 instructions.
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
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <math.h>
#include <datetime.h>

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

static int uniqueFields(PyObject *unique, PyObject **date, PyObject **size);

/* scannedOf's work: the tuple of NAME (a str), with INDEX, IRREGULAR and
 * the unique part carried by CARRY; None (a new reference) for a dotfile. */
static PyObject *
scannedFrom(PyObject *name, PyObject *index, PyObject *irregular, PyObject *carry)
{
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
        PyObject *carriedUnique = PyObject_CallOneArg(carry, unique);
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
    PyObject *date = NULL, *size = NULL;
    PyObject *scanned = uniqueFields(unique, &date, &size) < 0 ? NULL : PyTuple_New(8);
    if (scanned == NULL) {
        Py_XDECREF(date);
        Py_XDECREF(size);
        Py_DECREF(unique);
        Py_DECREF(letters);
        return NULL;
    }
    PyTuple_SET_ITEM(scanned, 0, Py_NewRef(unique));
    PyTuple_SET_ITEM(scanned, 1, unique);
    PyTuple_SET_ITEM(scanned, 2, Py_NewRef(index));
    PyTuple_SET_ITEM(scanned, 3, Py_NewRef(name));
    PyTuple_SET_ITEM(scanned, 4, letters);
    PyTuple_SET_ITEM(scanned, 5, Py_NewRef(irregular));
    PyTuple_SET_ITEM(scanned, 6, date);
    PyTuple_SET_ITEM(scanned, 7, size);
    if (irregular == Py_None) {
        /* Strings, numbers and None, which no reference cycle can go
         * through: the collector need not look at it (as it would find
         * at its next pass, after looking at each of a listing's). */
        PyObject_GC_UnTrack(scanned);
    }
    return scanned;
}

static PyObject *
scannedOf(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "scannedOf(name: str, index, irregular, carry)");
        return NULL;
    }
    return scannedFrom(args[0], args[1], args[2], args[3]);
}


/*
 * Directory(fd): one subdirectory (cur/ or new/) of a Maildir folder,
 * read a turn at a time (see the module's comment).
 */

/* One entry read by readdir: its name's octets at offset in the turn's
 * names, its d_type, and its status where one was taken. */
typedef struct {
    size_t offset;
    size_t length;
    unsigned char type;
    unsigned char wanted; /* a status is to be taken */
    int statusError;      /* the status's errno, 0 when taken */
    long long size;
    double mtime;
    int regular;          /* the status says it is a regular file */
    int link;             /* the status says it is a symbolic link */
    PyObject *scanned;    /* its tuple, while the turn is built */
} Read;

typedef struct {
    PyObject_HEAD
    DIR *dir;
    int busy;
    Read *entries;
    size_t capacity;
    char *names;
    size_t namesCapacity;
} Directory;

static void
directoryRelease(Directory *self)
{
    if (self->dir != NULL) {
        closedir(self->dir);
        self->dir = NULL;
    }
    PyMem_RawFree(self->entries);
    PyMem_RawFree(self->names);
    self->entries = NULL;
    self->names = NULL;
    self->capacity = self->namesCapacity = 0;
}

static int
directoryInit(Directory *self, PyObject *args, PyObject *kwargs)
{
    int fd;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "Directory takes no keyword arguments");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "i:Directory", &fd)) {
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Directory: being read");
        return -1;
    }
    directoryRelease(self);
    /* As os.scandir(fd): a duplicate, read from its start. */
    int copy;
    DIR *dir = NULL;
    Py_BEGIN_ALLOW_THREADS
    copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy >= 0) {
        dir = fdopendir(copy);
        if (dir == NULL) {
            int saved = errno;
            close(copy);
            errno = saved;
        }
        else {
            rewinddir(dir);
        }
    }
    Py_END_ALLOW_THREADS
    if (dir == NULL) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->dir = dir;
    return 0;
}

static void
directoryDealloc(Directory *self)
{
    PyTypeObject *type = Py_TYPE(self);
    directoryRelease(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

/* Read up to turn entries (not "." nor ".."), without the GIL: their names
 * and types into self->entries and self->names.  Return how many, or -1
 * with errno set (memory: ENOMEM). */
static Py_ssize_t
readEntries(Directory *self, Py_ssize_t turn)
{
    Py_ssize_t count = 0;
    size_t used = 0;
    while (count < turn) {
        errno = 0;
        struct dirent *entry = readdir(self->dir);
        if (entry == NULL) {
            return errno ? -1 : count;
        }
        const char *name = entry->d_name;
        if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) {
            continue;
        }
        size_t length = strlen(name);
        if ((size_t)count == self->capacity) {
            size_t capacity = self->capacity ? 2 * self->capacity : 256;
            Read *entries = PyMem_RawRealloc(self->entries, capacity * sizeof(Read));
            if (entries == NULL) {
                errno = ENOMEM;
                return -1;
            }
            self->entries = entries;
            self->capacity = capacity;
        }
        if (used + length + 1 > self->namesCapacity) {
            size_t capacity = self->namesCapacity ? 2 * self->namesCapacity : 16384;
            while (capacity < used + length + 1) {
                capacity *= 2;
            }
            char *names = PyMem_RawRealloc(self->names, capacity);
            if (names == NULL) {
                errno = ENOMEM;
                return -1;
            }
            self->names = names;
            self->namesCapacity = capacity;
        }
        memcpy(self->names + used, name, length + 1);
        Read *read = &self->entries[count++];
        memset(read, 0, sizeof *read);
        read->offset = used;
        read->length = length;
        read->type = entry->d_type;
        used += length + 1;
    }
    return count;
}

/* Take the status of the entries that want one, without the GIL. */
static void
takeStatus(Directory *self, Py_ssize_t count)
{
    int fd = dirfd(self->dir);
    for (Py_ssize_t i = 0; i < count; i++) {
        Read *read = &self->entries[i];
        if (!read->wanted) {
            continue;
        }
        struct stat status;
        if (fstatat(fd, self->names + read->offset, &status, AT_SYMLINK_NOFOLLOW) != 0) {
            read->statusError = errno ? errno : EIO;
            continue;
        }
        read->size = (long long)status.st_size;
        /* As CPython's fill_time computes st_mtime. */
        read->mtime = status.st_mtim.tv_sec + status.st_mtim.tv_nsec * 1e-9;
        read->regular = S_ISREG(status.st_mode);
        read->link = S_ISLNK(status.st_mode);
    }
}

/* Whether a scanned tuple lacks its date or its size. */
static INLINE int
lacksFields(PyObject *scanned)
{
    return PyTuple_GET_ITEM(scanned, 6) == Py_None || PyTuple_GET_ITEM(scanned, 7) == Py_None;
}

/* Set the date and size a scanned tuple (only the caller's) lacks from
 * the entry's status.  Return -1 with an exception set. */
static int
fillFields(PyObject *scanned, Read *read)
{
    if (read->statusError) {
        return 0;
    }
    if (PyTuple_GET_ITEM(scanned, 6) == Py_None) {
        PyObject *when = PyFloat_FromDouble(read->mtime);
        if (when == NULL) {
            return -1;
        }
        Py_SETREF(((PyTupleObject *)scanned)->ob_item[6], when);
    }
    if (PyTuple_GET_ITEM(scanned, 7) == Py_None) {
        PyObject *size = PyLong_FromLongLong(read->size);
        if (size == NULL) {
            return -1;
        }
        Py_SETREF(((PyTupleObject *)scanned)->ob_item[7], size);
    }
    return 0;
}

/* Keep a scanned tuple in first (per unique part, its first file) or, when
 * its unique part was met before, in duplicates (per such unique part, all
 * its files). */
static int
keep(PyObject *scanned, PyObject *first, PyObject *duplicates)
{
    PyObject *unique = PyTuple_GET_ITEM(scanned, 0);
    PyObject *earlier = PyDict_GetItemWithError(first, unique);
    if (earlier == NULL) {
        return PyErr_Occurred() ? -1 : PyDict_SetItem(first, unique, scanned);
    }
    PyObject *group = PyDict_GetItemWithError(duplicates, unique);
    if (group == NULL) {
        if (PyErr_Occurred()) {
            return -1;
        }
        group = PyList_New(1);
        if (group == NULL) {
            return -1;
        }
        PyList_SET_ITEM(group, 0, Py_NewRef(earlier));
        int set = PyDict_SetItem(duplicates, unique, group);
        Py_DECREF(group);
        if (set < 0) {
            return -1;
        }
    }
    if (!PyList_Check(group)) {
        PyErr_SetString(PyExc_TypeError, "Directory.scan: duplicates must hold lists");
        return -1;
    }
    return PyList_Append(group, scanned);
}

PyDoc_STRVAR(directoryScan_doc,
             "scan(index, turn, carry, classify, first, duplicates, status, /)\n--\n\n"
             "Read up to turn entries; keep what the scan keeps of each in first and\n"
             "duplicates; return how many were read.");

/* The tuple of one entry read, or None (a new reference). */
static PyObject *
scannedEntry(Read *read, PyObject *name, PyObject *index, PyObject *carry, PyObject *classify,
             int status)
{
    int regular = read->type == DT_REG || (read->type == DT_UNKNOWN && read->wanted
                                           && !read->statusError && read->regular);
    if (regular) {
        PyObject *scanned = scannedFrom(name, index, Py_None, carry);
        if (scanned == NULL || scanned == Py_None || !status || !read->wanted
            || !lacksFields(scanned)) {
            return scanned;
        }
        if (Py_REFCNT(scanned) != 1 || fillFields(scanned, read) < 0) {
            Py_DECREF(scanned);
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_SystemError, "Directory.scan: a shared tuple");
            }
            return NULL;
        }
        return scanned;
    }
    PyObject *link;
    if (read->type == DT_LNK) {
        link = Py_True;
    }
    else if (read->type != DT_UNKNOWN) {
        link = Py_False;
    }
    else if (read->statusError) {
        link = Py_None;
    }
    else {
        link = read->link ? Py_True : Py_False;
    }
    return PyObject_CallFunctionObjArgs(classify, name, link, NULL);
}

static PyObject *
directoryScan(Directory *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyLong_Check(args[0]) || !PyDict_Check(args[4]) || !PyDict_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "scan(index: int, turn: int, carry, classify, first: dict, duplicates: dict,"
                        " status: bool)");
        return NULL;
    }
    if (self->dir == NULL || self->busy) {
        PyErr_SetString(PyExc_ValueError, self->dir == NULL ? "Directory: closed" : "Directory: being read");
        return NULL;
    }
    Py_ssize_t turn = PyLong_AsSsize_t(args[1]);
    if (turn == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (turn < 1) {
        PyErr_SetString(PyExc_ValueError, "Directory.scan: turn must be positive");
        return NULL;
    }
    int status = PyObject_IsTrue(args[6]);
    if (status < 0) {
        return NULL;
    }
    PyObject *index = args[0], *carry = args[2], *classify = args[3];
    PyObject *first = args[4], *duplicates = args[5];
    Py_ssize_t count;
    int error;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    count = readEntries(self, turn);
    error = errno;
    Py_END_ALLOW_THREADS
    if (count < 0) {
        self->busy = 0;
        if (error == ENOMEM) {
            return PyErr_NoMemory();
        }
        errno = error;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    /* The tuples of the regular files, then their status where their
     * names lack a date or a size (and the type of those readdir did not
     * give), the GIL released once. */
    int wanted = 0;
    Py_ssize_t i;
    for (i = 0; i < count; i++) {
        Read *read = &self->entries[i];
        const char *octets = self->names + read->offset;
        if (octets[0] == '.') {
            continue;
        }
        PyObject *name = PyUnicode_DecodeFSDefaultAndSize(octets, (Py_ssize_t)read->length);
        if (name == NULL) {
            goto failed;
        }
        read->scanned = name;
        if (read->type == DT_UNKNOWN) {
            read->wanted = 1;
        }
        else if (read->type == DT_REG && status) {
            /* The name's fields, as scannedFrom will find them. */
            PyObject *scanned = scannedFrom(name, index, Py_None, carry);
            if (scanned == NULL) {
                goto failed;
            }
            if (scanned == Py_None) {
                /* Not a message (scannedFrom's dotfile: skipped above). */
                Py_DECREF(scanned);
                Py_CLEAR(read->scanned);
                continue;
            }
            read->wanted = lacksFields(scanned);
            /* The name released: the tuple holds it. */
            Py_SETREF(read->scanned, scanned);
        }
        wanted |= read->wanted;
    }
    if (wanted) {
        Py_BEGIN_ALLOW_THREADS
        takeStatus(self, count);
        Py_END_ALLOW_THREADS
    }
    for (i = 0; i < count; i++) {
        Read *read = &self->entries[i];
        PyObject *held = read->scanned;
        if (held == NULL) {
            continue;
        }
        read->scanned = NULL;
        PyObject *scanned;
        if (PyTuple_Check(held)) {
            /* A regular file's tuple, made above. */
            if (read->wanted && fillFields(held, read) < 0) {
                Py_DECREF(held);
                goto failed;
            }
            scanned = held;
        }
        else {
            /* Its name: a regular file without status wanted, or the
             * others. */
            scanned = scannedEntry(read, held, index, carry, classify, status);
            Py_DECREF(held);
            if (scanned == NULL) {
                goto failed;
            }
        }
        int kept = scanned == Py_None ? 0 : keep(scanned, first, duplicates);
        Py_DECREF(scanned);
        if (kept < 0) {
            goto failed;
        }
    }
    self->busy = 0;
    return PyLong_FromSsize_t(count);
failed:
    for (i = 0; i < count; i++) {
        Py_CLEAR(self->entries[i].scanned);
    }
    self->busy = 0;
    return NULL;
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

/* The date and size a unique name gives (new references, None where it
 * gives none); -1 with an exception set. */
static INLINE int
fieldObjects(int kind, const void *data, Py_ssize_t length, PyObject **date, PyObject **size)
{
    Py_ssize_t dot = findChar(kind, data, 0, length, '.');
    long long when = headValue(kind, data, dot);
    if (when < 0) {
        *date = Py_NewRef(Py_None);
    }
    else {
        *date = PyFloat_FromDouble((double)when);
        if (*date == NULL) {
            return -1;
        }
    }
    *size = sizeValue(kind, data, length);
    if (*size == NULL) {
        if (PyErr_Occurred()) {
            Py_CLEAR(*date);
            return -1;
        }
        *size = Py_NewRef(Py_None);
    }
    return 0;
}

/* The same, of a str. */
static int
uniqueFields(PyObject *unique, PyObject **date, PyObject **size)
{
    if (PyUnicode_READY(unique) < 0) {
        return -1;
    }
    const void *data = PyUnicode_DATA(unique);
    Py_ssize_t length = PyUnicode_GET_LENGTH(unique);
    /* The common case (Latin-1, ASCII included) with the kind known, so
     * that each read is a byte's. */
    if (PyUnicode_KIND(unique) == PyUnicode_1BYTE_KIND) {
        return fieldObjects(PyUnicode_1BYTE_KIND, data, length, date, size);
    }
    return fieldObjects(PyUnicode_KIND(unique), data, length, date, size);
}

static PyObject *fieldsOfUnique(PyObject *unique);

static PyObject *
nameFields(PyObject *module, PyObject *unique)
{
    (void)module;
    if (!PyUnicode_Check(unique)) {
        PyErr_SetString(PyExc_TypeError, "nameFields: unique must be str");
        return NULL;
    }
    return fieldsOfUnique(unique);
}

/* nameFields of a str. */
static PyObject *
fieldsOfUnique(PyObject *unique)
{
    PyObject *date, *size;
    if (uniqueFields(unique, &date, &size) < 0) {
        return NULL;
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


PyDoc_STRVAR(directoryClose_doc, "close()\n--\n\nClose the directory (again: nothing).");

static PyObject *
directoryClose(Directory *self, PyObject *unused)
{
    (void)unused;
    if (self->busy) {
        PyErr_SetString(PyExc_ValueError, "Directory: being read");
        return NULL;
    }
    directoryRelease(self);
    Py_RETURN_NONE;
}

static PyObject *
directoryEnter(Directory *self, PyObject *unused)
{
    (void)unused;
    return Py_NewRef(self);
}

static PyObject *
directoryExit(Directory *self, PyObject *args)
{
    (void)args;
    return directoryClose(self, NULL);
}

static PyMethodDef directoryMethods[] = {
    {"scan", (PyCFunction)(void (*)(void))directoryScan, METH_FASTCALL, directoryScan_doc},
    {"close", (PyCFunction)directoryClose, METH_NOARGS, directoryClose_doc},
    {"__enter__", (PyCFunction)directoryEnter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)directoryExit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot directorySlots[] = {
    {Py_tp_doc, "Directory(fd)\n--\n\n"
                "A Maildir folder's cur/ or new/, read a turn of entries at a time (a\n"
                "duplicate of fd, read from its start, as os.scandir(fd) reads it)."},
    {Py_tp_init, directoryInit},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, directoryDealloc},
    {Py_tp_methods, directoryMethods},
    {0, NULL},
};

static PyType_Spec directorySpec = {
    "imapmig.sources._listing.Directory",
    sizeof(Directory),
    0,
    Py_TPFLAGS_DEFAULT,
    directorySlots,
};

PyDoc_STRVAR(rowsOf_doc,
             "rowsOf(scanned, flags, flagsOf, keywords, /)\n--\n\n"
             "What a Maildir listing sorts of each scanned file: (date or -inf, key,\n"
             "flags, size or 0), the flags of letters met first worked out by\n"
             "flagsOf(letters, keywords) and kept in flags.");

static PyObject *
rowsOf(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4 || !PyList_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "rowsOf(scanned: list, flags: dict, flagsOf, keywords)");
        return NULL;
    }
    PyObject *scanned = args[0], *flags = args[1], *flagsOf = args[2], *keywords = args[3];
    Py_ssize_t count = PyList_GET_SIZE(scanned);
    PyObject *rows = PyList_New(count);
    PyObject *undated = PyFloat_FromDouble(-Py_HUGE_VAL);
    PyObject *zero = PyLong_FromLong(0);
    if (rows == NULL || undated == NULL || zero == NULL) {
        goto failed;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *one = PyList_GET_ITEM(scanned, i);
        if (!PyTuple_Check(one) || PyTuple_GET_SIZE(one) != 8) {
            PyErr_SetString(PyExc_TypeError, "rowsOf: a scanned file is not an 8-tuple");
            goto failed;
        }
        PyObject *letters = PyTuple_GET_ITEM(one, 4);
        PyObject *flagged = PyDict_GetItemWithError(flags, letters);
        if (flagged == NULL) {
            if (PyErr_Occurred()) {
                goto failed;
            }
            PyObject *made = PyObject_CallFunctionObjArgs(flagsOf, letters, keywords, NULL);
            if (made == NULL) {
                goto failed;
            }
            int set = PyDict_SetItem(flags, letters, made);
            Py_DECREF(made);
            if (set < 0) {
                goto failed;
            }
            /* Borrowed from the dict, which holds it. */
            flagged = made;
        }
        PyObject *when = PyTuple_GET_ITEM(one, 6);
        PyObject *size = PyTuple_GET_ITEM(one, 7);
        int truth = size == Py_None ? 0 : PyObject_IsTrue(size);
        if (truth < 0) {
            goto failed;
        }
        PyObject *row = PyTuple_New(4);
        if (row == NULL) {
            goto failed;
        }
        PyTuple_SET_ITEM(row, 0, Py_NewRef(when == Py_None ? undated : when));
        PyTuple_SET_ITEM(row, 1, Py_NewRef(PyTuple_GET_ITEM(one, 0)));
        PyTuple_SET_ITEM(row, 2, Py_NewRef(flagged));
        PyTuple_SET_ITEM(row, 3, Py_NewRef(truth ? size : zero));
        if (PyFloat_CheckExact(PyTuple_GET_ITEM(row, 0)) && PyUnicode_CheckExact(PyTuple_GET_ITEM(row, 1))
            && PyLong_CheckExact(PyTuple_GET_ITEM(row, 3)) && !PyObject_GC_IsTracked(flagged)) {
            /* No reference cycle can go through it (as scannedFrom). */
            PyObject_GC_UnTrack(row);
        }
        PyList_SET_ITEM(rows, i, row);
    }
    Py_DECREF(undated);
    Py_DECREF(zero);
    return rows;
failed:
    Py_XDECREF(rows);
    Py_XDECREF(undated);
    Py_XDECREF(zero);
    return NULL;
}


PyDoc_STRVAR(addFiles_doc,
             "addFiles(scanned, names, irregulars, /)\n--\n\n"
             "Where scanned files are: names[index][key] = name for each, and\n"
             "irregulars[key] = irregular for those that are not regular files.");

static PyObject *
addFiles(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3 || !PyList_Check(args[0]) || !PyTuple_Check(args[1]) || !PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "addFiles(scanned: list, names: tuple, irregulars: dict)");
        return NULL;
    }
    PyObject *scanned = args[0], *names = args[1], *irregulars = args[2];
    Py_ssize_t subdirs = PyTuple_GET_SIZE(names);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(scanned); i++) {
        PyObject *one = PyList_GET_ITEM(scanned, i);
        if (!PyTuple_Check(one) || PyTuple_GET_SIZE(one) != 8 || !PyLong_Check(PyTuple_GET_ITEM(one, 2))) {
            PyErr_SetString(PyExc_TypeError, "addFiles: a scanned file is not an 8-tuple");
            return NULL;
        }
        Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(one, 2));
        if (index == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (index < 0 || index >= subdirs || !PyDict_Check(PyTuple_GET_ITEM(names, index))) {
            PyErr_SetString(PyExc_ValueError, "addFiles: no such subdirectory");
            return NULL;
        }
        PyObject *key = PyTuple_GET_ITEM(one, 0);
        if (PyDict_SetItem(PyTuple_GET_ITEM(names, index), key, PyTuple_GET_ITEM(one, 3)) < 0) {
            return NULL;
        }
        PyObject *irregular = PyTuple_GET_ITEM(one, 5);
        if (irregular != Py_None && PyDict_SetItem(irregulars, key, irregular) < 0) {
            return NULL;
        }
    }
    Py_RETURN_NONE;
}


PyDoc_STRVAR(datesRepeat_doc,
             "datesRepeat(rows, /)\n--\n\n"
             "Whether two neighbouring rows of the list have the same date (their\n"
             "first item, a float).");

static PyObject *
datesRepeat(PyObject *module, PyObject *rows)
{
    (void)module;
    if (!PyList_Check(rows)) {
        PyErr_SetString(PyExc_TypeError, "datesRepeat(rows: list)");
        return NULL;
    }
    double previous = 0.0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rows); i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) < 1 || !PyFloat_Check(PyTuple_GET_ITEM(row, 0))) {
            PyErr_SetString(PyExc_TypeError, "datesRepeat: a row does not start with a float");
            return NULL;
        }
        double date = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(row, 0));
        if (i > 0 && date == previous) {
            Py_RETURN_TRUE;
        }
        previous = date;
    }
    Py_RETURN_FALSE;
}

static int
listingExec(PyObject *module)
{
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) {
        return -1;
    }
    PyObject *directory = PyType_FromSpec(&directorySpec);
    if (directory == NULL) {
        return -1;
    }
    int added = PyModule_AddObjectRef(module, "Directory", directory);
    Py_DECREF(directory);
    return added;
}

static PyMethodDef listingMethods[] = {
    {"utcDatetime", (PyCFunction)utcDatetime, METH_O, utcDatetime_doc},
    {"nameFields", (PyCFunction)nameFields, METH_O, nameFields_doc},
    {"scannedOf", (PyCFunction)(void (*)(void))scannedOf, METH_FASTCALL, scannedOf_doc},
    {"listedMessages", (PyCFunction)(void (*)(void))listedMessages, METH_FASTCALL,
     listedMessages_doc},
    {"rowsOf", (PyCFunction)(void (*)(void))rowsOf, METH_FASTCALL, rowsOf_doc},
    {"addFiles", (PyCFunction)(void (*)(void))addFiles, METH_FASTCALL, addFiles_doc},
    {"datesRepeat", (PyCFunction)datesRepeat, METH_O, datesRepeat_doc},
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
