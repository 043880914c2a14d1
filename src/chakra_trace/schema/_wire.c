/* Optional C kernels for the protobuf wire format: frame splitting, field scanning and
 * packed-varint decoding. They produce exactly what the numpy versions in wire.py produce
 * (the tests check both agree); everything schema-specific stays in Python/numpy.
 * Only the buffer protocol is used, so the build needs no numpy headers. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../_vec.h"

/* Read a varint at *p (< end). Returns 1 on success, 0 if cut off at end, -1 if over 10 bytes. */
static inline int read_varint(const uint8_t *buf, Py_ssize_t *p, Py_ssize_t end, uint64_t *out) {
    uint64_t r = 0;
    int shift = 0;
    Py_ssize_t q = *p;
    for (int k = 0; k < 10; k++) {
        if (q >= end) return 0;
        uint8_t b = buf[q++];
        r |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *p = q;
            *out = r;
            return 1;
        }
        shift += 7;
    }
    return -1;
}

static PyObject *wire_error(Py_ssize_t offset, const char *msg) {
    PyObject *args = Py_BuildValue("(ns)", offset, msg);
    if (args) {
        PyErr_SetObject(PyExc_ValueError, args);
        Py_DECREF(args);
    }
    return NULL;
}

/* split_frames(data, end, limit) -> (starts, ends, stop, need) */
static PyObject *split_frames(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t end;
    unsigned long long limit;
    if (!PyArg_ParseTuple(args, "y*nK", &view, &end, &limit)) return NULL;
    const uint8_t *buf = view.buf;
    if (end > view.len) end = view.len;
    vec s, e;
    if (vec_init(&s, 8, end / 32 + 16) || vec_init(&e, 8, end / 32 + 16)) {
        vec_free(&s);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    Py_ssize_t pos = 0, need = 0;
    PyObject *err = NULL;
    while (pos < end) {
        Py_ssize_t p = pos;
        uint64_t n;
        int ok = read_varint(buf, &p, end, &n);
        if (ok == 0) { need = 1; break; }
        if (ok < 0) { err = wire_error(pos, "length prefix is not a valid varint (longer than 10 bytes)"); break; }
        if (n > limit) {
            char msg[160];
            snprintf(msg, sizeof msg, "length prefix says %llu bytes, more than the %llu-byte message limit",
                     (unsigned long long)n, limit);
            err = wire_error(pos, msg);
            break;
        }
        if ((uint64_t)(end - p) < n) { need = (Py_ssize_t)(p + (Py_ssize_t)n - end); break; }
        if (s.len == s.cap && (vec_grow(&s) || vec_grow(&e))) { err = PyErr_NoMemory(); break; }
        ((int64_t *)s.data)[s.len++] = p;
        ((int64_t *)e.data)[e.len++] = p + (Py_ssize_t)n;
        pos = p + (Py_ssize_t)n;
    }
    PyBuffer_Release(&view);
    if (PyErr_Occurred()) {
        vec_free(&s);
        vec_free(&e);
        return NULL;
    }
    (void)err;
    PyObject *sb = vec_bytes(&s), *eb = vec_bytes(&e);
    return Py_BuildValue("(NNnn)", sb, eb, pos, need);
}

/* scan_fields(buf, starts, ends) -> (msg, number, wtype, value, start, data, end) as bytes */
static PyObject *scan_fields(PyObject *self, PyObject *args) {
    Py_buffer bv, sv, ev;
    if (!PyArg_ParseTuple(args, "y*y*y*", &bv, &sv, &ev)) return NULL;
    const uint8_t *buf = bv.buf;
    const int64_t *starts = sv.buf, *ends = ev.buf;
    Py_ssize_t nmsg = sv.len / 8;
    vec c_msg, c_num, c_wt, c_val, c_start, c_data, c_end;
    Py_ssize_t cap = nmsg * 4 + 16;
    int fail = vec_init(&c_msg, 8, cap) | vec_init(&c_num, 8, cap) | vec_init(&c_wt, 1, cap) |
               vec_init(&c_val, 8, cap) | vec_init(&c_start, 8, cap) | vec_init(&c_data, 8, cap) |
               vec_init(&c_end, 8, cap);
    vec *all[7] = {&c_msg, &c_num, &c_wt, &c_val, &c_start, &c_data, &c_end};
    if (fail) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t m = 0; m < nmsg; m++) {
        Py_ssize_t pos = starts[m], end = ends[m];
        if (end > bv.len || pos < 0) {
            wire_error(pos, "message bounds outside the buffer");
            goto error;
        }
        while (pos < end) {
            Py_ssize_t p = pos;
            uint64_t tag, value = 0;
            int ok = read_varint(buf, &p, end, &tag);
            if (ok <= 0) {
                wire_error(pos, ok == 0 ? "varint runs past the end of its message" : "varint longer than 10 bytes");
                goto error;
            }
            uint64_t number = tag >> 3;
            int wt = (int)(tag & 7);
            if (number == 0) { wire_error(pos, "invalid tag: field number 0"); goto error; }
            Py_ssize_t data = p, fend;
            if (wt == 0 || wt == 2) {
                ok = read_varint(buf, &p, end, &value);
                if (ok <= 0) {
                    wire_error(data, ok == 0 ? "varint runs past the end of its message" : "varint longer than 10 bytes");
                    goto error;
                }
                fend = p;
                if (wt == 2) {
                    data = p;
                    if ((uint64_t)(end - p) < value) {
                        char msg[160];
                        snprintf(msg, sizeof msg,
                                 "length-delimited field says %llu bytes, only %lld remain in its message",
                                 (unsigned long long)value, (long long)(end - p));
                        wire_error(pos, msg);
                        goto error;
                    }
                    fend = p + (Py_ssize_t)value;
                }
            } else if (wt == 1 || wt == 5) {
                int width = wt == 1 ? 8 : 4;
                if (end - p < width) {
                    wire_error(pos, "fixed-width value runs past the end of its message");
                    goto error;
                }
                for (int k = 0; k < width; k++) value |= (uint64_t)buf[p + k] << (8 * k);
                fend = p + width;
            } else {
                char msg[64];
                snprintf(msg, sizeof msg, "invalid tag: unsupported wire type %d", wt);
                wire_error(pos, msg);
                goto error;
            }
            if (c_msg.len == c_msg.cap) {
                for (int i = 0; i < 7; i++)
                    if (vec_grow(all[i])) { PyErr_NoMemory(); goto error; }
            }
            Py_ssize_t i = c_msg.len;
            ((int64_t *)c_msg.data)[i] = m;
            ((int64_t *)c_num.data)[i] = (int64_t)number;
            ((int8_t *)c_wt.data)[i] = (int8_t)wt;
            ((uint64_t *)c_val.data)[i] = value;
            ((int64_t *)c_start.data)[i] = pos;
            ((int64_t *)c_data.data)[i] = data;
            ((int64_t *)c_end.data)[i] = fend;
            for (int k = 0; k < 7; k++) all[k]->len = i + 1;
            pos = fend;
        }
    }
    PyBuffer_Release(&bv);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&ev);
    PyObject *out = PyTuple_New(7);
    for (int i = 0; i < 7; i++) PyTuple_SET_ITEM(out, i, vec_bytes(all[i]));
    return out;
