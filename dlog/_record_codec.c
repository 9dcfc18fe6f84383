/*
 * dlog._record_codec: the hot loops of dlog.record in C.
 *
 * Two loops run once per record on every write and every read: appending
 * plain records to an entry (RecordSetWriter.append_many) and decoding an
 * entry's records (decode_entry). Three more run once per row in the Spark
 * source's executors: an entry's records as columns, or written straight
 * into a batch's buffers (dlog.spark.columns), and the rows' DLSN texts
 * (dlog.spark.reader). This module does exactly those loops for the common
 * case and nothing else (append_rows also skips control and end-of-stream
 * records, as the source's filter does). Anything unusual -- a flagged record,
 * a record set, a malformed header, a value out of range, an object of an
 * unexpected type -- is handed back to the pure-Python code in
 * dlog/record.py, which stays complete and authoritative: it raises the
 * errors and handles every case. The extension is built optionally; when it
 * is missing, dlog.record runs the same loops in Python.
 *
 * Formats (all big-endian; see dlog/record.py): a LogRecord is
 *   int64 metadata (flags bits 0-15, position bits 16-47), int64 txid,
 *   int32 payload length, payload.
 *
 * The record classes are plain Python classes with __slots__; their slots
 * are read and written through the member descriptors' offsets, found once
 * in configure().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include "_slots.h"
#include <stdint.h>
#include <string.h>

#define RECORD_HEADER_SIZE 20
#define FLAG_RECORD_SET 0x4
#define KNOWN_FLAGS 0x7
#define POSITION_SHIFT 16
#define INT32_MAX_ 0x7fffffffLL
/* Unused flag bits, position bit 31 and the 16 unused high bits. */
#define METADATA_INVALID_MASK (0xFFFF800000000000ULL | (uint64_t)(0xFFFF & ~KNOWN_FLAGS))

/* The classes and slot offsets configure() found. */
static PyTypeObject *record_type;      /* LogRecord */
static PyTypeObject *read_type;        /* LogRecordWithDLSN */
static PyTypeObject *dlsn_type;        /* DLSN (a tuple subclass) */
static Py_ssize_t off_txid, off_payload, off_flags;
static Py_ssize_t off_dlsn, off_position, off_sequence_id;

static uint64_t
get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t
get_u32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void
put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

static void
put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static PyObject *
configure(PyObject *self, PyObject *args)
{
    PyTypeObject *rec, *read, *dlsn;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyType_Type, &rec, &PyType_Type, &read, &PyType_Type,
                          &dlsn))
        return NULL;
    if (!PyType_IsSubtype(read, rec) || !PyType_IsSubtype(dlsn, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError,
                        "configure(LogRecord, LogRecordWithDLSN, DLSN): wrong classes");
        return NULL;
    }
    if ((off_txid = slot_offset(rec, "txid")) < 0 ||
        (off_payload = slot_offset(rec, "payload")) < 0 ||
        (off_flags = slot_offset(rec, "flags")) < 0 ||
        (off_dlsn = slot_offset(read, "dlsn")) < 0 ||
        (off_position = slot_offset(read, "position")) < 0 ||
        (off_sequence_id = slot_offset(read, "sequence_id")) < 0)
        return NULL;
    Py_XSETREF(record_type, (PyTypeObject *)Py_NewRef(rec));
    Py_XSETREF(read_type, (PyTypeObject *)Py_NewRef(read));
    Py_XSETREF(dlsn_type, (PyTypeObject *)Py_NewRef(dlsn));
    Py_RETURN_NONE;
}

static int
configured(void)
{
    if (read_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "dlog._record_codec is not configured");
        return 0;
    }
    return 1;
}

/* A new DLSN (segment, entry, slot): the first two shared, the slot new. */
static PyObject *
new_dlsn(PyObject *segment, PyObject *entry, Py_ssize_t slot)
{
    PyObject *s = PyLong_FromSsize_t(slot);
    if (s == NULL)
        return NULL;
    PyObject *t = dlsn_type->tp_alloc(dlsn_type, 3);
    if (t == NULL) {
        Py_DECREF(s);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, Py_NewRef(segment));
    PyTuple_SET_ITEM(t, 1, Py_NewRef(entry));
    PyTuple_SET_ITEM(t, 2, s);
    return t;
}

