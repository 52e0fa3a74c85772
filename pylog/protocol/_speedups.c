/* The broker's hottest decode in C: the body of a Produce request.
 *
 * produce_body(buf, offset, flexible) reads a Produce request body (v3-v11) starting at
 * buf[offset] and returns (body, end) exactly as the generated codec does: the same dict
 * with its keys in the same order, and every records field a slice of buf (a view when
 * buf is a memoryview). It returns None for anything outside the common case, and the
 * caller then runs the generated codec, which accepts or refuses it with its own error:
 * a truncated or malformed body, a string that is not UTF-8, a null array, or tagged
 * fields (only their empty form is read here).
 *
 * Layout (Produce v3-v8; v9+ are flexible: compact lengths as unsigned varints of
 * length + 1, and an empty tagged-field section after each struct):
 *
 *   transactional_id  nullable string
 *   acks              int16
 *   timeout_ms        int32
 *   topic_data        array of { name string,
 *                                partition_data array of { index int32,
 *                                                          records nullable bytes } }
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    const unsigned char *data;
    Py_ssize_t size;
    Py_ssize_t pos;
    int flexible;
} Reader;

static PyObject *k_transactional_id, *k_acks, *k_timeout_ms, *k_topic_data, *k_name,
    *k_partition_data, *k_index, *k_records;

/* 0 on success; -1 when the bytes end or the varint is longer than 5 bytes. */
static int read_uvarint(Reader *r, uint32_t *out) {
    uint32_t value = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (r->pos >= r->size)
            return -1;
        unsigned char byte = r->data[r->pos++];
        if (shift == 28 && (byte & 0xF0))
            return -1;
        value |= (uint32_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = value;
            return 0;
        }
    }
    return -1;
}

static int read_i16(Reader *r, int16_t *out) {
    if (r->size - r->pos < 2)
        return -1;
    const unsigned char *d = r->data + r->pos;
    *out = (int16_t)((uint16_t)d[0] << 8 | d[1]);
    r->pos += 2;
    return 0;
}

static int read_i32(Reader *r, int32_t *out) {
    if (r->size - r->pos < 4)
        return -1;
    const unsigned char *d = r->data + r->pos;
    *out = (int32_t)((uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3]);
    r->pos += 4;
    return 0;
}

/* A length: -1 for null, else 0..size. 0 on success, -1 when malformed. */
static int read_length(Reader *r, int nullable_width, Py_ssize_t *out) {
    if (r->flexible) {
        uint32_t n;
        if (read_uvarint(r, &n) < 0)
            return -1;
        *out = (Py_ssize_t)n - 1;
        return 0;
    }
    if (nullable_width == 2) {
        int16_t n;
        if (read_i16(r, &n) < 0)
            return -1;
        *out = n;
    } else {
        int32_t n;
        if (read_i32(r, &n) < 0)
            return -1;
        *out = n;
    }
    return *out < -1 ? -1 : 0;
}

/* The empty tagged-field section of a flexible struct; anything else is left to the
 * generated codec. */
static int read_no_tags(Reader *r) {
    if (!r->flexible)
        return 0;
    if (r->pos >= r->size || r->data[r->pos] != 0)
        return -1;
    r->pos++;
    return 0;
}

/* A string, or Py_None when nullable and null. NULL with no exception set means "not
 * the common case"; NULL with an exception set is a real failure (memory). */
static PyObject *read_string(Reader *r, int nullable) {
    Py_ssize_t n;
    if (read_length(r, 2, &n) < 0)
        return NULL;
    if (n == -1) {
        if (!nullable)
            return NULL;
        Py_RETURN_NONE;
    }
    if (n > r->size - r->pos)
        return NULL;
    PyObject *s = PyUnicode_DecodeUTF8((const char *)r->data + r->pos, n, NULL);
    if (s == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            PyErr_Clear();
        return NULL;
    }
    r->pos += n;
    return s;
}

/* An array's element count: 0 on success, -1 when null, malformed, or more elements
 * than bytes left (each takes at least one). */
