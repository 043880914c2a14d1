/* Optional C kernels for Kineto (Chrome trace) JSON. nest() is the sweep of
 * io.kineto.interval_parents (which op encloses which, per thread). scan_events() reads a run of complete
 * trace events straight out of the str buffer that kineto.py decodes the file into, and
 * returns the columns _Columns.add_batch would build from `json`'s dicts for them.
 *
 * It takes only events whose values it reproduces exactly. At the first other one it stops,
 * and kineto.py decodes that one event in Python, which also reports errors: ph "M" (whose
 * args are kept), an escape in ph, a key or a string pid/tid, an exponent or a string where
 * an id or a time is expected, numbers beyond int64, bad syntax, an event cut by the end of
 * the buffer. Values it skips are still checked to be JSON exactly as `json` accepts it (NaN
 * and Infinity included). Positions are str indices, for any str kind (1, 2 or 4 bytes a
 * character), so Python needs no encoding and no offset conversion. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../_vec.h"

/* Every parsing helper takes the str kind and is forced inline into one copy of the scanner
 * per kind (scan_1/2/4), where the kind is a constant: no per-character switch. */
#if defined(_MSC_VER)
#define HOT static __forceinline
#else
#define HOT static inline __attribute__((always_inline))
#endif

#define MAX_DEPTH 200 /* deeper values are left to Python */
#define N_ARGS 7      /* args keys with a column, in kineto.py's _ARG_KEYS order */
#define PH_OTHER 63   /* '?': ph missing, not a string, or not one ASCII character */

typedef struct {
    const void *d; /* the str's characters */
    Py_ssize_t n;
} text;

HOT Py_UCS4 at(const text *t, int kind, Py_ssize_t i) {
    return kind == 1 ? ((const Py_UCS1 *)t->d)[i] : kind == 2 ? ((const Py_UCS2 *)t->d)[i]
                                                              : ((const Py_UCS4 *)t->d)[i];
}

#define CH(i) at(t, kind, (i))
#define IS_DIGIT(c) ((c) >= '0' && (c) <= '9')

HOT Py_ssize_t ws(const text *t, int kind, Py_ssize_t p) {
    while (p < t->n) {
        Py_UCS4 c = CH(p);
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
        p++;
    }
    return p;
}

/* The string whose opening quote is at p: returns the position after its closing quote, or
 * -1 (unterminated in the buffer, a raw control character, a bad escape). *esc is set if it
 * holds an escape: its characters are then not its value. */
