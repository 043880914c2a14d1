/* Optional C kernel for the host execution-trace reader (pytorch_host/reader.py): split_pieces()
 * cuts a buffer of nodes at the separator PyTorch writes between them and numbers the pieces
 * by their template key (the text with every digit read as '0'), so Python looks each
 * distinct key up once per buffer instead of copying and translating every node. It gives
 * exactly what bytearray.split plus bytes.translate would (the tests compare both). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../_vec.h"

#define MASK(c) ((uint8_t)((c) >= '0' && (c) <= '9' ? '0' : (c)))
#define ONES 0x0101010101010101ULL
#define HIGH 0x8080808080808080ULL

/* Eight bytes at once with every ASCII digit replaced by '0' (bytes >= 0x80 left alone). */
static inline uint64_t mask_word(const uint8_t *s) {
    uint64_t w;
    memcpy(&w, s, 8);
    uint64_t x = w & ~HIGH;                                   /* no carries between bytes */
    uint64_t ge0 = x + 0x50 * ONES, ge10 = x + 0x46 * ONES;   /* high bit: >= '0', >= ':' */
    uint64_t digit = (ge0 & ~ge10 & ~w & HIGH) >> 7;          /* 1 in each digit byte */
    uint64_t m = digit * 0xFF;
    return (w & ~m) | (0x30 * digit);
}

static uint64_t masked_hash(const uint8_t *s, int64_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        h = (h ^ mask_word(s + k)) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    for (; k < n; k++) h = (h ^ MASK(s[k])) * 1099511628211ULL;
    return h;
}

static int masked_equal(const uint8_t *a, const uint8_t *b, int64_t n) {
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        if (mask_word(a + k) != mask_word(b + k)) return 0;
    for (; k < n; k++)
        if (MASK(a[k]) != MASK(b[k])) return 0;
    return 1;
}

/* split_pieces(buf, pos, sep) -> (starts, lens, codes, first), the first two int64, codes
 * int32 and first int64: buf[pos:] cut at every occurrence of sep, without the last piece
 * (it may be incomplete); codes[i] numbers piece i's key in order of first appearance and
 * first[c] is the piece where key c first appears. */
static PyObject *split_pieces(PyObject *self, PyObject *args) {
    Py_buffer bv, sv;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "y*ny*", &bv, &pos, &sv)) return NULL;
    const uint8_t *buf = bv.buf, *sep = sv.buf;
    Py_ssize_t n = bv.len, m = sv.len;
    PyObject *result = NULL;
    vec starts, lens, codes, first;
    starts.obj = lens.obj = codes.obj = first.obj = NULL;
    int64_t *slots = NULL;
    uint64_t *hashes = NULL;
    size_t cap = 1024;
    int failed = 0;
    if (m == 0 || pos < 0 || pos > n) {
        PyErr_SetString(PyExc_ValueError, "split_pieces: empty separator or position outside the buffer");
        goto done;
    }
    if (vec_init(&starts, 8, 4096) || vec_init(&lens, 8, 4096) || vec_init(&codes, 4, 4096) ||
        vec_init(&first, 8, 64))
        goto done;
    slots = malloc(cap * sizeof(int64_t)); /* code of the key in each slot, -1 empty */
    hashes = malloc(cap * sizeof(uint64_t));
    if (!slots || !hashes) {
        PyErr_NoMemory();
        goto done;
    }
    memset(slots, 0xff, cap * sizeof(int64_t));
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t a = pos;
    for (;;) {
        /* the next separator at or after a */
        const uint8_t *hit = NULL;
        for (Py_ssize_t p = a; p + m <= n;) {
            const uint8_t *c = memchr(buf + p, sep[0], (size_t)(n - m + 1 - p));
            if (!c) break;
            if (memcmp(c, sep, (size_t)m) == 0) {
                hit = c;
                break;
            }
            p = (Py_ssize_t)(c - buf) + 1;
        }
        if (!hit) break;
        int64_t len = (int64_t)(hit - buf) - a;
        uint64_t h = masked_hash(buf + a, len);
        if ((size_t)first.len * 2 >= cap) { /* keep the table at most half full */
            size_t ncap = cap * 2;
            int64_t *ns = malloc(ncap * sizeof(int64_t));
            uint64_t *nh = malloc(ncap * sizeof(uint64_t));
            if (!ns || !nh) {
                free(ns);
                free(nh);
                failed = 1;
                break;
            }
            memset(ns, 0xff, ncap * sizeof(int64_t));
            for (size_t s = 0; s < cap; s++) {
                if (slots[s] < 0) continue;
                size_t t = (size_t)(hashes[s] ^ (hashes[s] >> 29)) & (ncap - 1);
                while (ns[t] >= 0) t = (t + 1) & (ncap - 1);
                ns[t] = slots[s];
                nh[t] = hashes[s];
            }
            free(slots);
            free(hashes);
            slots = ns;
            hashes = nh;
            cap = ncap;
        }
        size_t slot = (size_t)(h ^ (h >> 29)) & (cap - 1);
        int32_t code;
        for (;;) {
            int64_t c = slots[slot];
            if (c < 0) { /* a new key */
                code = (int32_t)first.len;
                if (vec_push(&first, &(int64_t){(int64_t)starts.len})) {
                    failed = 1;
                    break;
                }
                slots[slot] = code;
                hashes[slot] = h;
                break;
            }
            int64_t fi = ((int64_t *)first.data)[c];
            int64_t fs = ((int64_t *)starts.data)[fi], fl = ((int64_t *)lens.data)[fi];
            if (hashes[slot] == h && fl == len && masked_equal(buf + fs, buf + a, len)) {
                code = (int32_t)c;
                break;
            }
            slot = (slot + 1) & (cap - 1);
        }
        if (failed || vec_push(&starts, &(int64_t){(int64_t)a}) || vec_push(&lens, &len) || vec_push(&codes, &code)) {
            failed = 1;
            break;
        }
        a = (Py_ssize_t)(hit - buf) + m;
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    {
        PyObject *s = vec_bytes(&starts), *l = vec_bytes(&lens), *c = vec_bytes(&codes), *f = vec_bytes(&first);
        if (s && l && c && f) {
            result = Py_BuildValue("(NNNN)", s, l, c, f);
        } else {
            Py_XDECREF(s);
            Py_XDECREF(l);
            Py_XDECREF(c);
            Py_XDECREF(f);
        }
    }
done:
    free(slots);
    free(hashes);
    vec_free(&starts);
    vec_free(&lens);
    vec_free(&codes);
    vec_free(&first);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&sv);
    return result;
}

static PyMethodDef methods[] = {
    {"split_pieces", split_pieces, METH_VARARGS, "Cut nodes at a separator and number their template keys."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_host", "C host-ET reader kernel", -1, methods};

PyMODINIT_FUNC PyInit__host(void) { return kernel_module(&module); }