static int read_count(Reader *r, Py_ssize_t *out) {
    Py_ssize_t n;
    if (read_length(r, 4, &n) < 0 || n < 0 || n > r->size - r->pos)
        return -1;
    *out = n;
    return 0;
}

static int set_item(PyObject *dict, PyObject *key, PyObject *value) {
    if (value == NULL)
        return -1;
    int rc = PyDict_SetItem(dict, key, value);
    Py_DECREF(value);
    return rc;
}

static PyObject *read_partition(Reader *r, PyObject *buf) {
    int32_t index;
    Py_ssize_t n;
    if (read_i32(r, &index) < 0 || read_length(r, 4, &n) < 0)
        return NULL;
    if (n != -1 && n > r->size - r->pos)
        return NULL;
    PyObject *partition = PyDict_New();
    if (partition == NULL)
        return NULL;
    PyObject *records = n == -1 ? Py_NewRef(Py_None)
                                : PySequence_GetSlice(buf, r->pos, r->pos + n);
    if (n != -1)
        r->pos += n;
    if (set_item(partition, k_index, PyLong_FromLong(index)) < 0) {
        Py_XDECREF(records);
        Py_DECREF(partition);
        return NULL;
    }
    if (set_item(partition, k_records, records) < 0 || read_no_tags(r) < 0) {
        Py_DECREF(partition);
        return NULL;
    }
    return partition;
}

typedef PyObject *(*ElementReader)(Reader *, PyObject *);

/* An array of structs each read by ``element``, stored as a list at dict[key]; 0 on
 * success, -1 as for the readers. */
static int read_array_into(Reader *r, PyObject *buf, ElementReader element, PyObject *dict,
                           PyObject *key) {
    Py_ssize_t count;
    if (read_count(r, &count) < 0)
        return -1;
    PyObject *items = PyList_New(count);
    if (items == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = element(r, buf);
        if (item == NULL) {
            Py_DECREF(items);
            return -1;
        }
        PyList_SET_ITEM(items, i, item);
    }
    return set_item(dict, key, items);
}

static PyObject *read_topic(Reader *r, PyObject *buf) {
    PyObject *topic = PyDict_New();
    if (topic == NULL)
        return NULL;
    if (set_item(topic, k_name, read_string(r, 0)) < 0
            || read_array_into(r, buf, read_partition, topic, k_partition_data) < 0
            || read_no_tags(r) < 0) {
        Py_DECREF(topic);
        return NULL;
    }
    return topic;
}

/* The body from r->pos: (body, end), NULL with no exception set when not the common
 * case, NULL with an exception set on a real failure. */
static PyObject *read_body(Reader *r, PyObject *buf) {
    PyObject *body = PyDict_New(), *result = NULL;
    int16_t acks;
    int32_t timeout_ms;
    if (body == NULL)
        return NULL;
    if (set_item(body, k_transactional_id, read_string(r, 1)) == 0
            && read_i16(r, &acks) == 0 && read_i32(r, &timeout_ms) == 0
            && set_item(body, k_acks, PyLong_FromLong(acks)) == 0
            && set_item(body, k_timeout_ms, PyLong_FromLong(timeout_ms)) == 0
            && read_array_into(r, buf, read_topic, body, k_topic_data) == 0
            && read_no_tags(r) == 0)
        result = Py_BuildValue("(On)", body, r->pos);
    Py_DECREF(body);
    return result;
}

