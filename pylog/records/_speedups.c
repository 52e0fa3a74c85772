/*
 * The one sequential step of the vectorised records decoder, in C.
 *
 * record_starts(buffer, count, pos) -> bytes
 *
 * Walks the length prefixes (zigzag varints) of `count` records laid end to end in
 * `buffer`, the first at `pos`, and returns their start positions as native int64s.
 * Raises ValueError when a prefix is negative, longer than 10 bytes, or the walk leaves
 * the buffer; the caller then lets the reference decoder find out what is wrong.
 * Everything else about the records is checked column-wise by the caller, as for the
 * pure-Python walk in pylog/records/vectorised.py, which it must match exactly.
 *
 * record_fields(buffer, starts, section_ends, sections_size) -> bytes
 *
 * Decodes every record's fields at once (what DecodedSections does with numpy): for n
 * records, 8 columns of n native int64s one after the other: timestamp delta, offset
 * delta, key start, key length, value start, value length, headers position, record end.
 * Raises ValueError wherever the numpy code raises Unsupported (same checks).
 *
 * RecordsBuffer: the records section of a batch being built, encoded as records are
 * appended (one C call per record: the producer's hot path). Same bytes as
 * pylog/records/record.py's encode_record; pylog/records/records_buffer.py has the
 * pure-Python twin and the documentation of the interface.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *
record_starts(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count, pos;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &count, &pos))
        return NULL;
    if (count < 0 || pos < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "negative count or position");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const uint8_t *buf = (const uint8_t *)view.buf;
    const Py_ssize_t end = view.len;
    int64_t *starts = (int64_t *)PyBytes_AS_STRING(out);
    const char *error = NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        starts[i] = (int64_t)pos;
        uint64_t raw = 0;
        int shift = 0;
        for (;;) {
            if (pos >= end) { error = "a record runs past the buffer"; break; }
            uint8_t b = buf[pos++];
            raw |= (uint64_t)(b & 0x7F) << shift;
            if (!(b & 0x80)) break;
            shift += 7;
            if (shift > 63) { error = "a varint longer than 10 bytes"; break; }
        }
        if (error) break;
        int64_t length = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
        if (length < 0 || length > end - pos) { error = "a record length outside the buffer"; break; }
        pos += (Py_ssize_t)length;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (error) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_ValueError, error);
        return NULL;
    }
    return out;
}

/* The zigzag varint at buf[*pos]; 0 on success. Like the numpy decoder: at most 10 bytes,
 * and a 10th byte above 1 would not fit 64 bits. */
static int
read_zigzag(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos, int64_t *value)
{
    uint64_t raw = 0;
    for (int i = 0; i < 10; i++) {
        if (*pos + i >= end) return -1;
        uint8_t b = buf[*pos + i];
        if (i == 9 && b > 1) return -1;
        raw |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *pos += i + 1;
            *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
    }
    return -1;
}

#define MIN_RECORD_BODY 6  /* attributes and five one-byte varints */

static int
decode_fields(const uint8_t *buf, Py_ssize_t end, const int64_t *starts, const int64_t *section_ends,
              Py_ssize_t n, int64_t sections_size, int64_t *out)
{
    int64_t *ts = out, *od = out + n, *ks = out + 2 * n, *kl = out + 3 * n;
    int64_t *vs = out + 4 * n, *vl = out + 5 * n, *hp = out + 6 * n, *re = out + 7 * n;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t pos = (Py_ssize_t)starts[i];
        int64_t length, value;
        if (pos < 0 || read_zigzag(buf, end, &pos, &length)) return -1;
        int64_t record_end = (int64_t)pos + length;
        int64_t next = i + 1 < n ? starts[i + 1] : sections_size;
        if (length < MIN_RECORD_BODY || record_end != next || record_end > section_ends[i]) return -1;
        pos += 1;  /* attributes */
        if (read_zigzag(buf, end, &pos, &value) || pos >= record_end) return -1;
        ts[i] = value;
        if (read_zigzag(buf, end, &pos, &value) || pos >= record_end) return -1;
        od[i] = value;
        int64_t *field_start[2] = {ks + i, vs + i}, *field_length[2] = {kl + i, vl + i};
        for (int f = 0; f < 2; f++) {
            if (read_zigzag(buf, end, &pos, &value) || value < -1 || pos >= record_end) return -1;
            *field_start[f] = pos;
            *field_length[f] = value;
            pos += value > 0 ? value : 0;
            if (pos >= record_end) return -1;
        }
        if (buf[pos] == 0 && pos + 1 != record_end) return -1;
        hp[i] = pos;
        re[i] = record_end;
    }
    return 0;
}

