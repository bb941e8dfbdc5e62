/*
 * imapmig.imap._append: the send side's per-message loops in C (issue 31,
 * round 6): with two connections the machine is CPU-bound, and what the
 * interpreter spent a message there is imapmig's share.  The job layer's
 * loops (making SentMessages, reading their outcomes' columns) are
 * imapmig/job/_sent.c's: this layer knows OutgoingMessage alone.
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
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <string.h>

#include "../_slots.h"

/* OutgoingMessage, and where its slots are in an instance. */
static PyTypeObject *outgoingType = NULL;
static Py_ssize_t bodyOffset = -1;
static Py_ssize_t argumentsOffset = -1;
static Py_ssize_t binaryOffset = -1;
static Py_ssize_t mailboxOffset = -1;

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
    Py_ssize_t body = slotOffset(type, "body", "bindOutgoing");
    Py_ssize_t arguments = body < 0 ? -1 : slotOffset(type, "arguments", "bindOutgoing");
    Py_ssize_t binary = arguments < 0 ? -1 : slotOffset(type, "binary", "bindOutgoing");
    Py_ssize_t mailbox = binary < 0 ? -1 : slotOffset(type, "mailbox", "bindOutgoing");
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
    {"stampMailbox", (PyCFunction)(void (*)(void))stampMailbox, METH_FASTCALL, stampMailbox_doc},
    {"leadingRun", (PyCFunction)(void (*)(void))leadingRun, METH_FASTCALL, leadingRun_doc},
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
