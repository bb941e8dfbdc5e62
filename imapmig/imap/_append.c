/*
 * imapmig.imap._append: the send side's per-message loops in C (issue 31,
 * round 6): with two connections the machine is CPU-bound, and what the
 * interpreter spent a message there is imapmig's share.
 *
 * bindOutgoing(cls) -> None
 *
 *     Learn where the slots body, arguments, binary and mailbox of cls
 *     (imapmig.imap.outgoing.OutgoingMessage) are, so that
 *     appendLiterals, stampMailbox and leadingRun read them as their
 *     member descriptors do, with no lookup by name.  Called once, by
 *     imapmig.imap.sendqueue, at import.
 *
 * appendLiterals(messages, start, limit, budget, out) -> (index, gathered)
 *
 *     The same function as imapmig.imap.pipeline.appendLiteralsPython,
 *     which is the reference and the fallback where this extension was not
 *     built; tests.test_imap_pipeline runs both on the same messages.  Per
 *     message of the list messages from start on, while budget (octets)
 *     is left: its literal's header (its arguments, " {" or " ~{" for a
 *     binary one, its size, "+}\r\n") and its body (bytes as they are, a
 *     bytearray as a memoryview of it) appended to the list out; it stops
 *     at the first message whose body is not bytes or bytearray or is
 *     larger than limit (a synchronizing or streamed literal, which the
 *     pipeline writes itself), returning its index and False, or once
 *     budget is spent, returning the index reached and True.  Python took
 *     a bytes formatting, three len() calls and about thirty bytecodes a
 *     message.
 *
 * stampMailbox(messages, mailbox) -> octets
 *
 *     The same function as imapmig.imap.sendqueue.stampMailboxPython: each
 *     OutgoingMessage of the list messages gets mailbox; the sum of their
 *     bodies' lengths comes back.
 *
 * leadingRun(batch, mailbox, limit) -> (count, octets)
 *
 *     The same function as imapmig.imap.sendqueue.leadingRunPython: how
 *     many messages lead the list batch for mailbox with no more than
 *     limit octets of bodies together, and those octets.
 *
 * sourceKeys(messages) -> list
 *
 *     The same function as imapmig.job.recording.sourceKeysPython: the
 *     keys of a list of SourceMessages (a unit's, for its journal entry),
 *     or None if one is of another type.
 *
 * sendPieces(fd, pieces) -> octets
 *
 *     The same as socket.sendmsg(pieces) on the socket whose descriptor is
 *     fd (imapmig.imap.gather's _sendmsg, its Python twin and fallback):
 *     one sendmsg(2) of the pieces (bytes, or memoryviews of contiguous
 *     buffers; at most IOV_MAX of them) as they are, the GIL released
 *     around the call; a full socket raises BlockingIOError, any other
 *     failure OSError; NotImplemented if a piece is of another type (for
 *     the caller to use socket.sendmsg).  socket.sendmsg parsed each piece with
 *     PyArg_Parse("y*") and took a buffer of it: about 260 instructions a
 *     piece, two pieces a message.
 *
 * bindSent(sentClass, sourceClass, unknown, needsBinary) -> None
 *
 *     Learn the slots of sentClass (imapmig.job.recording.SentMessage)
 *     and sourceClass (imapmig.mail.message.SourceMessage), and the facts
 *     (imapmig.mail.octets) that leave a body unknown and that make it
 *     need a literal8, for prepareMessages and appendedColumns.  Called once, by
 *     imapmig.job.recording, at import.
 *
 * prepareMessages(chunk, bodies, facts, start, decisions, binary,
 *                 sizeLimit, target, withInternalDate, out) -> index
 *
 *     The same function as imapmig.job.preparation.prepareMessagesPython,
 *     the reference and the fallback; tests.test_job_preparation runs both
 *     on the same messages.  Per message of chunk from start on, the
 *     common one (a SourceMessage, its body bytes whose facts its reader
 *     found, within sizeLimit, needing no literal8 or going to a
 *     destination with BINARY, its flags decided already in the dict
 *     decisions): a SentMessage made as object.__new__ makes it, its
 *     slots set as SentMessage(...) sets them, appended to out; it stops
 *     at the first other one, returning its index (len(chunk) at the end),
 *     for the job's preparation to decide in Python.  Python took about a
 *     hundred bytecodes a message.
 *
 * appendedColumns(messages) -> (keys, sizes, converted, octets,
 *                               convertedCount, listed) or None
 *
 *     The same function as imapmig.job.recording.appendedColumnsPython,
 *     the reference and the fallback; tests.test_job_recording runs both.
 *     For a tagged reply's SentMessages (a non-empty list) of one target,
 *     none with a note: the columns of their AppendedRun (their source
 *     keys, their sizes as sent, their conversions) and the sums the
 *     recorder counts (the octets sent, the conversions, the octets
 *     listed); None for any other list, which the job records message by
 *     message.  Python took five comprehensions, about forty bytecodes a
 *     message.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <string.h>

/* OutgoingMessage, and where its slots are in an instance. */
static PyTypeObject *outgoingType = NULL;
static Py_ssize_t bodyOffset = -1;
static Py_ssize_t argumentsOffset = -1;
static Py_ssize_t binaryOffset = -1;
static Py_ssize_t mailboxOffset = -1;