HOT Py_ssize_t str_end(const text *t, int kind, Py_ssize_t p, int *esc) {
    p++;
    for (;;) {
        if (p >= t->n) return -1;
        Py_UCS4 c = CH(p);
        if (c == '"') return p + 1;
        if (c == '\\') {
            *esc = 1;
            if (p + 1 >= t->n) return -1;
            c = CH(p + 1);
            if (c == 'u') {
                if (p + 5 >= t->n) return -1;
                for (int k = 2; k < 6; k++) {
                    Py_UCS4 h = CH(p + k);
                    if (!(IS_DIGIT(h) || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F'))) return -1;
                }
                p += 6;
            } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
                       c == 't') {
                p += 2;
            } else {
                return -1;
            }
        } else if (c < 0x20) {
            return -1; /* json's strict mode */
        } else {
            p++;
        }
    }
}

/* The literal w at p: the position after it, or -1. */
HOT Py_ssize_t lit(const text *t, int kind, Py_ssize_t p, const char *w) {
    for (; *w; w++, p++)
        if (p >= t->n || CH(p) != (Py_UCS4)(unsigned char)*w) return -1;
    return p;
}

/* A JSON number (json's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][-+]?[0-9]+)?) */
typedef struct {
    int neg, exp;
    Py_ssize_t i0, i1, f0, f1; /* integer digits [i0, i1), fraction digits [f0, f1) */
} num;

HOT Py_ssize_t scan_num(const text *t, int kind, Py_ssize_t p, num *m) {
    m->neg = m->exp = 0;
    if (CH(p) == '-') {
        m->neg = 1;
        p++;
    }
    m->i0 = p;
    if (p >= t->n) return -1;
    Py_UCS4 c = CH(p);
    if (c == '0') {
        p++;
    } else if (c >= '1' && c <= '9') {
        while (p < t->n && IS_DIGIT(CH(p))) p++;
    } else {
        return -1;
    }
    m->i1 = m->f0 = m->f1 = p;
    if (p < t->n && CH(p) == '.') {
        m->f0 = ++p;
        while (p < t->n && IS_DIGIT(CH(p))) p++;
        if (p == m->f0) return -1;
        m->f1 = p;
    }
    if (p < t->n && (CH(p) == 'e' || CH(p) == 'E')) {
        p++;
        if (p < t->n && (CH(p) == '+' || CH(p) == '-')) p++;
        Py_ssize_t e0 = p;
        while (p < t->n && IS_DIGIT(CH(p))) p++;
        if (p == e0) return -1;
        m->exp = 1;
    }
    return p; /* a number cut by the end of the buffer fails later: no ',' or '}' after it */
}

/* The digits [s, e) as a value <= INT64_MAX; -1 if larger. */
HOT int digits_value(const text *t, int kind, Py_ssize_t s, Py_ssize_t e, int64_t *out) {
    if (e - s > 19) return -1;
    uint64_t v = 0;
    for (; s < e; s++) v = v * 10 + (CH(s) - '0'); /* 19 digits fit in uint64 */
    if (v > (uint64_t)INT64_MAX) return -1;
    *out = (int64_t)v;
    return 0;
}

/* An integer (no fraction, no exponent) as int64; -1 if it is not one or does not fit. */
HOT int int_value(const text *t, int kind, const num *m, int64_t *out) {
    if (m->exp || m->f1 > m->f0 || digits_value(t, kind, m->i0, m->i1, out) < 0) return -1;
    if (m->neg) *out = -*out;
    return 0;
}

/* µs text -> exact ns, as kineto._ns/_dec_ns: three fraction digits, the fourth rounds half
 * away from zero. Exponents (Decimal arithmetic in Python) are declined. */
HOT int ns_value(const text *t, int kind, const num *m, int64_t *out) {
    int64_t i;
    if (m->exp || digits_value(t, kind, m->i0, m->i1, &i) < 0 || i > (INT64_MAX - 1000) / 1000) return -1;
    Py_ssize_t nf = m->f1 - m->f0;
    int64_t f = 0;
    for (int k = 0; k < 3; k++) f = f * 10 + (k < nf ? (int64_t)(CH(m->f0 + k) - '0') : 0);
    if (nf > 3 && CH(m->f0 + 3) >= '5') f++;
    *out = m->neg ? -(i * 1000 + f) : i * 1000 + f;
    return 0;
}

HOT Py_ssize_t member_value(const text *t, int kind, Py_ssize_t p);

/* Check one JSON value at p and return the position after it, or -1. Iterative: containers
 * nest up to MAX_DEPTH levels (`json` itself goes as deep as Python's recursion limit). */
HOT Py_ssize_t skip_value(const text *t, int kind, Py_ssize_t p) {
    char close[MAX_DEPTH];
    int depth = 0;
    for (;;) {
        /* a value starts at p */
        if (p >= t->n) return -1;
        Py_UCS4 c = CH(p);
        if (c == '"') {
            int esc = 0;
            p = str_end(t, kind, p, &esc);
        } else if (c == '{' || c == '[') {
            char cl = c == '{' ? '}' : ']';
            p = ws(t, kind, p + 1);
            if (p < t->n && CH(p) == (Py_UCS4)cl) {
                p++;
            } else {
                if (depth == MAX_DEPTH) return -1;
                close[depth++] = cl;
                if (cl == '}' && (p = member_value(t, kind, p)) < 0) return -1;
                continue;
            }
        } else if (c == '-' && p + 1 < t->n && CH(p + 1) == 'I') {
            p = lit(t, kind, p, "-Infinity");
        } else if (c == '-' || IS_DIGIT(c)) {
            num m;
            p = scan_num(t, kind, p, &m);
            /* json makes ints of these, which fail past sys.get_int_max_str_digits() (>= 640) */
            if (p >= 0 && !m.exp && m.f1 == m.f0 && m.i1 - m.i0 > 640) return -1;
        } else {
            p = lit(t, kind, p, c == 't' ? "true" : c == 'f' ? "false" : c == 'n' ? "null" : c == 'N' ? "NaN"
                                                                                           : "Infinity");
        }
        if (p < 0) return -1;
        /* after a value: close containers until one goes on with ',' */
        for (;;) {
            if (depth == 0) return p;
            p = ws(t, kind, p);
            if (p >= t->n) return -1;
            c = CH(p);
            if (c == ',') {
                p = ws(t, kind, p + 1);
                if (close[depth - 1] == '}' && (p = member_value(t, kind, p)) < 0) return -1;
                break;
            }
            if (c != (Py_UCS4)close[depth - 1]) return -1;
            p++;
            depth--;
        }
    }
}

/* `"key" :` at p (after whitespace): the position of the member's value, or -1. */
HOT Py_ssize_t member_value(const text *t, int kind, Py_ssize_t p) {
    int esc = 0;
    if (p >= t->n || CH(p) != '"' || (p = str_end(t, kind, p, &esc)) < 0) return -1;
    p = ws(t, kind, p);
    if (p >= t->n || CH(p) != ':') return -1;
    return ws(t, kind, p + 1);
}

typedef struct {
    const char *s;
    Py_ssize_t n;
} keyname;
#define KEY(s) {s, sizeof(s) - 1}

/* The key of the member at p (after whitespace), looked up in keys[0..nkeys): its index, or
 * -1 for another key. *vp is set to the position of the value; -1 there means decline (bad
 * syntax, or an escape in the key: its characters are not its value). */
HOT int member_key(const text *t, int kind, Py_ssize_t p, const keyname *keys, int nkeys, Py_ssize_t *vp) {
    int esc = 0;
    Py_ssize_t q;
    *vp = -1;
    if (p >= t->n || CH(p) != '"' || (q = str_end(t, kind, p, &esc)) < 0 || esc) return -1;
    Py_ssize_t k0 = p + 1, len = q - 1 - k0;
    int found = -1;
    for (int k = 0; k < nkeys && found < 0; k++) {
        if (keys[k].n != len) continue;
        Py_ssize_t i = 0;
        while (i < len && CH(k0 + i) == (Py_UCS4)(unsigned char)keys[k].s[i]) i++;
        if (i == len) found = k;
    }
    q = ws(t, kind, q);
    if (q >= t->n || CH(q) != ':') return -1;
    *vp = ws(t, kind, q + 1);
    return found;
}

/* An id-like value (args columns, "id") as kineto._int_col sees it: ints (in int64), bools,
 * null -1, arrays/objects -1, floats without exponent (Decimal: integral -> int, else -1).
 * Strings (int(v, 0) rules) and NaN/Infinity are declined. */
HOT Py_ssize_t int_arg(const text *t, int kind, Py_ssize_t p, int64_t *v) {
    Py_UCS4 c = CH(p);
    if (c == '-' || IS_DIGIT(c)) {
        num m;
        Py_ssize_t q = scan_num(t, kind, p, &m);
        if (q < 0 || m.exp) return -1;
        for (Py_ssize_t k = m.f0; k < m.f1; k++) {
            if (CH(k) != '0') {
                *v = -1;
                return q;
            }
        }
        if (digits_value(t, kind, m.i0, m.i1, v) < 0) return -1;
        if (m.neg) *v = -*v;
        return q;
    }
    if (c == '[' || c == '{') {
        *v = -1;
        return skip_value(t, kind, p);
    }
    *v = c == 't' ? 1 : c == 'f' ? 0 : -1;
    return lit(t, kind, p, c == 't' ? "true" : c == 'f' ? "false" : "null");
}

/* What one event contributes to the columns. */
typedef struct {
    int ph, meta;               /* ph code; meta: ph is "M" */
    Py_ssize_t cat, cat_n;      /* cat's text (offset, length), escapes and all; length 0: "" */
    Py_ssize_t name, name_n;
    int64_t pid, tid;           /* numeric pid/tid ... */
    Py_ssize_t pid_s, pid_n;    /* ... or a string (pid_s >= 0), resolved by _Columns.label */
    Py_ssize_t tid_s, tid_n;
    int64_t ts, dur, args[N_ARGS], flow;
} event;

enum { K_PH, K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_ID, K_ARGS, N_KEYS };
static const keyname EVENT_KEYS[N_KEYS] = {KEY("ph"), KEY("cat"), KEY("name"), KEY("pid"), KEY("tid"),
                                          KEY("ts"), KEY("dur"), KEY("id"), KEY("args")};
static const keyname ARG_KEYS[N_ARGS] = {KEY("External id"), KEY("Record function id"), KEY("correlation"),
                                         KEY("stream"), KEY("device"), KEY("Ev Idx"), KEY("bytes")};

/* A string at p (else -1), its text between the quotes in (*s, *len). With escapes only if
 * allowed: cat and name, whose distinct texts Python decodes (json.decoder.scanstring). */
HOT Py_ssize_t string_value(const text *t, int kind, Py_ssize_t p, Py_ssize_t *s, Py_ssize_t *len, int escapes) {
    int esc = 0;
    Py_ssize_t q;
    if (CH(p) != '"' || (q = str_end(t, kind, p, &esc)) < 0 || (esc && !escapes)) return -1;
    *s = p + 1;
    *len = q - p - 2;
    return q;
}

/* pid/tid: an int64, a bool, null (-1) or a string without escapes; else -1 (decline). */
HOT Py_ssize_t id_value(const text *t, int kind, Py_ssize_t p, int64_t *v, Py_ssize_t *s, Py_ssize_t *len) {
    Py_UCS4 c = CH(p);
    *s = -1;
    *v = -1;
    if (c == '"') {
        Py_ssize_t q = string_value(t, kind, p, s, len, 0);
        if (q < 0) return -1;
        /* "digits" become numbers: more than 18 may not fit in int64 (an error in Python) */
        int digits = 0;
        for (Py_ssize_t k = *s; k < *s + *len; k++) digits += IS_DIGIT(CH(k));
        return digits > 18 ? -1 : q;
    }
    if (c == '-' || IS_DIGIT(c)) {
        num m;
        Py_ssize_t q = scan_num(t, kind, p, &m);
        return q < 0 || int_value(t, kind, &m, v) < 0 ? -1 : q;
    }
    *v = c == 't' ? 1 : c == 'f' ? 0 : -1;
    return lit(t, kind, p, c == 't' ? "true" : c == 'f' ? "false" : "null");
}

/* ts/dur: a number of µs -> ns; null keeps the default. */
HOT Py_ssize_t time_value(const text *t, int kind, Py_ssize_t p, int64_t *v) {
    Py_UCS4 c = CH(p);
    if (c == 'n') return lit(t, kind, p, "null");
    if (c != '-' && !IS_DIGIT(c)) return -1;
    num m;
    Py_ssize_t q = scan_num(t, kind, p, &m);
    return q < 0 || ns_value(t, kind, &m, v) < 0 ? -1 : q;
}

/* After a member's value at *p: 1 at the object's closing brace (*p just past it), 0 before
 * another member (*p at its key), -1 on anything else. */
HOT int after_member(const text *t, int kind, Py_ssize_t *p) {
    Py_ssize_t q = ws(t, kind, *p);
    if (q >= t->n) return -1;
    if (CH(q) == '}') {
        *p = q + 1;
        return 1;
    }
    if (CH(q) != ',') return -1;
    *p = ws(t, kind, q + 1);
    return 0;
}

/* "args": an object (its column keys read, the rest checked) or null; each "args" member
 * replaces the previous one entirely, as in a dict. */
HOT Py_ssize_t args_value(const text *t, int kind, Py_ssize_t p, event *ev) {
    for (int k = 0; k < N_ARGS; k++) ev->args[k] = -1;
    if (CH(p) != '{') return lit(t, kind, p, "null");
    p = ws(t, kind, p + 1);
    if (p < t->n && CH(p) == '}') return p + 1;
    for (;;) {
        Py_ssize_t v;
        int k = member_key(t, kind, p, ARG_KEYS, N_ARGS, &v);
        if (v < 0 || v >= t->n) return -1;
        p = k >= 0 ? int_arg(t, kind, v, &ev->args[k]) : skip_value(t, kind, v);
        if (p < 0) return -1;
        int end = after_member(t, kind, &p);
        if (end) return end < 0 ? -1 : p;
    }
}

/* One event at p ('{'): the position after its '}', or -1 to leave it to Python. Duplicate
 * keys: the last one wins, as in a dict. */
HOT Py_ssize_t parse_event(const text *t, int kind, Py_ssize_t p, event *ev) {
    ev->ph = PH_OTHER;
    ev->meta = 0;
    ev->cat = ev->cat_n = ev->name = ev->name_n = 0;
    ev->pid = ev->tid = -1;
    ev->pid_s = ev->tid_s = -1;
    ev->ts = 0;
    ev->dur = -1;
    for (int k = 0; k < N_ARGS; k++) ev->args[k] = -1;
    ev->flow = -1;
    p = ws(t, kind, p + 1);
    if (p < t->n && CH(p) == '}') return p + 1;
    for (;;) {
        Py_ssize_t v, len;
        int key = member_key(t, kind, p, EVENT_KEYS, N_KEYS, &v);
        if (v < 0 || v >= t->n) return -1;
        switch (key) {
        case K_PH:
            if (CH(v) == '"') {
                int esc = 0;
                p = str_end(t, kind, v, &esc);
                if (p < 0 || esc) return -1;
                len = p - v - 2;
                ev->ph = len == 1 && CH(v + 1) < 128 ? (int)CH(v + 1) : PH_OTHER;
                ev->meta = ev->ph == 'M';
            } else {
                p = skip_value(t, kind, v);
                ev->ph = PH_OTHER;
                ev->meta = 0;
            }
            break;
        case K_CAT:
            p = string_value(t, kind, v, &ev->cat, &ev->cat_n, 1);
            break;
        case K_NAME:
            p = string_value(t, kind, v, &ev->name, &ev->name_n, 1);
            break;
        case K_PID:
            p = id_value(t, kind, v, &ev->pid, &ev->pid_s, &ev->pid_n);
            break;
        case K_TID:
            p = id_value(t, kind, v, &ev->tid, &ev->tid_s, &ev->tid_n);
            break;
        case K_TS:
            ev->ts = 0;
            p = time_value(t, kind, v, &ev->ts);
            break;
        case K_DUR:
            ev->dur = -1;
            p = time_value(t, kind, v, &ev->dur);
            break;
        case K_ID:
            p = int_arg(t, kind, v, &ev->flow);
            break;
        case K_ARGS:
            p = args_value(t, kind, v, ev);
            break;
        default:
            p = skip_value(t, kind, v);
        }
        if (p < 0) return -1;
        int end = after_member(t, kind, &p);
        if (end) return end < 0 ? -1 : p;
    }
}

/* ------------------------------------------------------------------------------------------
 * String interning: equal strings get equal chunk-local codes, numbered in order of first
 * appearance; Python maps the few distinct ones to its global tables. */
typedef struct {
    int32_t *slots; /* code + 1; 0 = empty */
    uint64_t *hashes;
    size_t cap;     /* a power of two, at least twice the number of codes */
    vec first;      /* int64 (offset, length) of each code's first occurrence */
} strtab;

static uint64_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n, w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 29);
}