error:
    for (int i = 0; i < 7; i++) vec_free(all[i]);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&ev);
    return NULL;
}

/* decode_packed(buf, data, end) -> (values, counts) as bytes */
static PyObject *decode_packed(PyObject *self, PyObject *args) {
    Py_buffer bv, dv, ev;
    if (!PyArg_ParseTuple(args, "y*y*y*", &bv, &dv, &ev)) return NULL;
    const uint8_t *buf = bv.buf;
    const int64_t *data = dv.buf, *ends = ev.buf;
    Py_ssize_t n = dv.len / 8;
    vec vals, counts;
    if (vec_init(&vals, 8, n * 4 + 16) || vec_init(&counts, 8, n + 1)) {
        vec_free(&vals);
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t p = data[i], end = ends[i];
        int64_t c = 0;
        if (end > bv.len || p < 0) { wire_error(p, "packed field outside the buffer"); break; }
        while (p < end) {
            uint64_t v;
            Py_ssize_t at = p;
            int ok = read_varint(buf, &p, end, &v);
            if (ok <= 0) {
                wire_error(at, ok == 0 ? "packed varints run past the end of their field" : "packed varint longer than 10 bytes");
                goto done;
            }
            if (vals.len == vals.cap && vec_grow(&vals)) { PyErr_NoMemory(); goto done; }
            ((uint64_t *)vals.data)[vals.len++] = v;
            c++;
        }
        ((int64_t *)counts.data)[counts.len++] = c;
    }
done:
    PyBuffer_Release(&bv);
    PyBuffer_Release(&dv);
    PyBuffer_Release(&ev);
    if (PyErr_Occurred()) {
        vec_free(&vals);
        vec_free(&counts);
        return NULL;
    }
    PyObject *a = vec_bytes(&vals), *b = vec_bytes(&counts);
    return Py_BuildValue("(NN)", a, b);
}