/* The offset of the object slot name of cls, or -1 with an error set. */
static Py_ssize_t
slotOffset(PyTypeObject *cls, const char *name)
{
    PyObject *descr = PyDict_GetItemString(cls->tp_dict, name);
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "bindOutgoing: %.100s has no slot %s", cls->tp_name, name);
        return -1;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX || (member->flags & READONLY)) {
        PyErr_Format(PyExc_TypeError, "bindOutgoing: %s is not an object slot", name);
        return -1;
    }
    return member->offset;
}

PyDoc_STRVAR(bindOutgoing_doc,
             "bindOutgoing(cls, /)\n--\n\n"
             "Read the slots body, arguments, binary and mailbox of instances of\n"
             "cls (OutgoingMessage) in appendLiterals, stampMailbox and leadingRun.");

static PyObject *
bindOutgoing(PyObject *module, PyObject *cls)
{
    (void)module;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "bindOutgoing needs a class");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    Py_ssize_t body = slotOffset(type, "body");
    Py_ssize_t arguments = body < 0 ? -1 : slotOffset(type, "arguments");
    Py_ssize_t binary = arguments < 0 ? -1 : slotOffset(type, "binary");
    Py_ssize_t mailbox = binary < 0 ? -1 : slotOffset(type, "mailbox");
    if (mailbox < 0) {
        return NULL;
    }
    Py_INCREF(cls);
    Py_XSETREF(outgoingType, type);
    bodyOffset = body;
    argumentsOffset = arguments;
    binaryOffset = binary;
    mailboxOffset = mailbox;
    Py_RETURN_NONE;
}

/* The slot at offset of an OutgoingMessage, borrowed, or NULL with
 * AttributeError set (an unset slot), as its descriptor's __get__. */
static inline PyObject *
slotOf(PyObject *message, Py_ssize_t offset, const char *name)
{
    PyObject *value = *(PyObject **)((char *)message + offset);
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%s'",
                     Py_TYPE(message)->tp_name, name);
    }
    return value;
}

/* Append the header of a literal of size octets after arguments to out:
 * 0, or -1 with an error set. */