static int tab_alloc(strtab *s, size_t cap) {
    s->slots = calloc(cap, sizeof(int32_t));
    s->hashes = malloc(cap * sizeof(uint64_t));
    s->cap = cap;
    return s->slots && s->hashes ? 0 : -1;
}

static int tab_init(strtab *s) {
    s->first.obj = NULL;
    return tab_alloc(s, 256) || vec_init(&s->first, 16, 64) ? -1 : 0;
}

static void tab_free(strtab *s) {
    free(s->slots);
    free(s->hashes);
    s->slots = NULL;
    s->hashes = NULL;
    vec_free(&s->first);
}

/* Double the table (plain malloc: no GIL needed). */
static int tab_grow(strtab *s) {
    int32_t *slots = s->slots;
    uint64_t *hashes = s->hashes;
    size_t cap = s->cap;
    if (tab_alloc(s, cap * 2) < 0) {
        free(s->slots);
        free(s->hashes);
        s->slots = slots;
        s->hashes = hashes;
        s->cap = cap;
        return -1;
    }
    for (size_t i = 0; i < cap; i++) {
        if (!slots[i]) continue;
        size_t j = hashes[i] & (s->cap - 1);
        while (s->slots[j]) j = (j + 1) & (s->cap - 1);
        s->slots[j] = slots[i];
        s->hashes[j] = hashes[i];
    }
    free(slots);
    free(hashes);
    return 0;
}

