/* One-pass float32 comparison kernel for lar_prec.compare (optional C extension).
 *
 * The engine's numpy path (lar_prec/engine_chunks.py) makes ~20 passes over every chunk; this
 * does the same metrics in one pass, which is what makes `lar-prec compare` read dumps at
 * memory speed. It is an optional extension: without a C compiler lar-prec installs and uses
 * the numpy path, which gives the same results (max_err, indices, counts and maxima bit for
 * bit; the float64 sums of lar_prec.metrics.sums in another order, so cosine/RMSE/mean may
 * differ in the last digits). tests/test_kernel.py checks the two against each other and
 * tests/test_metrics.py both against the reference definitions (lar_prec/metrics.py).
 *
 * Float32 arithmetic must stay IEEE and uncontracted: max_err is bit-identical to
 * compare_binary_iodump's |a-b| / max(max(|a|,|b|), 1) in float32. setup.py builds with
 * -ffp-contract=off and never -ffast-math.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

typedef float v8sf __attribute__((vector_size(32)));
typedef int32_t v8si __attribute__((vector_size(32)));
typedef uint32_t v8su __attribute__((vector_size(32)));
typedef double v4df __attribute__((vector_size(32)));
typedef int64_t v4di __attribute__((vector_size(32)));
typedef float v4sf __attribute__((vector_size(16)));

/* AVX2 where the CPU has it, baseline SSE2 otherwise (chosen once at load time). */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && !defined(LAR_PREC_NO_CLONES)
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

typedef struct {
    int bad;          /* a NaN/Inf input, or float32 overflow: the caller's careful path */
    float max_err;    /* MegEngine's error, float32 */
    Py_ssize_t worst; /* first index of max_err; -1 when max_err <= floor (not looked for) */
    float max_rel;    /* max |a-b| / max(|a|,|b|) over positions where that is defined; -1: none */
    float scale;      /* max max(|a|,|b|) */
    float max_abs;    /* max |a-b| */
    double sum_abs, aa, ab, bb, dd;
    Py_ssize_t n_over;
    uint32_t max_ulp;
} result_t;

static inline v8sf sel(v8si m, v8sf x, v8sf y) { return (v8sf)((m & (v8si)x) | (~m & (v8si)y)); }
static inline v8si seli(v8si m, v8si x, v8si y) { return (m & x) | (~m & y); }
static inline v8sf vabs(v8sf x) { return (v8sf)((v8si)x & 0x7fffffff); }
static inline v4df vabsd(v4df x) { return (v4df)((v4di)x & 0x7fffffffffffffffLL); }

/* Float bits -> an integer ordered like the values, -0 and +0 both 0: the ulp distance of two
 * finite floats is the difference of these (through zero for opposite signs). */
static inline v8si ordered(v8si x) {
    v8si neg = x >> 31;
    return ((x & 0x7fffffff) ^ neg) - neg;
}
static inline int32_t ordered1(int32_t x) {
    int32_t neg = x >> 31;
    return ((x & 0x7fffffff) ^ neg) - neg;
}

/* MegEngine's error of one pair: |a-b| / max(max(|a|,|b|), 1) in float32. d/m where m >= 1
 * and d where m < 1 (d/m >= d there), so one division serves it and the relative error. */
static inline float err1(float x, float y) {
    float ax = fabsf(x), ay = fabsf(y), d = fabsf(x - y), m = ax > ay ? ax : ay;
    return m >= 1.0f ? d / m : d;
}


/* The loop, specialised by the constant flags (always inlined into the dispatching clones).
 * NaN/Inf need no test per value: they reach the float64 sums of squares (as does a float32
 * difference that overflows), checked once at the end. */