/*
 * decode_records(buf, segment_seq_no, entry_id, seq_base) -> list | None
 *
 * The LogRecordWithDLSN of each record of ``buf`` (an entry's record
 * stream, envelope removed), or None if any record is not a plain,
 * well-formed one (a record set, a bad header, a truncated record, a
 * sequence id outside int64): dlog.record decodes (or refuses) those.
 */
static PyObject *
decode_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *segment, *entry, *base_obj;
    if (!configured())
        return NULL;
    if (!PyArg_ParseTuple(args, "y*O!O!O!", &view, &PyLong_Type, &segment, &PyLong_Type, &entry,
                          &PyLong_Type, &base_obj))
        return NULL;
    int overflow = 0;
    long long seq_base = PyLong_AsLongLongAndOverflow(base_obj, &overflow);
    if (seq_base == -1 && PyErr_Occurred()) {
        PyBuffer_Release(&view);
        return NULL;
    }
    PyObject *out = NULL;
    if (overflow)
        goto fallback;
    const unsigned char *buf = view.buf;
    Py_ssize_t n = view.len, off = 0, slot = 0;
    out = PyList_New(0);
    if (out == NULL)
        goto error;
    while (off < n) {
        if (n - off < RECORD_HEADER_SIZE)
            goto fallback;
        uint64_t metadata = get_u64(buf + off);
        int64_t txid = (int64_t)get_u64(buf + off + 8);
        int32_t length = (int32_t)get_u32(buf + off + 16);
        Py_ssize_t start = off + RECORD_HEADER_SIZE;
        if ((metadata & METADATA_INVALID_MASK) || (metadata & FLAG_RECORD_SET) || length < 0 ||
            length > n - start)
            goto fallback;
        long long position = (long long)(metadata >> POSITION_SHIFT);
        long long sequence_id;
        if (__builtin_add_overflow(seq_base, position, &sequence_id))
            goto fallback;
        PyObject *rec = read_type->tp_alloc(read_type, 0);
        if (rec == NULL)
            goto error;
        /* Each slot is set as soon as its value exists: a failure leaves a
         * record whose set slots its deallocator frees. */
        PyObject *v;
        if ((v = PyLong_FromLongLong(txid)) == NULL)
            goto rec_error;
        SLOT(rec, off_txid) = v;
        if ((v = PyBytes_FromStringAndSize((const char *)buf + start, length)) == NULL)
            goto rec_error;
        SLOT(rec, off_payload) = v;
        if ((v = PyLong_FromLong((long)(metadata & 0xFFFF))) == NULL)
            goto rec_error;
        SLOT(rec, off_flags) = v;
        if ((v = new_dlsn(segment, entry, slot)) == NULL)
            goto rec_error;
        SLOT(rec, off_dlsn) = v;
        if ((v = PyLong_FromLongLong(position)) == NULL)
            goto rec_error;
        SLOT(rec, off_position) = v;
        if ((v = PyLong_FromLongLong(sequence_id)) == NULL)
            goto rec_error;
        SLOT(rec, off_sequence_id) = v;
        /* Out of the cyclic GC's sight, as CPython does for tuples of
         * atomic values: a decoded record holds ints, bytes and a DLSN of
         * ints, no cycle. A reader makes hundreds of thousands a second
         * and keeps many queued: tracked, every young collection walked
         * them (a tenth of a tailing reader's CPU), and the older ones
         * paused it for tens of milliseconds. */
        PyObject_GC_UnTrack(SLOT(rec, off_dlsn));
        PyObject_GC_UnTrack(rec);
        if (PyList_Append(out, rec) < 0)
            goto rec_error;
        Py_DECREF(rec);
        slot += 1;
        off = start + length;
        continue;
    rec_error:
        Py_DECREF(rec);
        goto error;
    }
    PyBuffer_Release(&view);
    return out;
fallback:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