/* The code of the string t[off:off+len]; -1 when out of memory. */
static int32_t tab_code(strtab *s, const text *t, int kind, Py_ssize_t off, Py_ssize_t len) {
    const uint8_t *base = t->d, *b = base + off * kind;
    size_t nb = (size_t)len * kind, mask = s->cap - 1;
    uint64_t h = hash_bytes(b, nb);
    size_t slot = h & mask;
    for (; s->slots[slot]; slot = (slot + 1) & mask) {
        int32_t c = s->slots[slot] - 1;
        const int64_t *f = (const int64_t *)s->first.data + 2 * c;
        if (s->hashes[slot] == h && f[1] == len && memcmp(base + f[0] * kind, b, nb) == 0) return c;
    }
    int64_t pair[2] = {off, len};
    if (vec_push(&s->first, pair) < 0) return -1;
    int32_t code = (int32_t)(s->first.len - 1);
    s->slots[slot] = code + 1;
    s->hashes[slot] = h;
    if ((size_t)s->first.len * 2 > s->cap && tab_grow(s) < 0) return -1;
    return code;
}

/* ------------------------------------------------------------------------------------------
 * The scan itself. Output columns, one row per event taken: */
enum { C_PH, C_CAT, C_NAME, C_PID, C_TID, C_PID_S, C_TID_S, C_TS, C_DUR, C_ARG0, C_FLOW = C_ARG0 + N_ARGS, N_COLS };
static const Py_ssize_t COL_ITEM[N_COLS] = {1, 4, 4, 8, 8, 4, 4, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8};
enum { T_CAT, T_NAME, T_LABEL, N_TABS };

