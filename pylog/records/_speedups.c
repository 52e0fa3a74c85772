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

static PyMethodDef methods[] = {
    {"record_starts", record_starts, METH_VARARGS,
     "record_starts(buffer, count, pos) -> bytes of native int64 record start positions"},
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