/*
 * append_plain(buf, records, start, limit, threshold, count, position, max_txid)
 *     -> (index, count, position, max_txid, done)
 *
 * RecordSetWriter.append_many's loop for plain records: appends
 * ``records[start:]`` to the bytearray ``buf`` while they fit (an entry of
 * at most ``limit`` bytes), stopping after the record that brings it to
 * ``threshold`` bytes or more. ``done`` is true when the run ended as
 * append_many's would (every record appended, the threshold reached, or the
 * next record does not fit an entry that holds some); false when record
 * ``index`` needs dlog.record's general path (flags, an empty entry it does
 * not fit, a payload that is not bytes, a txid that is not an int64, a
 * position at int32's max, an object that is not a LogRecord).
 */
static PyObject *
append_plain(PyObject *self, PyObject *args)
{
    PyObject *buf, *records, *max_obj;
    Py_ssize_t start, limit, threshold, count;
    long long position;
    if (!configured())
        return NULL;
    if (!PyArg_ParseTuple(args, "O!O!nnnnLO", &PyByteArray_Type, &buf, &PyList_Type, &records,
                          &start, &limit, &threshold, &count, &position, &max_obj))
        return NULL;
    int have_max = max_obj != Py_None;
    long long max_txid = 0;
    if (have_max) {
        max_txid = PyLong_AsLongLong(max_obj);
        if (max_txid == -1 && PyErr_Occurred())
            return NULL;
    }
    const Py_ssize_t max_set = 1024 * 1024 - 4 * 1024; /* MAX_LOGRECORDSET_SIZE */
    const Py_ssize_t max_payload = 1024 * 1024 - 8 * 1024 - RECORD_HEADER_SIZE;
    /* First the run of records to append and the size it needs, so that the
     * bytearray is resized once, before anything is written: an error (no
     * memory, a buffer export) then leaves it and the writer's state as they
     * were. */
    const Py_ssize_t used = PyByteArray_GET_SIZE(buf);
    const Py_ssize_t n = PyList_GET_SIZE(records);
    Py_ssize_t size_after = used, end = start, appended = 0;
    int done = start >= 0; /* a negative start: the general path decides */
    while (done && end < n) {
        PyObject *rec = PyList_GET_ITEM(records, end);
        PyObject *payload, *txid_obj, *flags;
        if (!PyObject_TypeCheck(rec, record_type) ||
            (payload = SLOT(rec, off_payload)) == NULL ||
            (txid_obj = SLOT(rec, off_txid)) == NULL || (flags = SLOT(rec, off_flags)) == NULL ||
            !PyBytes_CheckExact(payload) || !PyLong_CheckExact(txid_obj) ||
            !PyLong_CheckExact(flags)) {
            done = 0;
            break;
        }
        Py_ssize_t size = PyBytes_GET_SIZE(payload);
        Py_ssize_t new_size = size_after + RECORD_HEADER_SIZE + size;
        if (new_size > limit && (count + appended || new_size > max_set)) {
            if (!(count + appended))
                done = 0; /* dlog.record refuses it */
            break;        /* else the next entry takes it */
        }
        int flags_overflow = 0, txid_overflow = 0;
        long flag_bits = PyLong_AsLongAndOverflow(flags, &flags_overflow);
        (void)PyLong_AsLongLongAndOverflow(txid_obj, &txid_overflow);
        if (flags_overflow || txid_overflow || flag_bits != 0 || size > max_payload ||
            position + appended >= INT32_MAX_) {
            done = 0;
            break;
        }
        size_after = new_size;
        appended += 1;
        end += 1;
        if (new_size >= threshold)
            break;
    }
    if (appended && PyByteArray_Resize(buf, size_after) < 0)
        return NULL;
    unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(buf) + used;
    for (Py_ssize_t k = start; k < end; k++) {
        PyObject *rec = PyList_GET_ITEM(records, k);
        PyObject *payload = SLOT(rec, off_payload);
        long long txid = PyLong_AsLongLong(SLOT(rec, off_txid)); /* checked above */
        Py_ssize_t size = PyBytes_GET_SIZE(payload);
        position += 1;
        put_u64(p, (uint64_t)position << POSITION_SHIFT);
        put_u64(p + 8, (uint64_t)txid);
        put_u32(p + 16, (uint32_t)size);
        memcpy(p + RECORD_HEADER_SIZE, PyBytes_AS_STRING(payload), size);
        p += RECORD_HEADER_SIZE + size;
        if (!have_max || txid > max_txid) {
            max_txid = txid;
            have_max = 1;
        }
    }
    PyObject *max_out = have_max ? PyLong_FromLongLong(max_txid) : Py_NewRef(Py_None);
    if (max_out == NULL)
        return NULL;
    return Py_BuildValue("nnLNO", end, count + appended, position, max_out,
                         done ? Py_True : Py_False);
}