typedef struct {
    vec col[N_COLS];
    strtab tab[N_TABS];
    Py_ssize_t count, stop;
    int cut;
} result;

/* Append one event's row; -1 when out of memory. */
static int add_row(result *r, const text *t, int kind, const event *ev) {
    vec *col = r->col;
    if (col[0].len == col[0].cap)
        for (int k = 0; k < N_COLS; k++)
            if (vec_grow(&col[k]) < 0) return -1;
    Py_ssize_t i = col[0].len;
    int32_t cat = tab_code(&r->tab[T_CAT], t, kind, ev->cat, ev->cat_n);
    int32_t name = tab_code(&r->tab[T_NAME], t, kind, ev->name, ev->name_n);
    int32_t pid_s = ev->pid_s < 0 ? -1 : tab_code(&r->tab[T_LABEL], t, kind, ev->pid_s, ev->pid_n);
    if (cat < 0 || name < 0 || (ev->pid_s >= 0 && pid_s < 0)) return -1;
    int32_t tid_s = ev->tid_s < 0 ? -1 : tab_code(&r->tab[T_LABEL], t, kind, ev->tid_s, ev->tid_n);
    if (ev->tid_s >= 0 && tid_s < 0) return -1;
    ((uint8_t *)col[C_PH].data)[i] = (uint8_t)ev->ph;
    ((int32_t *)col[C_CAT].data)[i] = cat;
    ((int32_t *)col[C_NAME].data)[i] = name;
    ((int64_t *)col[C_PID].data)[i] = ev->pid;
    ((int64_t *)col[C_TID].data)[i] = ev->tid;
    ((int32_t *)col[C_PID_S].data)[i] = pid_s;
    ((int32_t *)col[C_TID_S].data)[i] = tid_s;
    ((int64_t *)col[C_TS].data)[i] = ev->ts;
    ((int64_t *)col[C_DUR].data)[i] = ev->dur;
    for (int k = 0; k < N_ARGS; k++) ((int64_t *)col[C_ARG0 + k].data)[i] = ev->args[k];
    ((int64_t *)col[C_FLOW].data)[i] = ev->flow;
    for (int k = 0; k < N_COLS; k++) col[k].len = i + 1;
    return 0;
}