static PyObject *
record_fields(PyObject *self, PyObject *args)
{
    Py_buffer view, starts, ends;
    long long sections_size;
    if (!PyArg_ParseTuple(args, "y*y*y*L", &view, &starts, &ends, &sections_size))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = starts.len / (Py_ssize_t)sizeof(int64_t);
    if (ends.len != starts.len || starts.len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "starts and section_ends must be int64 arrays of one length");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, 8 * n * (Py_ssize_t)sizeof(int64_t));
    if (out == NULL)
        goto done;
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = decode_fields((const uint8_t *)view.buf, view.len, (const int64_t *)starts.buf,
                           (const int64_t *)ends.buf, n, (int64_t)sections_size,
                           (int64_t *)PyBytes_AS_STRING(out));
    Py_END_ALLOW_THREADS
    if (failed) {
        Py_CLEAR(out);
        PyErr_SetString(PyExc_ValueError, "a record the fast path does not take");
    }
done:
    PyBuffer_Release(&view);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&ends);
    return out;
}


/* ---- RecordsBuffer ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    uint8_t *buf;
    Py_ssize_t size, capacity;
    int64_t *timestamps;
    Py_ssize_t count, ts_capacity;
    int64_t base_timestamp, max_timestamp;
} RecordsBuffer;

static int
varint_size(int64_t value)
{
    uint64_t z = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    int n = 1;
    while (z >= 0x80) { z >>= 7; n++; }
    return n;
}

static uint8_t *
put_varint(uint8_t *p, int64_t value)
{
    uint64_t z = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (z >= 0x80) { *p++ = (uint8_t)((z & 0x7F) | 0x80); z >>= 7; }
    *p++ = (uint8_t)z;
    return p;
}

/* A key or value: bytes, another buffer, or None (length -1). */
typedef struct { Py_buffer view; const char *data; Py_ssize_t len; int held; } Field;