#define FLAG_CONTROL 0x1
#define FLAG_END_OF_STREAM 0x2

/*
 * Whether ``buf[off:n]`` is plain, well-formed records only (no record set,
 * no bad header, none truncated); if so, ``*count`` and ``*total`` are the
 * records, and their payload bytes, that have none of the ``skip`` flags.
 */
static int
scan_plain(const unsigned char *buf, Py_ssize_t off, Py_ssize_t n, uint64_t skip,
           Py_ssize_t *count, Py_ssize_t *total)
{
    *count = *total = 0;
    while (off < n) {
        if (n - off < RECORD_HEADER_SIZE)
            return 0;
        uint64_t metadata = get_u64(buf + off);
        int32_t length = (int32_t)get_u32(buf + off + 16);
        Py_ssize_t start = off + RECORD_HEADER_SIZE;
        if ((metadata & METADATA_INVALID_MASK) || (metadata & FLAG_RECORD_SET) || length < 0 ||
            length > n - start)
            return 0;
        if (!(metadata & skip)) {
            *total += length;
            *count += 1;
        }
        off = start + length;
    }
    return 1;
}

/*
 * plain_columns(buf) -> (positions, txids, flags, offsets, data, any_flags) | None
 *
 * The Spark source's columns of ``buf`` (an entry's record stream, envelope
 * removed), for Arrow buffers: ``positions``, ``txids`` and ``flags`` are
 * native int64s, one per record; ``offsets`` are the n + 1 native int32
 * offsets of each payload in ``data``, the payloads laid end to end.
 * None if any record is not a plain, well-formed one (a record set, a bad
 * header, a truncated record) or the payloads pass int32 offsets:
 * dlog.spark.columns decodes (or refuses) those.
 */
static PyObject *
plain_columns(PyObject *self, PyObject *args)
{
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    const unsigned char *buf = view.buf;
    const Py_ssize_t n = view.len;
    /* First pass: check every record and size the columns. */
    Py_ssize_t off, count, total;
    if (!scan_plain(buf, 0, n, 0, &count, &total))
        goto fallback;
    if (total > INT32_MAX_)
        goto fallback;
    PyObject *positions = PyBytes_FromStringAndSize(NULL, 8 * count);
    PyObject *txids = PyBytes_FromStringAndSize(NULL, 8 * count);
    PyObject *flags = PyBytes_FromStringAndSize(NULL, 8 * count);
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, 4 * (count + 1));
    PyObject *data = PyBytes_FromStringAndSize(NULL, total);
    if (positions == NULL || txids == NULL || flags == NULL || offsets == NULL || data == NULL) {
        Py_XDECREF(positions);
        Py_XDECREF(txids);
        Py_XDECREF(flags);
        Py_XDECREF(offsets);
        Py_XDECREF(data);
        PyBuffer_Release(&view);
        return NULL;
    }
    char *pos_out = PyBytes_AS_STRING(positions), *txid_out = PyBytes_AS_STRING(txids);
    char *flag_out = PyBytes_AS_STRING(flags), *off_out = PyBytes_AS_STRING(offsets);
    char *data_out = PyBytes_AS_STRING(data);
    int32_t at = 0;
    int any_flags = 0;
    off = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        uint64_t metadata = get_u64(buf + off);
        int64_t txid = (int64_t)get_u64(buf + off + 8);
        int32_t length = (int32_t)get_u32(buf + off + 16);
        int64_t position = (int64_t)(metadata >> POSITION_SHIFT);
        int64_t flag_bits = (int64_t)(metadata & 0xFFFF);
        any_flags |= flag_bits != 0;
        memcpy(pos_out + 8 * i, &position, 8);
        memcpy(txid_out + 8 * i, &txid, 8);
        memcpy(flag_out + 8 * i, &flag_bits, 8);
        memcpy(off_out + 4 * i, &at, 4);
        memcpy(data_out + at, buf + off + RECORD_HEADER_SIZE, length);
        at += length;
        off += RECORD_HEADER_SIZE + length;
    }
    memcpy(off_out + 4 * count, &at, 4);
    PyBuffer_Release(&view);
    return Py_BuildValue("NNNNNO", positions, txids, flags, offsets, data,
                         any_flags ? Py_True : Py_False);