/* Whether the object at p runs past the end of the text, judging by brackets and strings only
 * (it is not taken anyway: this only tells Python to read on rather than decode it now). */
HOT int runs_out(const text *t, int kind, Py_ssize_t p) {
    Py_ssize_t depth = 0;
    for (; p < t->n; p++) {
        Py_UCS4 c = CH(p);
        if (c == '"') {
            for (p++; p < t->n && CH(p) != '"'; p++)
                if (CH(p) == '\\') p++;
            if (p >= t->n) return 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            return 0;
        }
    }
    return 1;
}

/* Events from pos on, each followed by `, {` of the next one taken: stops before the first
 * event not taken, with r->stop after the last one taken and r->cut set when the text ends
 * before that next event does. -1 when out of memory. */
HOT int scan_run(const text *t, int kind, Py_ssize_t pos, result *r) {
    Py_ssize_t p = ws(t, kind, pos);
    r->count = 0;
    r->stop = pos;
    event ev;
    while (p < t->n && CH(p) == '{') {
        Py_ssize_t q = parse_event(t, kind, p, &ev);
        if (q < 0 || ev.meta) break; /* ph "M" keeps its args: Python's */
        if (add_row(r, t, kind, &ev) < 0) return -1;
        r->count++;
        r->stop = q;
        q = ws(t, kind, q);
        if (q >= t->n || CH(q) != ',') {
            p = q;
            break;
        }
        p = ws(t, kind, q + 1);
    }
    r->cut = p >= t->n || (CH(p) == '{' && runs_out(t, kind, p));
    return 0;
}