static int
appendHeader(PyObject *out, PyObject *arguments, int binary, Py_ssize_t size)
{
    /* " ~{", the digits, "+}\r\n": written backwards from the end. */
    char tail[48];
    char *end = tail + sizeof tail;
    char *at = end;
    *--at = '\n';
    *--at = '\r';
    *--at = '}';
    *--at = '+';
    size_t value = (size_t)size;
    do {
        *--at = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    *--at = '{';
    if (binary) {
        *--at = '~';
    }
    *--at = ' ';
    Py_ssize_t tailLength = end - at;
    Py_ssize_t argumentsLength = PyBytes_GET_SIZE(arguments);
    PyObject *header = PyBytes_FromStringAndSize(NULL, argumentsLength + tailLength);
    if (header == NULL) {
        return -1;
    }
    char *into = PyBytes_AS_STRING(header);
    memcpy(into, PyBytes_AS_STRING(arguments), (size_t)argumentsLength);
    memcpy(into + argumentsLength, at, (size_t)tailLength);
    int failed = PyList_Append(out, header);
    Py_DECREF(header);
    return failed;
}

PyDoc_STRVAR(appendLiterals_doc,
             "appendLiterals(messages, start, limit, budget, out, /)\n--\n\n"
             "Append to out the non-synchronizing literals of messages from start\n"
             "on, up to the first one whose body is not bytes or bytearray or is\n"
             "larger than limit, or until budget octets are gathered; return the\n"
             "index reached and whether the budget stopped it.  See\n"
             "imapmig.imap.pipeline.appendLiteralsPython.");

static PyObject *
appendLiterals(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "appendLiterals takes exactly 5 arguments");
        return NULL;
    }
    PyObject *messages = args[0];
    PyObject *out = args[4];
    if (!PyList_Check(messages) || !PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "appendLiterals needs lists of messages and pieces");
        return NULL;
    }
    if (outgoingType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "appendLiterals: bindOutgoing was not called");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    /* The limit and the budget may be any int: clamped to what a size
     * can be (a body is never longer than PY_SSIZE_T_MAX). */
    int overflow;
    long long limit = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow) {
        limit = overflow > 0 ? LLONG_MAX : -1;
    }
    long long budget = PyLong_AsLongLongAndOverflow(args[3], &overflow);
    if (budget == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow) {
        budget = overflow > 0 ? LLONG_MAX : 0;
    }
    if (start < 0) {
        start = 0;
    }
    Py_ssize_t index = start;
    int gathered = 0;
    /* The list may change under a callback (none is made here but a
     * memoryview's creation): its size is read at each step. */
    for (; index < PyList_GET_SIZE(messages); index++) {
        if (budget <= 0) {
            gathered = 1;
            break;
        }
        PyObject *message = PyList_GET_ITEM(messages, index);
        if (!PyObject_TypeCheck(message, outgoingType)) {
            PyErr_Format(PyExc_TypeError, "appendLiterals: not an OutgoingMessage: %.100s",
                         Py_TYPE(message)->tp_name);
            return NULL;
        }
        PyObject *body = slotOf(message, bodyOffset, "body");
        if (body == NULL) {
            return NULL;
        }
        /* bytes as they are; a bytearray (or a subclass of either) as a
         * memoryview of it; anything else (a StreamedBody) stops. */
        Py_ssize_t size;
        int isBytes = PyBytes_CheckExact(body);
        if (isBytes || PyBytes_Check(body)) {
            size = PyBytes_GET_SIZE(body);
        } else if (PyByteArray_Check(body)) {
            size = PyByteArray_GET_SIZE(body);
        } else {
            break;
        }
        if ((long long)size > limit) {
            break;
        }
        PyObject *arguments = slotOf(message, argumentsOffset, "arguments");
        if (arguments == NULL) {
            return NULL;
        }
        if (!PyBytes_Check(arguments)) {
            PyErr_Format(PyExc_TypeError, "appendLiterals: arguments are %.100s, not bytes",
                         Py_TYPE(arguments)->tp_name);
            return NULL;
        }
        PyObject *binaryFlag = slotOf(message, binaryOffset, "binary");
        if (binaryFlag == NULL) {
            return NULL;
        }
        int binary = binaryFlag == Py_False ? 0
                     : binaryFlag == Py_True ? 1
                                             : PyObject_IsTrue(binaryFlag);
        if (binary < 0) {
            return NULL;
        }
        /* Held across the appends: out's growth runs no Python code, but
         * the message could be dropped by a list change elsewhere. */
        Py_INCREF(body);
        Py_INCREF(arguments);
        int failed = appendHeader(out, arguments, binary, size);
        Py_DECREF(arguments);
        if (failed == 0) {
            if (isBytes) {
                failed = PyList_Append(out, body);
            } else {
                PyObject *view = PyMemoryView_FromObject(body);
                failed = view == NULL ? -1 : PyList_Append(out, view);
                Py_XDECREF(view);
            }
        }
        Py_DECREF(body);
        if (failed) {
            return NULL;
        }
        budget -= size;
    }
    return Py_BuildValue("(nO)", index, gathered ? Py_True : Py_False);
}

/* SentMessage and SourceMessage, and where their slots are. */
static PyTypeObject *sentType = NULL;
static PyTypeObject *sourceType = NULL;
static Py_ssize_t sentBody, sentArguments, sentOrigin, sentMailbox, sentBinary, sentTarget,
    sentSource, sentNote, sentConverted;
static Py_ssize_t sourceKey, sourceFlags, sourceDate, sourceSize;
static unsigned long factsUnknown = 0, factsNeedBinary = 0;
static PyObject *emptyBytes = NULL;

PyDoc_STRVAR(bindSent_doc,
             "bindSent(sentClass, sourceClass, unknown, needsBinary, /)\n--\n\n"
             "Make SentMessages of sentClass from SourceMessages of sourceClass in\n"
             "prepareMessages; unknown and needsBinary are the facts' bits.");