static inline __attribute__((always_inline)) void loop(const float *a, const float *b, Py_ssize_t n, float thr,
                                                     const int want_ulp, const int count, result_t *r) {
    const v8sf zero = {0}, one = zero + 1.0f;
    v8sf best = zero - 1.0f, rel = zero - 1.0f, scale = zero, mabs = zero;
    v8si over = {0};
    v8su ulp = {0};
    v4df saa = {0}, sab = {0}, sbb = {0}, sdd = {0}, sabs = {0};
    Py_ssize_t i = 0, nv = n & ~(Py_ssize_t)7;
    for (; i < nv; i += 8) {
        v8sf va, vb;
        memcpy(&va, a + i, 32);
        memcpy(&vb, b + i, 32);
        v8sf aa_ = vabs(va), ab_ = vabs(vb);
        v8sf d0 = va - vb;
        v8sf d = vabs(d0);
        /* a.a, a.b, b.b, d.d and sum |d| in float64 (lar_prec.metrics.sums): a product of
           two float32 is exact there; each sum is direct, since b.b or d.d derived from the
           others cancels badly when b is small next to a, or close to it */
        v4sf alo, ahi, blo, bhi, dlo, dhi;
        memcpy(&alo, &va, 16);
        memcpy(&ahi, (const char *)&va + 16, 16);
        memcpy(&blo, &vb, 16);
        memcpy(&bhi, (const char *)&vb + 16, 16);
        memcpy(&dlo, &d0, 16);
        memcpy(&dhi, (const char *)&d0 + 16, 16);
        v4df xa = __builtin_convertvector(alo, v4df), ya = __builtin_convertvector(ahi, v4df);
        v4df xb = __builtin_convertvector(blo, v4df), yb = __builtin_convertvector(bhi, v4df);
        v4df xd = __builtin_convertvector(dlo, v4df), yd = __builtin_convertvector(dhi, v4df);
        saa += xa * xa + ya * ya;
        sab += xa * xb + ya * yb;
        sbb += xb * xb + yb * yb;
        sdd += xd * xd + yd * yd;
        sabs += vabsd(xd) + vabsd(yd);
        v8sf m = sel(aa_ > ab_, aa_, ab_);
        scale = sel(m > scale, m, scale);
        mabs = sel(d > mabs, d, mabs);
        v8sf q = d / m; /* 0/0 = NaN where both are 0: never > rel, and e = d there */
        rel = sel(q > rel, q, rel);
        v8sf e = sel(m >= one, q, d);
        best = sel(e > best, e, best);
        if (count) over -= (e > thr);
        if (want_ulp) {
            v8si oa = ordered((v8si)va), ob = ordered((v8si)vb);
            v8si gt = oa > ob;
            v8su u = (v8su)seli(gt, oa, ob) - (v8su)seli(gt, ob, oa);
            ulp = (v8su)seli((v8si)(u > ulp), (v8si)u, (v8si)ulp);
        }
    }
    float e_best = -1.0f, r_rel = -1.0f, r_scale = 0.0f, r_mabs = 0.0f;
    Py_ssize_t n_over = 0;
    uint32_t r_ulp = 0;
    for (int k = 0; k < 8; k++) {
        if (best[k] > e_best) e_best = best[k];
        if (rel[k] > r_rel) r_rel = rel[k];
        if (scale[k] > r_scale) r_scale = scale[k];
        if (mabs[k] > r_mabs) r_mabs = mabs[k];
        n_over += over[k];
        if (ulp[k] > r_ulp) r_ulp = ulp[k];
    }
    double s_aa = 0, s_ab = 0, s_bb = 0, s_dd = 0, s_abs = 0;
    for (int k = 0; k < 4; k++) {
        s_aa += saa[k];
        s_ab += sab[k];
        s_bb += sbb[k];
        s_dd += sdd[k];
        s_abs += sabs[k];
    }
    /* the last n % 8 values, one at a time, same arithmetic */
    int tail_bad = 0;
    for (; i < n; i++) {
        float x = a[i], y = b[i];
        float ax = fabsf(x), ay = fabsf(y), d0 = x - y, d = fabsf(d0);
        if (!(ax <= 3.40282347e38f) || !(d <= 3.40282347e38f)) tail_bad = 1;
        s_aa += (double)x * x;
        s_ab += (double)x * y;
        s_bb += (double)y * y;
        s_dd += (double)d0 * d0;
        s_abs += (double)d;
        float m = ax > ay ? ax : ay;
        if (m > r_scale) r_scale = m;
        if (d > r_mabs) r_mabs = d;
        float q = d / m;
        if (q > r_rel) r_rel = q;
        float e = m >= 1.0f ? q : d;
        if (e > e_best) e_best = e;
        if (count) n_over += e > thr;
        if (want_ulp) {
            int32_t xa, xb;
            memcpy(&xa, &x, 4);
            memcpy(&xb, &y, 4);
            int32_t oa = ordered1(xa), ob = ordered1(xb);
            uint32_t u = oa > ob ? (uint32_t)oa - (uint32_t)ob : (uint32_t)ob - (uint32_t)oa;
            if (u > r_ulp) r_ulp = u;
        }
    }
    r->bad = tail_bad || !isfinite(s_aa) || !isfinite(s_bb) || !isfinite(s_dd);
    r->max_err = e_best;
    r->max_rel = r_rel;
    r->scale = r_scale;
    r->max_abs = r_mabs;
    r->sum_abs = s_abs;
    r->aa = s_aa;
    r->ab = s_ab;
    r->bb = s_bb;
    r->dd = s_dd;
    r->n_over = n_over;
    r->max_ulp = r_ulp;
}

CLONES
static void kernel(const float *a, const float *b, Py_ssize_t n, int want_ulp, int count, float thr, result_t *r) {
    if (want_ulp && count) loop(a, b, n, thr, 1, 1, r);
    else if (want_ulp) loop(a, b, n, thr, 1, 0, r);
    else if (count) loop(a, b, n, thr, 0, 1, r);
    else loop(a, b, n, thr, 0, 0, r);
}