static PyObject *produce_body(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "produce_body(buf, offset, flexible)");
        return NULL;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
    if (offset == -1 && PyErr_Occurred())
        return NULL;
    int flexible = PyObject_IsTrue(args[2]);
    if (flexible < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Reader r = {view.buf, view.len, offset, flexible};
    PyObject *result = offset < 0 || offset > view.len ? NULL : read_body(&r, args[0]);
    PyBuffer_Release(&view);
    if (result == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;  /* not the common case: the generated codec decides */
    return result;
}

/* A tuple subclass instance (a named tuple) of ``type`` holding the n values, which it
 * takes over. */
static PyObject *named_tuple(PyObject *type, Py_ssize_t n, PyObject **values) {
    PyObject *fields = PyTuple_New(n);
    if (fields == NULL) {
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(values[i]);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (values[i] == NULL) {
            for (Py_ssize_t j = i + 1; j < n; j++)
                Py_XDECREF(values[j]);
            Py_DECREF(fields);
            return NULL;
        }
        PyTuple_SET_ITEM(fields, i, values[i]);
    }
    PyObject *args = PyTuple_Pack(1, fields);
    Py_DECREF(fields);
    if (args == NULL)
        return NULL;
    PyObject *instance = PyTuple_Type.tp_new((PyTypeObject *)type, args, NULL);
    Py_DECREF(args);
    return instance;
}

static PyObject *produce_request(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyType_Check(args[2]) || !PyType_Check(args[3])
            || !PyType_IsSubtype((PyTypeObject *)args[2], &PyTuple_Type)
            || !PyType_IsSubtype((PyTypeObject *)args[3], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError,
                        "produce_request(frame, flexible, header_type, request_type)");
        return NULL;
    }
    int flexible = PyObject_IsTrue(args[1]);
    if (flexible < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    /* The request header (v1, or v2 when flexible): the client_id is a nullable string
     * with an int16 length even in v2. */
    Reader r = {view.buf, view.len, 0, 0};
    int16_t api_key, api_version;
    int32_t correlation_id;
    PyObject *client_id = NULL, *decoded = NULL, *result = NULL;
    if (read_i16(&r, &api_key) < 0 || api_key != 0 || read_i16(&r, &api_version) < 0
            || read_i32(&r, &correlation_id) < 0
            || (client_id = read_string(&r, 1)) == NULL)
        goto done;
    /* Only the versions whose body it reads (v3-v11), and in the encoding the caller
     * names (flexible from v9): any other header is left to the general path. */
    if (api_version < 3 || api_version > 11 || flexible != (api_version >= 9))
        goto done;
    r.flexible = flexible;
    if (read_no_tags(&r) < 0 || (decoded = read_body(&r, args[0])) == NULL)
        goto done;
    PyObject *header_values[4] = {PyLong_FromLong(api_key), PyLong_FromLong(api_version),
                                  PyLong_FromLong(correlation_id), Py_NewRef(client_id)};
    PyObject *header = named_tuple(args[2], 4, header_values);
    if (header == NULL)
        goto done;
    PyObject *request_values[2] = {header, Py_NewRef(PyTuple_GET_ITEM(decoded, 0))};
    result = named_tuple(args[3], 2, request_values);
done:
    Py_XDECREF(client_id);
    Py_XDECREF(decoded);
    PyBuffer_Release(&view);
    if (result == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;  /* not the common case: the general path decides */
    return result;
}

static PyMethodDef methods[] = {
    {"produce_body", (PyCFunction)(void (*)(void))produce_body, METH_FASTCALL,
     "produce_body(buf, offset, flexible) -> (body, end) or None: a Produce request body "
     "v3-v11 as the generated codec reads it, or None outside the common case"},
    {"produce_request", (PyCFunction)(void (*)(void))produce_request, METH_FASTCALL,
     "produce_request(frame, flexible, header_type, request_type) -> request or None: a "
     "whole Produce request frame (without its size) as decode_request gives it, or None "
     "outside the common case"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pylog.protocol._speedups",
    "The Produce request body decoder in C (see produce_body).", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    struct { PyObject **slot; const char *name; } keys[] = {
        {&k_transactional_id, "transactional_id"}, {&k_acks, "acks"},
        {&k_timeout_ms, "timeout_ms"}, {&k_topic_data, "topic_data"}, {&k_name, "name"},
        {&k_partition_data, "partition_data"}, {&k_index, "index"}, {&k_records, "records"},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        *keys[i].slot = PyUnicode_InternFromString(keys[i].name);
        if (*keys[i].slot == NULL)
            return NULL;
    }
    return PyModule_Create(&module);
}