static PyObject *
bindSent(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4 || !PyType_Check(args[0]) || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "bindSent takes two classes and two ints");
        return NULL;
    }
    PyTypeObject *sent = (PyTypeObject *)args[0];
    PyTypeObject *source = (PyTypeObject *)args[1];
    unsigned long unknown = PyLong_AsUnsignedLong(args[2]);
    if (unknown == (unsigned long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    unsigned long needsBinary = PyLong_AsUnsignedLong(args[3]);
    if (needsBinary == (unsigned long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    /* The slots of sent, wherever in its bases they are. */
    static const char *const sentNames[] = {
        "body", "arguments", "origin", "mailbox", "binary", "target", "source", "note", "converted",
    };
    Py_ssize_t *const sentOffsets[] = {
        &sentBody, &sentArguments, &sentOrigin, &sentMailbox, &sentBinary, &sentTarget,
        &sentSource, &sentNote, &sentConverted,
    };
    Py_ssize_t found[9];
    for (int i = 0; i < 9; i++) {
        found[i] = -1;
        PyObject *mro = sent->tp_mro;
        for (Py_ssize_t k = 0; mro != NULL && k < PyTuple_GET_SIZE(mro) && found[i] < 0; k++) {
            PyTypeObject *base = (PyTypeObject *)PyTuple_GET_ITEM(mro, k);
            if (PyDict_GetItemString(base->tp_dict, sentNames[i]) != NULL) {
                found[i] = slotOffset(base, sentNames[i]);
                if (found[i] < 0) {
                    return NULL;
                }
            }
        }
        if (found[i] < 0) {
            PyErr_Format(PyExc_TypeError, "bindSent: no slot %s", sentNames[i]);
            return NULL;
        }
    }
    /* SourceMessage is frozen (attrs): its slots are read, never set. */
    static const char *const sourceNames[] = {"flags", "internalDate", "size", "key"};
    Py_ssize_t sourceFound[4];
    for (int i = 0; i < 4; i++) {
        PyObject *descr = PyDict_GetItemString(source->tp_dict, sourceNames[i]);
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)
            || ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "bindSent: no slot %s", sourceNames[i]);
            return NULL;
        }
        sourceFound[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
    }
    if (emptyBytes == NULL && (emptyBytes = PyBytes_FromStringAndSize(NULL, 0)) == NULL) {
        return NULL;
    }
    for (int i = 0; i < 9; i++) {
        *sentOffsets[i] = found[i];
    }
    sourceFlags = sourceFound[0];
    sourceDate = sourceFound[1];
    sourceSize = sourceFound[2];
    sourceKey = sourceFound[3];
    Py_INCREF(sent);
    Py_XSETREF(sentType, sent);
    Py_INCREF(source);
    Py_XSETREF(sourceType, source);
    factsUnknown = unknown;
    factsNeedBinary = needsBinary;
    Py_RETURN_NONE;
}

/* Set the object slot at offset of a new object to value (a new
 * reference given to it). */
static inline void
setSlot(PyObject *object, Py_ssize_t offset, PyObject *value)
{
    *(PyObject **)((char *)object + offset) = value;
}

PyDoc_STRVAR(prepareMessages_doc,
             "prepareMessages(chunk, bodies, facts, start, decisions, binary, sizeLimit,\n"
             "                target, withInternalDate, out, /)\n--\n\n"
             "Append to out a SentMessage for each common message of chunk from\n"
             "start on, up to the first other one; return its index (or the end).\n"
             "See imapmig.job.preparation.prepareMessagesPython.");

static PyObject *
prepareMessages(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "prepareMessages takes exactly 10 arguments");
        return NULL;
    }
    PyObject *chunk = args[0], *bodies = args[1], *facts = args[2], *decisions = args[4];
    PyObject *sizeLimitArg = args[6], *target = args[7], *dated = args[8], *out = args[9];
    if (sentType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "prepareMessages: bindSent was not called");
        return NULL;
    }
    if (!PyList_Check(out) || !PyDict_Check(decisions)) {
        PyErr_SetString(PyExc_TypeError, "prepareMessages needs a dict of decisions, a list out");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[3]);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    int binaryOK = PyObject_IsTrue(args[5]);
    if (binaryOK < 0) {
        return NULL;
    }
    long long sizeLimit = LLONG_MAX;
    if (sizeLimitArg != Py_None) {
        int overflow;
        sizeLimit = PyLong_AsLongLongAndOverflow(sizeLimitArg, &overflow);
        if (sizeLimit == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (overflow) {
            sizeLimit = overflow > 0 ? LLONG_MAX : -1;
        }
    }
    /* Only the common shapes: a list or tuple of messages, a list of
     * bodies, facts as bytes or bytearray; anything else is Python's. */
    if (!(PyList_Check(chunk) || PyTuple_Check(chunk)) || !PyList_Check(bodies)
        || !(PyBytes_Check(facts) || PyByteArray_Check(facts))) {
        return PyLong_FromSsize_t(start);
    }
    Py_ssize_t index = start < 0 ? 0 : start;
    for (;; index++) {
        /* Read at each step: the lists could change under a call made
         * here (withInternalDate, a tuple's hash). */
        Py_ssize_t count = PySequence_Fast_GET_SIZE(chunk);
        if (PyList_GET_SIZE(bodies) < count) {
            count = PyList_GET_SIZE(bodies);
        }
        Py_ssize_t factsCount = PyBytes_Check(facts) ? PyBytes_GET_SIZE(facts)
                                                     : PyByteArray_GET_SIZE(facts);
        if (index >= count || index >= factsCount) {
            break;
        }
        PyObject *message = PySequence_Fast_GET_ITEM(chunk, index);
        PyObject *body = PyList_GET_ITEM(bodies, index);
        unsigned char found = PyBytes_Check(facts)
            ? (unsigned char)PyBytes_AS_STRING(facts)[index]
            : (unsigned char)PyByteArray_AS_STRING(facts)[index];
        if (!Py_IS_TYPE(message, sourceType) || !PyBytes_CheckExact(body) || (found & factsUnknown)) {
            break;
        }
        Py_ssize_t size = PyBytes_GET_SIZE(body);
        if ((long long)size > sizeLimit) {
            break;
        }
        int binary = 0;
        if (found & factsNeedBinary) {
            if (!binaryOK) {
                break;
            }
            binary = 1;
        }
        PyObject *flags = *(PyObject **)((char *)message + sourceFlags);
        PyObject *when = *(PyObject **)((char *)message + sourceDate);
        PyObject *listed = *(PyObject **)((char *)message + sourceSize);
        if (flags == NULL || when == NULL || listed == NULL || !PyLong_CheckExact(listed)) {
            break;
        }
        PyObject *decided = PyDict_GetItemWithError(decisions, flags);
        if (decided == NULL) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            break;
        }
        if (!PyTuple_CheckExact(decided) || PyTuple_GET_SIZE(decided) != 3) {
            PyErr_SetString(PyExc_TypeError, "prepareMessages: a decision is not a 3-tuple");
            return NULL;
        }
        Py_INCREF(decided);
        Py_INCREF(message);
        Py_INCREF(body);
        PyObject *arguments;
        if (when == Py_None) {
            arguments = PyTuple_GET_ITEM(decided, 1);
            Py_INCREF(arguments);
        } else {
            PyObject *callArgs[2] = {PyTuple_GET_ITEM(decided, 2), when};
            Py_INCREF(when);
            arguments = PyObject_Vectorcall(dated, callArgs, 2, NULL);
            Py_DECREF(when);
        }
        Py_ssize_t listedSize = arguments == NULL ? -1 : PyLong_AsSsize_t(listed);
        PyObject *sent = NULL;
        if (arguments != NULL && !(listedSize == -1 && PyErr_Occurred())) {
            sent = sentType->tp_alloc(sentType, 0);
        }
        if (sent == NULL) {
            Py_XDECREF(arguments);
            Py_DECREF(decided);
            Py_DECREF(message);
            Py_DECREF(body);
            return NULL;
        }
        PyObject *note = PyTuple_GET_ITEM(decided, 0);
        Py_INCREF(note);
        Py_DECREF(decided);
        setSlot(sent, sentBody, body);
        setSlot(sent, sentArguments, arguments);
        Py_INCREF(message);
        setSlot(sent, sentOrigin, message);
        setSlot(sent, sentSource, message);
        Py_INCREF(emptyBytes);
        setSlot(sent, sentMailbox, emptyBytes);
        setSlot(sent, sentBinary, Py_NewRef(binary ? Py_True : Py_False));
        setSlot(sent, sentTarget, Py_NewRef(target));
        setSlot(sent, sentNote, note);
        setSlot(sent, sentConverted, PyLong_FromLong(size != listedSize ? 1 : 0));
        int failed = PyList_Append(out, sent);
        Py_DECREF(sent);
        if (failed) {
            return NULL;
        }
    }
    return PyLong_FromSsize_t(index);
}

