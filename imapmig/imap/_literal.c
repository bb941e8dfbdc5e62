/*
 * imapmig.imap._literal: a FETCH literal read into its final bytes (issue 31).
 *
 * LiteralBuffer(size) -> a writable buffer of size octets
 * LiteralBuffer.take([size]) -> bytes
 *
 * The same type as imapmig.imap.literal.LiteralBufferPython, which is the
 * reference and the fallback where this extension was not built (no
 * compiler); tests.test_imap_literal runs both on the same fills.
 *
 * A literal of a FETCH response (a message body) of known size ({N}) is
 * allocated once, as the bytes object the body will be, and filled where it
 * is: by recv_into on the socket (plain TCP), by OpenSSL's SSL_read (TLS),
 * or by a copy of the part of a read that holds it.  The buffer protocol
 * hands out the bytes object's own storage, writable, while the buffer
 * holds it alone: this is what CPython's socket.recv does with the bytes it
 * returns (PyBytes_FromStringAndSize(NULL, n), filled by recv), a bytes
 * object nobody else has seen yet.  take() hands the bytes over, once, and
 * only when no view of the storage is left (BufferError otherwise): from
 * then on it is an ordinary immutable bytes object (its hash not yet
 * computed), and the buffer is empty (a view of it fails; take() again
 * fails).  take(size) keeps only the first size octets: the bytes object
 * shrinks in place (_PyBytes_Resize, a realloc), which is how TLS's reads of
 * an unknown amount of plaintext become bytes (imapmig.imap.tls).
 *
 * Before: the octets of a literal were copied once more, from the reads
 * that brought them into bytes of their own (b"".join of the pieces, or
 * bytes() of a part of one read), and over TLS once more again, from the
 * shared plaintext buffer into the bytes of each read (about 33k and 35k
 * instructions a realistic message; bench/results/s2s.md).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>

typedef struct {
    PyObject_HEAD
    /* The bytes being filled; NULL once taken. */
    PyObject *bytes;
    /* Views of its storage handed out and not yet released. */
    Py_ssize_t exports;
} LiteralBuffer;

static PyObject *
LiteralBuffer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t size;
    static char *keywords[] = {"size", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n:LiteralBuffer", keywords, &size)) {
        return NULL;
    }
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "a literal's size cannot be negative");
        return NULL;
    }
    LiteralBuffer *self = (LiteralBuffer *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    /* Not zeroed: every octet is written before take() hands it over (the
     * caller's count says so).  Size 0 is the shared empty bytes, which a
     * view of length 0 never writes. */
    self->bytes = PyBytes_FromStringAndSize(NULL, size);
    if (self->bytes == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->exports = 0;
    return (PyObject *)self;
}

static void
LiteralBuffer_dealloc(LiteralBuffer *self)
{
    Py_XDECREF(self->bytes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
LiteralBuffer_getbuffer(LiteralBuffer *self, Py_buffer *view, int flags)
{
    if (self->bytes == NULL) {
        PyErr_SetString(PyExc_BufferError, "the literal was taken");
        view->obj = NULL;
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)self, PyBytes_AS_STRING(self->bytes),
                          PyBytes_GET_SIZE(self->bytes), 0, flags) < 0) {
        return -1;
    }
    self->exports++;
    return 0;
}

static void
LiteralBuffer_releasebuffer(LiteralBuffer *self, Py_buffer *view)
{
    self->exports--;
}

static PyBufferProcs LiteralBuffer_as_buffer = {
    (getbufferproc)LiteralBuffer_getbuffer,
    (releasebufferproc)LiteralBuffer_releasebuffer,
};

static PyObject *
LiteralBuffer_take(LiteralBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t size = -1;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "take() takes at most one argument (the octets to keep)");
        return NULL;
    }
    if (nargs == 1 && args[0] != Py_None) {
        size = PyNumber_AsSsize_t(args[0], PyExc_OverflowError);
        if (size == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (size < 0) {
            PyErr_SetString(PyExc_ValueError, "cannot keep fewer than 0 octets");
            return NULL;
        }
    }
    if (self->bytes == NULL) {
        PyErr_SetString(PyExc_ValueError, "the literal was taken already");
        return NULL;
    }
    if (self->exports > 0) {
        PyErr_SetString(PyExc_BufferError,
                        "a view of the literal is still held: it could still be written");
        return NULL;
    }
    PyObject *bytes = self->bytes;
    self->bytes = NULL;
    if (size >= 0 && size < PyBytes_GET_SIZE(bytes)) {
        /* Only this buffer ever held the bytes object (nobody has seen it):
         * it can still change size.  Shrinking reallocates in place (glibc's
         * realloc trims the block; an mmapped one is mremapped), no copy;
         * size 0 gives the shared empty bytes.  On failure bytes is freed
         * and NULL returned, with MemoryError set. */
        if (_PyBytes_Resize(&bytes, size) < 0) {
            return NULL;
        }
    }
    return bytes;
}