static int
field_get(PyObject *obj, Field *f, const char *what)
{
    f->held = 0;
    if (obj == Py_None) { f->data = NULL; f->len = -1; return 0; }
    if (PyBytes_Check(obj)) { f->data = PyBytes_AS_STRING(obj); f->len = PyBytes_GET_SIZE(obj); return 0; }
    if (PyObject_GetBuffer(obj, &f->view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes or None, not %.100s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    f->held = 1; f->data = f->view.buf; f->len = f->view.len;
    return 0;
}

static void
field_release(Field *f)
{
    if (f->held) PyBuffer_Release(&f->view);
}

static Py_ssize_t
field_size(const Field *f)
{
    return f->len < 0 ? 1 : varint_size(f->len) + f->len;
}

static uint8_t *
put_field(uint8_t *p, const Field *f)
{
    p = put_varint(p, f->len);
    if (f->len > 0) { memcpy(p, f->data, (size_t)f->len); p += f->len; }
    return p;
}

static int
grow(RecordsBuffer *self, Py_ssize_t need)
{
    if (self->size + need > self->capacity) {
        Py_ssize_t capacity = self->capacity ? self->capacity : 4096;
        while (capacity < self->size + need) capacity *= 2;
        uint8_t *buf = PyMem_Realloc(self->buf, (size_t)capacity);
        if (buf == NULL) { PyErr_NoMemory(); return -1; }
        self->buf = buf; self->capacity = capacity;
    }
    if (self->count == self->ts_capacity) {
        Py_ssize_t capacity = self->ts_capacity ? self->ts_capacity * 2 : 256;
        int64_t *ts = PyMem_Realloc(self->timestamps, (size_t)capacity * sizeof(int64_t));
        if (ts == NULL) { PyErr_NoMemory(); return -1; }
        self->timestamps = ts; self->ts_capacity = capacity;
    }
    return 0;
}

static PyObject *
RecordsBuffer_append(RecordsBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 3 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError, "append(key, value, timestamp, headers=(), limit=-1)");
        return NULL;
    }
    long long timestamp = PyLong_AsLongLong(args[2]);
    if (timestamp == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t limit = -1;
    if (nargs == 5) {
        limit = PyLong_AsSsize_t(args[4]);
        if (limit == -1 && PyErr_Occurred()) return NULL;
    }
    PyObject *headers = NULL;  /* a fast sequence of (str, bytes|None) pairs, or NULL */
    Py_ssize_t header_count = 0;
    if (nargs >= 4 && args[3] != Py_None) {
        headers = PySequence_Fast(args[3], "headers must be a sequence of (key, value) pairs");
        if (headers == NULL) return NULL;
        header_count = PySequence_Fast_GET_SIZE(headers);
    }
    Field key, value;
    PyObject *result = NULL;
    Field *header_values = NULL;
    const char **header_keys = NULL;
    Py_ssize_t *header_key_lens = NULL, fetched = 0;
    if (field_get(args[0], &key, "key") < 0) { Py_XDECREF(headers); return NULL; }
    if (field_get(args[1], &value, "value") < 0) { field_release(&key); Py_XDECREF(headers); return NULL; }
    int64_t base = self->count ? self->base_timestamp : (int64_t)timestamp;
    Py_ssize_t body = 1 + varint_size((int64_t)timestamp - base) + varint_size(self->count)
                      + field_size(&key) + field_size(&value) + varint_size(header_count);
    if (header_count) {
        header_values = PyMem_Calloc((size_t)header_count, sizeof(Field));
        header_keys = PyMem_Calloc((size_t)header_count, sizeof(char *));
        header_key_lens = PyMem_Calloc((size_t)header_count, sizeof(Py_ssize_t));
        if (!header_values || !header_keys || !header_key_lens) { PyErr_NoMemory(); goto done; }
        for (Py_ssize_t i = 0; i < header_count; i++) {
            PyObject *pair = PySequence_Fast_GET_ITEM(headers, i);
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))) {
                PyErr_SetString(PyExc_TypeError, "a header must be a (str, bytes | None) tuple");
                goto done;
            }
            header_keys[i] = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &header_key_lens[i]);
            if (header_keys[i] == NULL) goto done;
            if (field_get(PyTuple_GET_ITEM(pair, 1), &header_values[i], "a header value") < 0) goto done;
            fetched = i + 1;
            body += varint_size(header_key_lens[i]) + header_key_lens[i] + field_size(&header_values[i]);
        }
    }
    Py_ssize_t record = varint_size(body) + body;
    if (self->count && limit >= 0 && self->size + record > limit) {
        result = PyLong_FromLong(-1);
        goto done;
    }
    if (grow(self, record) < 0) goto done;
    uint8_t *p = self->buf + self->size;
    p = put_varint(p, body);
    *p++ = 0;  /* attributes */
    p = put_varint(p, (int64_t)timestamp - base);
    p = put_varint(p, self->count);
    p = put_field(p, &key);
    p = put_field(p, &value);
    p = put_varint(p, header_count);
    for (Py_ssize_t i = 0; i < header_count; i++) {
        p = put_varint(p, header_key_lens[i]);
        memcpy(p, header_keys[i], (size_t)header_key_lens[i]);
        p += header_key_lens[i];
        p = put_field(p, &header_values[i]);
    }
    self->size += record;
    if (self->count == 0) self->max_timestamp = -1;  /* as Java: no timestamp below -1 */
    if (timestamp > self->max_timestamp) self->max_timestamp = timestamp;
    self->base_timestamp = base;
    self->timestamps[self->count++] = timestamp;
    result = PyLong_FromSsize_t(self->size);
done:
    for (Py_ssize_t i = 0; i < fetched; i++) field_release(&header_values[i]);
    PyMem_Free(header_values);
    PyMem_Free(header_keys);
    PyMem_Free(header_key_lens);
    field_release(&key);
    field_release(&value);
    Py_XDECREF(headers);
    return result;
}

static PyObject *
RecordsBuffer_getvalue(RecordsBuffer *self, PyObject *unused)
{
    return PyBytes_FromStringAndSize((const char *)self->buf, self->size);
}

static PyObject *
RecordsBuffer_timestamps(RecordsBuffer *self, PyObject *unused)
{
    PyObject *out = PyList_New(self->count);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < self->count; i++) {
        PyObject *ts = PyLong_FromLongLong(self->timestamps[i]);
        if (ts == NULL) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i, ts);
    }
    return out;
}