static int scan_1(const text *t, Py_ssize_t pos, result *r) { return scan_run(t, 1, pos, r); }
static int scan_2(const text *t, Py_ssize_t pos, result *r) { return scan_run(t, 2, pos, r); }
static int scan_4(const text *t, Py_ssize_t pos, result *r) { return scan_run(t, 4, pos, r); }

/* scan_events(buf: str, pos) -> (count, stop, cut, ph, cat, name, pid, tid, pid_s, tid_s, ts,
 * dur, 7 args columns, flow_id, cat table, name table, label table), all but the first three
 * bytes:
 * ph uint8; cat/name int32 chunk-local codes; pid_s/tid_s int32 label codes (-1: pid/tid is
 * the number in pid/tid); int64 otherwise; tables int64 (offset, length) pairs into buf. */
static PyObject *scan_events(PyObject *self, PyObject *args) {
    PyObject *s;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "Un", &s, &pos)) return NULL;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) < 0) return NULL;
#endif
    text t = {PyUnicode_DATA(s), PyUnicode_GET_LENGTH(s)};
    int kind = PyUnicode_KIND(s);
    if (pos < 0 || pos > t.n) {
        PyErr_SetString(PyExc_ValueError, "scan_events: position outside the buffer");
        return NULL;
    }
    result r;
    PyObject *out = NULL;
    int fail = 0;
    for (int k = 0; k < N_COLS; k++) r.col[k].obj = NULL;
    for (int k = 0; k < N_TABS; k++) {
        r.tab[k].slots = NULL;
        r.tab[k].hashes = NULL;
        r.tab[k].first.obj = NULL;
    }
    Py_ssize_t rows = (t.n - pos) / 256 + 16; /* Kineto events take a few hundred characters */
    for (int k = 0; k < N_COLS; k++) fail |= vec_init(&r.col[k], COL_ITEM[k], rows);
    for (int k = 0; k < N_TABS; k++) fail |= tab_init(&r.tab[k]);
    if (fail) {
        PyErr_NoMemory();
        goto done;
    }
    /* Only the str (immutable, referenced by args) and our buffers are touched: let other
     * threads (the converter reads the host trace meanwhile) run. */
    Py_BEGIN_ALLOW_THREADS
    fail = kind == PyUnicode_1BYTE_KIND ? scan_1(&t, pos, &r)
         : kind == PyUnicode_2BYTE_KIND ? scan_2(&t, pos, &r) : scan_4(&t, pos, &r);
    Py_END_ALLOW_THREADS
    if (fail) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    out = PyTuple_New(3 + N_COLS + N_TABS);
    if (!out) goto done;
    PyTuple_SET_ITEM(out, 0, PyLong_FromSsize_t(r.count));
    PyTuple_SET_ITEM(out, 1, PyLong_FromSsize_t(r.stop));
    PyTuple_SET_ITEM(out, 2, PyBool_FromLong(r.cut));
    for (int k = 0; k < N_COLS; k++) PyTuple_SET_ITEM(out, 3 + k, vec_bytes(&r.col[k]));
    for (int k = 0; k < N_TABS; k++) PyTuple_SET_ITEM(out, 3 + N_COLS + k, vec_bytes(&r.tab[k].first));
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(out); k++) {
        if (!PyTuple_GET_ITEM(out, k)) {
            Py_CLEAR(out);
            if (!PyErr_Occurred()) PyErr_NoMemory();
            break;
        }
    }
