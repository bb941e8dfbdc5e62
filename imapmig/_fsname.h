/*
 * A file's name, given as str, as the os module encodes it for a system
 * call: an ASCII name is its own encoding (stored with a terminating NUL),
 * any other is encoded in the file system encoding with surrogateescape
 * for the octets that did not decode.  Used by imapmig/mail/_octets.c
 * (reading a Maildir's files); imapmig/sources/_listing.c, which shared
 * it, now reads its names from readdir(3) as octets.
 */
#ifndef IMAPMIG_FSNAME_H
#define IMAPMIG_FSNAME_H

#include <Python.h>
#include <string.h>

/*
 * Set *path to NAME's encoding; *encoded to the bytes holding it, or NULL
 * where NAME holds it (the caller releases it with Py_XDECREF).  Return 1,
 * 0 if the name holds a NUL (no such file can exist: *encoded set as for
 * 1), or -1 with an exception set.
 */
static int
fsName(PyObject *name, PyObject **encoded, const char **path)
{
    Py_ssize_t length;
    *encoded = NULL;
    if (PyUnicode_IS_COMPACT_ASCII(name)) {
        *path = (const char *)PyUnicode_DATA(name);
        length = PyUnicode_GET_LENGTH(name);
    }
    else {
        *encoded = PyUnicode_EncodeFSDefault(name);
        if (*encoded == NULL) {
            return -1;
        }
        *path = PyBytes_AS_STRING(*encoded);
        length = PyBytes_GET_SIZE(*encoded);
    }
    return (Py_ssize_t)strlen(*path) == length;
}

#endif
