/*
 * Slots of plain Python classes with __slots__, for dlog's C extensions:
 * each reads and writes them through the member descriptors' offsets,
 * found once (in its configure()).
 */
#ifndef DLOG_SLOTS_H
#define DLOG_SLOTS_H

#include <Python.h>
#include <structmember.h>

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* The offset of slot ``name`` of ``type`` (a member descriptor), or -1
 * with TypeError set. */
static Py_ssize_t
slot_offset(PyTypeObject *type, const char *name)
{
    PyObject *descr = PyObject_GetAttrString((PyObject *)type, name);
    if (descr == NULL)
        return -1;
    Py_ssize_t off = -1;
    if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyMemberDef *def = ((PyMemberDescrObject *)descr)->d_member;
        if (def->type == T_OBJECT_EX)
            off = def->offset;
    }
    Py_DECREF(descr);
    if (off < 0)
        PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ member", type->tp_name, name);
    return off;
}

#endif