/* The first index holding the largest error: one more pass, but only over a chunk whose
 * largest error beats the var's so far, which after the first few chunks is rare. The same
 * vector arithmetic as the loop, so the same float32 values. */
CLONES
static Py_ssize_t first_at(const float *a, const float *b, Py_ssize_t n, float target) {
    const v8sf zero = {0}, one = zero + 1.0f;
    Py_ssize_t i = 0, nv = n & ~(Py_ssize_t)7;
    for (; i < nv; i += 8) {
        v8sf va, vb;
        memcpy(&va, a + i, 32);
        memcpy(&vb, b + i, 32);
        v8sf aa_ = vabs(va), ab_ = vabs(vb), d = vabs(va - vb);
        v8sf m = sel(aa_ > ab_, aa_, ab_);
        v8si hit = sel(m >= one, d / m, d) == target;
        int64_t any[4];
        memcpy(any, &hit, 32);
        if (any[0] | any[1] | any[2] | any[3])
            for (int k = 0; k < 8; k++)
                if (hit[k]) return i + k;
    }
    for (; i < n; i++)
        if (err1(a[i], b[i]) == target) return i;
    return 0; /* not reached: target came from these values */
}

PyDoc_STRVAR(float32_doc,
"float32(a, b, ulp, threshold, floor) -> tuple or None\n\n"
"Metrics of two equal-length buffers of float32 values in one pass: (max_err, worst_index,\n"
"max_rel (-1.0: undefined everywhere), scale, max_abs, sum_abs, aa, ab, bb, dd, n_over, max_ulp).\n"
"worst_index is -1 unless max_err > floor (the var's largest error so far); n_over counts\n"
"errors above threshold (None: not counted; with 0 it is the count of differing values);\n"
"max_ulp is None unless ulp. None when a value is NaN/Inf or float32 overflows: the caller\n"
"measures that chunk the careful way.");

static PyObject *py_float32(PyObject *self, PyObject *args) {
    Py_buffer ba, bb;
    int want_ulp;
    PyObject *thr_obj;
    double floor_;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*pOd", &ba, &bb, &want_ulp, &thr_obj, &floor_)) return NULL;
    PyObject *out = NULL;
    int count = thr_obj != Py_None;
    double thr = count ? PyFloat_AsDouble(thr_obj) : 0.0;
    if (thr == -1.0 && PyErr_Occurred()) goto done;
    if (ba.len != bb.len || ba.len % 4 != 0 || ba.len == 0) {
        PyErr_Format(PyExc_ValueError, "float32: buffers of %zd and %zd bytes, expected equal non-zero multiples of 4", ba.len, bb.len);
        goto done;
    }
    Py_ssize_t n = ba.len / 4;
    result_t r;
    const float *a = (const float *)ba.buf, *b = (const float *)bb.buf;
    Py_BEGIN_ALLOW_THREADS
    kernel(a, b, n, want_ulp, count, (float)thr, &r);
    r.worst = (!r.bad && (double)r.max_err > floor_) ? first_at(a, b, n, r.max_err) : -1;
    Py_END_ALLOW_THREADS
    if (r.bad) {
        out = Py_None;
        Py_INCREF(out);
        goto done;
    }
    out = Py_BuildValue("(dnddddddddNN)", (double)r.max_err, r.worst, (double)r.max_rel, (double)r.scale,
                        (double)r.max_abs, r.sum_abs, r.aa, r.ab, r.bb, r.dd,
                        count ? PyLong_FromSsize_t(r.n_over) : (Py_INCREF(Py_None), Py_None),
                        want_ulp ? PyLong_FromUnsignedLong(r.max_ulp) : (Py_INCREF(Py_None), Py_None));
done:
    PyBuffer_Release(&ba);
    PyBuffer_Release(&bb);
    return out;
}

PyDoc_STRVAR(same_doc, "same(a, b) -> bool\n\nTrue when two buffers hold the same bytes (memcmp).");

static PyObject *py_same(PyObject *self, PyObject *args) {
    Py_buffer ba, bb;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*", &ba, &bb)) return NULL;
    int eq = ba.len == bb.len;
    if (eq) {
        Py_BEGIN_ALLOW_THREADS
        eq = memcmp(ba.buf, bb.buf, (size_t)ba.len) == 0;
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&ba);
    PyBuffer_Release(&bb);
    return PyBool_FromLong(eq);
}

static PyMethodDef methods[] = {
    {"float32", py_float32, METH_VARARGS, float32_doc},
    {"same", py_same, METH_VARARGS, same_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "lar_prec._kernel", "One-pass float32 comparison kernel (optional).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernel(void) { return PyModule_Create(&module); }
