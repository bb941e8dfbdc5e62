/*
 * imapmig.job._sent: the job's per-message loops over SentMessages and
 * SourceMessages in C (issue 31, round 6; split from imapmig.imap._append,
 * an imap-layer module that made the job layer's objects): with two
 * connections the machine is CPU-bound, and what the interpreter spent a
 * message there is imapmig's share.
 *
 * bindSent(sentClass, sourceClass, unknown, needsBinary) -> None
 *
 *     Learn the slots of sentClass (imapmig.job.recording.SentMessage)
 *     and sourceClass (imapmig.mail.message.SourceMessage), and the facts
 *     (imapmig.mail.octets) that leave a body unknown and that make it
 *     need a literal8, for prepareMessages, appendedColumns and
 *     sourceKeys.  Called once, by imapmig.job.recording, at import.
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
 *
 * sourceKeys(messages) -> list
 *
 *     The same function as imapmig.job.recording.sourceKeysPython: the
 *     keys of a list of SourceMessages (a unit's, for its journal entry),
 *     or None if one is of another type.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>

#include "../_slots.h"

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
                found[i] = slotOffset(base, sentNames[i], "bindSent");
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

static PyMethodDef sentMethods[] = {
    {"bindSent", (PyCFunction)(void (*)(void))bindSent, METH_FASTCALL, bindSent_doc},
    {"prepareMessages", (PyCFunction)(void (*)(void))prepareMessages, METH_FASTCALL,
     prepareMessages_doc},
    {"appendedColumns", (PyCFunction)appendedColumns, METH_O, appendedColumns_doc},
    {"sourceKeys", (PyCFunction)sourceKeys, METH_O, sourceKeys_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef sentModule = {
    PyModuleDef_HEAD_INIT,
    "imapmig.job._sent",
    "The job's per-message loops over SentMessages in C (see imapmig.job.preparation).",
    -1,
    sentMethods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__sent(void)
{
    return PyModule_Create(&sentModule);
}