/* intern(buf, data, lens) -> (codes int32, first int64): equal byte strings get equal codes,
 * numbered in order of first appearance; first[c] is the index of code c's first occurrence. */
static PyObject *intern(PyObject *self, PyObject *args) {
    Py_buffer bv, dv, lv;
    if (!PyArg_ParseTuple(args, "y*y*y*", &bv, &dv, &lv)) return NULL;
    const uint8_t *buf = bv.buf;
    const int64_t *data = dv.buf, *lens = lv.buf;
    Py_ssize_t n = dv.len / 8;
    size_t cap = 64;
    while (cap < (size_t)n * 2) cap <<= 1;
    int64_t *slots = malloc(cap * sizeof(int64_t)); /* index of first occurrence, -1 empty */
    uint64_t *hashes = malloc(cap * sizeof(uint64_t));
    vec codes, first;
    PyObject *result = NULL;
    codes.obj = first.obj = NULL;
    codes.data = first.data = NULL;
    if (!slots || !hashes || vec_init(&codes, 4, n + 1) || vec_init(&first, 8, 64)) {
        PyErr_NoMemory();
        goto done;
    }
    memset(slots, 0xff, cap * sizeof(int64_t));
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *s = buf + data[i];
        int64_t len = lens[i];
        if (data[i] < 0 || len < 0 || data[i] + len > bv.len) { wire_error(data[i], "string outside the buffer"); goto done; }
        uint64_t h = 1469598103934665603ULL ^ (uint64_t)len;
        for (int64_t k = 0; k < len; k++) h = (h ^ s[k]) * 1099511628211ULL;
        size_t slot = (size_t)(h ^ (h >> 29)) & (cap - 1);
        int32_t code;
        for (;;) {
            int64_t j = slots[slot];
            if (j < 0) {
                /* new string: remember where its first occurrence is */
                if (first.len == first.cap && vec_grow(&first)) { PyErr_NoMemory(); goto done; }
                code = (int32_t)first.len;
                ((int64_t *)first.data)[first.len++] = i;
                slots[slot] = code;
                hashes[slot] = h;
                break;
            }
            int64_t fi = ((int64_t *)first.data)[j];
            if (hashes[slot] == h && lens[fi] == len && memcmp(buf + data[fi], s, (size_t)len) == 0) {
                code = (int32_t)j;
                break;
            }
            slot = (slot + 1) & (cap - 1);
        }
        ((int32_t *)codes.data)[codes.len++] = code;
    }
    {
        PyObject *a = vec_bytes(&codes), *b = vec_bytes(&first);
        result = Py_BuildValue("(NN)", a, b);
    }
done:
    free(slots);
    free(hashes);
    vec_free(&codes);
    vec_free(&first);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&dv);
    PyBuffer_Release(&lv);
    return result;
}

/* concat_rows(datas, lens, total) -> bytes: row i of the output is row i of each part, in order.
 * datas[k] holds part k's rows back to back; lens[k] (int64) their lengths. */
static PyObject *concat_rows(PyObject *self, PyObject *args) {
    PyObject *datas, *lens;
    Py_ssize_t total;
    if (!PyArg_ParseTuple(args, "O!O!n", &PyTuple_Type, &datas, &PyTuple_Type, &lens, &total)) return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(datas);
    if (k != PyTuple_GET_SIZE(lens) || k > 256) {
        PyErr_SetString(PyExc_ValueError, "concat_rows: need matching data/lens tuples (at most 256 parts)");
        return NULL;
    }
    Py_buffer dv[256], lv[256];
    Py_ssize_t got = 0, nrows = -1;
    PyObject *out = NULL;
    for (; got < k; got++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(datas, got), &dv[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(lens, got), &lv[got], PyBUF_C_CONTIGUOUS) < 0) {
            PyBuffer_Release(&dv[got]);
            goto done;
        }
        Py_ssize_t rows = lv[got].len / 8;
        if (nrows >= 0 && rows != nrows) {
            PyErr_SetString(PyExc_ValueError, "concat_rows: parts have different row counts");
            got++;
            goto done;
        }
        nrows = rows;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    {
        char *o = PyBytes_AS_STRING(out), *oend = o + total;
        Py_ssize_t pos[256];
        for (Py_ssize_t j = 0; j < k; j++) pos[j] = 0;
        for (Py_ssize_t r = 0; r < nrows; r++) {
            for (Py_ssize_t j = 0; j < k; j++) {
                int64_t n = ((const int64_t *)lv[j].buf)[r];
                if (n < 0 || pos[j] + n > dv[j].len || o + n > oend) {
                    PyErr_SetString(PyExc_ValueError, "concat_rows: lengths exceed the data");
                    Py_CLEAR(out);
                    goto done;
                }
                memcpy(o, (const char *)dv[j].buf + pos[j], (size_t)n);
                o += n;
                pos[j] += n;
            }
        }
        if (o != oend) {
            PyErr_SetString(PyExc_ValueError, "concat_rows: total does not match the lengths");
            Py_CLEAR(out);
        }
    }
done:
    for (Py_ssize_t j = 0; j < got; j++) {
        PyBuffer_Release(&dv[j]);
        PyBuffer_Release(&lv[j]);
    }
    return out;
}

