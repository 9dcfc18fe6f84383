/*
 * dlog.protocol._add_codec: the add request and response of BookKeeper's v3
 * wire protocol, encoded and decoded in C.
 *
 * Adds are a bookie's hottest path, and a ledger client's. dlog.protocol.messages
 * encodes and decodes them by hand, without protobuf's message objects, in
 * exactly protobuf's bytes; this module does the same work in C, byte for
 * byte the same (tests/unit/test_wire_fast_path.py holds all of them to the
 * generated protobuf code). The decoder accepts exactly the requests the
 * Python one accepts -- an add in the canonical shape BookKeeper's clients
 * write -- and declines everything else with None, for protobuf to parse.
 * The extension is optional: without it, dlog.protocol.messages runs its
 * Python twins.
 *
 * Layout (protobuf field numbers from proto/bookkeeper.proto):
 *   Request  { 1: header { 1: version=3, 2: operation=ADD_ENTRY(2), 3: txnId,
 *                          [4: priority] },
 *              101: addRequest { 1: ledgerId, 2: entryId, 3: masterKey,
 *                                4: body, [100: flag=RECOVERY_ADD(1)] } }
 *   Response { 1: header { 1: 3, 2: 2, 3: txnId }, 2: status,
 *              101: addResponse { 1: status, 2: ledgerId, 3: entryId } }
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include "../_slots.h"
#include <stdint.h>
#include <string.h>

#define VERSION_THREE 3
#define ADD_ENTRY 2
#define RECOVERY_ADD 1

static PyTypeObject *frame_type; /* AddFrame */
static Py_ssize_t off_txn, off_lid, off_eid, off_key, off_body, off_recovery;