/* The slot at offset of object, borrowed; NULL if unset. */
static inline PyObject *
slotAt(PyObject *object, Py_ssize_t offset)
{
    return *(PyObject **)((char *)object + offset);
}

PyDoc_STRVAR(appendedColumns_doc,
             "appendedColumns(messages, /)\n--\n\n"
             "The keys, sizes and conversions of messages (SentMessages of one\n"
             "target, none with a note), the octets sent, the conversions and the\n"
             "octets listed; None for any other list.  See\n"
             "imapmig.job.recording.appendedColumnsPython.");

static PyObject *
appendedColumns(PyObject *module, PyObject *messages)
{
    (void)module;
    if (sentType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "appendedColumns: bindSent was not called");
        return NULL;
    }
    if (!PyList_Check(messages) || PyList_GET_SIZE(messages) == 0) {
        Py_RETURN_NONE;
    }
    Py_ssize_t count = PyList_GET_SIZE(messages);
    PyObject *target = NULL;
    /* First the checks, which make nothing: the messages are of one
     * target, none has a note, each has what the columns take. */
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *message = PyList_GET_ITEM(messages, i);
        if (!Py_IS_TYPE(message, sentType)) {
            Py_RETURN_NONE;
        }
        PyObject *messageTarget = slotAt(message, sentTarget);
        PyObject *note = slotAt(message, sentNote);
        PyObject *source = slotAt(message, sentSource);
        PyObject *converted = slotAt(message, sentConverted);
        PyObject *body = slotAt(message, sentBody);
        if (i == 0) {
            target = messageTarget;
        }
        if (messageTarget == NULL || messageTarget != target || note != Py_None || source == NULL
            || !Py_IS_TYPE(source, sourceType) || converted == NULL
            || !PyLong_CheckExact(converted) || body == NULL
            || !(PyBytes_Check(body) || PyByteArray_Check(body))) {
            Py_RETURN_NONE;
        }
        PyObject *key = slotAt(source, sourceKey);
        PyObject *listed = slotAt(source, sourceSize);
        if (key == NULL || listed == NULL || !PyLong_CheckExact(listed)) {
            Py_RETURN_NONE;
        }
    }
    PyObject *keys = PyList_New(count);
    PyObject *sizes = PyList_New(count);
    PyObject *conversions = PyList_New(count);
    if (keys == NULL || sizes == NULL || conversions == NULL) {
        goto failed;
    }
    long long octets = 0, convertedCount = 0, listedOctets = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        /* Checked again: making the lists may have run a collection, and
         * a finalizer could change the list or its messages. */
        if (PyList_GET_SIZE(messages) != count) {
            goto changed;
        }
        PyObject *message = PyList_GET_ITEM(messages, i);
        PyObject *source = slotAt(message, sentSource);
        PyObject *converted = slotAt(message, sentConverted);
        PyObject *body = slotAt(message, sentBody);
        if (!Py_IS_TYPE(message, sentType) || source == NULL || !Py_IS_TYPE(source, sourceType)
            || converted == NULL || !PyLong_CheckExact(converted) || body == NULL
            || !(PyBytes_Check(body) || PyByteArray_Check(body)) || slotAt(source, sourceKey) == NULL
            || slotAt(source, sourceSize) == NULL || !PyLong_CheckExact(slotAt(source, sourceSize))) {
            goto changed;
        }
        Py_ssize_t size = PyBytes_Check(body) ? PyBytes_GET_SIZE(body) : PyByteArray_GET_SIZE(body);
        PyObject *sizeObject = PyLong_FromSsize_t(size);
        if (sizeObject == NULL) {
            goto failed;
        }
        PyList_SET_ITEM(sizes, i, sizeObject);
        PyList_SET_ITEM(keys, i, Py_NewRef(slotAt(source, sourceKey)));
        PyList_SET_ITEM(conversions, i, Py_NewRef(converted));
        long long one = PyLong_AsLongLong(converted);
        long long listed = PyLong_AsLongLong(slotAt(source, sourceSize));
        if ((one == -1 || listed == -1) && PyErr_Occurred()) {
            goto failed;
        }
        octets += size;
        convertedCount += one;
        listedOctets += listed;
    }
    return Py_BuildValue("(NNNLLL)", keys, sizes, conversions, octets, convertedCount,
                         listedOctets);