fallback:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/*
 * append_rows(buf, start, entry_id, entries, slots, txids, offsets, data, rows, nbytes)
 *     -> (rows added, bytes added, written) | None
 *
 * The user rows of the record stream ``buf[start:]`` (an entry's plain
 * records), written into a batch's columns after the ``rows`` rows and
 * ``nbytes`` payload bytes they hold. The columns are writable buffers:
 * native int64 ``entries`` (``entry_id``), ``slots`` (the record's index in
 * the entry) and ``txids``; int32 payload ``offsets`` (row i's payload is
 * ``data[offsets[i]:offsets[i + 1]]``) and the payload bytes ``data``.
 * Control and end-of-stream records are skipped (their slots are not
 * reused). If a column is too small, nothing is written and ``written`` is
 * false: the caller grows the columns by the counts given and calls again.
 * None, and nothing written, if any record is not a plain, well-formed one
 * (a record set, a bad header, a truncated record): dlog.spark.columns
 * decodes (or refuses) those. OverflowError if the payloads would pass
 * int32 offsets.
 */
static PyObject *
append_rows(PyObject *self, PyObject *args)
{
    Py_buffer view, columns[5];
    Py_ssize_t start, rows, nbytes;
    long long entry_id;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*nLw*w*w*w*w*nn", &view, &start, &entry_id, &columns[0],
                          &columns[1], &columns[2], &columns[3], &columns[4], &rows, &nbytes))
        return NULL;
    const unsigned char *buf = view.buf;
    const Py_ssize_t n = view.len;
    if (start < 0 || start > n || rows < 0 || nbytes < 0 || nbytes > INT32_MAX_) {
        PyErr_SetString(PyExc_ValueError, "append_rows: start, rows or nbytes out of range");
        goto done;
    }
    /* First pass: check every record and size the rows kept. */
    Py_ssize_t off, kept, total;
    if (!scan_plain(buf, start, n, FLAG_CONTROL | FLAG_END_OF_STREAM, &kept, &total))
        goto fallback;
    if (total > INT32_MAX_ - nbytes) {
        PyErr_SetString(PyExc_OverflowError,
                        "append_rows: the batch's payloads pass 2 GiB (int32 offsets)");
        goto done;
    }
    Py_ssize_t end = rows + kept;
    if (columns[0].len / 8 < end || columns[1].len / 8 < end || columns[2].len / 8 < end ||
        columns[3].len / 4 < end + 1 || columns[4].len < nbytes + total) {
        result = Py_BuildValue("nnO", kept, total, Py_False); /* grow them, and call again */
        goto done;
    }
    char *entry_out = (char *)columns[0].buf + 8 * rows;
    char *slot_out = (char *)columns[1].buf + 8 * rows;
    char *txid_out = (char *)columns[2].buf + 8 * rows;
    char *off_out = (char *)columns[3].buf + 4 * rows;
    char *data_out = (char *)columns[4].buf + nbytes;
    int32_t at = (int32_t)nbytes;
    int64_t entry = (int64_t)entry_id;
    memcpy(off_out, &at, 4);
    off_out += 4;
    off = start;
    for (int64_t slot = 0, i = 0; off < n; slot++) {
        uint64_t metadata = get_u64(buf + off);
        int32_t length = (int32_t)get_u32(buf + off + 16);
        if (!(metadata & (FLAG_CONTROL | FLAG_END_OF_STREAM))) {
            int64_t txid = (int64_t)get_u64(buf + off + 8);
            memcpy(entry_out + 8 * i, &entry, 8);
            memcpy(slot_out + 8 * i, &slot, 8);
            memcpy(txid_out + 8 * i, &txid, 8);
            memcpy(data_out, buf + off + RECORD_HEADER_SIZE, length);
            data_out += length;
            at += length;
            memcpy(off_out + 4 * i, &at, 4);
            i++;
        }
        off += RECORD_HEADER_SIZE + length;
    }
    result = Py_BuildValue("nnO", kept, total, Py_True);
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    for (int c = 0; c < 5; c++)
        PyBuffer_Release(&columns[c]);
    return result;
}

