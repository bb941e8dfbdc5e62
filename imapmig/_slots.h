/*
 * An instance's object slots (__slots__ entries) found once by their
 * member descriptors' offsets, then read and set at those offsets with no
 * lookup by name.  Shared by imapmig/imap/_append.c (OutgoingMessage's
 * slots) and imapmig/job/_sent.c (SentMessage's and SourceMessage's),
 * which were one extension until the two layers' code was split.
 */
#ifndef IMAPMIG_SLOTS_H
#define IMAPMIG_SLOTS_H

#include <Python.h>
#include <structmember.h>

/*
 * The offset of the writable object slot name of cls, or -1 with
 * TypeError set (its message names function, the caller).
 */
static Py_ssize_t
slotOffset(PyTypeObject *cls, const char *name, const char *function)
{
    PyObject *descr = PyDict_GetItemString(cls->tp_dict, name);
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "%s: %.100s has no slot %s", function, cls->tp_name, name);
        return -1;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX || (member->flags & READONLY)) {
        PyErr_Format(PyExc_TypeError, "%s: %s is not an object slot", function, name);
        return -1;
    }
    return member->offset;
}

/* The slot at offset of object, borrowed; NULL if unset. */
static inline PyObject *
slotAt(PyObject *object, Py_ssize_t offset)
{
    return *(PyObject **)((char *)object + offset);
}

/* The slot at offset of object, borrowed, or NULL with AttributeError set
 * (an unset slot), as its descriptor's __get__. */
static inline PyObject *
slotOf(PyObject *object, Py_ssize_t offset, const char *name)
{
    PyObject *value = slotAt(object, offset);
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%s'",
                     Py_TYPE(object)->tp_name, name);
    }
    return value;
}

/* Set the object slot at offset of a new object to value (a new
 * reference given to it). */
static inline void
setSlot(PyObject *object, Py_ssize_t offset, PyObject *value)
{
    *(PyObject **)((char *)object + offset) = value;
}

#endif
