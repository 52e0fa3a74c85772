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

static PyMethodDef methods[] = {
    {"record_starts", record_starts, METH_VARARGS,
     "record_starts(buffer, count, pos) -> bytes of native int64 record start positions"},
    {"record_fields", record_fields, METH_VARARGS,
     "record_fields(buffer, starts, section_ends, sections_size) -> bytes of 8 int64 columns"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pylog.records._speedups",
    "C versions of the records decoder's sequential steps (optional).", -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModule_Create(&module);
}