static const char BASE64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* The base64 of ``groups`` groups of three bytes of ``raw`` at ``out``. */
static void
base64_groups(char *out, const unsigned char *raw, int groups)
{
    for (int g = 0; g < groups; g++, raw += 3, out += 4) {
        uint32_t v = ((uint32_t)raw[0] << 16) | ((uint32_t)raw[1] << 8) | raw[2];
        out[0] = BASE64[v >> 18];
        out[1] = BASE64[(v >> 12) & 63];
        out[2] = BASE64[(v >> 6) & 63];
        out[3] = BASE64[v & 63];
    }
}

/*
 * dlsn_texts(segment, entries, slots) -> bytes
 *
 * DLSN(segment, entries[i], slots[i]).serialize() for each i, laid end to
 * end (36 characters each: the base64 of version 1 and the three big-endian
 * int64s). ``entries`` and ``slots``: buffers of native int64s, of one length.
 */
static PyObject *
dlsn_texts(PyObject *self, PyObject *args)
{
    long long segment;
    Py_buffer entries, slots;
    if (!PyArg_ParseTuple(args, "Ly*y*", &segment, &entries, &slots))
        return NULL;
    PyObject *out = NULL;
    if (entries.len != slots.len || entries.len % 8) {
        PyErr_SetString(PyExc_ValueError,
                        "dlsn_texts: entries and slots must be int64s of one length");
        goto done;
    }
    Py_ssize_t count = entries.len / 8;
    if (count > PY_SSIZE_T_MAX / 36) {
        PyErr_NoMemory();
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, 36 * count);
    if (out == NULL)
        goto done;
    /* The 27 bytes are nine base64 groups of three: groups 0-2 are the
     * version and segment (the same on every row), 3-4 the entry's first six
     * bytes (the same along an entry's rows), 5-8 the rest. */
    unsigned char raw[27];
    char head[20];
    raw[0] = 1;
    put_u64(raw + 1, (uint64_t)segment);
    raw[25] = raw[26] = 0;
    base64_groups(head, raw, 3);
    char *p = PyBytes_AS_STRING(out);
    const char *e = entries.buf, *s = slots.buf;
    int64_t last_entry = 0;
    for (Py_ssize_t i = 0; i < count; i++, p += 36) {
        int64_t entry, slot;
        memcpy(&entry, e + 8 * i, 8);
        memcpy(&slot, s + 8 * i, 8);
        if (i == 0 || entry != last_entry) {
            put_u64(raw + 9, (uint64_t)entry);
            base64_groups(head + 12, raw + 9, 2);
            last_entry = entry;
        }
        put_u64(raw + 17, (uint64_t)slot);
        memcpy(p, head, 20);
        base64_groups(p + 20, raw + 15, 4);
        p[34] = p[35] = '='; /* 25 bytes: the last group holds one */
    }
done:
    PyBuffer_Release(&entries);
    PyBuffer_Release(&slots);
    return out;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(LogRecord, LogRecordWithDLSN, DLSN): the classes to read and build."},
    {"decode_records", decode_records, METH_VARARGS,
     "decode_records(buf, segment_seq_no, entry_id, seq_base) -> list | None"},
    {"append_plain", append_plain, METH_VARARGS,
     "append_plain(buf, records, start, limit, threshold, count, position, max_txid)"
     " -> (index, count, position, max_txid, done)"},
    {"plain_columns", plain_columns, METH_VARARGS,
     "plain_columns(buf) -> (positions, txids, flags, offsets, data, any_flags) | None"},
    {"append_rows", append_rows, METH_VARARGS,
     "append_rows(buf, start, entry_id, entries, slots, txids, offsets, data, rows, nbytes)"
     " -> (rows, bytes, written) | None"},
    {"dlsn_texts", dlsn_texts, METH_VARARGS,
     "dlsn_texts(segment, entries, slots) -> bytes (36 characters per DLSN)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "dlog._record_codec",
    .m_doc = "The per-record loops of dlog.record and the Spark source in C (optional; both "
              "have them in Python).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__record_codec(void)
{
    return PyModule_Create(&module);
}