done:
    for (int k = 0; k < N_COLS; k++) vec_free(&r.col[k]);
    for (int k = 0; k < N_TABS; k++) tab_free(&r.tab[k]);
    return out;
}

/* nest(starts, ends, bounds) -> int64 parent positions: interval_parents' sweep over
 * intervals sorted by (thread, start, -end, index), one stack per thread; bounds (int64) are
 * the positions where threads begin, then n. Python sorts and maps positions back. */
static PyObject *nest(PyObject *self, PyObject *args) {
    Py_buffer sv, ev, bv;
    if (!PyArg_ParseTuple(args, "y*y*y*", &sv, &ev, &bv)) return NULL;
    const int64_t *s = sv.buf, *e = ev.buf, *b = bv.buf;
    Py_ssize_t n = sv.len / 8, nb = bv.len / 8;
    PyObject *out = NULL;
    int64_t *stack = NULL;
    int ok = ev.len == sv.len && nb >= 1 && b[0] == 0 && b[nb - 1] == n;
    for (Py_ssize_t g = 0; ok && g + 1 < nb; g++) ok = b[g] <= b[g + 1];
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "nest: bad lengths or thread bounds");
        goto done;
    }
    out = PyByteArray_FromStringAndSize(NULL, n * 8);
    stack = malloc((size_t)(n + 1) * sizeof(int64_t));
    if (!out || !stack) {
        Py_CLEAR(out);
        PyErr_NoMemory();
        goto done;
    }
    int64_t *o = (int64_t *)PyByteArray_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t g = 0; g + 1 < nb; g++) {
        Py_ssize_t top = 0;
        for (int64_t k = b[g]; k < b[g + 1]; k++) {
            int64_t sk = s[k], ek = e[k];
            while (top && e[stack[top - 1]] <= sk) top--; /* closed before k starts */
            o[k] = -1;
            if (top && e[stack[top - 1]] >= ek) {
                o[k] = stack[top - 1];
            } else if (top) { /* partial overlap: the innermost open interval that contains k */
                for (Py_ssize_t j = top - 2; j >= 0; j--) {
                    int64_t p = stack[j];
                    if (e[p] >= ek && e[p] > sk) {
                        o[k] = p;
                        break;
                    }
                }
            }
            stack[top++] = k;
        }
    }
    Py_END_ALLOW_THREADS
done:
    free(stack);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&ev);
    PyBuffer_Release(&bv);
    return out;
}

static PyMethodDef methods[] = {
    {"scan_events", scan_events, METH_VARARGS, "Scan a run of Kineto trace events into columns."},
    {"nest", nest, METH_VARARGS, "Innermost enclosing interval of sorted intervals, per thread."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kineto", "C Kineto kernels: event scanning, interval nesting", -1, methods};

PyMODINIT_FUNC PyInit__kineto(void) { return kernel_module(&module); }