static PyObject *RecordsBuffer_get_count(RecordsBuffer *self, void *c) { return PyLong_FromSsize_t(self->count); }
static PyObject *RecordsBuffer_get_size(RecordsBuffer *self, void *c) { return PyLong_FromSsize_t(self->size); }
static PyObject *RecordsBuffer_get_base(RecordsBuffer *self, void *c)
{
    return PyLong_FromLongLong(self->count ? self->base_timestamp : -1);
}
static PyObject *RecordsBuffer_get_max(RecordsBuffer *self, void *c)
{
    return PyLong_FromLongLong(self->count ? self->max_timestamp : -1);
}

static Py_ssize_t RecordsBuffer_len(RecordsBuffer *self) { return self->count; }

static void
RecordsBuffer_dealloc(RecordsBuffer *self)
{
    PyMem_Free(self->buf);
    PyMem_Free(self->timestamps);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef RecordsBuffer_methods[] = {
    {"append", (PyCFunction)(void (*)(void))RecordsBuffer_append, METH_FASTCALL,
     "append(key, value, timestamp, headers=(), limit=-1) -> size of the records so far, "
     "or -1 (nothing appended) when the buffer holds records and this one would take it past limit"},
    {"getvalue", (PyCFunction)RecordsBuffer_getvalue, METH_NOARGS, "the records section as bytes"},
    {"timestamps", (PyCFunction)RecordsBuffer_timestamps, METH_NOARGS, "every record's timestamp, in order"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef RecordsBuffer_getset[] = {
    {"count", (getter)RecordsBuffer_get_count, NULL, "records appended", NULL},
    {"size", (getter)RecordsBuffer_get_size, NULL, "bytes of the records section", NULL},
    {"base_timestamp", (getter)RecordsBuffer_get_base, NULL, "the first record's timestamp (-1: empty)", NULL},
    {"max_timestamp", (getter)RecordsBuffer_get_max, NULL, "the largest timestamp (-1: empty)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods RecordsBuffer_sequence = {.sq_length = (lenfunc)RecordsBuffer_len};

static PyTypeObject RecordsBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pylog.records._speedups.RecordsBuffer",
    .tp_basicsize = sizeof(RecordsBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The records section of a v2 batch, encoded as records are appended.",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)RecordsBuffer_dealloc,
    .tp_methods = RecordsBuffer_methods,
    .tp_getset = RecordsBuffer_getset,
    .tp_as_sequence = &RecordsBuffer_sequence,
};

/*
 * murmur2(data) -> int: Kafka's murmur2 hash (org.apache.kafka.common.utils.Utils.murmur2)
 * of a bytes-like object, as an unsigned 32-bit int: what the default partitioner hashes
 * a record's key with. pylog/client/partitioner.py has the pure-Python twin.
 */
static PyObject *
murmur2(PyObject *self, PyObject *data)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    const Py_ssize_t length = view.len;
    const uint32_t m = 0x5BD1E995u;
    uint32_t h = 0x9747B28Cu ^ (uint32_t)length;
    const Py_ssize_t whole = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < whole; i += 4) {
        uint32_t k = (uint32_t)buf[i] | (uint32_t)buf[i + 1] << 8
                     | (uint32_t)buf[i + 2] << 16 | (uint32_t)buf[i + 3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = (h * m) ^ k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)buf[whole + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)buf[whole + 1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)buf[whole];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(h);
}

static PyMethodDef methods[] = {
    {"record_starts", record_starts, METH_VARARGS,
     "record_starts(buffer, count, pos) -> bytes of native int64 record start positions"},
    {"record_fields", record_fields, METH_VARARGS,
     "record_fields(buffer, starts, section_ends, sections_size) -> bytes of 8 int64 columns"},
    {"murmur2", murmur2, METH_O, "murmur2(data) -> Kafka's murmur2 hash of data as an unsigned 32-bit int"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pylog.records._speedups",
    "C versions of the records decoder's sequential steps and of the producer's record encoder (optional).", -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (PyType_Ready(&RecordsBufferType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&RecordsBufferType);
    if (PyModule_AddObject(m, "RecordsBuffer", (PyObject *)&RecordsBufferType) < 0) {
        Py_DECREF(&RecordsBufferType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