static Py_ssize_t
LiteralBuffer_length(LiteralBuffer *self)
{
    return self->bytes == NULL ? 0 : PyBytes_GET_SIZE(self->bytes);
}

static PySequenceMethods LiteralBuffer_as_sequence = {
    .sq_length = (lenfunc)LiteralBuffer_length,
};

static PyMethodDef LiteralBuffer_methods[] = {
    {"take", (PyCFunction)(void (*)(void))LiteralBuffer_take, METH_FASTCALL,
     "take(size=None) -> bytes\n\n"
     "The literal's octets as bytes, handed over once, when no view of them is\n"
     "held (BufferError otherwise); the buffer is empty after.  With size, only\n"
     "the first size octets (all of them if it has no more), with no copy."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LiteralBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "imapmig.imap._literal.LiteralBuffer",
    .tp_doc = "LiteralBuffer(size)\n\n"
              "A writable buffer of size octets that becomes, filled, the bytes of a\n"
              "literal (take()) with no copy.",
    .tp_basicsize = sizeof(LiteralBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = LiteralBuffer_new,
    .tp_dealloc = (destructor)LiteralBuffer_dealloc,
    .tp_as_buffer = &LiteralBuffer_as_buffer,
    .tp_as_sequence = &LiteralBuffer_as_sequence,
    .tp_methods = LiteralBuffer_methods,
};

/* readTLS(sslRead, ssl, buffer) -> (octets, last)
 *
 * OpenSSL's SSL_read (its address, sslRead, as cffi gives it: the C function
 * cryptography's bindings call) on the SSL at address ssl, into the writable
 * buffer, call after call (one TLS record each) while it gives octets and
 * the buffer has room: octets is what was read, last what the last call
 * returned (> 0: the buffer is full; <= 0: SSL_get_error says why it
 * stopped, usually that it wants more input).  What imapmig.imap.tls's
 * Python loop did with one cffi call (and a pointer object) a record: the
 * source's records are a few KiB each, about ten a message.  The GIL is
 * held: OpenSSL only decrypts from a memory BIO here, no system call. */
static PyObject *
literal_readTLS(PyObject *module, PyObject *args)
{
    unsigned long long readAddress, sslAddress;
    Py_buffer buffer;
    if (!PyArg_ParseTuple(args, "KKw*:readTLS", &readAddress, &sslAddress, &buffer)) {
        return NULL;
    }
    if (readAddress == 0 || sslAddress == 0) {
        PyBuffer_Release(&buffer);
        PyErr_SetString(PyExc_ValueError, "readTLS needs SSL_read's address and an SSL's");
        return NULL;
    }
    int (*sslRead)(void *, void *, int) = (int (*)(void *, void *, int))(uintptr_t)readAddress;
    void *ssl = (void *)(uintptr_t)sslAddress;
    Py_ssize_t total = 0;
    int last = 1;
    while (total < buffer.len) {
        Py_ssize_t wanted = buffer.len - total;
        if (wanted > INT_MAX) {
            wanted = INT_MAX;
        }
        last = sslRead(ssl, (char *)buffer.buf + total, (int)wanted);
        if (last <= 0) {
            break;
        }
        total += last;
    }
    PyBuffer_Release(&buffer);
    return Py_BuildValue("(ni)", total, last);
}

static PyMethodDef literalFunctions[] = {
    {"readTLS", literal_readTLS, METH_VARARGS,
     "readTLS(sslRead, ssl, buffer) -> (octets, last)\n\n"
     "SSL_read (at address sslRead) on the SSL at address ssl into buffer, while it\n"
     "gives octets and the buffer has room: the octets read and the last call's result."},
    {NULL, NULL, 0, NULL},
};

static int
literalExec(PyObject *module)
{
    if (PyType_Ready(&LiteralBufferType) < 0) {
        return -1;
    }
    Py_INCREF(&LiteralBufferType);
    if (PyModule_AddObject(module, "LiteralBuffer", (PyObject *)&LiteralBufferType) < 0) {
        Py_DECREF(&LiteralBufferType);
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot literalSlots[] = {
    {Py_mod_exec, (void *)literalExec},
    {0, NULL},
};

static struct PyModuleDef literalModule = {
    PyModuleDef_HEAD_INIT,
    "imapmig.imap._literal",
    "A FETCH literal read into its final bytes, in C.",
    0,
    literalFunctions,
    literalSlots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__literal(void)
{
    return PyModuleDef_Init(&literalModule);
}