changed:
    Py_DECREF(keys);
    Py_DECREF(sizes);
    Py_DECREF(conversions);
    Py_RETURN_NONE;
failed:
    Py_XDECREF(keys);
    Py_XDECREF(sizes);
    Py_XDECREF(conversions);
    return NULL;
}

/* The length of a message's body: bytes, bytearray, or len() of any
 * other (a StreamedBody); -1 with an error set. */
static inline Py_ssize_t
bodyLength(PyObject *message)
{
    PyObject *body = slotOf(message, bodyOffset, "body");
    if (body == NULL) {
        return -1;
    }
    if (PyBytes_Check(body)) {
        return PyBytes_GET_SIZE(body);
    }
    if (PyByteArray_Check(body)) {
        return PyByteArray_GET_SIZE(body);
    }
    Py_INCREF(body);
    Py_ssize_t length = PyObject_Size(body);
    Py_DECREF(body);
    return length;
}

/* messages is a list of OutgoingMessages: 0, or -1 with an error set. */
static int
checkMessages(PyObject *messages, const char *function)
{
    if (outgoingType == NULL) {
        PyErr_Format(PyExc_RuntimeError, "%s: bindOutgoing was not called", function);
        return -1;
    }
    if (!PyList_Check(messages)) {
        PyErr_Format(PyExc_TypeError, "%s needs a list", function);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(messages); i++) {
        if (!PyObject_TypeCheck(PyList_GET_ITEM(messages, i), outgoingType)) {
            PyErr_Format(PyExc_TypeError, "%s: not an OutgoingMessage", function);
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(stampMailbox_doc,
             "stampMailbox(messages, mailbox, /)\n--\n\n"
             "Give each of messages mailbox; return the octets of their bodies.\n"
             "See imapmig.imap.sendqueue.stampMailboxPython.");

static PyObject *
stampMailbox(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "stampMailbox takes exactly 2 arguments");
        return NULL;
    }
    PyObject *messages = args[0], *mailbox = args[1];
    if (checkMessages(messages, "stampMailbox") < 0) {
        return NULL;
    }
    long long octets = 0;
    /* The size is read at each step: len() of a streamed body runs
     * Python code. */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(messages); i++) {
        PyObject *message = PyList_GET_ITEM(messages, i);
        Py_INCREF(message);
        PyObject **slot = (PyObject **)((char *)message + mailboxOffset);
        PyObject *old = *slot;
        Py_INCREF(mailbox);
        *slot = mailbox;
        Py_XDECREF(old);
        Py_ssize_t length = bodyLength(message);
        Py_DECREF(message);
        if (length < 0) {
            return NULL;
        }
        octets += length;
    }
    return PyLong_FromLongLong(octets);
}