static PyObject *
configure(PyObject *self, PyObject *args)
{
    PyTypeObject *type;
    if (!PyArg_ParseTuple(args, "O!", &PyType_Type, &type))
        return NULL;
    if ((off_txn = slot_offset(type, "txn_id")) < 0 ||
        (off_lid = slot_offset(type, "ledger_id")) < 0 ||
        (off_eid = slot_offset(type, "entry_id")) < 0 ||
        (off_key = slot_offset(type, "master_key")) < 0 ||
        (off_body = slot_offset(type, "body")) < 0 ||
        (off_recovery = slot_offset(type, "recovery")) < 0)
        return NULL;
    Py_XSETREF(frame_type, (PyTypeObject *)Py_NewRef(type));
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------- varints */

/* A varint at *pos of at most ``max`` bytes (the last under 0x80): its value
 * into *out (0 if it is over 64 bits: *big is set), *pos past it. 0 when
 * there is none (too long, or the input ends). */
static int
read_varint(const uint8_t *p, Py_ssize_t n, Py_ssize_t *pos, int max, uint64_t *out, int *big)
{
    uint64_t value = 0;
    *big = 0;
    for (int i = 0; i < max; i++) {
        if (*pos >= n)
            return 0;
        uint8_t b = p[(*pos)++];
        uint64_t bits = b & 0x7f;
        if (i == 9 && bits > 1)
            *big = 1;
        else
            value |= bits << (7 * i);
        if (b < 0x80) {
            *out = *big ? 0 : value;
            return 1;
        }
    }
    return 0;
}

static Py_ssize_t
varint_size(uint64_t v)
{
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *
put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* ------------------------------------------------------- packet header */

/* Bytes of field 1 (the BKPacketHeader of an ADD_ENTRY with ``txn``), its
 * tag and length included. */
static Py_ssize_t
header_size(uint64_t txn)
{
    Py_ssize_t body = 5 + varint_size(txn);
    return 1 + varint_size((uint64_t)body) + body;
}

/* Writes field 1: header { version=3, operation=ADD_ENTRY, txnId }. */
static uint8_t *
put_header(uint8_t *q, uint64_t txn)
{
    *q++ = 0x0a;
    q = put_varint(q, (uint64_t)(5 + varint_size(txn)));
    *q++ = 0x08;
    *q++ = VERSION_THREE;
    *q++ = 0x10;
    *q++ = ADD_ENTRY;
    *q++ = 0x18;
    return put_varint(q, txn);
}

/* ------------------------------------------------------------ add request */

/*
 * decode_add_request(data) -> AddFrame | None
 *
 * The same grammar as dlog.protocol.messages' regular expression: header
 * {08 03 10 02 18 txn [20 priority]} ending where "aa 06" (addRequest)
 * begins, addRequest's length reaching exactly the end of the request,
 * {08 lid 10 eid 1a keylen key 22 bodylen(at most 5 bytes) body [a0 06 01]}.
 */
static PyObject *
decode_add_request(PyObject *self, PyObject *arg)
{
    if (frame_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "dlog.protocol._add_codec is not configured");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *p = view.buf;
    const Py_ssize_t n = view.len;
    Py_ssize_t pos = 0;
    uint64_t header_len, txn, priority, sub_len, lid, eid, key_len, body_len;
    int big_txn, big, big_lid, big_eid;
    PyObject *frame = NULL;

    if (n < 8 || p[0] != 0x0a || p[1] >= 0x80 || p[2] != 0x08 || p[3] != VERSION_THREE ||
        p[4] != 0x10 || p[5] != ADD_ENTRY || p[6] != 0x18)
        goto decline;
    header_len = p[1];
    pos = 7;
    if (!read_varint(p, n, &pos, 10, &txn, &big_txn))
        goto decline;
    if (pos < n && p[pos] == 0x20) {
        pos++;
        if (!read_varint(p, n, &pos, 10, &priority, &big))
            goto decline;
    }
    if (pos + 2 > n || p[pos] != 0xaa || p[pos + 1] != 0x06)
        goto decline;
    pos += 2;
    if ((uint64_t)pos != 4 + header_len) /* the header ends where addRequest starts */
        goto decline;
    if (!read_varint(p, n, &pos, 10, &sub_len, &big) || big || sub_len != (uint64_t)(n - pos))
        goto decline;
    if (pos >= n || p[pos++] != 0x08 || !read_varint(p, n, &pos, 10, &lid, &big_lid))
        goto decline;
    if (pos >= n || p[pos++] != 0x10 || !read_varint(p, n, &pos, 10, &eid, &big_eid))
        goto decline;
    if (pos >= n || p[pos++] != 0x1a || !read_varint(p, n, &pos, 10, &key_len, &big))
        goto decline;
    if (big_txn || big_lid || big_eid) /* over 64 bits: protobuf's to judge */
        goto decline;
    if (big || key_len >= (uint64_t)(n - pos))
        goto decline;
    const Py_ssize_t key_at = pos;
    pos += (Py_ssize_t)key_len;
    if (p[pos++] != 0x22 || !read_varint(p, n, &pos, 5, &body_len, &big))
        goto decline;
    const Py_ssize_t body_at = pos;
    int recovery;
    if (body_len == (uint64_t)(n - body_at))
        recovery = 0;
    else if (body_len + 3 == (uint64_t)(n - body_at) && p[n - 3] == 0xa0 && p[n - 2] == 0x06 &&
             p[n - 1] == RECOVERY_ADD)
        recovery = 1;
    else
        goto decline;

    frame = frame_type->tp_alloc(frame_type, 0);
    if (frame == NULL)
        goto error;
    PyObject *v;
    if ((v = PyLong_FromUnsignedLongLong(txn)) == NULL)
        goto error;
    SLOT(frame, off_txn) = v;
    /* int64s travel as their two's complement */
    if ((v = PyLong_FromLongLong((long long)lid)) == NULL)
        goto error;
    SLOT(frame, off_lid) = v;
    if ((v = PyLong_FromLongLong((long long)eid)) == NULL)
        goto error;
    SLOT(frame, off_eid) = v;
    if ((v = PyBytes_FromStringAndSize((const char *)p + key_at, (Py_ssize_t)key_len)) == NULL)
        goto error;
    SLOT(frame, off_key) = v;
    if ((v = PyBytes_FromStringAndSize((const char *)p + body_at, (Py_ssize_t)body_len)) == NULL)
        goto error;
    SLOT(frame, off_body) = v;
    SLOT(frame, off_recovery) = Py_NewRef(recovery ? Py_True : Py_False);
    PyBuffer_Release(&view);
    return frame;
decline:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    Py_XDECREF(frame);
    PyBuffer_Release(&view);
    return NULL;
}

/*
 * encode_add_request(txn, ledger_id, entry_id, master_key, body, recovery) -> bytes
 */
static PyObject *
encode_add_request(PyObject *self, PyObject *args)
{
    unsigned long long txn;
    long long lid, eid;
    Py_buffer key, body;
    int recovery = 0;
    if (!PyArg_ParseTuple(args, "KLLy*y*|p", &txn, &lid, &eid, &key, &body, &recovery))
        return NULL;
    Py_ssize_t sub = 1 + varint_size((uint64_t)lid) + 1 + varint_size((uint64_t)eid) + 1 +
                     varint_size((uint64_t)key.len) + key.len + 1 +
                     varint_size((uint64_t)body.len) + body.len + (recovery ? 3 : 0);
    Py_ssize_t total = header_size(txn) + 2 + varint_size((uint64_t)sub) + sub;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out != NULL) {
        uint8_t *q = put_header((uint8_t *)PyBytes_AS_STRING(out), txn);
        *q++ = 0xaa;
        *q++ = 0x06;
        q = put_varint(q, (uint64_t)sub);
        *q++ = 0x08;
        q = put_varint(q, (uint64_t)lid);
        *q++ = 0x10;
        q = put_varint(q, (uint64_t)eid);
        *q++ = 0x1a;
        q = put_varint(q, (uint64_t)key.len);
        memcpy(q, key.buf, key.len);
        q += key.len;
        *q++ = 0x22;
        q = put_varint(q, (uint64_t)body.len);
        memcpy(q, body.buf, body.len);
        q += body.len;
        if (recovery) {
            *q++ = 0xa0;
            *q++ = 0x06;
            *q++ = RECOVERY_ADD;
        }
    }
    PyBuffer_Release(&key);
    PyBuffer_Release(&body);
    return out;
}

/* ----------------------------------------------------------- add response */

/*
 * encode_add_response(txn, status, ledger_id, entry_id) -> bytes
 */
static PyObject *
encode_add_response(PyObject *self, PyObject *args)
{
    unsigned long long txn;
    long long status, lid, eid;
    if (!PyArg_ParseTuple(args, "KLLL", &txn, &status, &lid, &eid))
        return NULL;
    Py_ssize_t sub = 1 + varint_size((uint64_t)status) + 1 + varint_size((uint64_t)lid) + 1 +
                     varint_size((uint64_t)eid);
    Py_ssize_t total = header_size(txn) + 1 + varint_size((uint64_t)status) + 2 +
                       varint_size((uint64_t)sub) + sub;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    uint8_t *q = put_header((uint8_t *)PyBytes_AS_STRING(out), txn);
    *q++ = 0x10;
    q = put_varint(q, (uint64_t)status);
    *q++ = 0xaa;
    *q++ = 0x06;
    q = put_varint(q, (uint64_t)sub);
    *q++ = 0x08;
    q = put_varint(q, (uint64_t)status);
    *q++ = 0x10;
    q = put_varint(q, (uint64_t)lid);
    *q++ = 0x18;
    q = put_varint(q, (uint64_t)eid);
    return out;
}

/*
 * decode_add_response(data) -> (txn, status, add status, ledger_id, entry_id) | None
 *
 * An add response in the shape protobuf serializers write it: header
 * {08 03 10 02 18 txn [20 priority]}, 10 status, aa 06 len {08 status
 * 10 lid 18 eid}, nothing else. None for anything else (protobuf's to
 * parse). The caller checks that both statuses are codes protobuf knows:
 * an unknown enum value is not a status to protobuf.
 */
static PyObject *
decode_add_response(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *p = view.buf;
    const Py_ssize_t n = view.len;
    Py_ssize_t pos;
    uint64_t header_len, txn, priority, status, sub_len, status2, lid, eid;
    int big, big_txn, big_status, big_status2, big_lid, big_eid;

    if (n < 8 || p[0] != 0x0a || p[1] >= 0x80 || p[2] != 0x08 || p[3] != VERSION_THREE ||
        p[4] != 0x10 || p[5] != ADD_ENTRY || p[6] != 0x18)
        goto decline;
    header_len = p[1];
    pos = 7;
    if (!read_varint(p, n, &pos, 10, &txn, &big_txn))
        goto decline;
    if (pos < n && p[pos] == 0x20) {
        pos++;
        if (!read_varint(p, n, &pos, 10, &priority, &big))
            goto decline;
    }
    if ((uint64_t)pos != 2 + header_len) /* the header ends where status starts */
        goto decline;
    if (pos >= n || p[pos++] != 0x10 || !read_varint(p, n, &pos, 10, &status, &big_status))
        goto decline;
    if (pos + 2 > n || p[pos] != 0xaa || p[pos + 1] != 0x06)
        goto decline;
    pos += 2;
    if (!read_varint(p, n, &pos, 10, &sub_len, &big) || big || sub_len != (uint64_t)(n - pos))
        goto decline;
    if (pos >= n || p[pos++] != 0x08 || !read_varint(p, n, &pos, 10, &status2, &big_status2))
        goto decline;
    if (pos >= n || p[pos++] != 0x10 || !read_varint(p, n, &pos, 10, &lid, &big_lid))
        goto decline;
    if (pos >= n || p[pos++] != 0x18 || !read_varint(p, n, &pos, 10, &eid, &big_eid))
        goto decline;
    if (pos != n || big_txn || big_status || big_status2 || big_lid || big_eid)
        goto decline;
    PyBuffer_Release(&view);
    /* enums and int64s travel as their two's complement */
    return Py_BuildValue("KLLLL", (unsigned long long)txn, (long long)status,
                         (long long)status2, (long long)lid, (long long)eid);
decline:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_add_response", decode_add_response, METH_O,
     "decode_add_response(data) -> (txn, status, add status, ledger_id, entry_id) | None"},
    {"configure", configure, METH_VARARGS, "configure(AddFrame): the class to build."},
    {"decode_add_request", decode_add_request, METH_O,
     "decode_add_request(data) -> AddFrame | None (None: let protobuf parse it)"},
    {"encode_add_request", encode_add_request, METH_VARARGS,
     "encode_add_request(txn, ledger_id, entry_id, master_key, body, recovery=False) -> bytes"},
    {"encode_add_response", encode_add_response, METH_VARARGS,
     "encode_add_response(txn, status, ledger_id, entry_id) -> bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "dlog.protocol._add_codec",
    .m_doc = "BookKeeper's add request and response in C (optional; "
             "dlog.protocol.messages has them in Python).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__add_codec(void)
{
    return PyModule_Create(&module);
}
