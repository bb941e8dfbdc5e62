/*
 * imapmig.imap._append: the send side's per-message loops in C (issue 31,
 * round 6): with two connections the machine is CPU-bound, and what the
 * interpreter spent a message there is imapmig's share.
 *
 * bindOutgoing(cls) -> None
 *
 *     Learn where the slots body, arguments and binary of cls
 *     (imapmig.imap.outgoing.OutgoingMessage) are, so that
 *     appendLiterals reads them as their member descriptors do, with no
 *     lookup by name.  Called once, by imapmig.imap.pipeline, at import.
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
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

/* OutgoingMessage, and where its slots are in an instance. */
static PyTypeObject *outgoingType = NULL;
static Py_ssize_t bodyOffset = -1;
static Py_ssize_t argumentsOffset = -1;
static Py_ssize_t binaryOffset = -1;

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
             "Read the slots body, arguments and binary of instances of cls\n"
             "(OutgoingMessage) in appendLiterals.");

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
    if (binary < 0) {
        return NULL;
    }
    Py_INCREF(cls);
    Py_XSETREF(outgoingType, type);
    bodyOffset = body;
    argumentsOffset = arguments;
    binaryOffset = binary;
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

static PyMethodDef appendMethods[] = {
    {"bindOutgoing", (PyCFunction)bindOutgoing, METH_O, bindOutgoing_doc},
    {"appendLiterals", (PyCFunction)(void (*)(void))appendLiterals, METH_FASTCALL,
     appendLiterals_doc},
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