/* ------------------------------------------------------------------------------------------
 * decode_nodes: one pass over Chakra Node messages, producing the columns codec.py builds.
 * Same rules as the numpy path: fields 1/3/6/7 varint scalars (last wins), 2 name, 4/5 deps
 * (packed or not), 10 attributes whose message is exactly {name, one member} with a column's
 * name and canonical member become column values (first occurrence per node); every other
 * field is kept verbatim in `extra`, fields numbered below 10 first (protobuf's order). */

#define MAX_COLS 16

typedef struct {
    const char *name;
    Py_ssize_t len;
    int field, wt;
} colspec;

static inline int skip_value(const uint8_t *buf, Py_ssize_t *p, Py_ssize_t end, int wt, uint64_t *value,
                             Py_ssize_t *data, const char **err) {
    *data = *p;
    if (wt == 0 || wt == 2) {
        int ok = read_varint(buf, p, end, value);
        if (ok <= 0) {
            *err = ok == 0 ? "varint runs past the end of its message" : "varint longer than 10 bytes";
            return -1;
        }
        if (wt == 2) {
            *data = *p;
            if ((uint64_t)(end - *p) < *value) {
                *err = "length-delimited field runs past the end of its message";
                return -1;
            }
            *p += (Py_ssize_t)*value;
        }
        return 0;
    }
    if (wt == 1 || wt == 5) {
        int width = wt == 1 ? 8 : 4;
        if (end - *p < width) {
            *err = "fixed-width value runs past the end of its message";
            return -1;
        }
        uint64_t v = 0;
        for (int k = 0; k < width; k++) v |= (uint64_t)buf[*p + k] << (8 * k);
        *value = v;
        *p += width;
        return 0;
    }
    *err = "invalid tag: unsupported wire type";
    return -1;
}

/* Read a field tag; on failure set *err and return -1. */
static inline int read_tag(const uint8_t *buf, Py_ssize_t *p, Py_ssize_t end, uint64_t *number, int *wt,
                           const char **err) {
    uint64_t tag;
    int ok = read_varint(buf, p, end, &tag);
    if (ok <= 0) {
        *err = ok == 0 ? "varint runs past the end of its message" : "varint longer than 10 bytes";
        return -1;
    }
    *number = tag >> 3;
    *wt = (int)(tag & 7);
    if (*number == 0) {
        *err = "invalid tag: field number 0";
        return -1;
    }
    return 0;
}