PyDoc_STRVAR(leadingRun_doc,
             "leadingRun(batch, mailbox, limit, /)\n--\n\n"
             "How many messages lead batch for mailbox with at most limit octets\n"
             "of bodies together, and their octets.  See\n"
             "imapmig.imap.sendqueue.leadingRunPython.");

static PyObject *
leadingRun(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "leadingRun takes exactly 3 arguments");
        return NULL;
    }
    PyObject *batch = args[0], *mailbox = args[1];
    if (checkMessages(batch, "leadingRun") < 0) {
        return NULL;
    }
    int overflow;
    long long limit = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow) {
        limit = overflow > 0 ? LLONG_MAX : -1;
    }
    long long octets = 0;
    Py_ssize_t count = 0;
    for (; count < PyList_GET_SIZE(batch); count++) {
        PyObject *message = PyList_GET_ITEM(batch, count);
        PyObject *its = slotOf(message, mailboxOffset, "mailbox");
        if (its == NULL) {
            return NULL;
        }
        if (its != mailbox) {
            Py_INCREF(message);
            Py_INCREF(its);
            int same = PyObject_RichCompareBool(its, mailbox, Py_EQ);
            Py_DECREF(its);
            Py_DECREF(message);
            if (same < 0) {
                return NULL;
            }
            if (!same) {
                break;
            }
        }
        Py_INCREF(message);
        Py_ssize_t length = bodyLength(message);
        Py_DECREF(message);
        if (length < 0) {
            return NULL;
        }
        if (octets + length > limit) {
            break;
        }
        octets += length;
    }
    return Py_BuildValue("(nL)", count, octets);
}

PyDoc_STRVAR(sourceKeys_doc,
             "sourceKeys(messages, /)\n--\n\n"
             "The keys of messages, a list or tuple of SourceMessages; None if one\n"
             "is of another type.  See imapmig.job.recording.sourceKeysPython.");

static PyObject *
sourceKeys(PyObject *module, PyObject *messages)
{
    (void)module;
    if (sourceType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "sourceKeys: bindSent was not called");
        return NULL;
    }
    if (!PyList_Check(messages) && !PyTuple_Check(messages)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(messages);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *message = PySequence_Fast_GET_ITEM(messages, i);
        if (!Py_IS_TYPE(message, sourceType) || slotAt(message, sourceKey) == NULL) {
            Py_RETURN_NONE;
        }
    }
    PyObject *keys = PyList_New(count);
    if (keys == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *message = PySequence_Fast_GET_ITEM(messages, i);
        PyList_SET_ITEM(keys, i, Py_NewRef(slotAt(message, sourceKey)));
    }
    return keys;
}

PyDoc_STRVAR(sendPieces_doc,
             "sendPieces(fd, pieces, /)\n--\n\n"
             "socket.sendmsg(pieces) on the socket of descriptor fd, for pieces of\n"
             "bytes and memoryviews: the octets sent.");

/* The most pieces sendPieces takes without allocating its iovec. */
#define STACK_PIECES 64