static PyObject *decode_nodes(PyObject *self, PyObject *args) {
    Py_buffer bv, sv, ev;
    PyObject *cols;
    if (!PyArg_ParseTuple(args, "y*y*y*O!", &bv, &sv, &ev, &PyTuple_Type, &cols)) return NULL;
    const uint8_t *buf = bv.buf;
    const int64_t *starts = sv.buf, *ends = ev.buf;
    Py_ssize_t n = sv.len / 8, ncol = PyTuple_GET_SIZE(cols);
    colspec spec[MAX_COLS];
    PyObject *result = NULL;
    enum { IDS, TYPES, START, DUR, NAME_OFF, NAME_LEN, CTRL, CTRL_N, DATA, DATA_N, PRESENT,
           T_NODE, T_COL, T_VAL, T_LEN, EXTRA, EXTRA_N, EXTRA_SPLIT, P_NODE, P_BIT, P_OFF, TAIL, NV };
    vec v[NV];
    const Py_ssize_t item[NV] = {8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 2, 8, 1, 8, 8, 1, 8, 4, 8, 1, 4, 1};
    for (int k = 0; k < NV; k++) v[k].obj = NULL;
    if (ncol > MAX_COLS) {
        PyErr_SetString(PyExc_ValueError, "decode_nodes: too many column attributes");
        goto done;
    }
    for (Py_ssize_t k = 0; k < ncol; k++) {
        PyObject *c = PyTuple_GET_ITEM(cols, k);
        if (!PyArg_ParseTuple(c, "y#ii", &spec[k].name, &spec[k].len, &spec[k].field, &spec[k].wt)) goto done;
    }
    /* Every value takes at least one byte of input, so the block size bounds each vector:
     * reserving that much avoids regrowth copies, and pages never written are never faulted in. */
    Py_ssize_t bytes = n ? (Py_ssize_t)(ends[n - 1] - starts[0]) + 16 : 16;
    if (bytes < 16 || bytes > bv.len + 16) bytes = bv.len + 16;
    for (int k = 0; k < NV; k++) {
        int fixed = k <= NAME_LEN || k == CTRL_N || k == DATA_N || k == PRESENT || k == EXTRA_N || k == EXTRA_SPLIT;
        Py_ssize_t cap = fixed ? n : (k >= T_NODE && k <= T_LEN) ? bytes / 4 + 16
                                   : (k >= P_NODE && k <= P_OFF) ? bytes / 4 + 16 : bytes;
        if (vec_init(&v[k], item[k], cap)) {
            PyErr_NoMemory();
            goto done;
        }
        if (fixed) {
            memset(v[k].data, 0, (size_t)(n * item[k]));
            v[k].len = n;
        }
    }
    uint64_t *ids = (uint64_t *)v[IDS].data, *types = (uint64_t *)v[TYPES].data;
    uint64_t *st = (uint64_t *)v[START].data, *du = (uint64_t *)v[DUR].data;
    int64_t *noff = (int64_t *)v[NAME_OFF].data, *nlen = (int64_t *)v[NAME_LEN].data;
    int64_t *cn = (int64_t *)v[CTRL_N].data, *dn = (int64_t *)v[DATA_N].data, *en = (int64_t *)v[EXTRA_N].data;
    uint16_t *present = (uint16_t *)v[PRESENT].data;
    uint32_t *split = (uint32_t *)v[EXTRA_SPLIT].data;
    const char *err = NULL;
    Py_ssize_t err_at = 0;

    /* The loop touches only buffers: let other threads (e.g. a gzip reader) run meanwhile. */
    PyThreadState *ts = PyEval_SaveThread();
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t pos = starts[i], end = ends[i];
        if (pos < 0 || end > bv.len || pos > end) {
            err = "message bounds outside the buffer";
            err_at = pos;
            goto fail;
        }
        Py_ssize_t extra0 = v[EXTRA].len;
        v[TAIL].len = 0;
        /* where each column attribute sat: canonical = all before other attributes, in bit order */
        int ncons = 0, canonical = 1;
        int8_t cons_bit[MAX_COLS];
        uint32_t cons_off[MAX_COLS];
        while (pos < end) {
            Py_ssize_t p = pos, data;
            uint64_t number, value = 0;
            int wt;
            if (read_tag(buf, &p, end, &number, &wt, &err) < 0 ||
                skip_value(buf, &p, end, wt, &value, &data, &err) < 0) {
                err_at = pos;
                goto fail;
            }
            int used = 0;
            if (wt == 0 && (number == 1 || number == 3 || number == 6 || number == 7)) {
                (number == 1 ? ids : number == 3 ? types : number == 6 ? st : du)[i] = value;
                used = 1;
            } else if (wt == 2 && number == 2) {
                noff[i] = data;
                nlen[i] = (int64_t)value;
                used = 1;
            } else if ((number == 4 || number == 5) && (wt == 0 || wt == 2)) {
                vec *out = &v[number == 4 ? CTRL : DATA];
                int64_t *count = number == 4 ? cn : dn;
                if (wt == 0) {
                    if (vec_push(out, &value)) goto nomem;
                    count[i]++;
                } else {
                    Py_ssize_t q = data;
                    while (q < p) {
                        uint64_t x;
                        Py_ssize_t at = q;
                        int r = read_varint(buf, &q, p, &x);
                        if (r <= 0) {
                            err = r == 0 ? "packed varints run past the end of their field" : "packed varint longer than 10 bytes";
                            err_at = at;
                            goto fail;
                        }
                        if (vec_push(out, &x)) goto nomem;
                        count[i]++;
                    }
                }
                used = 1;
            } else if (wt == 2 && number == 10) {
                /* attribute: exactly one name field and one other field */
                Py_ssize_t q = data, aend = p, name_at = -1, name_n = 0, val_data = 0;
                int fields = 0, names = 0, mfield = 0, mwt = 0;
                uint64_t mval = 0;
                while (q < aend) {
                    Py_ssize_t at = q, d;
                    uint64_t fnum, x = 0;
                    int fwt;
                    if (read_tag(buf, &q, aend, &fnum, &fwt, &err) < 0 ||
                        skip_value(buf, &q, aend, fwt, &x, &d, &err) < 0) {
                        err_at = at;
                        goto fail;
                    }
                    fields++;
                    if (fnum == 1 && fwt == 2) {
                        names++;
                        name_at = d;
                        name_n = (Py_ssize_t)x;
                    } else {
                        mfield = (int)fnum;
                        mwt = fwt;
                        mval = x;
                        val_data = d;
                    }
                }
                if (fields == 2 && names == 1) {
                    for (Py_ssize_t k = 0; k < ncol; k++) {
                        if (spec[k].len == name_n && spec[k].field == mfield && spec[k].wt == mwt &&
                            memcmp(buf + name_at, spec[k].name, (size_t)name_n) == 0) {
                            if (present[i] & (1u << k)) break; /* a repeat stays in the extras */
                            present[i] |= (uint16_t)(1u << k);
                            int64_t node = i, len = mwt == 2 ? (int64_t)mval : 0;
                            uint64_t val = mwt == 2 ? (uint64_t)val_data : mval;
                            int8_t col = (int8_t)k;
                            if (vec_push(&v[T_NODE], &node) || vec_push(&v[T_COL], &col) ||
                                vec_push(&v[T_VAL], &val) || vec_push(&v[T_LEN], &len))
                                goto nomem;
                            if (v[TAIL].len || (ncons && cons_bit[ncons - 1] > col)) canonical = 0;
                            cons_bit[ncons] = col;
                            cons_off[ncons++] = (uint32_t)v[TAIL].len;
                            used = 1;
                            break;
                        }
                    }
                }
            }
            if (!used) {
                if (vec_extend(number < 10 ? &v[EXTRA] : &v[TAIL], buf + pos, p - pos)) goto nomem;
            }
            pos = p;
        }
        if (!canonical) {
            for (int k = 0; k < ncons; k++) {
                int64_t node = i;
                if (vec_push(&v[P_NODE], &node) || vec_push(&v[P_BIT], &cons_bit[k]) ||
                    vec_push(&v[P_OFF], &cons_off[k]))
                    goto nomem;
            }
        }
        split[i] = (uint32_t)(v[EXTRA].len - extra0);
        if (v[TAIL].len && vec_extend(&v[EXTRA], v[TAIL].data, v[TAIL].len)) goto nomem;
        en[i] = v[EXTRA].len - extra0;
    }
    PyEval_RestoreThread(ts);
    result = PyTuple_New(NV - 1);
    if (result)
        for (int k = 0; k < NV - 1; k++) PyTuple_SET_ITEM(result, k, vec_bytes(&v[k]));
    goto done;
nomem:
    PyEval_RestoreThread(ts);
    if (!PyErr_Occurred()) PyErr_NoMemory();
    goto done;
fail:
    PyEval_RestoreThread(ts);
    wire_error(err_at, err);
done:
    for (int k = 0; k < NV; k++) vec_free(&v[k]);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&ev);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_nodes", decode_nodes, METH_VARARGS, "Decode Chakra Node messages into columns."},
    {"concat_rows", concat_rows, METH_VARARGS, "Row-wise concatenation of ragged byte rows."},
    {"intern", intern, METH_VARARGS, "Number distinct byte strings in order of appearance."},
    {"split_frames", split_frames, METH_VARARGS, "Find complete varint-framed messages."},
    {"scan_fields", scan_fields, METH_VARARGS, "Split messages into their fields."},
    {"decode_packed", decode_packed, METH_VARARGS, "Decode packed varint payloads."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wire", "C wire-format kernels", -1, methods};

PyMODINIT_FUNC PyInit__wire(void) { return kernel_module(&module); }