static PyObject *
sendPieces(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "sendPieces takes exactly 2 arguments");
        return NULL;
    }
    long descriptor = PyLong_AsLong(args[0]);
    if (descriptor == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (descriptor < 0 || descriptor > INT_MAX) {
        /* A closed socket's fileno() is -1: as sendmsg(2) on it. */
        errno = EBADF;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    int fd = (int)descriptor;
    /* A tuple of the pieces holds each of them (and so its buffer) while
     * the GIL is released, whatever becomes of the caller's list. */
    PyObject *pieces = PySequence_Tuple(args[1]);
    if (pieces == NULL) {
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(pieces);
    long iovMax = sysconf(_SC_IOV_MAX);
    if (iovMax <= 0) {
        iovMax = 1024;
    }
    if (count > iovMax) {
        Py_DECREF(pieces);
        PyErr_SetString(PyExc_OSError, "sendPieces: more pieces than IOV_MAX");
        return NULL;
    }
    struct iovec stackVectors[STACK_PIECES];
    struct iovec *vectors = stackVectors;
    if (count > STACK_PIECES) {
        vectors = PyMem_New(struct iovec, (size_t)count);
        if (vectors == NULL) {
            Py_DECREF(pieces);
            return PyErr_NoMemory();
        }
    }
    PyObject *result = NULL;
    /* Bytes cannot change, and a memoryview's export keeps its buffer. */
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *piece = PyTuple_GET_ITEM(pieces, i);
        if (PyBytes_Check(piece)) {
            vectors[i].iov_base = PyBytes_AS_STRING(piece);
            vectors[i].iov_len = (size_t)PyBytes_GET_SIZE(piece);
        } else if (PyMemoryView_Check(piece)) {
            Py_buffer *view = PyMemoryView_GET_BUFFER(piece);
            if (((PyMemoryViewObject *)piece)->flags & _Py_MEMORYVIEW_RELEASED) {
                PyErr_SetString(PyExc_ValueError,
                                "operation forbidden on released memoryview object");
                goto done;
            }
            if (!PyBuffer_IsContiguous(view, 'C')) {
                PyErr_SetString(PyExc_BufferError,
                                "memoryview: underlying buffer is not C-contiguous");
                goto done;
            }
            vectors[i].iov_base = view->buf;
            vectors[i].iov_len = (size_t)view->len;
        } else {
            /* Any other piece: socket.sendmsg's (the caller's fallback). */
            result = Py_NewRef(Py_NotImplemented);
            goto done;
        }
    }
    struct msghdr header;
    memset(&header, 0, sizeof header);
    header.msg_iov = vectors;
    header.msg_iovlen = (size_t)count;
    ssize_t sent;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        sent = sendmsg(fd, &header, 0);
        Py_END_ALLOW_THREADS
        if (sent >= 0 || errno != EINTR) {
            break;
        }
        /* As socket.sendmsg: a signal's handler runs, then it goes on. */
        if (PyErr_CheckSignals() < 0) {
            goto done;
        }
    }
    if (sent < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    result = PyLong_FromSsize_t(sent);
done:
    if (vectors != stackVectors) {
        PyMem_Free(vectors);
    }
    Py_DECREF(pieces);
    return result;
}

static PyMethodDef appendMethods[] = {
    {"bindOutgoing", (PyCFunction)bindOutgoing, METH_O, bindOutgoing_doc},
    {"appendLiterals", (PyCFunction)(void (*)(void))appendLiterals, METH_FASTCALL,
     appendLiterals_doc},
    {"bindSent", (PyCFunction)(void (*)(void))bindSent, METH_FASTCALL, bindSent_doc},
    {"prepareMessages", (PyCFunction)(void (*)(void))prepareMessages, METH_FASTCALL,
     prepareMessages_doc},
    {"appendedColumns", (PyCFunction)appendedColumns, METH_O, appendedColumns_doc},
    {"stampMailbox", (PyCFunction)(void (*)(void))stampMailbox, METH_FASTCALL, stampMailbox_doc},
    {"leadingRun", (PyCFunction)(void (*)(void))leadingRun, METH_FASTCALL, leadingRun_doc},
    {"sourceKeys", (PyCFunction)sourceKeys, METH_O, sourceKeys_doc},
    {"sendPieces", (PyCFunction)(void (*)(void))sendPieces, METH_FASTCALL, sendPieces_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef appendModule = {
    PyModuleDef_HEAD_INIT,
    "imapmig.imap._append",
    "The send side's per-message loops in C (see imapmig.imap.pipeline).",
    -1,
    appendMethods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__append(void)
{
    return PyModule_Create(&appendModule);
}
