/* One-pass float32 comparison kernel for lar_prec.compare (optional C extension).
 *
 * The engine's numpy path (lar_prec/engine_chunks.py) makes ~20 passes over every chunk; this
 * does the same metrics in one pass, which is what makes `lar-prec compare` read dumps at
 * memory speed. It is an optional extension: without a C compiler lar-prec installs and uses
 * the numpy path, which gives the same results (max_err, indices, counts and maxima bit for
 * bit; the float64 sums of lar_prec.metrics.sums in another order, so cosine/RMSE/mean may
 * differ in the last digits). tests/test_kernel.py checks the two against each other and
 * tests/test_metrics.py both against the reference definitions (lar_prec/metrics.py). Also
 * here: each float var's error histogram (engine/hist.py; tests/compare/test_stats.py), float16
 * widened exactly (F16C where the CPU has it), the batch reader (scan_start), an auto
 * threshold's second pass (count_pairs) and the report's JSON text (json_rows).
 *
 * Float32 arithmetic must stay IEEE and uncontracted: max_err is bit-identical to
 * compare_binary_iodump's |a-b| / max(max(|a|,|b|), 1) in float32. setup.py builds with
 * -ffp-contract=off and never -ffast-math.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <limits.h>
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
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
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
    int32_t rel_lo, rel_hi, abs_lo, abs_hi; /* histogram bins touched, see below */
    int rows;                               /* the histogram rows counted (bit per row) */
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

/* err1 of eight pairs (the loop's arithmetic) */
static inline v8sf err8(v8sf va, v8sf vb) {
    const v8sf one = (v8sf){0} + 1.0f;
    v8sf aa_ = vabs(va), ab_ = vabs(vb), d = vabs(va - vb);
    v8sf m = sel(aa_ > ab_, aa_, ab_);
    return sel(m >= one, d / m, d);
}


/* ---- error histogram (lar_prec/compare/engine/hist.py holds the definition and its numpy twin)
 * The relative error q = |a-b| / max(|a|,|b|) (0 where a = b) and the absolute error d = |a-b|,
 * both float32, each counted in a fixed log-spaced histogram: the bin of a value is its float
 * bits >> 19 (the exponent and the top HIST_SUB_BITS mantissa bits: 16 bins per power of two,
 * each at most 1/16 wide relative to its lower edge), clamped to [2^-64, 2^64); bin 0 is exact
 * zero, bin 1 everything below 2^-64, bin HIST_NB - 1 everything from 2^64 (and inf). Each
 * kind is split by max(|a|,|b|) < 1 ("small") or >= 1 ("big"), so that MegEngine's error (d
 * where small, q where big) has its histogram too: four rows of HIST_NB counts,
 * [rel small, rel big, abs small, abs big], then four slots: the lowest and highest bin >= 1
 * touched by rel and by abs (empty: lo HIST_NB, hi 0). */
#define HIST_SUB_BITS 4
#define HIST_LO ((127 - 64) << HIST_SUB_BITS)
#define HIST_HI ((127 + 64) << HIST_SUB_BITS)
#define HIST_NB (HIST_HI - HIST_LO + 3)
#define HIST_LEN (4 * HIST_NB + 4)

static inline v8si hist_bin8(v8si x) {
    v8si b = x >> (23 - HIST_SUB_BITS);
    b = seli(b < HIST_LO - 1, b - b + (HIST_LO - 1), b);
    b = seli(b > HIST_HI, b - b + HIST_HI, b);
    return seli(x == 0, b - b, b - (HIST_LO - 2));
}
static inline int32_t hist_bin1(float v) {
    int32_t x, b;
    memcpy(&x, &v, 4);
    if (x == 0) return 0;
    b = x >> (23 - HIST_SUB_BITS);
    b = b < HIST_LO - 1 ? HIST_LO - 1 : (b > HIST_HI ? HIST_HI : b);
    return b - (HIST_LO - 2);
}

/* one chunk's counts, folded into the caller's int64 histogram only when the chunk is good
 * (a chunk with NaN/Inf is measured again by the careful path) */
#define HIST_COPIES 4
#define HIST_BLOCK 256
static __thread uint32_t hist_scratch[HIST_COPIES][4 * HIST_NB];

/* add the scratch counts of the bins a chunk touched into `dst` (HIST_LEN int64) and clear
 * them; with dst NULL only clear */
static void hist_fold(int64_t *dst, const result_t *r) {
    uint32_t (*hs)[4 * HIST_NB] = hist_scratch;
    for (int row = 0; row < 4; row++) {
        if (!(r->rows >> row & 1)) continue;
        int lo = row < 2 ? r->rel_lo : r->abs_lo, hi = row < 2 ? r->rel_hi : r->abs_hi;
        for (int j = 0; j <= hi; j = j ? j + 1 : (lo > 1 ? lo : 1)) {
            int x = row * HIST_NB + j;
            uint32_t c = 0;
            for (int l = 0; l < HIST_COPIES; l++) {
                c += hs[l][x];
                hs[l][x] = 0;
            }
            if (dst) dst[x] += c;
        }
    }
    if (!dst) return;
    int64_t *slot = dst + 4 * HIST_NB;
    if (r->rel_lo < slot[0]) slot[0] = r->rel_lo;
    if (r->rel_hi > slot[1]) slot[1] = r->rel_hi;
    if (r->abs_lo < slot[2]) slot[2] = r->abs_lo;
    if (r->abs_hi > slot[3]) slot[3] = r->abs_hi;
}

/* an empty histogram (HIST_LEN int64, from a cleared one: only the bins its slots say were touched) */
static void hist_clear(int64_t *h) {
    int64_t *slot = h + 4 * HIST_NB;
    for (int row = 0; row < 4; row++) {
        int lo = (int)slot[row < 2 ? 0 : 2], hi = (int)slot[row < 2 ? 1 : 3];
        h[row * HIST_NB] = 0;
        for (int j = lo; j <= hi; j++) h[row * HIST_NB + j] = 0;
    }
    slot[0] = slot[2] = HIST_NB;
    slot[1] = slot[3] = 0;
}

/* Count a block of k (a multiple of 8) errors kept by the loop below (float bits, the sign
 * bit set for the rel big row, else abs small) into the scratch histogram; widen [lo, hi]. */
static inline __attribute__((always_inline)) void err_block(int32_t *buf, Py_ssize_t k, int32_t *lo, int32_t *hi) {
    const v8si nb = {0}, none = nb + HIST_NB;
    v8si vlo = none, vhi = nb;
    uint32_t (*hs)[4 * HIST_NB] = hist_scratch;
    __asm__("" : "+r"(hs)); /* the thread's address looked up once, not per value */
    for (Py_ssize_t j = 0; j < k; j += 8) {
        v8si x;
        memcpy(&x, buf + j, 32);
        v8si be = hist_bin8(x & INT32_MAX);
        vlo = seli((be > 0) & (be < vlo), be, vlo);
        vhi = seli(be > vhi, be, vhi);
        x = be + seli(x < 0, nb + HIST_NB, nb + 2 * HIST_NB);
        memcpy(buf + j, &x, 32);
    }
    for (Py_ssize_t j = 0; j < k; j += HIST_COPIES) {
#pragma GCC unroll 4
        for (int c = 0; c < HIST_COPIES; c++) hs[c][buf[j + c]]++;
    }
    for (int c = 0; c < 8; c++) {
        if (vlo[c] < *lo) *lo = vlo[c];
        if (vhi[c] > *hi) *hi = vhi[c];
    }
}

/* The loop, specialised by the constant flags (always inlined into the dispatching clones).
 * NaN/Inf need no test per value: they reach the float64 sums of squares (as does a float32
 * difference that overflows), checked once at the end. */
static inline __attribute__((always_inline)) void loop(const float *a, const float *b, Py_ssize_t n, float thr,
                                                     const int want_ulp, const int count, const int want_err,
                                                     result_t *r) {
    const v8sf zero = {0}, one = zero + 1.0f;
    /* want_err: MegEngine's error counted in the histogram, a block at a time: this loop keeps
     * each error's bits (the sign bit set where max(|a|,|b|) >= 1: its row), err_block bins
     * and counts them (the loop has no register to spare) */
    const v8si smask = (v8si){0} + INT32_MIN;
    int32_t ebuf[HIST_BLOCK] __attribute__((aligned(32)));
    int32_t h_lo = HIST_NB, h_hi = 0;

    v8sf best = zero - 1.0f, rel = zero - 1.0f, scale = zero, mabs = zero;
    v8si over = {0};
    v8su ulp = {0};
    v4df saa = {0}, sab = {0}, sbb = {0}, sdd = {0}, sabs = {0};
    Py_ssize_t i = 0, nv = n & ~(Py_ssize_t)7;
    while (i < nv) {
    Py_ssize_t i0 = i, end = want_err && nv - i > HIST_BLOCK ? i + HIST_BLOCK : nv;
    for (; i < end; i += 8) {
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
        if (want_err) {
            v8si x = (v8si)e | ((v8si)(m >= one) & smask);
            memcpy(ebuf + (i - i0), &x, 32);
        }
    }
    if (want_err) err_block(ebuf, i - i0, &h_lo, &h_hi);
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
        if (want_err) {
            int32_t be = hist_bin1(e);
            if (be > 0 && be < h_lo) h_lo = be;
            if (be > h_hi) h_hi = be;
            hist_scratch[0][be + (m >= 1.0f ? HIST_NB : 2 * HIST_NB)]++;
        }
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
    /* one range for both rows (the bins of either; scanning a few empty ones costs nothing) */
    r->rel_lo = r->abs_lo = h_lo;
    r->rel_hi = r->abs_hi = h_hi;
    r->rows = want_err ? 6 : 0; /* rel big, abs small */
}

/* The error histogram of a chunk (see hist_bin1) into the thread's scratch copies, and the
 * bins touched into r: a loop of its own after the metrics' (the chunk is in cache by then),
 * which leaves both loops their registers. Blocks of bins are computed in vectors, then
 * counted, a value at a time, into HIST_COPIES copies (consecutive values, often of one bin,
 * do not wait for each other's increment). */
static inline __attribute__((always_inline)) void hist_loop(const float *a, const float *b, Py_ssize_t n, result_t *r) {
    const v8sf zero = {0}, one = zero + 1.0f;
    const v8si nb = {0}, none = nb + HIST_NB;
    v8si qlo = none, qhi = nb, dlo = none, dhi = nb;
    uint32_t (*hs)[4 * HIST_NB] = hist_scratch;
    __asm__("" : "+r"(hs)); /* the thread's address looked up once: not rematerialised per value */
    int32_t idx[2 * HIST_BLOCK] __attribute__((aligned(32)));
    Py_ssize_t nv = n & ~(Py_ssize_t)7;
    for (Py_ssize_t i0 = 0; i0 < nv; i0 += HIST_BLOCK) {
        Py_ssize_t k = nv - i0 < HIST_BLOCK ? nv - i0 : HIST_BLOCK;
        for (Py_ssize_t i = 0; i < k; i += 8) {
            v8sf va, vb;
            memcpy(&va, a + i0 + i, 32);
            memcpy(&vb, b + i0 + i, 32);
            v8sf aa_ = vabs(va), ab_ = vabs(vb), d = vabs(va - vb);
            v8sf m = sel(aa_ > ab_, aa_, ab_);
            v8si bq = seli((v8si)(d == zero), nb, hist_bin8((v8si)(d / m))), bd = hist_bin8((v8si)d);
            qlo = seli((bq > 0) & (bq < qlo), bq, qlo);
            qhi = seli(bq > qhi, bq, qhi);
            dlo = seli((bd > 0) & (bd < dlo), bd, dlo);
            dhi = seli(bd > dhi, bd, dhi);
            v8si big = (v8si)(m >= one) & HIST_NB;
            v8si xq = bq + big, xd = bd + big + 2 * HIST_NB;
            memcpy(idx + 2 * i, &xq, 32);
            memcpy(idx + 2 * i + 8, &xd, 32);
        }
        for (Py_ssize_t j = 0; j < 2 * k; j += HIST_COPIES) {
#pragma GCC unroll 4
            for (int c = 0; c < HIST_COPIES; c++) hs[c][idx[j + c]]++;
        }
    }
    int32_t rlo = HIST_NB, rhi = 0, alo = HIST_NB, ahi = 0;
    for (int k = 0; k < 8; k++) {
        if (qlo[k] < rlo) rlo = qlo[k];
        if (qhi[k] > rhi) rhi = qhi[k];
        if (dlo[k] < alo) alo = dlo[k];
        if (dhi[k] > ahi) ahi = dhi[k];
    }
    for (Py_ssize_t i = nv; i < n; i++) {
        float x = a[i], y = b[i], ax = fabsf(x), ay = fabsf(y), d = fabsf(x - y), m = ax > ay ? ax : ay;
        int32_t big = m >= 1.0f ? HIST_NB : 0, bq = d == 0.0f ? 0 : hist_bin1(d / m), bd = hist_bin1(d);
        if (bq > 0 && bq < rlo) rlo = bq;
        if (bq > rhi) rhi = bq;
        if (bd > 0 && bd < alo) alo = bd;
        if (bd > ahi) ahi = bd;
        hs[0][bq + big]++;
        hs[0][bd + big + 2 * HIST_NB]++;
    }
    r->rel_lo = rlo;
    r->rel_hi = rhi;
    r->abs_lo = alo;
    r->abs_hi = ahi;
    r->rows = 15;
}

/* hist: HIST_NONE, HIST_ERR (MegEngine's error, counted in the metrics' loop) or HIST_FULL (the
 * relative and the absolute error, in a loop of their own: MegEngine's error follows from them) */
enum { HIST_NONE = 0, HIST_ERR = 1, HIST_FULL = 2 };

CLONES
static void kernel(const float *a, const float *b, Py_ssize_t n, int want_ulp, int count, int hist, float thr,
                   result_t *r) {
    int e = hist == HIST_ERR;
    if (want_ulp && count) e ? loop(a, b, n, thr, 1, 1, 1, r) : loop(a, b, n, thr, 1, 1, 0, r);
    else if (want_ulp) e ? loop(a, b, n, thr, 1, 0, 1, r) : loop(a, b, n, thr, 1, 0, 0, r);
    else if (count) e ? loop(a, b, n, thr, 0, 1, 1, r) : loop(a, b, n, thr, 0, 1, 0, r);
    else e ? loop(a, b, n, thr, 0, 0, 1, r) : loop(a, b, n, thr, 0, 0, 0, r);
    if (hist == HIST_FULL && !r->bad) hist_loop(a, b, n, r);
}

/* The first index holding the largest error: one more pass, but only over a chunk whose
 * largest error beats the var's so far, which after the first few chunks is rare. The same
 * vector arithmetic as the loop, so the same float32 values. */
CLONES
static Py_ssize_t first_at(const float *a, const float *b, Py_ssize_t n, float target) {
    Py_ssize_t i = 0, nv = n & ~(Py_ssize_t)7;
    for (; i < nv; i += 8) {
        v8sf va, vb;
        memcpy(&va, a + i, 32);
        memcpy(&vb, b + i, 32);
        v8si hit = err8(va, vb) == target;
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
"measures that chunk the careful way. hist: None, or a writable buffer of HIST_LEN int64\n"
"(lar_prec/compare/engine/hist.py) the chunk's error histogram is added to (not when None is\n"
"returned): MegEngine's error, with full also the relative and the absolute error.");

static void halves_to_floats(const void *src, float *dst, Py_ssize_t n);
static uint32_t ulp16_max(const void *pa, const void *pb, Py_ssize_t n);

/* a thread's float32 copies of float16 chunks (float16(): grown, never freed) */
static __thread float *half_buf;
static __thread Py_ssize_t half_cap;

/* float32() and float16(): the values are float32, or float16 (widened exactly first) */
static PyObject *measure_call(PyObject *args, int half) {
    const char *what = half ? "float16" : "float32";
    int size = half ? 2 : 4;
    Py_buffer ba, bb;
    int want_ulp;
    PyObject *thr_obj;
    double floor_;
    PyObject *hist_obj = Py_None;
    int full = 0;
    Py_buffer bh = {0};
    if (!PyArg_ParseTuple(args, "y*y*pOd|Op", &ba, &bb, &want_ulp, &thr_obj, &floor_, &hist_obj, &full)) return NULL;
    PyObject *out = NULL;
    int want_hist = hist_obj != Py_None;
    if (want_hist) {
        if (PyObject_GetBuffer(hist_obj, &bh, PyBUF_WRITABLE) < 0) { want_hist = 0; goto done; }
        if (bh.len != (Py_ssize_t)(HIST_LEN * sizeof(int64_t))) {
            PyErr_Format(PyExc_ValueError, "%s: a histogram of %zd bytes, expected %d", what, bh.len, (int)(HIST_LEN * 8));
            goto done;
        }
    }
    int count = thr_obj != Py_None;
    double thr = count ? PyFloat_AsDouble(thr_obj) : 0.0;
    if (thr == -1.0 && PyErr_Occurred()) goto done;
    if (ba.len != bb.len || ba.len % size != 0 || ba.len == 0) {
        PyErr_Format(PyExc_ValueError, "%s: buffers of %zd and %zd bytes, expected equal non-zero multiples of %d", what,
                     ba.len, bb.len, size);
        goto done;
    }
    Py_ssize_t n = ba.len / size;
    const float *a = (const float *)ba.buf, *b = (const float *)bb.buf;
    if (half) {
        if (half_cap < 2 * n) {
            float *x = realloc(half_buf, (size_t)(2 * n) * sizeof(float));
            if (!x) { PyErr_NoMemory(); goto done; }
            half_buf = x;
            half_cap = 2 * n;
        }
        a = half_buf;
        b = half_buf + n;
    }
    result_t r;
    Py_BEGIN_ALLOW_THREADS
    if (half) {
        halves_to_floats(ba.buf, (float *)a, n);
        halves_to_floats(bb.buf, (float *)b, n);
    }
    kernel(a, b, n, want_ulp && !half, count, !want_hist ? HIST_NONE : full ? HIST_FULL : HIST_ERR, (float)thr, &r);
    r.worst = (!r.bad && (double)r.max_err > floor_) ? first_at(a, b, n, r.max_err) : -1;
    if (want_hist) hist_fold(r.bad ? NULL : (int64_t *)bh.buf, &r);
    if (half && want_ulp && !r.bad) r.max_ulp = ulp16_max(ba.buf, bb.buf, n);
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
    if (want_hist) PyBuffer_Release(&bh);
    return out;
}

static PyObject *py_float32(PyObject *self, PyObject *args) {
    (void)self;
    return measure_call(args, 0);
}

PyDoc_STRVAR(float16_doc,
"float16(a, b, ulp, threshold, floor, hist=None, full=False) -> tuple or None\n\n"
"float32() of two buffers of float16 values, widened exactly to float32 first (where the CPU\n"
"has F16C, by it); max_ulp in float16 units in the last place.");

static PyObject *py_float16(PyObject *self, PyObject *args) {
    (void)self;
    return measure_call(args, 1);
}

/* the upper edge of histogram bin j (see hist_bin1): every value in it is below this */
static double hist_edge(int j) {
    if (j == 0) return 0.0;
    if (j >= HIST_NB - 1) return INFINITY;
    int32_t bits = (j + HIST_LO - 1) << (23 - HIST_SUB_BITS);
    float f;
    memcpy(&f, &bits, 4);
    return (double)f;
}

/* the k[i]-th smallest values (1-based; k ascending) of rows r0 + r1 of histogram h, each as
 * its bin's upper edge clamped to top (the exact largest value), in one pass over the bins */
static void hist_kth(const int64_t *h, int r0, int r1, int lo, int hi, const long long *k, int nk, double top,
                     double *out) {
    long long c = h[r0 * HIST_NB] + h[r1 * HIST_NB];
    int i = 0;
    for (; i < nk && c >= k[i]; i++) out[i] = 0.0;
    for (int j = lo; j <= hi && i < nk; j++) {
        c += h[r0 * HIST_NB + j] + h[r1 * HIST_NB + j];
        if (c < k[i]) continue;
        double e = hist_edge(j);
        for (; i < nk && c >= k[i]; i++) out[i] = e < top ? e : top;
    }
    for (; i < nk; i++) out[i] = top;
}

/* p50, p90, p99, p99.9 (exact fractions: k = ceil(num * n / den)) */
static const long long QNUM[4] = {1, 9, 99, 999}, QDEN[4] = {2, 10, 100, 1000};
#define HIST_STATS 13

/* a var's statistics from its histogram of n values (lar_prec/compare/engine/hist.py STAT_FIELDS):
 * MegEngine's error p50, p90, p99, p99.9, that error at ratio (k = ceil(ratio * n)), then with
 * full the relative error's four quantiles and the absolute error's (else NaN) */
static void hist_stats(const int64_t *h, long long n, double ratio, int full, double max_rel, double max_abs,
                       double max_err, double out[HIST_STATS]) {
    const int64_t *slot = h + 4 * HIST_NB;
    int rlo = (int)slot[0], rhi = (int)slot[1], alo = (int)slot[2], ahi = (int)slot[3];
    int elo = rlo < alo ? rlo : alo, ehi = rhi > ahi ? rhi : ahi;
    long long k[5];
    for (int i = 0; i < 4; i++) k[i] = (QNUM[i] * n + QDEN[i] - 1) / QDEN[i];
    if (full) {
        hist_kth(h, 0, 1, rlo, rhi, k, 4, max_rel < 0 ? 0.0 : max_rel, out + 5);
        hist_kth(h, 2, 3, alo, ahi, k, 4, max_abs, out + 9);
    } else {
        for (int i = 5; i < HIST_STATS; i++) out[i] = NAN;
    }
    /* MegEngine's error: q where max(|a|,|b|) >= 1 (row 1), d below (row 2); the quantiles
     * and the one at ratio in one pass (the ranks in order) */
    long long kr = (long long)ceil(ratio * (double)n);
    kr = kr < 1 ? 1 : kr;
    int at = 4;
    while (at > 0 && k[at - 1] > kr) at--;
    for (int i = 4; i > at; i--) k[i] = k[i - 1];
    k[at] = kr;
    double e[5];
    hist_kth(h, 1, 2, elo, ehi, k, 5, max_err, e);
    for (int i = 0, j = 0; i < 5; i++)
        if (i != at) out[j++] = e[i];
    out[4] = e[at];
}

/* the statistics as Python objects (None for those not counted) into items */
static int stats_objects(const double st[HIST_STATS], PyObject *items[HIST_STATS]) {
    int ok = 1;
    for (int i = 0; i < HIST_STATS; i++) {
        items[i] = isnan(st[i]) ? (Py_INCREF(Py_None), Py_None) : PyFloat_FromDouble(st[i]);
        ok = ok && items[i];
    }
    return ok;
}

PyDoc_STRVAR(hist_stats_doc,
"hist_stats(hist, n, ratio, full, max_rel, max_abs, max_err) -> tuple\n\n"
"The statistics of the error histogram hist of n values (lar_prec/compare/engine/hist.py\n"
"STAT_FIELDS; stats_np is the numpy twin): MegEngine's error p50, p90, p99, p99.9, that error\n"
"at ratio, then with full the relative and the absolute error's quantiles (else None).");

static PyObject *py_hist_stats(PyObject *self, PyObject *args) {
    Py_buffer bh;
    long long n;
    int full;
    double ratio, mr, ma, me, out[HIST_STATS];
    PyObject *items[HIST_STATS];
    (void)self;
    if (!PyArg_ParseTuple(args, "y*Ldpddd", &bh, &n, &ratio, &full, &mr, &ma, &me)) return NULL;
    if (bh.len != (Py_ssize_t)(HIST_LEN * sizeof(int64_t))) {
        PyBuffer_Release(&bh);
        return PyErr_Format(PyExc_ValueError, "hist_stats: a histogram of %zd bytes, expected %d", bh.len, (int)(HIST_LEN * 8));
    }
    hist_stats((const int64_t *)bh.buf, n, ratio, full, mr, ma, me, out);
    PyBuffer_Release(&bh);
    int ok = stats_objects(out, items);
    PyObject *t = ok ? PyTuple_New(HIST_STATS) : NULL;
    for (int i = 0; i < HIST_STATS; i++) {
        if (t) PyTuple_SET_ITEM(t, i, items[i]);
        else Py_XDECREF(items[i]);
    }
    return t;
}

PyDoc_STRVAR(hist_add_doc, "hist_add(dst, src)\n\nAdd histogram src into dst (counts summed, bin ranges widened).");

static PyObject *py_hist_add(PyObject *self, PyObject *args) {
    Py_buffer bd, bs;
    (void)self;
    if (!PyArg_ParseTuple(args, "w*y*", &bd, &bs)) return NULL;
    if (bd.len != (Py_ssize_t)(HIST_LEN * sizeof(int64_t)) || bs.len != bd.len) {
        PyBuffer_Release(&bd);
        PyBuffer_Release(&bs);
        return PyErr_Format(PyExc_ValueError, "hist_add: histograms of %d bytes expected", (int)(HIST_LEN * 8));
    }
    int64_t *d = (int64_t *)bd.buf;
    const int64_t *x = (const int64_t *)bs.buf;
    for (int i = 0; i < 4 * HIST_NB; i++) d[i] += x[i];
    for (int i = 4 * HIST_NB; i < HIST_LEN; i += 2) {
        if (x[i] < d[i]) d[i] = x[i];
        if (x[i + 1] > d[i + 1]) d[i + 1] = x[i + 1];
    }
    PyBuffer_Release(&bd);
    PyBuffer_Release(&bs);
    Py_RETURN_NONE;
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

/* ======================================================================== scan_pairs
 *
 * Many small vars (detection and transformer models have tens of thousands) cost per file,
 * not per byte: in Python each file took an open, a header parse, a title read, a second open
 * for the values and ~40 us of bookkeeping. scan_pairs reads each pair of files once, on
 * several threads without the GIL: the 40-byte header (checked as lar_prec/dumps/binary.py
 * checks it), the title and, for a var small enough, its values, compared exactly as the
 * Python engine compares them (lar_prec/compare/engine/chunks.py: the same kernel calls per
 * chunk, the same accumulation order). Anything unusual (a file that cannot be opened or is
 * not a dump, NaN/Inf, a dtype or a size this path does not take) is left to the Python
 * reader and engine, which say what is wrong or take the careful path.
 */
#include <pthread.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <time.h>
#include <errno.h>

#define HDR 40
#define NDIM 7

enum { H_NONE = 0, H_F32, H_F16, H_I8, H_U8, H_I16, H_U16, H_I32, H_BOOL };

/* ------------------------------------------------------------------------ titles
 *
 * The usual title, parsed as lar_prec/dumps/titles.py parses it in one match (its _FAST
 * pattern: the owner the shortest prefix followed by "{OprType}, name:", the name the
 * shortest followed by the fixed tail and what may follow a block there). Only pure-ASCII
 * titles; anything else, or anything that pattern would not match in one go (the Python
 * parser then takes its step-by-step path, or reports the error), returns "not parsed" and
 * Python parses the title itself. tests/compare/test_batch.py holds the two to agreement.
 */
enum { F_VAR, F_LAST, F_NEXT };

typedef struct {
    long long vid, slot, si, vi, opr_id;
    int is_layout, has_opr_id;
    char storage;
    size_t text0, text1, dtype0, dtype1, owner0, owner1, type0, type1, name0, name1, cn0, cn1, end;
} block_t;

typedef struct {
    int ok;
    long long input_index; /* -1: none */
    block_t var;
    size_t inputs_at;
    Py_ssize_t n_inputs;
    long long *input_ids;  /* malloc'd */
} title_t;

static inline int isdig(char c) { return c >= '0' && c <= '9'; }
static inline int lit(const char *s, size_t n, size_t *p, const char *w) {
    size_t k = strlen(w);
    if (n - *p < k || memcmp(s + *p, w, k) != 0) return 0;
    *p += k;
    return 1;
}

/* \d{1,20} (with neg_ok: -?\d{1,20}) at *p: 1 read, 0 no match, -1 a number this path does
 * not read (19 or 20 digits: Python's int takes them) */
static int number(const char *s, size_t n, size_t *p, int neg_ok, long long *out) {
    size_t i = *p;
    int neg = 0;
    if (neg_ok && i < n && s[i] == '-') { neg = 1; i++; }
    size_t st = i;
    long long v = 0;
    while (i < n && isdig(s[i]) && i - st <= 20) { if (i - st < 18) v = v * 10 + (s[i] - '0'); i++; }
    size_t k = i - st;
    if (k == 0 || k > 20) return 0;
    if (k > 18) return -1;
    *out = neg ? -v : v;
    *p = i;
    return 1;
}

/* the tail ", slot:N, <cn>, s|d, N, N}" at k and what must follow it: 1, 0, or -1 (give up) */
static int tail_at(const char *s, size_t n, size_t k, int place, block_t *b) {
    size_t p = k;
    int r;
    if (!lit(s, n, &p, ", slot:")) return 0;
    if ((r = number(s, n, &p, 0, &b->slot)) != 1) return r;
    if (!lit(s, n, &p, ", ")) return 0;
    b->cn0 = p;
    while (p < n && s[p] != ',') p++;
    b->cn1 = p;
    if (!lit(s, n, &p, ", ")) return 0;
    if (p >= n || (s[p] != 's' && s[p] != 'd')) return 0;
    b->storage = s[p++];
    if (!lit(s, n, &p, ", ")) return 0;
    if ((r = number(s, n, &p, 1, &b->si)) != 1) return r;
    if (!lit(s, n, &p, ", ")) return 0;
    if ((r = number(s, n, &p, 1, &b->vi)) != 1) return r;
    if (!lit(s, n, &p, "}")) return 0;
    b->end = p;
    if (place == F_VAR) return n - p >= 18 && memcmp(s + p, " owner_opr_inputs=", 18) == 0;
    if (place == F_LAST) return p == n;
    if (p == n) return 1;
    if (s[p] != ' ') return 0;
    size_t q = p + 1;
    while (q < n && isdig(s[q])) q++;
    return q > p + 1 && n - q >= 5 && memcmp(s + q, "={id:", 5) == 0;
}

static inline int opr_char(char c) { return isdig(c) || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == ':'; }
static inline int ident_char(char c) { return isdig(c) || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }

/* one {id:...} block at pos, as _FAST matches it: 1, or 0 (Python parses the title) */
static int block_at(const char *s, size_t n, size_t pos, int place, block_t *b) {
    size_t p = pos;
    memset(b, 0, sizeof *b);
    if (!lit(s, n, &p, "{id:") || number(s, n, &p, 0, &b->vid) != 1 || !lit(s, n, &p, ", ")) return 0;
    if (lit(s, n, &p, "layout:")) b->is_layout = 1;
    else if (!lit(s, n, &p, "shape:")) return 0;
    b->text0 = p;
    if (p >= n || s[p] != '{') return 0;
    p++;
    while (p < n && s[p] != '{' && s[p] != '}') p++;
    if (p >= n || s[p] != '}') return 0;
    b->text1 = ++p;
    if (!lit(s, n, &p, ", ")) return 0;
    b->dtype0 = p;
    if (p >= n || !((s[p] >= 'A' && s[p] <= 'Z') || (s[p] >= 'a' && s[p] <= 'z'))) return 0;
    while (p < n && ident_char(s[p])) p++;
    b->dtype1 = p;
    if (!lit(s, n, &p, ", owner:")) return 0;
    /* the owner: the shortest prefix followed by {OprType}, name: (Python's lookahead) */
    b->owner0 = p;
    size_t j = p;
    for (;; j++) {
        if (j >= n) return 0;
        if (s[j] != '{') continue;
        size_t q = j + 1;
        while (q < n && opr_char(s[q])) q++;
        if (q < n && s[q] == '}' && n - (q + 1) >= 7 && memcmp(s + q + 1, ", name:", 7) == 0) {
            b->owner1 = j;
            b->type0 = j + 1;
            b->type1 = q;
            p = q + 8;
            break;
        }
    }
    /* a ", slot:" before the name: Python's steps decide where the block ends */
    for (size_t i = b->dtype1; i + 7 <= p; i++)
        if (memcmp(s + i, ", slot:", 7) == 0) return 0;
    b->name0 = p;
    int found = 0;
    for (size_t k = p; k < n && !found; k++) {
        if (s[k] != ',') continue;
        int r = tail_at(s, n, k, place, b);
        if (r < 0) return 0;
        if (r == 1) {
            b->name1 = k;
            found = 1;
        }
    }
    if (!found) return 0;
    /* the operator id: "[N]" ending the owner (titles.py _OPR_ID) */
    if (b->owner1 > b->owner0 && s[b->owner1 - 1] == ']') {
        size_t e = b->owner1 - 1, d = e;
        while (d > b->owner0 && isdig(s[d - 1])) d--;
        if (e - d >= 1 && e - d <= 18 && d > b->owner0 && s[d - 1] == '[') {
            long long v = 0;
            for (size_t i = d; i < e; i++) v = v * 10 + (s[i] - '0');
            b->opr_id = v;
            b->has_opr_id = 1;
        }
        else if (e - d > 18) return 0;
    }
    return 1;
}

static void parse_title_c(const char *s, size_t n, title_t *t) {
    memset(t, 0, sizeof *t);
    t->input_index = -1;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return;
    size_t p = 0;
    if (n >= 3 && memcmp(s, "inp", 3) == 0) {
        size_t q = 3;
        long long k;
        if (number(s, n, &q, 0, &k) == 1 && lit(s, n, &q, ": ")) { t->input_index = k; p = q; }
        else return;
    }
    if (!lit(s, n, &p, "var=") || !block_at(s, n, p, F_VAR, &t->var)) return;
    p = t->var.end + 18;
    if (p < n && s[p] == ' ') p++;
    t->inputs_at = p;
    size_t cap = 0;
    block_t b;
    if (p == n) { t->ok = 1; return; }
    if (s[p] == '{') {
        if (!block_at(s, n, p, F_LAST, &b)) return;
        t->input_ids = malloc(sizeof(long long));
        if (!t->input_ids) return;
        t->input_ids[0] = b.vid;
        t->n_inputs = 1;
        t->ok = 1;
        return;
    }
    for (long long k = 0;; k++) {
        char key[24];
        snprintf(key, sizeof key, "%lld=", k);
        if (!lit(s, n, &p, key) || !block_at(s, n, p, F_NEXT, &b)) goto fail;
        if ((size_t)t->n_inputs == cap) {
            cap = cap ? 2 * cap : 4;
            long long *x = realloc(t->input_ids, cap * sizeof(long long));
            if (!x) goto fail;
            t->input_ids = x;
        }
        t->input_ids[t->n_inputs++] = b.vid;
        if (b.end == n) { t->ok = 1; return; }
        p = b.end + 1;
    }
fail:
    free(t->input_ids);
    t->input_ids = NULL;
    t->n_inputs = 0;
}

static PyObject *title_tuple(const char *s, const title_t *t) {
    const block_t *b = &t->var;
    PyObject *ids = PyTuple_New(t->n_inputs);
    if (!ids) return NULL;
    for (Py_ssize_t i = 0; i < t->n_inputs; i++) {
        PyObject *x = PyLong_FromLongLong(t->input_ids[i]);
        if (!x) { Py_DECREF(ids); return NULL; }
        PyTuple_SET_ITEM(ids, i, x);
    }
#define SL(a, z) s + b->a, (Py_ssize_t)(b->z - b->a)
    return Py_BuildValue("(NLOs#s#s#s#Ns#Ls#CLLnN)",
                         t->input_index < 0 ? (Py_INCREF(Py_None), Py_None) : PyLong_FromLongLong(t->input_index),
                         b->vid, b->is_layout ? Py_True : Py_False, SL(text0, text1), SL(dtype0, dtype1), SL(owner0, owner1),
                         SL(type0, type1), b->has_opr_id ? PyLong_FromLongLong(b->opr_id) : (Py_INCREF(Py_None), Py_None),
                         SL(name0, name1), b->slot, SL(cn0, cn1), (int)b->storage, b->si, b->vi, (Py_ssize_t)t->inputs_at, ids);
#undef SL
}

typedef struct { long long code; int bits; int handler; } dt_t;

typedef struct {
    int ok;                /* header read and consistent */
    uint32_t code;
    int ndim;
    uint32_t dims[NDIM];
    long long size;        /* elements */
    long long file_size;
    uint32_t name_len;
    char *title;           /* malloc'd copy (A always, B when it differs from A's) */
    const dt_t *dt;
} head_t;


/* at most this many errors inside an auto threshold's band are kept per var read whole
 * (band_window; tens of thousands of small vars: BAND_CAP, or one in 256 of a var's elements
 * where that is more), and per var read a window at a time */
#define BAND_CAP 64
#define STREAM_BAND_CAP 65536

typedef struct {
    long long n_fin, worst, n_over, n_diff, max_ulp; /* max_ulp -1: none */
    double max_err, worst_a, worst_b, max_abs, max_rel, sum_abs, aa, ab, bb, dd, scale;
    int has_stats;         /* a float var: stats from its error histogram (hist_stats) */
    double stats[HIST_STATS];
    /* an auto threshold's band (band_window): values above it, and the errors inside it */
    int band_ok, band_n;
    long long band_above;
    float *band_vals;      /* malloc'd (job_clear frees it) */
} acc_t;

typedef struct {
    const char *pa, *pb;
    head_t a, b;
    title_t ta, tb;        /* parsed titles (tb only when B's differs) */
    int title_same;
    int measured;
    acc_t acc;
} pair_t;

typedef struct {
    pair_t *pairs;
    Py_ssize_t n;
    Py_ssize_t next;       /* shared work counter */
    const dt_t *dts;
    int n_dts;
    long long max_file;    /* files up to this size are read whole and compared */
    long long chunk;       /* elements per kernel call, as the Python engine's chunk_elements */
    int count;
    float thr;
    double thr_d;          /* the threshold as given (its float32 rounding is thr) */
    double ratio;          /* --pass-ratio: the share of elements hist_stats' last value is at */
    int full;              /* relative and absolute error histograms too (HIST_FULL) */
    double band_lo[2], band_hi[2]; /* an auto threshold's band of float32 and float16 (0: none) */
    int oom;
    int stream;            /* files over max_file: measured too, mapped a window at a time */
    long long piece;       /* a streamed var's elements are summed per range of this many (0: one range) */
    long long done_bytes;  /* the files of the pairs measured so far, both sides (atomic; scan_poll) */
    int running;           /* threads not yet done (under `lock`; scan_poll waits on `ended`) */
    pthread_mutex_t lock;
    pthread_cond_t ended;
} scan_t;

/* a thread of the scan is done: told to scan_poll at once */
static void scan_thread_done(scan_t *s) {
    pthread_mutex_lock(&s->lock);
    s->running--;
    pthread_cond_broadcast(&s->ended);
    pthread_mutex_unlock(&s->lock);
}

static const dt_t *find_dt(const scan_t *s, uint32_t code) {
    for (int i = 0; i < s->n_dts; i++)
        if (s->dts[i].code == (long long)code) return &s->dts[i];
    return NULL;
}

/* A thread's open folder: the files of a block are in one or two folders, and opening each
 * by its name in an open folder saves walking the whole path every time (a third of the
 * system time of reading 40,000 small files). */
typedef struct { int fd; size_t len; char path[4096]; } dirc_t;

static int open_in(dirc_t *dc, const char *path) {
    const char *slash = strrchr(path, '/');
    size_t len = slash ? (size_t)(slash - path) : 0;
    if (!slash || len == 0 || len >= sizeof dc->path) return open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (dc->fd < 0 || dc->len != len || memcmp(dc->path, path, len) != 0) {
        if (dc->fd >= 0) close(dc->fd);
        memcpy(dc->path, path, len);
        dc->path[len] = 0;
        dc->len = len;
        dc->fd = open(dc->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dc->fd < 0) { dc->len = 0; return open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); }
    }
    return openat(dc->fd, slash + 1, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
}

static size_t read_all(int fd, char *p, size_t want) {
    size_t got = 0;
    while (got < want) {
        ssize_t k = read(fd, p + got, want - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    return got;
}

static int grow(char **buf, size_t *cap, size_t want) {
    if (want <= *cap) return 1;
    char *nb = realloc(*buf, want);
    if (!nb) return 0;
    *buf = nb;
    *cap = want;
    return 1;
}

/* the first read of a file: a small one is whole after it (no fstat) */
#define FIRST_READ 65536

/* Read the header and title of one file, and all of it when it is small: 0 when this path
 * cannot take the file (the Python reader will, and says what is wrong with it). */
static int read_file(const scan_t *s, dirc_t *dc, const char *path, head_t *h, char **buf, size_t *cap, size_t *got_out) {
    memset(h, 0, sizeof *h);
    *got_out = 0;
    int fd = open_in(dc, path);
    if (fd < 0) return 0;
    if (!grow(buf, cap, FIRST_READ)) { close(fd); return 0; }
    /* a folder fails to read, a fifo or device gives no dump header: left to the Python reader */
    ssize_t k;
    do k = read(fd, *buf, FIRST_READ); while (k < 0 && errno == EINTR);
    /* one read: a short one is the end of the file (a second read would return 0), or a file
     * system that reads in pieces, whose header then does not match the bytes: Python */
    size_t got = k > 0 ? (size_t)k : 0;
    long long fsize;
    if (got < FIRST_READ) {
        fsize = (long long)got;
    } else {
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { close(fd); return 0; }
        fsize = (long long)st.st_size;
        if (fsize < FIRST_READ) { close(fd); return 0; }  /* it shrank: the Python reader */
        if (fsize <= s->max_file) {
            if (!grow(buf, cap, (size_t)fsize)) { close(fd); return 0; }
            got += read_all(fd, *buf + got, (size_t)fsize - got);
            if (got != (size_t)fsize) { close(fd); return 0; }
        }
    }
    close(fd);
    if (got < HDR) return 0;
    uint32_t w[10];
    memcpy(w, *buf, HDR);  /* little-endian hosts only: the module is built for x86-64/arm64 */
    if (w[2] != NDIM) return 0;
    const dt_t *dt = find_dt(s, w[1]);
    if (!dt) return 0;
    unsigned long long size = 1;
    int ndim = 0;
    for (int i = 0; i < NDIM; i++) {
        uint32_t d = w[3 + i];
        if (d == 0) {
            for (int j = i + 1; j < NDIM; j++) if (w[3 + j]) return 0;
            break;
        }
        if (__builtin_mul_overflow(size, (unsigned long long)d, &size)) return 0;
        h->dims[ndim++] = d;
    }
    unsigned long long bits;
    if (size > (1ULL << 58) || __builtin_mul_overflow(size, (unsigned long long)dt->bits, &bits)) return 0;
    unsigned long long nbytes = (bits + 7) / 8;
    unsigned long long off = HDR + (unsigned long long)w[0];
    if (off > (unsigned long long)fsize || off > got) return 0; /* a long title: the Python reader */
    if ((unsigned long long)fsize - off != nbytes) return 0;
    h->ok = 1;
    h->code = w[1];
    h->ndim = ndim;
    h->size = (long long)size;
    h->file_size = fsize;
    h->name_len = w[0];
    h->dt = dt;
    *got_out = got;
    return 1;
}

static void acc_add_kernel(acc_t *acc, const result_t *r, Py_ssize_t n, long long off, const float *a, const float *b, int count_zero) {
    /* chunks.py _kernel_add, in its order */
    acc->n_fin += n;
    if (r->worst >= 0 && (double)r->max_err > acc->max_err) {
        acc->max_err = (double)r->max_err;
        acc->worst = off + r->worst;
        acc->worst_a = (double)a[r->worst];
        acc->worst_b = (double)b[r->worst];
    }
    if ((double)r->scale > acc->scale) acc->scale = (double)r->scale;
    if ((double)r->max_abs > acc->max_abs) acc->max_abs = (double)r->max_abs;
    if ((double)r->max_rel > acc->max_rel) acc->max_rel = (double)r->max_rel;
    acc->aa += r->aa;
    acc->ab += r->ab;
    acc->bb += r->bb;
    acc->dd += r->dd;
    acc->sum_abs += r->sum_abs;
    if (r->n_over >= 0) {
        acc->n_over += r->n_over;
        if (count_zero) acc->n_diff += r->n_over;
    }
}

static int run_kernel(const float *a, const float *b, Py_ssize_t n, int want_ulp, int count, float thr, double floor_,
                      int64_t *hist, int full, result_t *r) {
    kernel(a, b, n, want_ulp, count, !hist ? HIST_NONE : full ? HIST_FULL : HIST_ERR, thr, r);
    if (hist) hist_fold(r->bad ? NULL : hist, r);
    if (r->bad) return 0;
    r->worst = (double)r->max_err > floor_ ? first_at(a, b, n, r->max_err) : -1;
    if (!count) r->n_over = -1;
    return 1;
}

/* An auto threshold's window of one var (see band_window): the errors above it counted, those
 * inside it kept (at most `limit`; ok 0 when there were more or no memory). */
typedef struct {
    float lo, hi;
    long long above;
    float *vals;
    int n, cap, limit, ok;
} band_t;

static void band_keep(band_t *bd, float e) {
    if (bd->n == bd->cap) {
        int cap = bd->cap ? 2 * bd->cap : 64;
        if (cap > bd->limit) cap = bd->limit;
        float *x = bd->n < bd->limit ? realloc(bd->vals, (size_t)cap * sizeof(float)) : NULL;
        if (!x) { bd->ok = 0; return; }
        bd->vals = x;
        bd->cap = cap;
    }
    bd->vals[bd->n++] = e;
}

/* the errors of n pairs against the window: eight at a time, the few inside looked at one by
 * one (err8 is err1's arithmetic: the same float32 values) */
CLONES
static void band_scan(const float *a, const float *b, Py_ssize_t n, band_t *bd) {
    const v8sf lo = (v8sf){0} + bd->lo, hi = (v8sf){0} + bd->hi;
    v8si above = {0};
    Py_ssize_t i = 0, nv = n & ~(Py_ssize_t)7;
    for (; i < nv && bd->ok; i += 8) {
        v8sf va, vb;
        memcpy(&va, a + i, 32);
        memcpy(&vb, b + i, 32);
        v8sf e = err8(va, vb);
        v8si over = e > hi, in = (e > lo) & ~over;
        above -= over;
        int64_t any[4];
        memcpy(any, &in, 32);
        if (any[0] | any[1] | any[2] | any[3])
            for (int k = 0; k < 8; k++)
                if (in[k]) band_keep(bd, e[k]);
    }
    for (int k = 0; k < 8; k++) bd->above += above[k];
    for (; i < n && bd->ok; i++) {
        float e = err1(a[i], b[i]);
        if (e > bd->hi) bd->above++;
        else if (e > bd->lo) band_keep(bd, e);
    }
}

static uint32_t ulp16_max(const void *pa, const void *pb, Py_ssize_t n);

/* chunks.py _kernel_range in C: n values (float32, or float16 widened first) `chunk` at a time
 * as the Python engine cuts them (identical bytes as kernel(a, a)), accumulated into acc in the
 * Python engine's order; pos: the first value's index in the var. Returns -1, or the offset of
 * the first chunk with NaN/Inf (acc then holds what came before it: the caller measures that
 * chunk the careful way). fa, fb: room for `chunk` floats (float16 only). */
static Py_ssize_t measure_run(const char *pa, const char *pb, Py_ssize_t n, int half, Py_ssize_t chunk, int count,
                              float thr, int count_zero, int64_t *hist, int full, long long pos, acc_t *acc,
                              float *fa, float *fb, band_t *band) {
    int size = half ? 2 : 4;
    result_t r;
    for (Py_ssize_t i = 0; i < n; i += chunk) {
        Py_ssize_t k = n - i < chunk ? n - i : chunk;
        const char *ca = pa + i * size, *cb = pb + i * size;
        int same = memcmp(ca, cb, (size_t)(k * size)) == 0;
        const float *a = (const float *)ca, *b = (const float *)cb;
        if (half) {
            halves_to_floats(ca, fa, k);
            if (!same) halves_to_floats(cb, fb, k);
            a = fa;
            b = same ? fa : fb;
        }
        if (!run_kernel(a, same ? a : b, k, !half, count, thr, acc->max_err, hist, full, &r)) return i;
        acc_add_kernel(acc, &r, k, pos + i, a, b, count_zero);
        if (band && !same && band->ok && r.max_err > band->lo) band_scan(a, b, k, band); /* while in cache */
        long long u = half ? (long long)(same ? 0 : ulp16_max(ca, cb, k)) : (long long)r.max_ulp;
        if (u > acc->max_ulp) acc->max_ulp = u;
    }
    return -1;
}

static inline int32_t ord16(uint16_t x) {
    int32_t v = (int16_t)x, neg = v < 0 ? -1 : 0;
    return ((v & 0x7fff) ^ neg) - neg;
}

static inline double int_at(const char *p, int h, Py_ssize_t i) {
    switch (h) {
    case H_I8: return (double)((const int8_t *)p)[i];
    case H_U8: case H_BOOL: return (double)((const uint8_t *)p)[i];
    case H_I16: { int16_t v; memcpy(&v, p + 2 * i, 2); return (double)v; }
    case H_U16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return (double)v; }
    default: { int32_t v; memcpy(&v, p + 4 * i, 4); return (double)v; }
    }
}

static inline int64_t int64_at(const char *p, int h, Py_ssize_t i) {
    switch (h) {
    case H_I8: return ((const int8_t *)p)[i];
    case H_U8: case H_BOOL: return ((const uint8_t *)p)[i];
    case H_I16: { int16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case H_U16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    default: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    }
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else { /* subnormal: normalise */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            bits = sign | (uint32_t)(112 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) bits = sign | 0x7f800000u | man << 13;
    else bits = sign | (exp + 112) << 23 | man << 13;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* n float16 values (bits) as float32: F16C's vcvtph2ps where the CPU has it (exact, as the
 * scalar conversion) */
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx,f16c"))) static void halves_f16c(const uint16_t *src, float *dst, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) {
        uint16_t x;
        memcpy(&x, src + i, 2);
        dst[i] = half_to_float(x);
    }
}
#endif

static void halves_to_floats(const void *src, float *dst, Py_ssize_t n) {
#if defined(__GNUC__) && defined(__x86_64__)
    static int f16c = -1;
    if (f16c < 0) f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
    if (f16c) { halves_f16c((const uint16_t *)src, dst, n); return; }
#endif
    for (Py_ssize_t i = 0; i < n; i++) {
        uint16_t x;
        memcpy(&x, (const char *)src + 2 * i, 2);
        dst[i] = half_to_float(x);
    }
}

/* largest ulp distance of n pairs of float16 bit patterns (finite) */
static uint32_t ulp16_max(const void *pa, const void *pb, Py_ssize_t n) {
    uint32_t u = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint16_t x, y;
        memcpy(&x, (const char *)pa + 2 * i, 2);
        memcpy(&y, (const char *)pb + 2 * i, 2);
        int32_t d = ord16(x) - ord16(y);
        uint32_t ad = (uint32_t)(d < 0 ? -d : d);
        if (ad > u) u = ad;
    }
    return u;
}

/* at least n floats in each of the buffers *fa and *fb (their capacity *cap): 0 when out of memory */
static int room(float **fa, float **fb, size_t *cap, Py_ssize_t n) {
    if ((size_t)n <= *cap) return 1;
    float *x = realloc(*fa, (size_t)n * 4);
    if (!x) return 0;
    *fa = x;
    float *y = realloc(*fb, (size_t)n * 4);
    if (!y) return 0;
    *fb = y;
    *cap = (size_t)n;
    return 1;
}

/* an empty accumulator, as chunks.Acc starts */
static void acc_init(acc_t *c) {
    memset(c, 0, sizeof *c);
    c->max_err = -1.0;
    c->worst = -1;
    c->max_ulp = -1;
}

/* threshold.scale_factor, min(1, max(scale, floor)) as Python's min/max compute it (a NaN
 * scale gives 1): what a var's auto threshold is multiplied by */
static double scale_factor_of(double s, double floor_) {
    double m = s;
    if (floor_ > m) m = floor_;
    return m < 1.0 ? m : 1.0;
}

/* scale_factor_of at threshold.SCALE_FLOOR: a measured var's auto window */
static double scale_factor(double scale) { return scale_factor_of(scale, 1e-6); }

static int int_chunk_acc(acc_t *acc, const char *ca, const char *cb, Py_ssize_t k, int h, long long pos, float *fa,
                         float *fb);

/* chunks.py exact_range over n integers (or Bool) of handler h and `size` bytes each, `chunk` at
 * a time from index pos (int_chunk_acc per chunk): 0 when the Python engine must */
static int int_run(acc_t *acc, const char *pa, const char *pb, Py_ssize_t n, int h, int size, Py_ssize_t chunk,
                   long long pos, float *fa, float *fb) {
    for (Py_ssize_t c0 = 0; c0 < n; c0 += chunk)
        if (!int_chunk_acc(acc, pa + c0 * size, pb + c0 * size, n - c0 < chunk ? n - c0 : chunk, h, pos + c0, fa, fb))
            return 0;
    return 1;
}

/* Compare the values of a pair read whole (both headers ok, same dtype and shape): 1 when
 * measured, 0 when the Python engine must (NaN/Inf, overflow, int_chunk_acc's cases). */
static int measure(const scan_t *s, pair_t *p, const char *da, const char *db, float **f32a, float **f32b, size_t *fcap,
                   int64_t *hist) {
    acc_t *acc = &p->acc;
    acc_init(acc);
    int h = p->a.dt->handler;
    Py_ssize_t n = (Py_ssize_t)p->a.size;
    if (h == H_F32 || h == H_F16) {
        /* chunks.py _kernel_range: per chunk, identical bytes as kernel(a, a) */
        int half = h == H_F16;
        if (half && !room(f32a, f32b, fcap, n < (Py_ssize_t)s->chunk ? n : (Py_ssize_t)s->chunk)) return 0;
        if (measure_run(da, db, n, half, (Py_ssize_t)s->chunk, s->count, s->thr, s->count && s->thr_d == 0.0, hist,
                        s->full, 0, acc, *f32a, *f32b, NULL) >= 0)
            return 0; /* NaN/Inf: the Python engine */
        if (!s->count) acc->n_over = 0;
        return 1;
    }
    /* integers, Bool, Byte and quantized raw values: chunks.py exact_range, a chunk at a time */
    Py_ssize_t chunk = (Py_ssize_t)s->chunk;
    if (!room(f32a, f32b, fcap, n < chunk ? n : chunk)) return 0;
    return int_run(acc, da, db, n, h, p->a.dt->bits / 8, chunk, 0, *f32a, *f32b);
}

/* the var's band from a scan's (its values handed over) */
static void band_take(acc_t *c, band_t *bd) {
    free(c->band_vals);
    c->band_ok = bd->ok;
    c->band_above = bd->above;
    c->band_n = bd->n;
    c->band_vals = bd->vals;
    bd->vals = NULL;
}

/* `want` bytes at `off`: 1, or 0 when the file ends before or cannot be read */
static int pread_all(int fd, char *p, size_t want, long long off) {
    size_t got = 0;
    while (got < want) {
        ssize_t k = pread(fd, p + got, want - got, (off_t)(off + (long long)got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return 0;
        got += (size_t)k;
    }
    return 1;
}

/* A window of a file's bytes: mapped (read where the page cache holds them, no copy: io.py
 * maps its windows too) or, where mapping fails, read into `buf`. The file's size is checked
 * first: a page past the end of a file that shrank would kill the process (SIGBUS). */
typedef struct { const char *p; void *base; size_t len; } window_t;

static int window_map(window_t *w, int fd, long long off, size_t want, char *buf) {
    w->base = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || (long long)st.st_size < off + (long long)want) return 0;
    long long page = sysconf(_SC_PAGESIZE), lo = off - off % page;
    size_t len = (size_t)(off - lo) + want;
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)lo);
    if (m != MAP_FAILED) {
        w->base = m;
        w->len = len;
        w->p = (const char *)m + (off - lo);
        return 1;
    }
    w->p = buf;
    return pread_all(fd, buf, want, off);
}

static void window_unmap(window_t *w) {
    if (w->base) munmap(w->base, w->len);
    w->base = NULL;
}

/* a streamed var's values are read this many bytes at a time (a multiple of the chunk) */
#define STREAM_WINDOW (4 << 20)

/* scan.py merge: the accumulator of the next consecutive range added to `out`, in order */
static void acc_merge(acc_t *out, const acc_t *a) {
    out->n_fin += a->n_fin;
    if (a->max_err > out->max_err) {
        out->max_err = a->max_err;
        out->worst = a->worst;
        out->worst_a = a->worst_a;
        out->worst_b = a->worst_b;
    }
    if (a->max_abs > out->max_abs) out->max_abs = a->max_abs;
    if (a->max_rel > out->max_rel) out->max_rel = a->max_rel;
    out->aa += a->aa;
    out->ab += a->ab;
    out->bb += a->bb;
    out->dd += a->dd;
    out->sum_abs += a->sum_abs;
    if (a->scale > out->scale) out->scale = a->scale;
    if (a->max_ulp >= 0 && a->max_ulp > out->max_ulp) out->max_ulp = a->max_ulp;
    out->n_over += a->n_over;
    out->n_diff += a->n_diff;
}

/* chunks.py exact_range of one chunk of k integers (or Bool) of handler h at index pos, added to
 * acc: identical bytes as _identical_chunk, else _int_chunk (float32 casts through the kernel,
 * the differing count and, from 2**24 on, the exact largest difference). 0 when the Python
 * engine must: a Bool byte that is not 0/1, or a sum of squares that could round (numpy sums
 * in another order: the same only while every partial sum is an exact integer). fa, fb: room
 * for k floats. */
static int int_chunk_acc(acc_t *acc, const char *ca, const char *cb, Py_ssize_t k, int h, long long pos, float *fa,
                         float *fb) {
    size_t nb = (size_t)k * (size_t)(h == H_I32 ? 4 : (h == H_I16 || h == H_U16) ? 2 : 1);
    if (h == H_BOOL)
        for (size_t i = 0; i < nb; i++)
            if ((uint8_t)ca[i] > 1 || (uint8_t)cb[i] > 1) return 0;
    if (memcmp(ca, cb, nb) == 0) {
        double mag = 0.0, xx = 0.0;
        for (Py_ssize_t i = 0; i < k; i++) {
            double x = int_at(ca, h, i);
            if (fabs(x) > mag) mag = fabs(x);
            xx += x * x;
        }
        if ((double)k * mag * mag >= 9007199254740992.0) return 0;
        acc->n_fin += k;
        acc->aa += xx;
        acc->ab += xx;
        acc->bb += xx;
        if (mag > acc->scale) acc->scale = mag;
        if (0.0 > acc->max_err) {
            acc->max_err = 0.0;
            acc->worst = pos;
            acc->worst_a = acc->worst_b = int_at(ca, h, 0);
        }
        return 1;
    }
    long long ndiff = 0;
    uint64_t exact = 0;
    for (Py_ssize_t i = 0; i < k; i++) {
        int64_t x = int64_at(ca, h, i), y = int64_at(cb, h, i);
        ndiff += x != y;
        uint64_t d = (uint64_t)(x > y ? x - y : y - x);
        if (d > exact) exact = d;
        fa[i] = (float)x;
        fb[i] = (float)y;
    }
    double before = acc->max_abs;
    result_t r;
    if (!run_kernel(fa, fb, k, 0, 0, 0.0f, acc->max_err, NULL, 0, &r)) return 0;
    acc_add_kernel(acc, &r, k, pos, fa, fb, 0);
    acc->n_diff += ndiff;
    if (acc->scale >= 16777216.0) acc->max_abs = before > (double)exact ? before : (double)exact;
    return 1;
}

/* A pair too big to read whole (headers ok, same dtype and shape), mapped a window at a time
 * and measured as the Python engine measures it (plan.py: ranges of s->piece values, each
 * chunks.py _kernel_range or exact_range, merged in order by scan.py merge): the same kernel
 * calls, the same order of accumulation. 0 when the Python engine must (NaN/Inf, int_chunk_acc's
 * cases, a file that cannot be read now, no memory). */
static int stream_measure(const scan_t *s, pair_t *p, dirc_t *dca, dirc_t *dcb, char **ba, size_t *ca, char **bb,
                          size_t *cb, float **f32a, float **f32b, size_t *fcap, int64_t *hist) {
    acc_t *acc = &p->acc;
    acc_init(acc);
    int h = p->a.dt->handler, half = h == H_F16, is_float = h == H_F32 || h == H_F16, size = p->a.dt->bits / 8;
    Py_ssize_t n = (Py_ssize_t)p->a.size, chunk = (Py_ssize_t)s->chunk;
    Py_ssize_t piece = s->piece > 0 ? (Py_ssize_t)s->piece : n;
    Py_ssize_t win = STREAM_WINDOW / size / chunk * chunk;
    if (win < chunk) win = chunk;
    if ((half || !is_float) && !room(f32a, f32b, fcap, n < chunk ? n : chunk)) return 0;
    if (!grow(ba, ca, (size_t)win * size) || !grow(bb, cb, (size_t)win * size)) return 0;
    int fa = open_in(dca, p->pa);
    if (fa < 0) return 0;
    int fb = open_in(dcb, p->pb);
    if (fb < 0) { close(fa); return 0; }
    off_t oa = HDR + (off_t)p->a.name_len, ob = HDR + (off_t)p->b.name_len;
    int ok = 1;
    /* an auto threshold's window, for a scale factor of 1 (the var's scale is known only at the
     * end): its errors are looked at a chunk at a time, while the chunk is in cache */
    band_t bd = {(float)s->band_lo[half], (float)s->band_hi[half], 0, NULL, 0, 0, STREAM_BAND_CAP, 1};
    band_t *band = is_float && s->band_hi[half] > 0 ? &bd : NULL;
    for (Py_ssize_t p0 = 0; p0 < n && ok; p0 += piece) {
        Py_ssize_t p1 = n - p0 < piece ? n : p0 + piece;
        acc_t pc;
        acc_init(&pc);
        for (Py_ssize_t w0 = p0; w0 < p1; w0 += win) {
            Py_ssize_t k = p1 - w0 < win ? p1 - w0 : win;
            size_t want = (size_t)k * size;
            window_t wa, wb;
            if (!window_map(&wa, fa, (long long)oa + (long long)w0 * size, want, *ba)
                || !window_map(&wb, fb, (long long)ob + (long long)w0 * size, want, *bb)) {
                if (wa.base) window_unmap(&wa);
                ok = 0;
                break;
            }
            if (is_float) {
                ok = measure_run(wa.p, wb.p, k, half, chunk, s->count, s->thr, s->count && s->thr_d == 0.0, hist, s->full, w0,
                                 &pc, *f32a, *f32b, band) < 0;
            } else {
                ok = int_run(&pc, wa.p, wb.p, k, h, size, chunk, w0, *f32a, *f32b);
            }
            window_unmap(&wa);
            window_unmap(&wb);
            if (!ok) break;
        }
        acc_merge(acc, &pc);
    }
    close(fa);
    close(fb);
    if (ok && is_float && !s->count) acc->n_over = 0;
    if (ok && band) {
        double sf = scale_factor(acc->scale);
        if (sf < 1.0) { /* another window: known only when no error reaches it */
            bd.ok = !(acc->max_err > (double)(float)(s->band_lo[half] * sf));
            bd.above = 0;
            bd.n = 0;
        }
        band_take(acc, &bd);
    }
    free(bd.vals);
    return ok;
}

/* An auto threshold is chosen once every var is measured, so its count of elements above it
 * would need each var read again (folders.py _recount). A var's auto threshold lies in
 * [lo, hi] x its scale factor unless widened above the band (threshold.py window); its errors
 * inside that window are kept
 * (at most BAND_CAP; band_ok 0 if more), with the count above it: whatever the threshold in the
 * window, the count is then known exactly without reading the files again. fa, fb: room for
 * fcap floats (a float16 var is widened a chunk of that size at a time). */
static void band_window(const scan_t *s, acc_t *c, const char *va, const char *vb, Py_ssize_t n, int half,
                        float *fa, float *fb, size_t fcap) {
    double sf = scale_factor(c->scale);
    Py_ssize_t cap = n / 256 < BAND_CAP ? BAND_CAP : (n / 256 > STREAM_BAND_CAP ? STREAM_BAND_CAP : n / 256);
    band_t bd = {(float)(s->band_lo[half] * sf), (float)(s->band_hi[half] * sf), 0, NULL, 0, 0, (int)cap, 1};
    if (c->max_err > (double)bd.lo) { /* else none above the window's low end */
        Py_ssize_t step = half ? (Py_ssize_t)fcap : n;
        for (Py_ssize_t i0 = 0; i0 < n && bd.ok; i0 += step) {
            Py_ssize_t k = n - i0 < step ? n - i0 : step;
            const float *a = (const float *)va + i0, *b = (const float *)vb + i0;
            if (half) {
                halves_to_floats(va + 2 * i0, fa, k);
                halves_to_floats(vb + 2 * i0, fb, k);
                a = fa;
                b = fb;
            }
            band_scan(a, b, k, &bd);
        }
    }
    band_take(c, &bd);
}

static void *scan_worker(void *arg) {
    scan_t *s = (scan_t *)arg;
    char *ba = NULL, *bb = NULL;
    size_t ca = 0, cb = 0, fcap = 0;
    float *fa = NULL, *fb = NULL;
    int64_t *hist = calloc(HIST_LEN, sizeof(int64_t));  /* a float var's error histogram */
    if (!hist) {
        __atomic_store_n(&s->oom, 1, __ATOMIC_RELAXED);
        scan_thread_done(s);
        return NULL;
    }
    hist_clear(hist);
    dirc_t da, db;  /* A's folder, B's */
    da.fd = db.fd = -1;
    da.len = db.len = 0;
    for (;;) {
        Py_ssize_t i = __atomic_fetch_add(&s->next, 1, __ATOMIC_RELAXED);
        if (i >= s->n) break;
        pair_t *p = &s->pairs[i];
        size_t ga, gb;
        int oka = read_file(s, &da, p->pa, &p->a, &ba, &ca, &ga);
        if (oka) {
            p->a.title = malloc(p->a.name_len ? p->a.name_len : 1);
            if (!p->a.title) { __atomic_store_n(&s->oom, 1, __ATOMIC_RELAXED); p->a.ok = 0; oka = 0; }
            else {
                memcpy(p->a.title, ba + HDR, p->a.name_len);
                parse_title_c(p->a.title, p->a.name_len, &p->ta);
            }
        }
        if (!p->pb) continue;
        int okb = read_file(s, &db, p->pb, &p->b, &bb, &cb, &gb);
        if (!okb) continue;
        p->title_same = oka && p->a.name_len == p->b.name_len && memcmp(p->a.title, bb + HDR, p->b.name_len) == 0;
        if (!p->title_same) {
            p->b.title = malloc(p->b.name_len ? p->b.name_len : 1);
            if (!p->b.title) { __atomic_store_n(&s->oom, 1, __ATOMIC_RELAXED); p->b.ok = 0; continue; }
            memcpy(p->b.title, bb + HDR, p->b.name_len);
            parse_title_c(p->b.title, p->b.name_len, &p->tb);
        }
        if (!oka || p->a.dt->handler == H_NONE || p->a.code != p->b.code || p->a.ndim != p->b.ndim
            || memcmp(p->a.dims, p->b.dims, sizeof p->a.dims) != 0)
            continue;
        int h = p->a.dt->handler, half = h == H_F16, big = p->a.file_size > s->max_file || p->b.file_size > s->max_file;
        if (big && !s->stream) continue;
        const char *va = ba + HDR + p->a.name_len, *vb = bb + HDR + p->b.name_len;
        p->measured = big ? stream_measure(s, p, &da, &db, &ba, &ca, &bb, &cb, &fa, &fb, &fcap, hist)
                          : measure(s, p, va, vb, &fa, &fb, &fcap, hist);
        if (p->measured && (h == H_F32 || h == H_F16)) { /* float: its statistics */
            acc_t *c = &p->acc;
            c->has_stats = 1;
            hist_stats(hist, c->n_fin, s->ratio, s->full, c->max_rel, c->max_abs, c->max_err, c->stats);
            /* a streamed var's band was made as it was read */
            if (s->band_hi[half] > 0 && !big) band_window(s, c, va, vb, (Py_ssize_t)p->a.size, half, fa, fb, fcap);
        }
        if (p->measured) __atomic_fetch_add(&s->done_bytes, p->a.file_size + p->b.file_size, __ATOMIC_RELAXED);
        hist_clear(hist);
    }
    scan_thread_done(s);
    if (da.fd >= 0) close(da.fd);
    if (db.fd >= 0) close(db.fd);
    free(ba);
    free(bb);
    free(fa);
    free(fb);
    free(hist);
    return NULL;
}

/* A measured var's fields as lar_prec/compare/engine/scan.py acc_fields and plan.py
 * value_fields make them from its accumulator (every position finite here): max_err,
 * max_abs_err, max_rel_err, mean_abs_err, rmse, cosine, max_ulp, worst_index, worst_a, worst_b,
 * scale, n_over, threshold, n_diff. The same IEEE operations, so the same numbers. */
static PyObject *fields_tuple(const pair_t *p, const scan_t *s) {
    const acc_t *c = &p->acc;
    double n = (double)c->n_fin;
    PyObject *cos, *ulp, *idx, *n_over, *thr, *n_diff;
    if (c->aa > 0 && c->bb > 0) {
        double x = c->ab / sqrt(c->aa * c->bb);
        x = x > 1.0 ? 1.0 : x;
        cos = PyFloat_FromDouble(x < -1.0 ? -1.0 : x);
    } else cos = (Py_INCREF(Py_None), Py_None);
    ulp = c->max_ulp < 0 ? (Py_INCREF(Py_None), Py_None) : PyLong_FromLongLong(c->max_ulp);
    idx = PyTuple_New(p->a.ndim);
    if (idx) {
        long long w = c->worst;
        for (int k = p->a.ndim - 1; k >= 0; k--) {
            PyTuple_SET_ITEM(idx, k, PyLong_FromLongLong(w % (long long)p->a.dims[k]));
            w /= (long long)p->a.dims[k];
        }
    }
    int is_float = p->a.dt->handler == H_F32 || p->a.dt->handler == H_F16;
    if (!is_float) { /* exact: every differing element is over */
        n_over = PyLong_FromLongLong(c->n_diff);
        n_diff = PyLong_FromLongLong(c->n_diff);
        thr = (Py_INCREF(Py_None), Py_None);
    } else if (s->count) {
        n_over = PyLong_FromLongLong(c->n_over);
        thr = PyFloat_FromDouble(s->thr_d);
        n_diff = s->thr_d == 0.0 ? PyLong_FromLongLong(c->n_diff) : (Py_INCREF(Py_None), Py_None);
    } else {
        n_over = (Py_INCREF(Py_None), Py_None);
        thr = (Py_INCREF(Py_None), Py_None);
        n_diff = (Py_INCREF(Py_None), Py_None);
    }
    PyObject *st[HIST_STATS];
    double none[HIST_STATS];
    for (int i = 0; i < HIST_STATS; i++) none[i] = NAN;
    int ok = stats_objects(c->has_stats ? c->stats : none, st);
    if (!cos || !ulp || !idx || !n_over || !thr || !n_diff || !ok) {
        Py_XDECREF(cos); Py_XDECREF(ulp); Py_XDECREF(idx); Py_XDECREF(n_over); Py_XDECREF(thr); Py_XDECREF(n_diff);
        for (int i = 0; i < HIST_STATS; i++) Py_XDECREF(st[i]);
        return NULL;
    }
    PyObject *head = Py_BuildValue("(dddddNNNdddNNN)", c->max_err, c->max_abs, c->max_rel, c->sum_abs / n, sqrt(c->dd / n),
                                   cos, ulp, idx, c->worst_a, c->worst_b, c->scale, n_over, thr, n_diff);
    PyObject *band = c->has_stats && c->band_ok && s->band_hi[p->a.dt->handler == H_F16] > 0
        ? Py_BuildValue("(Ly#)", c->band_above, (const char *)c->band_vals, (Py_ssize_t)(4 * c->band_n))
        : (Py_INCREF(Py_None), Py_None);
    PyObject *out = head && band ? PyTuple_New(15 + HIST_STATS) : NULL;
    if (out) PyTuple_SET_ITEM(out, 14 + HIST_STATS, band);
    else Py_XDECREF(band);
    for (int i = 0; i < 14 && out; i++) {
        PyObject *x = PyTuple_GET_ITEM(head, i);
        Py_INCREF(x);
        PyTuple_SET_ITEM(out, i, x);
    }
    for (int i = 0; i < HIST_STATS; i++) {
        if (out) PyTuple_SET_ITEM(out, 14 + i, st[i]);
        else Py_DECREF(st[i]);
    }
    Py_XDECREF(head);
    return out;
}

static PyObject *head_tuple(const head_t *h, PyObject *title, const title_t *t) {
    PyObject *shape = PyTuple_New(h->ndim);
    if (!shape) { Py_DECREF(title); return NULL; }
    for (int i = 0; i < h->ndim; i++) PyTuple_SET_ITEM(shape, i, PyLong_FromUnsignedLong(h->dims[i]));
    PyObject *parsed = (t->ok && h->title) ? title_tuple(h->title, t) : (Py_INCREF(Py_None), Py_None);
    if (!parsed) { Py_DECREF(title); Py_DECREF(shape); return NULL; }
    return Py_BuildValue("(lNLLNNI)", (long)h->code, shape, h->size, h->file_size, title, parsed, (unsigned int)h->name_len);
}

PyDoc_STRVAR(scan_pairs_doc,
"scan_pairs(paths_a, paths_b, dtypes, max_file, chunk, threshold, threads, ratio=1.0, full=False,\n"
"           band=(0, 0, 0, 0), stream=False, piece=0) -> list\n\n"
"Read each pair of dump files (str or file system bytes; paths_b[i] may be None) once: header, title and, for files of\n"
"at most max_file bytes of the same dtype and shape, the values compared as the Python engine\n"
"does with chunks of `chunk` elements (threshold: count errors above it, or None). dtypes is a\n"
"sequence of (code, bits, handler). One tuple per pair: (head_a, head_b, title_same, fields);\n"
"a head is (code, shape, size, file_size, title, parsed, title bytes) or None where the Python reader must\n"
"read the file; head_b's title and parsed are None when title_same; parsed is the title's\n"
"fields (input_index, id, is_layout, layout text, dtype, owner, opr_type, opr_id, name, slot,\n"
"comp_node, storage, shape_infer, value_infer, where the inputs start, input ids) or None\n"
"where Python must parse it; fields are a measured var's (max_err, max_abs_err, max_rel_err,\n"
"mean_abs_err, rmse, cosine, max_ulp, worst_index, worst_a, worst_b, scale, n_over, threshold,\n"
"n_diff, then float vars' hist_stats at ratio: rel p50 ... error at ratio, None for others), as the\n"
"Python engine finishes them, or None. band: (float32 low, high, float16 low, high) of an auto\n"
"threshold's window (its errors inside kept, the last field). stream: files over max_file are\n"
"measured too, mapped a window at a time, in ranges of `piece` elements (0: one) merged in\n"
"order, as the Python engine splits a big var.");

/* One call's work: what the threads read (no Python object is touched off the GIL) and what
 * is freed after. scan_start hands it to threads of its own and returns at once (the caller
 * files the last block meanwhile); scan_finish joins them and makes the results. */
typedef struct {
    scan_t s;
    dt_t *dts;
    pair_t *pairs;
    PyObject *encoded;  /* the paths as bytes, alive until the end */
    pthread_t tid[16];
    int started;  /* threads running or not yet joined */
    int sync;     /* s.lock and s.ended made */
} job_t;

/* run the job on `threads` threads of its own (on this one, without the GIL, when none can be had) */
static void job_start(job_t *j, int threads) {
    pthread_mutex_lock(&j->s.lock);
    j->s.running = threads;
    pthread_mutex_unlock(&j->s.lock);
    for (int t = 0; t < threads; t++)
        if (pthread_create(&j->tid[j->started], NULL, scan_worker, &j->s) == 0) j->started++;
        else scan_thread_done(&j->s);
    if (!j->started) {
        j->s.running = 1;
        Py_BEGIN_ALLOW_THREADS
        scan_worker(&j->s);
        Py_END_ALLOW_THREADS
    }
}

static void job_join(job_t *j) {
    if (!j->started) return;
    Py_BEGIN_ALLOW_THREADS
    for (int t = 0; t < j->started; t++) pthread_join(j->tid[t], NULL);
    Py_END_ALLOW_THREADS
    j->started = 0;
}

/* wait for its threads and free what it read: a finished job has no pairs */
static void job_clear(job_t *j) {
    job_join(j);
    if (j->pairs)
        for (Py_ssize_t i = 0; i < j->s.n; i++) {
            free(j->pairs[i].a.title);
            free(j->pairs[i].b.title);
            free(j->pairs[i].ta.input_ids);
            free(j->pairs[i].tb.input_ids);
            free(j->pairs[i].acc.band_vals);
        }
    PyMem_Free(j->pairs);
    PyMem_Free(j->dts);
    Py_CLEAR(j->encoded);
    j->pairs = j->s.pairs = NULL;
    j->dts = NULL;
    j->s.n = 0;
}

static void job_free(job_t *j) {
    if (!j) return;
    job_clear(j);
    if (j->sync) {
        pthread_mutex_destroy(&j->s.lock);
        pthread_cond_destroy(&j->s.ended);
    }
    PyMem_Free(j);
}

/* the arguments checked, the paths encoded: a job ready to run (NULL and an exception if not) */
static job_t *job_new(PyObject *args, int *threads_out) {
    PyObject *la, *lb, *dts_obj, *thr_obj;
    long long max_file, chunk;
    int threads;
    double ratio = 1.0, band[4] = {0, 0, 0, 0};
    int full = 0, stream = 0;
    long long piece = 0;
    if (!PyArg_ParseTuple(args, "O!O!OLLOi|dp(dddd)pL", &PyList_Type, &la, &PyList_Type, &lb, &dts_obj, &max_file, &chunk,
                          &thr_obj, &threads, &ratio, &full, &band[0], &band[1], &band[2], &band[3], &stream, &piece))
        return NULL;
    if (piece < 0) { PyErr_SetString(PyExc_ValueError, "scan_pairs: piece must be >= 0"); return NULL; }
    Py_ssize_t n = PyList_GET_SIZE(la);
    if (PyList_GET_SIZE(lb) != n) { PyErr_SetString(PyExc_ValueError, "scan_pairs: paths_a and paths_b differ in length"); return NULL; }
    if (chunk < 1 || threads < 1) { PyErr_SetString(PyExc_ValueError, "scan_pairs: chunk and threads must be >= 1"); return NULL; }
    job_t *j = PyMem_Calloc(1, sizeof(job_t));
    if (!j) { PyErr_NoMemory(); return NULL; }
    PyObject *dseq = PySequence_Fast(dts_obj, "scan_pairs: dtypes must be a sequence");
    if (!dseq) goto fail;
    Py_ssize_t nd = PySequence_Fast_GET_SIZE(dseq);
    j->dts = PyMem_Calloc((size_t)(nd ? nd : 1), sizeof(dt_t));
    j->pairs = PyMem_Calloc((size_t)(n ? n : 1), sizeof(pair_t));
    if (!j->dts || !j->pairs) { PyErr_NoMemory(); goto fail_seq; }
    for (Py_ssize_t i = 0; i < nd; i++) {
        dt_t *d = &j->dts[i];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(dseq, i), "Lii", &d->code, &d->bits, &d->handler)) goto fail_seq;
        if (d->bits < 1 || d->handler < H_NONE || d->handler > H_BOOL) { PyErr_SetString(PyExc_ValueError, "scan_pairs: bad dtype row"); goto fail_seq; }
    }
    Py_CLEAR(dseq);
    /* paths as file system bytes (os.fsencode's encoding), held until the end */
    j->encoded = PyList_New(0);
    if (!j->encoded) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *xy[2] = {PyList_GET_ITEM(la, i), PyList_GET_ITEM(lb, i)};
        const char *pp[2] = {NULL, NULL};
        for (int k = 0; k < 2; k++) {
            PyObject *x = xy[k];
            if (x == Py_None && k == 1) continue;
            PyObject *enc = PyUnicode_Check(x) ? PyUnicode_EncodeFSDefault(x) : (PyBytes_Check(x) ? (Py_INCREF(x), x) : NULL);
            if (!enc) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "scan_pairs: paths must be str or bytes");
                goto fail;
            }
            int bad = PyList_Append(j->encoded, enc);
            Py_DECREF(enc);
            if (bad) goto fail;
            pp[k] = PyBytes_AS_STRING(enc);
        }
        j->pairs[i].pa = pp[0];
        j->pairs[i].pb = pp[1];
    }
    scan_t s = {j->pairs, n, 0, j->dts, (int)nd, max_file, chunk, thr_obj != Py_None, 0.0f, 0.0, ratio, full,
                {band[0], band[2]}, {band[1], band[3]}, 0, stream, piece, 0, 0};
    if (s.count) {
        double t = PyFloat_AsDouble(thr_obj);
        if (t == -1.0 && PyErr_Occurred()) goto fail;
        s.thr = (float)t;
        s.thr_d = t;
    }
    j->s = s;
    pthread_mutex_init(&j->s.lock, NULL);
    pthread_cond_init(&j->s.ended, NULL);
    j->sync = 1;
    if (threads > 16) threads = 16;
    if (threads > n) threads = n > 0 ? (int)n : 1;
    *threads_out = threads;
    return j;
fail_seq:
    Py_XDECREF(dseq);
fail:
    job_free(j);
    return NULL;
}

/* the results of a job whose threads are done (NULL and an exception on failure) */
static PyObject *job_results(job_t *j) {
    Py_ssize_t n = j->s.n;
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        pair_t *p = &j->pairs[i];
        PyObject *ha = Py_None, *hb = Py_None, *acc = Py_None;
        Py_INCREF(Py_None); Py_INCREF(Py_None); Py_INCREF(Py_None);
        if (p->a.ok) {
            Py_DECREF(ha);
            PyObject *t = PyUnicode_DecodeUTF8(p->a.title, p->a.name_len, "replace");
            ha = t ? head_tuple(&p->a, t, &p->ta) : NULL;
        }
        if (ha && p->b.ok) {
            Py_DECREF(hb);
            PyObject *t = p->title_same ? (Py_INCREF(Py_None), Py_None) : PyUnicode_DecodeUTF8(p->b.title, p->b.name_len, "replace");
            hb = t ? head_tuple(&p->b, t, &p->tb) : NULL;
        }
        if (ha && hb && p->measured) {
            Py_DECREF(acc);
            acc = fields_tuple(p, &j->s);
        }
        if (!ha || !hb || !acc) {
            Py_XDECREF(ha); Py_XDECREF(hb); Py_XDECREF(acc);
            Py_DECREF(out);
            return NULL;
        }
        PyObject *item = Py_BuildValue("(NNON)", ha, hb, p->title_same ? Py_True : Py_False, acc);
        if (!item) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i, item);
    }
    if (j->s.oom) { Py_DECREF(out); return PyErr_NoMemory(); }
    return out;
}

static PyObject *py_scan_pairs(PyObject *self, PyObject *args) {
    (void)self;
    int threads;
    job_t *j = job_new(args, &threads);
    if (!j) return NULL;
    job_start(j, threads);
    job_join(j);
    PyObject *out = job_results(j);
    job_free(j);
    return out;
}

/* scan_start: the job runs on threads of its own while the caller goes on (with the GIL) */
#define JOB_CAPSULE "lar_prec._kernel.scan_job"

static void job_capsule_free(PyObject *cap) {
    job_free(PyCapsule_GetPointer(cap, JOB_CAPSULE));
}

PyDoc_STRVAR(scan_start_doc,
"scan_start(paths_a, paths_b, dtypes, max_file, chunk, threshold, threads, ratio=1.0, full=False,\n"
"           band=(0, 0, 0, 0), stream=False, piece=0) -> job\n\n"
"scan_pairs on `threads` threads of its own, started now; scan_finish(job) waits for them and\n"
"returns what scan_pairs returns. A job dropped unfinished is waited for and freed.");

static PyObject *py_scan_start(PyObject *self, PyObject *args) {
    (void)self;
    int threads;
    job_t *j = job_new(args, &threads);
    if (!j) return NULL;
    job_start(j, threads);
    PyObject *cap = PyCapsule_New(j, JOB_CAPSULE, job_capsule_free);
    if (!cap) job_free(j);
    return cap;
}

PyDoc_STRVAR(scan_poll_doc, "scan_poll(job, seconds) -> (done, bytes)\n\n"
"Wait up to `seconds` for a scan_start job's threads: whether they are all done, and the bytes of\n"
"the files (both sides) of the pairs measured so far (a progress bar's; scan_finish still gives\n"
"the results).");

static PyObject *py_scan_poll(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    double seconds;
    if (!PyArg_ParseTuple(args, "Od", &cap, &seconds)) return NULL;
    job_t *j = PyCapsule_GetPointer(cap, JOB_CAPSULE);
    if (!j) return NULL;
    if (j->pairs == NULL) { PyErr_SetString(PyExc_ValueError, "scan_poll: this job was finished"); return NULL; }
    int done;
    Py_BEGIN_ALLOW_THREADS
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long long ns = (long long)until.tv_nsec + (long long)(seconds > 0 ? seconds * 1e9 : 0);
    until.tv_sec += (time_t)(ns / 1000000000LL);
    until.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&j->s.lock);
    while (j->s.running > 0 && pthread_cond_timedwait(&j->s.ended, &j->s.lock, &until) == 0) {}
    done = j->s.running <= 0;
    pthread_mutex_unlock(&j->s.lock);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(OL)", done ? Py_True : Py_False, __atomic_load_n(&j->s.done_bytes, __ATOMIC_RELAXED));
}

PyDoc_STRVAR(scan_finish_doc, "scan_finish(job) -> list\n\nWait for a scan_start job and return its results (once).");

static PyObject *py_scan_finish(PyObject *self, PyObject *cap) {
    (void)self;
    job_t *j = PyCapsule_GetPointer(cap, JOB_CAPSULE);
    if (!j) return NULL;
    if (j->pairs == NULL) { PyErr_SetString(PyExc_ValueError, "scan_finish: this job was finished"); return NULL; }
    job_join(j);
    PyObject *out = job_results(j);
    job_clear(j);  /* its memory now, not when the capsule goes */
    return out;
}

/* ======================================================================== measure
 *
 * The Python engine's float32 and float16 ranges (chunks.py _kernel_range) a mapped window at a
 * time: the loop over the window's chunks runs here (measure_run, as the batch reader's), not in
 * Python, which took a third of the time of a big var. The accumulator goes in and comes back as
 * a tuple in chunks.Acc's order, so the sums are added in the same order as chunk by chunk.
 */
#define ACC_STATE "(LdLddddddddddNLL)"

static int acc_from(PyObject *t, acc_t *c) {
    PyObject *ulp;
    if (!PyArg_ParseTuple(t, "LdLddddddddddOLL", &c->n_fin, &c->max_err, &c->worst, &c->worst_a, &c->worst_b, &c->max_abs,
                          &c->max_rel, &c->sum_abs, &c->aa, &c->ab, &c->bb, &c->dd, &c->scale, &ulp, &c->n_over, &c->n_diff))
        return 0;
    c->max_ulp = ulp == Py_None ? -1 : PyLong_AsLongLong(ulp);
    return !(c->max_ulp == -1 && PyErr_Occurred());
}

PyDoc_STRVAR(measure_doc,
"measure(a, b, half, chunk, threshold, hist, full, pos, state) -> (state, bad)\n\n"
"float32() (half: float16()) of every `chunk` values of the buffers a and b in turn, as the\n"
"Python engine cuts them, added to the accumulator state (n_fin, max_err, worst, worst_a,\n"
"worst_b, max_abs, max_rel, sum_abs, aa, ab, bb, dd, scale, max_ulp or None, n_over, n_diff)\n"
"in that order; pos: the index of a's first value in the var; hist: None or a histogram.\n"
"bad: -1, or the index in a of the first chunk with NaN/Inf (state holds what came before).");

static PyObject *py_measure(PyObject *self, PyObject *args) {
    Py_buffer ba, bb, bh = {0};
    int half, full;
    Py_ssize_t chunk;
    long long pos;
    PyObject *thr_obj, *hist_obj, *state, *out = NULL;
    acc_t acc;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*y*pnOOpLO!", &ba, &bb, &half, &chunk, &thr_obj, &hist_obj, &full, &pos,
                          &PyTuple_Type, &state))
        return NULL;
    int size = half ? 2 : 4, want_hist = hist_obj != Py_None, count = thr_obj != Py_None;
    double thr = count ? PyFloat_AsDouble(thr_obj) : 0.0;
    if ((thr == -1.0 && PyErr_Occurred()) || !acc_from(state, &acc)) goto done;
    if (ba.len != bb.len || ba.len % size != 0 || chunk < 1) {
        PyErr_Format(PyExc_ValueError, "measure: buffers of %zd and %zd bytes, chunk %zd", ba.len, bb.len, chunk);
        goto done;
    }
    if (want_hist) {
        if (PyObject_GetBuffer(hist_obj, &bh, PyBUF_WRITABLE) < 0) { want_hist = 0; goto done; }
        if (bh.len != (Py_ssize_t)(HIST_LEN * sizeof(int64_t))) {
            PyErr_Format(PyExc_ValueError, "measure: a histogram of %zd bytes, expected %d", bh.len, (int)(HIST_LEN * 8));
            goto done;
        }
    }
    Py_ssize_t n = ba.len / size;
    if (half && half_cap < 2 * chunk) {
        float *x = realloc(half_buf, (size_t)(2 * chunk) * sizeof(float));
        if (!x) { PyErr_NoMemory(); goto done; }
        half_buf = x;
        half_cap = 2 * chunk;
    }
    Py_ssize_t bad;
    Py_BEGIN_ALLOW_THREADS
    bad = measure_run(ba.buf, bb.buf, n, half, chunk, count, (float)thr, count && thr == 0.0,
                      want_hist ? (int64_t *)bh.buf : NULL, full, pos, &acc, half_buf, half_buf + (half ? chunk : 0), NULL);
    Py_END_ALLOW_THREADS
    out = Py_BuildValue("(" ACC_STATE "n)", acc.n_fin, acc.max_err, acc.worst, acc.worst_a, acc.worst_b, acc.max_abs,
                        acc.max_rel, acc.sum_abs, acc.aa, acc.ab, acc.bb, acc.dd, acc.scale,
                        acc.max_ulp < 0 ? (Py_INCREF(Py_None), Py_None) : PyLong_FromLongLong(acc.max_ulp),
                        acc.n_over, acc.n_diff, bad);
done:
    PyBuffer_Release(&ba);
    PyBuffer_Release(&bb);
    if (want_hist) PyBuffer_Release(&bh);
    return out;
}

/* ======================================================================== count_pairs
 *
 * The second pass of an auto threshold (lar_prec/compare/folders.py _recount): the threshold is
 * known only once every var is measured, so the elements of each var above it are counted by
 * reading the var again. Here only that is done, on threads without the GIL: the MegEngine error
 * of each position finite on both sides (float32, as the kernel's loop computes it) against the
 * var's threshold rounded to float32 (as judging compares it). A pair this path cannot read is
 * left to the Python engine, which says what is wrong.
 */
typedef struct {
    const char *pa, *pb;
    long long oa, ob;   /* data offsets in bytes; -1: after the file's header and title */
    long long n;        /* elements */
    int half;           /* float16 values (else float32) */
    float thr;
    long long count;    /* -1: not counted */
} cnt_t;

typedef struct {
    cnt_t *t;
    Py_ssize_t n, next;
    long long chunk;
} cnt_job_t;

CLONES
static long long count_above(const float *a, const float *b, Py_ssize_t n, float thr) {
    const v8sf big = (v8sf){0} + 3.40282347e38f;
    v8si over = {0};
    Py_ssize_t i = 0, nv = n & ~(Py_ssize_t)7;
    for (; i < nv; i += 8) {
        v8sf va, vb;
        memcpy(&va, a + i, 32);
        memcpy(&vb, b + i, 32);
        over -= (vabs(va) <= big) & (vabs(vb) <= big) & (err8(va, vb) > thr);
    }
    long long c = 0;
    for (int k = 0; k < 8; k++) c += over[k];
    for (; i < n; i++)
        if (fabsf(a[i]) <= 3.40282347e38f && fabsf(b[i]) <= 3.40282347e38f && err1(a[i], b[i]) > thr) c++;
    return c;
}

/* the data offset of the dump open at fd (after its 40-byte header and its title), -1 if none */
static long long data_offset(int fd) {
    uint32_t w[10];
    if (pread(fd, w, HDR, 0) != HDR) return -1;
    return HDR + (long long)w[0];
}

static long long count_one(const cnt_t *t, long long chunk, char *ra, char *rb, float *fa, float *fb) {
    int fda = open(t->pa, O_RDONLY | O_CLOEXEC), fdb = fda < 0 ? -1 : open(t->pb, O_RDONLY | O_CLOEXEC);
    long long c = -1;
    if (fda < 0 || fdb < 0) goto out;
    long long oa = t->oa >= 0 ? t->oa : data_offset(fda), ob = t->ob >= 0 ? t->ob : data_offset(fdb);
    if (oa < 0 || ob < 0) goto out;
    int size = t->half ? 2 : 4;
    c = 0;
    for (long long pos = 0; pos < t->n; pos += chunk) {
        long long k = t->n - pos < chunk ? t->n - pos : chunk;
        if (!pread_all(fda, ra, (size_t)(k * size), oa + pos * size) || !pread_all(fdb, rb, (size_t)(k * size), ob + pos * size)) {
            c = -1;
            break;
        }
        if (t->half) {
            halves_to_floats(ra, fa, (Py_ssize_t)k);
            halves_to_floats(rb, fb, (Py_ssize_t)k);
            c += count_above(fa, fb, (Py_ssize_t)k, t->thr);
        } else {
            c += count_above((const float *)ra, (const float *)rb, (Py_ssize_t)k, t->thr);
        }
    }
out:
    if (fda >= 0) close(fda);
    if (fdb >= 0) close(fdb);
    return c;
}

static void *count_worker(void *arg) {
    cnt_job_t *j = (cnt_job_t *)arg;
    size_t bytes = (size_t)j->chunk * 4;
    char *ra = malloc(bytes), *rb = malloc(bytes);
    float *fa = malloc(bytes), *fb = malloc(bytes);
    for (;;) {
        Py_ssize_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (i >= j->n) break;
        j->t[i].count = (ra && rb && fa && fb) ? count_one(&j->t[i], j->chunk, ra, rb, fa, fb) : -1;
    }
    free(ra);
    free(rb);
    free(fa);
    free(fb);
    return NULL;
}

PyDoc_STRVAR(count_pairs_doc,
"count_pairs(pairs, chunk, threads) -> list\n\n"
"For each (path_a, offset_a, path_b, offset_b, n, half, threshold) of the list pairs: the\n"
"elements of the n float32 (half: float16) values at those byte offsets of the two files (-1:\n"
"after the dump's header and title) whose MegEngine error is above threshold (compared in\n"
"float32), over the positions finite on both sides; None where a file cannot be read (the\n"
"Python engine counts those). Read chunk values at a time, on up to `threads` threads.");

static PyObject *py_count_pairs(PyObject *self, PyObject *args) {
    PyObject *list, *keep = NULL, *out = NULL;
    long long chunk;
    int threads;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!Li", &PyList_Type, &list, &chunk, &threads)) return NULL;
    if (chunk < 1 || threads < 1) { PyErr_SetString(PyExc_ValueError, "count_pairs: chunk and threads must be >= 1"); return NULL; }
    Py_ssize_t n = PyList_GET_SIZE(list);
    cnt_job_t j = {PyMem_Calloc((size_t)(n ? n : 1), sizeof(cnt_t)), n, 0, chunk};
    keep = PyList_New(0);  /* the encoded paths, alive until the threads are done */
    if (!j.t || !keep) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pa, *pb;
        double thr;
        cnt_t *t = &j.t[i];
        if (!PyArg_ParseTuple(PyList_GET_ITEM(list, i), "O&LO&LLpd", PyUnicode_FSConverter, &pa, &t->oa,
                              PyUnicode_FSConverter, &pb, &t->ob, &t->n, &t->half, &thr))
            goto done;
        int bad = PyList_Append(keep, pa) || PyList_Append(keep, pb);
        Py_DECREF(pa);
        Py_DECREF(pb);
        if (bad) goto done;
        t->pa = PyBytes_AS_STRING(pa);
        t->pb = PyBytes_AS_STRING(pb);
        t->thr = (float)thr;
    }
    if (threads > 16) threads = 16;
    if (threads > n) threads = n > 0 ? (int)n : 1;
    pthread_t tid[16];
    int started = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int k = 1; k < threads; k++)
        if (pthread_create(&tid[started], NULL, count_worker, &j) == 0) started++;
    count_worker(&j);
    for (int k = 0; k < started; k++) pthread_join(tid[k], NULL);
    Py_END_ALLOW_THREADS
    out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *x = j.t[i].count < 0 ? (Py_INCREF(Py_None), Py_None) : PyLong_FromLongLong(j.t[i].count);
        if (!x) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, x);
    }
done:
    Py_XDECREF(keep);
    PyMem_Free(j.t);
    return out;
}

/* ======================================================================== json_rows
 *
 * One report var as JSON text: json's C encoder spends ~9 us on a var's 30 keys (a str object
 * per key, separator and value, then a join); a report of 20,000 vars took longer to write than
 * to compare. This writes the same text into one buffer: floats as float.__repr__ writes them
 * (PyOS_double_to_string, 'r'), ints in decimal, strings escaped as json's ensure_ascii does,
 * tuples and lists of ints as [a, b]. A value it does not write the same way (NaN/Inf, another
 * type) returns None: the caller encodes that var with the json module.
 */
typedef struct { char *p; size_t n, cap; } sbuf_t;

static int sb_put(sbuf_t *b, const char *s, size_t k) {
    if (b->n + k > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + k) cap *= 2;
        char *p = PyMem_Realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, k);
    b->n += k;
    return 0;
}

/* an exact int as a long long: 0 where it is not one or does not fit (no error left set) */
static int ll_of(PyObject *o, long long *out) {
    if (!PyLong_CheckExact(o)) return 0;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
    return 1;
}

static int sb_int(sbuf_t *b, PyObject *v) {
    long long x;
    if (!ll_of(v, &x)) return 1;
    /* decimal digits from the end (snprintf's format parsing was a tenth of a row) */
    char tmp[24];
    char *p = tmp + sizeof tmp;
    unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
    do { *--p = (char)('0' + u % 10); u /= 10; } while (u);
    if (x < 0) *--p = '-';
    return sb_put(b, p, (size_t)(tmp + sizeof tmp - p));
}

/* a character json writes as it is (ensure_ascii) */
static inline int json_plain(Py_UCS4 c) { return c >= ' ' && c <= '~' && c != '\\' && c != '"'; }

static int sb_str(sbuf_t *b, PyObject *v) {
    static const char hex[] = "0123456789abcdef";
    if (PyUnicode_READY(v) < 0) return -1;
    int kind = PyUnicode_KIND(v);
    const void *data = PyUnicode_DATA(v);
    Py_ssize_t n = PyUnicode_GET_LENGTH(v);
    if (PyUnicode_IS_ASCII(v)) {
        /* the usual name: runs of characters json writes as they are, copied at once */
        const char *c = (const char *)data;
        Py_ssize_t i = 0;
        while (i < n && json_plain((unsigned char)c[i])) i++;
        if (i == n) {
            if (sb_put(b, "\"", 1) || sb_put(b, c, (size_t)n)) return -1;
            return sb_put(b, "\"", 1);
        }
    }
    if (sb_put(b, "\"", 1)) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        char e[12];
        size_t k = 0;
        if (json_plain(c)) { e[k++] = (char)c; }
        else {
            e[k++] = '\\';
            switch (c) {
            case '\\': case '"': e[k++] = (char)c; break;
            case '\b': e[k++] = 'b'; break;
            case '\f': e[k++] = 'f'; break;
            case '\n': e[k++] = 'n'; break;
            case '\r': e[k++] = 'r'; break;
            case '\t': e[k++] = 't'; break;
            default:
                if (c >= 0x10000) { /* a UTF-16 surrogate pair, as json writes it */
                    Py_UCS4 hi = 0xd800 | ((c - 0x10000) >> 10);
                    e[k++] = 'u';
                    e[k++] = hex[(hi >> 12) & 0xf]; e[k++] = hex[(hi >> 8) & 0xf];
                    e[k++] = hex[(hi >> 4) & 0xf]; e[k++] = hex[hi & 0xf];
                    c = 0xdc00 | ((c - 0x10000) & 0x3ff);
                    e[k++] = '\\';
                }
                e[k++] = 'u';
                e[k++] = hex[(c >> 12) & 0xf]; e[k++] = hex[(c >> 8) & 0xf];
                e[k++] = hex[(c >> 4) & 0xf]; e[k++] = hex[c & 0xf];
            }
        }
        if (sb_put(b, e, k)) return -1;
    }
    return sb_put(b, "\"", 1);
}

/* ---- shortest float text (float.__repr__) without Python's dtoa ----------------------------
 * repr of a double is the shortest decimal that reads back as the same double, the closest to
 * it when several are that short. Python's dtoa finds it with big integers (~0.4 us a float: a
 * report of 20,000 vars writes 220,000 of them). Grisu3 (Loitsch, "Printing floating-point
 * numbers quickly and accurately with integers", PLDI 2010) finds it with 64-bit integers for
 * all but ~0.5% of doubles, and says when it cannot be sure: those go to
 * PyOS_double_to_string as before. The text is then laid out as repr lays it out. */

typedef struct { uint64_t f; int e; } diyfp_t;

/* 10^k = f * 2^e for k = -348, -340, ..., 340: f the 64 bits nearest, top bit set (made with
 * exact integers; tests/report/test_json_text.py makes it again and compares) */
static const struct { uint64_t f; int16_t e, k; } POW10[87] = {
    {0xfa8fd5a0081c0288u, -1220, -348}, {0xbaaee17fa23ebf76u, -1193, -340}, {0x8b16fb203055ac76u, -1166, -332},
    {0xcf42894a5dce35eau, -1140, -324}, {0x9a6bb0aa55653b2du, -1113, -316}, {0xe61acf033d1a45dfu, -1087, -308},
    {0xab70fe17c79ac6cau, -1060, -300}, {0xff77b1fcbebcdc4fu, -1034, -292}, {0xbe5691ef416bd60cu, -1007, -284},
    {0x8dd01fad907ffc3cu, -980, -276}, {0xd3515c2831559a83u, -954, -268}, {0x9d71ac8fada6c9b5u, -927, -260},
    {0xea9c227723ee8bcbu, -901, -252}, {0xaecc49914078536du, -874, -244}, {0x823c12795db6ce57u, -847, -236},
    {0xc21094364dfb5637u, -821, -228}, {0x9096ea6f3848984fu, -794, -220}, {0xd77485cb25823ac7u, -768, -212},
    {0xa086cfcd97bf97f4u, -741, -204}, {0xef340a98172aace5u, -715, -196}, {0xb23867fb2a35b28eu, -688, -188},
    {0x84c8d4dfd2c63f3bu, -661, -180}, {0xc5dd44271ad3cdbau, -635, -172}, {0x936b9fcebb25c996u, -608, -164},
    {0xdbac6c247d62a584u, -582, -156}, {0xa3ab66580d5fdaf6u, -555, -148}, {0xf3e2f893dec3f126u, -529, -140},
    {0xb5b5ada8aaff80b8u, -502, -132}, {0x87625f056c7c4a8bu, -475, -124}, {0xc9bcff6034c13053u, -449, -116},
    {0x964e858c91ba2655u, -422, -108}, {0xdff9772470297ebdu, -396, -100}, {0xa6dfbd9fb8e5b88fu, -369, -92},
    {0xf8a95fcf88747d94u, -343, -84}, {0xb94470938fa89bcfu, -316, -76}, {0x8a08f0f8bf0f156bu, -289, -68},
    {0xcdb02555653131b6u, -263, -60}, {0x993fe2c6d07b7facu, -236, -52}, {0xe45c10c42a2b3b06u, -210, -44},
    {0xaa242499697392d3u, -183, -36}, {0xfd87b5f28300ca0eu, -157, -28}, {0xbce5086492111aebu, -130, -20},
    {0x8cbccc096f5088ccu, -103, -12}, {0xd1b71758e219652cu, -77, -4}, {0x9c40000000000000u, -50, 4},
    {0xe8d4a51000000000u, -24, 12}, {0xad78ebc5ac620000u, 3, 20}, {0x813f3978f8940984u, 30, 28},
    {0xc097ce7bc90715b3u, 56, 36}, {0x8f7e32ce7bea5c70u, 83, 44}, {0xd5d238a4abe98068u, 109, 52},
    {0x9f4f2726179a2245u, 136, 60}, {0xed63a231d4c4fb27u, 162, 68}, {0xb0de65388cc8ada8u, 189, 76},
    {0x83c7088e1aab65dbu, 216, 84}, {0xc45d1df942711d9au, 242, 92}, {0x924d692ca61be758u, 269, 100},
    {0xda01ee641a708deau, 295, 108}, {0xa26da3999aef774au, 322, 116}, {0xf209787bb47d6b85u, 348, 124},
    {0xb454e4a179dd1877u, 375, 132}, {0x865b86925b9bc5c2u, 402, 140}, {0xc83553c5c8965d3du, 428, 148},
    {0x952ab45cfa97a0b3u, 455, 156}, {0xde469fbd99a05fe3u, 481, 164}, {0xa59bc234db398c25u, 508, 172},
    {0xf6c69a72a3989f5cu, 534, 180}, {0xb7dcbf5354e9beceu, 561, 188}, {0x88fcf317f22241e2u, 588, 196},
    {0xcc20ce9bd35c78a5u, 614, 204}, {0x98165af37b2153dfu, 641, 212}, {0xe2a0b5dc971f303au, 667, 220},
    {0xa8d9d1535ce3b396u, 694, 228}, {0xfb9b7cd9a4a7443cu, 720, 236}, {0xbb764c4ca7a44410u, 747, 244},
    {0x8bab8eefb6409c1au, 774, 252}, {0xd01fef10a657842cu, 800, 260}, {0x9b10a4e5e9913129u, 827, 268},
    {0xe7109bfba19c0c9du, 853, 276}, {0xac2820d9623bf429u, 880, 284}, {0x80444b5e7aa7cf85u, 907, 292},
    {0xbf21e44003acdd2du, 933, 300}, {0x8e679c2f5e44ff8fu, 960, 308}, {0xd433179d9c8cb841u, 986, 316},
    {0x9e19db92b4e31ba9u, 1013, 324}, {0xeb96bf6ebadf77d9u, 1039, 332}, {0xaf87023b9bf0ee6bu, 1066, 340},
};

static inline diyfp_t dfp_mul(diyfp_t a, diyfp_t b) {  /* the top 64 bits of the product, rounded */
    unsigned __int128 p = (unsigned __int128)a.f * b.f + ((unsigned __int128)1 << 63);
    diyfp_t r = {(uint64_t)(p >> 64), a.e + b.e + 64};
    return r;
}

static inline diyfp_t dfp_norm(diyfp_t a) {
    int s = __builtin_clzll(a.f);
    a.f <<= s;
    a.e -= s;
    return a;
}

/* Grisu's round_weed: move the last digit down while that gets closer to the double (rest is
 * what the digits are above too_high ... distances scaled by ten_kappa per last digit); 0 when
 * it cannot tell which of two candidates is closer, or the candidate may not read back */
static int round_weed(char *buf, int len, uint64_t dist_high_w, uint64_t unsafe, uint64_t rest, uint64_t ten_kappa,
                      uint64_t unit) {
    uint64_t small = dist_high_w - unit, big = dist_high_w + unit;
    while (rest < small && unsafe - rest >= ten_kappa &&
           (rest + ten_kappa < small || small - rest >= rest + ten_kappa - small)) {
        buf[len - 1]--;
        rest += ten_kappa;
    }
    if (rest < big && unsafe - rest >= ten_kappa && (rest + ten_kappa < big || big - rest > rest + ten_kappa - big))
        return 0;
    return 2 * unit <= rest && rest <= unsafe - 4 * unit;
}

static const uint32_t SMALL_POW10[] = {0, 1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000};

/* the digits of the shortest decimal inside (low, high) around w, all three scaled alike
 * (exponent in [-60, -32]); kappa: the decimal exponent of the last digit */
static int digit_gen(diyfp_t low, diyfp_t w, diyfp_t high, char *buf, int *len, int *kappa) {
    uint64_t unit = 1;
    uint64_t too_low = low.f - unit, too_high = high.f + unit;
    uint64_t unsafe = too_high - too_low;
    int shift = -w.e;
    uint64_t one = (uint64_t)1 << shift;
    uint32_t integrals = (uint32_t)(too_high >> shift);
    uint64_t fractionals = too_high & (one - 1);
    int bits = 64 - shift;
    int k = (((bits + 1) * 1233) >> 12) + 1;  /* the largest power of ten <= integrals */
    if (integrals < SMALL_POW10[k]) k--;
    uint32_t divisor = SMALL_POW10[k];
    *kappa = k;
    *len = 0;
    while (*kappa > 0) {
        buf[(*len)++] = (char)('0' + integrals / divisor);
        integrals %= divisor;
        (*kappa)--;
        uint64_t rest = ((uint64_t)integrals << shift) + fractionals;
        if (rest < unsafe)
            return round_weed(buf, *len, too_high - w.f, unsafe, rest, (uint64_t)divisor << shift, unit);
        divisor /= 10;
    }
    for (;;) {
        fractionals *= 10;
        unit *= 10;
        unsafe *= 10;
        if (*len >= 17) return 0;  /* never for a double (17 digits always read back): a guard */
        buf[(*len)++] = (char)('0' + (fractionals >> shift));
        fractionals &= one - 1;
        (*kappa)--;
        if (fractionals < unsafe) return round_weed(buf, *len, (too_high - w.f) * unit, unsafe, fractionals, one, unit);
    }
}

/* repr(x) for a finite x > 0 into out (at least 32 bytes): its length, or 0 when Grisu3
 * cannot be sure (the caller asks Python) */
static size_t grisu_repr(double x, char *out) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int biased = (int)((bits >> 52) & 0x7ff);
    uint64_t frac = bits & (((uint64_t)1 << 52) - 1);
    diyfp_t v = biased ? (diyfp_t){frac | ((uint64_t)1 << 52), biased - 1075} : (diyfp_t){frac, -1074};
    /* the boundaries halfway to the neighbouring doubles (the lower one nearer at a power of 2) */
    diyfp_t plus = dfp_norm((diyfp_t){(v.f << 1) + 1, v.e - 1});
    diyfp_t minus = (frac == 0 && biased > 1) ? (diyfp_t){(v.f << 2) - 1, v.e - 2} : (diyfp_t){(v.f << 1) - 1, v.e - 1};
    minus.f <<= minus.e - plus.e;
    minus.e = plus.e;
    diyfp_t w = dfp_norm(v);
    /* a cached 10^-k that brings w's exponent into [-60, -32] */
    int min_e = -60 - (w.e + 64);
    int dk = (int)ceil((min_e + 63) * 0.30102999566398114);
    int idx = (348 + dk - 1) / 8 + 1;
    if (idx < 0 || idx >= 87) return 0;
    diyfp_t c = {POW10[idx].f, POW10[idx].e};
    diyfp_t sw = dfp_mul(w, c), slow = dfp_mul(minus, c), shigh = dfp_mul(plus, c);
    if (sw.e < -60 || sw.e > -32) return 0;
    char d[20];
    int n, kappa;
    if (!digit_gen(slow, sw, shigh, d, &n, &kappa)) return 0;
    while (n > 1 && d[n - 1] == '0') { n--; kappa++; }
    int decpt = n + kappa - POW10[idx].k;  /* x = 0.d1d2...dn * 10^decpt */
    char *p = out;
    if (decpt > -4 && decpt <= 16) {  /* repr's fixed notation */
        if (decpt <= 0) {
            *p++ = '0'; *p++ = '.';
            for (int i = 0; i < -decpt; i++) *p++ = '0';
            memcpy(p, d, (size_t)n); p += n;
        } else if (decpt >= n) {
            memcpy(p, d, (size_t)n); p += n;
            for (int i = n; i < decpt; i++) *p++ = '0';
            *p++ = '.'; *p++ = '0';
        } else {
            memcpy(p, d, (size_t)decpt); p += decpt;
            *p++ = '.';
            memcpy(p, d + decpt, (size_t)(n - decpt)); p += n - decpt;
        }
    } else {  /* d.ddde+XX, at least two exponent digits */
        *p++ = d[0];
        if (n > 1) { *p++ = '.'; memcpy(p, d + 1, (size_t)(n - 1)); p += n - 1; }
        int ex = decpt - 1;
        *p++ = 'e';
        *p++ = ex < 0 ? '-' : '+';
        if (ex < 0) ex = -ex;
        if (ex >= 100) { *p++ = (char)('0' + ex / 100); ex %= 100; }
        *p++ = (char)('0' + ex / 10); *p++ = (char)('0' + ex % 10);
    }
    return (size_t)(p - out);
}

/* repr(x) into text (40 bytes): its length, 0 for NaN/Inf and where Grisu3 is not sure (then
 * Python's dtoa says). Zero as dtoa tells it, by a comparison: where MegEngine set
 * flush-to-zero, a subnormal is zero for both (repr writes 0.0 for it there). */
static size_t float_text(double x, char *text) {
    if (!isfinite(x)) return 0;
    size_t neg = signbit(x) != 0;
    text[0] = '-';
    if (x == 0) { memcpy(text + neg, "0.0", 3); return neg + 3; }
    size_t k = grisu_repr(fabs(x), text + neg);
    return k ? k + neg : 0;
}

/* 0 written, 1 not written the same way (the caller falls back), -1 error. kind: what the
 * field holds ('f' float, 'i' int, 'n' int or float, 's' str, 'b' bool, 'l' ints): a value of
 * another type is written differently by the caller's general path (an int in a float field
 * as 1.0), so it falls back */
static int sb_value(sbuf_t *b, PyObject *v, char kind) {
    if (v == Py_None) return sb_put(b, "null", 4);
    if (kind == 'b') {
        if (v == Py_True) return sb_put(b, "true", 4);
        if (v == Py_False) return sb_put(b, "false", 5);
        return 1;
    }
    if (PyFloat_CheckExact(v) && (kind == 'f' || kind == 'n')) {
        double x = PyFloat_AS_DOUBLE(v);
        if (!isfinite(x)) return 1;
        char text[40];
        size_t k = float_text(x, text);
        const char *s = text;
        char *py = NULL;
        if (!k) {  /* a double Grisu3 is not sure of: Python's dtoa */
            py = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
            if (!py) return -1;
            s = py;
            k = strlen(py);
        }
        int r = sb_put(b, s, k);
        PyMem_Free(py);
        return r;
    }
    if (PyLong_CheckExact(v) && (kind == 'i' || kind == 'n')) return sb_int(b, v);
    if (PyUnicode_CheckExact(v) && kind == 's') return sb_str(b, v);
    if ((PyTuple_CheckExact(v) || PyList_CheckExact(v)) && kind == 'l') {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
        PyObject **items = PySequence_Fast_ITEMS(v);
        if (sb_put(b, "[", 1)) return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (!PyLong_CheckExact(items[i])) return 1;
            if ((i && sb_put(b, ", ", 2))) return -1;
            int r = sb_int(b, items[i]);
            if (r) return r;
        }
        return sb_put(b, "]", 1);
    }
    return 1;
}

static PyObject *json_one(PyObject *prefixes, PyObject *const *values, Py_ssize_t n, const char *kinds, Py_ssize_t nk,
                          sbuf_t *b);

PyDoc_STRVAR(json_rows_doc,
"json_rows(prefixes, rows, kinds, keys=None) -> list\n\n"
"For each tuple of the list rows: prefixes[0] + json(row[0]) + prefixes[1] + ... + prefixes[-1]\n"
"(len(prefixes) is len(row) + 1; ASCII str, e.g. '{\"id\": ', ', \"name\": ', '}'), each value\n"
"written as json.dumps writes it (ensure_ascii). kinds[i] says what row[i] may be: 'f' a\n"
"float, 'i' an int, 'n' either, 's' a str, 'b' a bool, 'l' a tuple/list of ints (or None).\n"
"None for a row with a value NaN/Inf or not of its kind's type. With keys (a tuple of str),\n"
"rows are objects and row[i] is getattr(row, keys[i]).");

/* getattr(obj, key) (a new reference): the instance dict read directly where the type has no
 * data descriptor of that name (what getattr does first), else the generic lookup */
static PyObject *attr_of(PyObject *obj, PyObject *key) {
    PyObject *descr = _PyType_Lookup(Py_TYPE(obj), key);
    if (descr == NULL || Py_TYPE(descr)->tp_descr_set == NULL) {
        PyObject **dp = _PyObject_GetDictPtr(obj);
        if (dp && *dp) {
            PyObject *v = PyDict_GetItemWithError(*dp, key);
            if (v) { Py_INCREF(v); return v; }
            if (PyErr_Occurred()) return NULL;
        }
    }
    return PyObject_GetAttr(obj, key);
}

static PyObject *py_json_rows(PyObject *self, PyObject *args) {
    PyObject *prefixes, *rows, *keys = Py_None;
    const char *kinds;
    Py_ssize_t nk;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!s#|O", &PyTuple_Type, &prefixes, &PyList_Type, &rows, &kinds, &nk, &keys))
        return NULL;
    if (keys != Py_None) {
        int ok = PyTuple_Check(keys) && PyTuple_GET_SIZE(keys) == nk;
        for (Py_ssize_t j = 0; ok && j < nk; j++) ok = PyUnicode_Check(PyTuple_GET_ITEM(keys, j));
        if (!ok) { PyErr_SetString(PyExc_TypeError, "json_rows: keys must be a tuple of str, one per kind"); return NULL; }
    }
    Py_ssize_t n = PyList_GET_SIZE(rows);
    PyObject **vals = keys != Py_None ? PyMem_Malloc(sizeof(PyObject *) * (size_t)(nk ? nk : 1)) : NULL;
    if (keys != Py_None && !vals) return PyErr_NoMemory();
    PyObject *out = PyList_New(n);
    if (!out) { PyMem_Free(vals); return NULL; }
    sbuf_t b = {NULL, 0, 0};  /* one buffer for every row */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i), *t = NULL;
        if (keys != Py_None) {  /* an object: its attributes, read without a tuple of them per row */
            Py_ssize_t j = 0;
            for (; j < nk; j++)
                if (!(vals[j] = attr_of(row, PyTuple_GET_ITEM(keys, j)))) break;
            if (j == nk) t = json_one(prefixes, vals, nk, kinds, nk, &b);
            while (j > 0) Py_DECREF(vals[--j]);
        } else if (!PyTuple_Check(row)) {
            PyErr_SetString(PyExc_TypeError, "json_rows: rows must be tuples");
        } else {
            t = json_one(prefixes, ((PyTupleObject *)row)->ob_item, PyTuple_GET_SIZE(row), kinds, nk, &b);
        }
        if (!t) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i, t);
    }
    PyMem_Free(vals);
    PyMem_Free(b.p);
    return out;
}

static PyObject *json_one(PyObject *prefixes, PyObject *const *values, Py_ssize_t n, const char *kinds, Py_ssize_t nk,
                          sbuf_t *b) {
    if (PyTuple_GET_SIZE(prefixes) != n + 1 || nk != n) {
        PyErr_SetString(PyExc_ValueError, "json_rows: needs one prefix more than values, and one kind per value");
        return NULL;
    }
    b->n = 0;
    for (Py_ssize_t i = 0; i <= n; i++) {
        Py_ssize_t k;
        const char *p = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(prefixes, i), &k);
        if (!p || sb_put(b, p, (size_t)k)) goto fail;
        if (i == n) break;
        int r = sb_value(b, values[i], kinds[i]);
        if (r < 0) goto fail;
        if (r > 0) Py_RETURN_NONE;
    }
    return PyUnicode_DecodeASCII(b->p, (Py_ssize_t)b->n, "strict");
fail:
    if (!PyErr_Occurred()) PyErr_NoMemory();
    return NULL;
}

PyDoc_STRVAR(grisu_repr_doc,
"grisu_repr(x) -> str or None\n\n"
"repr(x) as json_rows writes it without Python's dtoa (Grisu3), or None where Grisu3 cannot be\n"
"sure (about 0.5% of doubles; NaN, Inf): json_rows asks Python for those.");

static PyObject *py_grisu_repr(PyObject *self, PyObject *arg) {
    (void)self;
    double x = PyFloat_AsDouble(arg);
    if (x == -1.0 && PyErr_Occurred()) return NULL;
    char text[40];
    size_t k = float_text(x, text);
    if (!k) Py_RETURN_NONE;
    return PyUnicode_FromStringAndSize(text, (Py_ssize_t)k);
}

/* ================================================================ the auto threshold's passes
 *
 * An auto threshold judges every var twice after it is chosen: by the band (judge_vars, what
 * lar_prec.compare.threshold.judge_all does) and, once the edge rule has had its say, into
 * each record with its count of elements over the threshold from what the batch reader kept
 * (apply_judged, the loop of lar_prec.compare.folders._judge_auto). Tens of thousands of vars:
 * a Python loop over them cost more than comparing their files. Same decisions, same numbers
 * (tests/compare/test_auto_columns.py holds both paths to the record-by-record one). */

/* float(np.float32(t)): round to nearest float32, beyond its range to infinity (to_float32) */
static double to_f32(double t) {
    float y = (float)t;
    if (isinf(y) && !isinf(t)) return copysign(INFINITY, t);
    return (double)y;
}

/* a str among words (identity first: the records share Python's interned literals) */
static int is_word(PyObject *x, PyObject *w) {
    if (x == w) return 1;
    if (!PyUnicode_Check(x)) return 0;
    int r = PyUnicode_Compare(x, w);
    if (r == -1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return r == 0;
}

/* a float field: 1 and *out set, 0 for None, -1 for another type */
static int float_field(PyObject *x, double *out) {
    if (x == Py_None) return 0;
    if (!PyFloat_CheckExact(x)) return -1;
    *out = PyFloat_AS_DOUBLE(x);
    return 1;
}

/* each of k columns as a fast sequence, all of length *n (*n < 0: the first column's); -1 with
 * an error set (what remains in fast is released by the caller) */
static int fast_columns(PyObject *const *cols, int k, PyObject **fast, Py_ssize_t *n, const char *who) {
    for (int c = 0; c < k; c++) {
        if (!(fast[c] = PySequence_Fast(cols[c], "columns must be sequences"))) return -1;
        if (*n < 0) *n = PySequence_Fast_GET_SIZE(fast[c]);
        else if (PySequence_Fast_GET_SIZE(fast[c]) != *n) {
            PyErr_Format(PyExc_ValueError, "%s: columns of different lengths", who);
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(judge_vars_doc,
"judge_vars(status, dtype, max_err, scale, n_nonfinite, n_diff, threshold, n_over, kinds, scaled,\n"
"           scale_floor, words) -> (status, threshold, n_over) or None\n\n"
"lar_prec.compare.threshold.judge_all over columns (sequences of one field of every var):\n"
"kinds maps each dtype name to (base threshold, float_name), words is ('ok', 'divergent',\n"
"'nonfinite', 'missing', 'shape_mismatch', 'dtype_mismatch'). None where a field is not of\n"
"the type the records give it (the caller judges in Python).");

static PyObject *py_judge_vars(PyObject *self, PyObject *args) {
    PyObject *cols[8], *kinds, *words;
    int scaled;
    double floor_;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO!pdO!", &cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5],
                          &cols[6], &cols[7], &PyDict_Type, &kinds, &scaled, &floor_, &PyTuple_Type, &words))
        return NULL;
    if (PyTuple_GET_SIZE(words) != 6) { PyErr_SetString(PyExc_ValueError, "judge_vars: six words"); return NULL; }
    PyObject *w_ok = PyTuple_GET_ITEM(words, 0), *w_div = PyTuple_GET_ITEM(words, 1),
             *w_nonf = PyTuple_GET_ITEM(words, 2), *w_miss = PyTuple_GET_ITEM(words, 3),
             *w_shape = PyTuple_GET_ITEM(words, 4), *w_dtype = PyTuple_GET_ITEM(words, 5);
    PyObject *fast[8] = {NULL};
    PyObject *st_out = NULL, *t_out = NULL, *no_out = NULL, *zero = NULL, *result = NULL;
    Py_ssize_t n = -1;
    if (fast_columns(cols, 8, fast, &n, "judge_vars") < 0) goto done;
    if (!(st_out = PyList_New(n)) || !(t_out = PyList_New(n)) || !(no_out = PyList_New(n)) || !(zero = PyLong_FromLong(0)))
        goto done;
    PyObject **ST = PySequence_Fast_ITEMS(fast[0]), **DT = PySequence_Fast_ITEMS(fast[1]),
             **ME = PySequence_Fast_ITEMS(fast[2]), **SC = PySequence_Fast_ITEMS(fast[3]),
             **NF = PySequence_Fast_ITEMS(fast[4]), **ND = PySequence_Fast_ITEMS(fast[5]),
             **TH = PySequence_Fast_ITEMS(fast[6]), **NO = PySequence_Fast_ITEMS(fast[7]);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *st = ST[i], *t_obj = TH[i], *no = NO[i];  /* unchanged unless judged below */
        Py_INCREF(st); Py_INCREF(t_obj); Py_INCREF(no);
        PyList_SET_ITEM(st_out, i, st); PyList_SET_ITEM(t_out, i, t_obj); PyList_SET_ITEM(no_out, i, no);
        if (is_word(st, w_miss) || is_word(st, w_shape)) continue;
        PyObject *k = PyDict_GetItemWithError(kinds, DT[i]);
        if (!k) { if (PyErr_Occurred()) goto done; goto fallback; }
        if (!PyTuple_Check(k) || PyTuple_GET_SIZE(k) != 2 || !PyFloat_Check(PyTuple_GET_ITEM(k, 0))) goto fallback;
        double base = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(k, 0)), s = 0.0, e = 0.0;
        PyObject *flt = PyTuple_GET_ITEM(k, 1);
        int has_s = float_field(SC[i], &s), has_e = float_field(ME[i], &e);
        if (has_s < 0 || has_e < 0) goto fallback;
        double t = scaled && has_s ? base * scale_factor_of(s, floor_) : base;
        if (is_word(st, w_dtype)) {
            PyObject *v = has_e ? PyFloat_FromDouble(t) : (Py_INCREF(Py_None), Py_None);
            if (!v) goto done;
            PyList_SetItem(t_out, i, v);
            continue;
        }
        int nonfinite = PyObject_IsTrue(NF[i]);
        if (nonfinite < 0) goto done;
        PyObject *new_st, *new_t, *new_no;
        if (flt == Py_False) {  /* exact types: any differing element diverges */
            PyObject *nd = ND[i];
            long long d = 0;
            if (nd != Py_None) {
                if (!PyLong_CheckExact(nd)) goto fallback;
                d = PyLong_AsLongLong(nd);
                if (d == -1 && PyErr_Occurred()) { PyErr_Clear(); goto fallback; }
            }
            new_st = nonfinite ? w_nonf : d > 0 ? w_div : w_ok;
            if (!(new_t = PyFloat_FromDouble(0.0))) goto done;
            new_no = nd;
            Py_INCREF(new_st); Py_INCREF(new_no);
        } else {
            double t32 = to_f32(t);
            new_st = nonfinite ? w_nonf : (has_e && e > t32) ? w_div : w_ok;
            if (!has_e || e <= t32) new_no = zero;
            else {  /* needs a recount unless it was counted at this very threshold */
                double old = 0.0;
                int has_old = float_field(t_obj, &old);
                if (has_old < 0) goto fallback;
                new_no = (no != Py_None && has_old && old == t) ? no : Py_None;
            }
            if (!(new_t = PyFloat_FromDouble(t))) goto done;
            Py_INCREF(new_st); Py_INCREF(new_no);
        }
        PyList_SetItem(st_out, i, new_st);
        PyList_SetItem(t_out, i, new_t);
        PyList_SetItem(no_out, i, new_no);
    }
    result = PyTuple_Pack(3, st_out, t_out, no_out);
    goto done;
fallback:
    result = Py_None;
    Py_INCREF(result);
done:
    for (int c = 0; c < 8; c++) Py_XDECREF(fast[c]);
    Py_XDECREF(st_out); Py_XDECREF(t_out); Py_XDECREF(no_out); Py_XDECREF(zero);
    return result;
}

/* count_from_band: the count above t of a var from what the batch reader kept of its errors
 * (kept: (above, float32 bytes) or None); -1: recount it from the files */
static long long count_kept(PyObject *kept, PyObject *win, int scale_ge1, double sf, double t) {
    if (kept == Py_None || !PyTuple_Check(kept) || PyTuple_GET_SIZE(kept) != 2 || !win) return -1;
    if (!PyTuple_Check(win) || PyTuple_GET_SIZE(win) != 4) return -1;
    double w[4];
    for (int j = 0; j < 4; j++) {
        PyObject *x = PyTuple_GET_ITEM(win, j);
        if (!PyFloat_Check(x)) return -1;
        w[j] = PyFloat_AS_DOUBLE(x);
    }
    double t32 = to_f32(t), lo, hi;
    if (scale_ge1) { lo = w[2]; hi = w[3]; }  /* the dtype's own window, rounded to float32 */
    else { lo = to_f32(w[0] * sf); hi = to_f32(w[1] * sf); }
    if (!(lo <= t32 && t32 <= hi)) return -1;
    PyObject *above = PyTuple_GET_ITEM(kept, 0), *inside = PyTuple_GET_ITEM(kept, 1);
    /* inside: None where no error fell inside the window (count_from_band: the count above) */
    if (!PyLong_CheckExact(above) || (inside != Py_None && !PyBytes_Check(inside))) return -1;
    long long count = PyLong_AsLongLong(above);
    if (count == -1 && PyErr_Occurred()) { PyErr_Clear(); return -1; }
    if (inside == Py_None) return count;
    Py_ssize_t nb = PyBytes_GET_SIZE(inside);
    if (nb % (Py_ssize_t)sizeof(float)) return -1;
    const char *p = PyBytes_AS_STRING(inside);
    for (Py_ssize_t k = 0; k < nb; k += (Py_ssize_t)sizeof(float)) {
        float e;
        memcpy(&e, p + k, sizeof e);
        count += (double)e > t32;
    }
    return count;
}

PyDoc_STRVAR(apply_judged_doc,
"apply_judged(diffs, status0, status, threshold, n_over, max_err, dtype, scale, max_abs_err, windows,\n"
"             todo, scale_floor, words) -> list\n\n"
"The loop of lar_prec.compare.folders._judge_auto (_apply_judged there): every var whose first\n"
"status (status0) is not 'missing'/'shape_mismatch' gets status, threshold and n_over written\n"
"into its record's instance dict, n_over counted from its kept band (record attribute 'band';\n"
"windows: dtype -> (low, high, low as float32, high as float32)) when it is None and todo is a\n"
"list; a var it cannot count is appended to todo. Returns the positions of divergent quantized\n"
"vars one step apart (max_abs_err 1). words: ('divergent', 'missing', 'shape_mismatch').");

static PyObject *py_apply_judged(PyObject *self, PyObject *args) {
    PyObject *diffs, *cols[8], *windows, *todo, *words;
    double floor_;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!OOOOOOOOO!OdO!", &PyList_Type, &diffs, &cols[0], &cols[1], &cols[2], &cols[3],
                          &cols[4], &cols[5], &cols[6], &cols[7], &PyDict_Type, &windows, &todo, &floor_,
                          &PyTuple_Type, &words))
        return NULL;
    if (PyTuple_GET_SIZE(words) != 3) { PyErr_SetString(PyExc_ValueError, "apply_judged: three words"); return NULL; }
    if (todo != Py_None && !PyList_Check(todo)) { PyErr_SetString(PyExc_TypeError, "apply_judged: todo must be a list or None"); return NULL; }
    PyObject *w_div = PyTuple_GET_ITEM(words, 0), *w_miss = PyTuple_GET_ITEM(words, 1), *w_shape = PyTuple_GET_ITEM(words, 2);
    static PyObject *K_ST, *K_T, *K_NO, *K_BAND, *QUANT, *ONE;
    if (!K_ST) {
        K_ST = PyUnicode_InternFromString("status"); K_T = PyUnicode_InternFromString("threshold");
        K_NO = PyUnicode_InternFromString("n_over"); K_BAND = PyUnicode_InternFromString("band");
        QUANT = PyUnicode_InternFromString("Quantized"); ONE = PyLong_FromLong(1);
        if (!K_ST || !K_T || !K_NO || !K_BAND || !QUANT || !ONE) return NULL;
    }
    PyObject *fast[8] = {NULL}, *steps = NULL, *result = NULL;
    Py_ssize_t n = PyList_GET_SIZE(diffs);
    if (fast_columns(cols, 8, fast, &n, "apply_judged") < 0) goto done;
    if (!(steps = PyList_New(0))) goto done;
    PyObject **S0 = PySequence_Fast_ITEMS(fast[0]), **ST = PySequence_Fast_ITEMS(fast[1]),
             **TH = PySequence_Fast_ITEMS(fast[2]), **NO = PySequence_Fast_ITEMS(fast[3]),
             **ME = PySequence_Fast_ITEMS(fast[4]), **DT = PySequence_Fast_ITEMS(fast[5]),
             **SC = PySequence_Fast_ITEMS(fast[6]), **MA = PySequence_Fast_ITEMS(fast[7]);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (is_word(S0[i], w_miss) || is_word(S0[i], w_shape)) continue;
        PyObject *d = PyList_GET_ITEM(diffs, i), *st = ST[i], *t = TH[i], *no = NO[i], *counted = NULL;
        PyObject **dp = _PyObject_GetDictPtr(d);
        if (!dp || !*dp) { PyErr_SetString(PyExc_TypeError, "apply_judged: a record without an instance dict"); goto done; }
        PyObject *dict = *dp;
        if (no == Py_None && todo != Py_None && t != Py_None && ME[i] != Py_None) {
            long long c = -1;
            double tv, s = 0.0;
            int has_s = float_field(SC[i], &s);
            if (PyFloat_CheckExact(t) && has_s >= 0) {
                tv = PyFloat_AS_DOUBLE(t);
                PyObject *kept = PyDict_GetItemWithError(dict, K_BAND);
                if (!kept && PyErr_Occurred()) goto done;
                PyObject *win = PyDict_GetItemWithError(windows, DT[i]);
                if (!win && PyErr_Occurred()) goto done;
                if (kept) c = count_kept(kept, win, has_s && s >= 1.0, has_s ? scale_factor_of(s, floor_) : 1.0, tv);
            }
            if (c < 0) {
                PyObject *pos = PyLong_FromSsize_t(i);
                if (!pos || PyList_Append(todo, pos) < 0) { Py_XDECREF(pos); goto done; }
                Py_DECREF(pos);
            } else if (!(counted = PyLong_FromLongLong(c))) goto done;
        }
        int bad = PyDict_SetItem(dict, K_ST, st) < 0 || PyDict_SetItem(dict, K_T, t) < 0
                  || PyDict_SetItem(dict, K_NO, counted ? counted : no) < 0;
        Py_XDECREF(counted);
        if (bad) goto done;
        if (is_word(st, w_div) && PyUnicode_Check(DT[i])) {
            int q = PyUnicode_Tailmatch(DT[i], QUANT, 0, PY_SSIZE_T_MAX, -1);
            if (q < 0) goto done;
            if (q) {
                int one = PyObject_RichCompareBool(MA[i], ONE, Py_EQ);
                if (one < 0) goto done;
                if (one) {
                    PyObject *pos = PyLong_FromSsize_t(i);
                    if (!pos || PyList_Append(steps, pos) < 0) { Py_XDECREF(pos); goto done; }
                    Py_DECREF(pos);
                }
            }
        }
    }
    result = steps;
    steps = NULL;
done:
    for (int c = 0; c < 8; c++) Py_XDECREF(fast[c]);
    Py_XDECREF(steps);
    return result;
}

/* ---- the auto threshold's columns and edge rule -------------------------------------------
 * lar_prec.compare.threshold.VarColumns and lar_prec.compare.growth.grow_columns: each var's
 * fields read once into flat arrays (bytes objects), the vars' edges found through their
 * positions, the roots at a candidate threshold counted, and the edge rule's arithmetic, each
 * operation as the record-by-record reference (growth._grow_records) makes it, in the same
 * order: the same numbers (tests/compare/test_auto_columns.py). No numpy: a comparison that
 * needs no recheck never imports it. */

enum { ST_OK, ST_DIV, ST_MISSING, ST_SHAPE, ST_OTHER };
enum { K_MOVE, K_REDUCING, K_ELEMWISE };

/* np.maximum: NaN wins */
static inline double np_max(double a, double b) { return a != a ? a : b != b ? b : (a > b ? a : b); }

static PyObject *new_bytes(Py_ssize_t n, char **p) {
    PyObject *b = PyBytes_FromStringAndSize(NULL, n > 0 ? n : 0);
    if (b) *p = PyBytes_AS_STRING(b);
    return b;
}

/* a status's code among (ok, divergent, missing, shape_mismatch) */
static int status_code(PyObject *st, PyObject *words) {
    for (int c = 0; c < 4; c++)
        if (is_word(st, PyTuple_GET_ITEM(words, c))) return c;
    return ST_OTHER;
}

PyDoc_STRVAR(auto_columns_doc,
"auto_columns(status, dtype, max_err, scale, opr_type, inputs, pos, float_names, kinds, scale_floor,\n"
"             words) -> tuple or None\n\n"
"The flat columns of VarColumns: (me, sc, has_scale, has_e, norm, dt, kind, st, src, dst) as bytes:\n"
"max_err and scale as float64 (NaN for None), whether each is given (uint8), norm_err (max_err\n"
"over min(1, scale) floored), the index of the dtype in float_names (int8, -1 for others), the\n"
"operator kind (int8, kinds: opr_type -> 0 move, 1 reducing, 2 elementwise), the status code\n"
"(int8: words are ok, divergent, missing, shape_mismatch; 4 any other), and the edges (int64\n"
"input position -> position, inputs among the vars (pos: id -> position), none to itself, by\n"
"position then input order). None where a field is not of the type the records give it.");

static PyObject *py_auto_columns(PyObject *self, PyObject *args) {
    PyObject *cols[6], *pos, *names, *kinds, *words;
    double floor_;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOO!O!O!dO!", &cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5],
                          &PyDict_Type, &pos, &PyTuple_Type, &names, &PyDict_Type, &kinds, &floor_, &PyTuple_Type, &words))
        return NULL;
    if (PyTuple_GET_SIZE(words) != 4 || PyTuple_GET_SIZE(names) > 100) {
        PyErr_SetString(PyExc_ValueError, "auto_columns: four words, a few float names");
        return NULL;
    }
    PyObject *fast[6] = {NULL}, *out[10] = {NULL}, *result = NULL;
    Py_ssize_t n = -1, n_edges = 0;
    if (fast_columns(cols, 6, fast, &n, "auto_columns") < 0) goto done;
    PyObject **ST = PySequence_Fast_ITEMS(fast[0]), **DT = PySequence_Fast_ITEMS(fast[1]),
             **ME = PySequence_Fast_ITEMS(fast[2]), **SC = PySequence_Fast_ITEMS(fast[3]),
             **OP = PySequence_Fast_ITEMS(fast[4]), **IN = PySequence_Fast_ITEMS(fast[5]);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyTuple_Check(IN[i])) goto fallback;
        n_edges += PyTuple_GET_SIZE(IN[i]);
    }
    char *p[10];
    const Py_ssize_t sizes[10] = {8 * n, 8 * n, n, n, 8 * n, n, n, n, 8 * n_edges, 8 * n_edges};
    for (int c = 0; c < 10; c++)
        if (!(out[c] = new_bytes(sizes[c], &p[c]))) goto done;
    double *me = (double *)p[0], *sc = (double *)p[1], *norm = (double *)p[4];
    uint8_t *has_s = (uint8_t *)p[2], *has_e = (uint8_t *)p[3];
    int8_t *dt = (int8_t *)p[5], *kind = (int8_t *)p[6], *st = (int8_t *)p[7];
    int64_t *src = (int64_t *)p[8], *dst = (int64_t *)p[9];
    Py_ssize_t e = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double x = 0.0, y = 0.0;
        int he = float_field(ME[i], &x), hs = float_field(SC[i], &y);
        if (he < 0 || hs < 0) goto fallback;
        me[i] = he ? x : NAN;
        sc[i] = hs ? y : NAN;
        has_e[i] = (uint8_t)he;
        has_s[i] = (uint8_t)hs;
        /* VarColumns: me / where(has_scale & sc < 1, where(sc > floor, sc, floor), 1) */
        norm[i] = me[i] / ((hs && y < 1.0) ? (y > floor_ ? y : floor_) : 1.0);
        dt[i] = -1;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(names); k++)
            if (is_word(DT[i], PyTuple_GET_ITEM(names, k))) { dt[i] = (int8_t)k; break; }
        PyObject *kc = PyDict_GetItemWithError(kinds, OP[i]);
        if (!kc) { if (PyErr_Occurred()) goto done; goto fallback; }
        long kv = PyLong_AsLong(kc);
        if (kv < 0 || kv > 2) { PyErr_Clear(); goto fallback; }
        kind[i] = (int8_t)kv;
        st[i] = (int8_t)status_code(ST[i], words);
        PyObject *ins = IN[i];
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(ins); j++) {
            PyObject *at = PyDict_GetItemWithError(pos, PyTuple_GET_ITEM(ins, j));
            if (!at) { if (PyErr_Occurred()) goto done; continue; }  /* not among these vars */
            Py_ssize_t q = PyLong_AsSsize_t(at);
            if (q == -1 && PyErr_Occurred()) goto done;
            if (q < 0 || q >= n) { PyErr_SetString(PyExc_ValueError, "auto_columns: a position out of range"); goto done; }
            if (q == i) continue;
            src[e] = q;
            dst[e] = i;
            e++;
        }
    }
    if (e < n_edges) {  /* inputs outside the set: the edges' bytes cut to those found */
        if (_PyBytes_Resize(&out[8], 8 * e) < 0 || _PyBytes_Resize(&out[9], 8 * e) < 0) goto done;
    }
    result = PyTuple_New(10);
    if (!result) goto done;
    for (int c = 0; c < 10; c++) { PyTuple_SET_ITEM(result, c, out[c]); out[c] = NULL; }
    goto done;
fallback:
    result = Py_None;
    Py_INCREF(result);
done:
    for (int c = 0; c < 6; c++) Py_XDECREF(fast[c]);
    for (int c = 0; c < 10; c++) Py_XDECREF(out[c]);
    return result;
}

/* a bytes-like argument's buffer, as an array of n items of `size` bytes */
typedef struct { Py_buffer view; Py_ssize_t n; } col_t;

static int col_get(PyObject *obj, Py_ssize_t size, col_t *c, const char *what) {
    if (PyObject_GetBuffer(obj, &c->view, PyBUF_SIMPLE) < 0) return -1;
    if (c->view.len % size) {
        PyErr_Format(PyExc_ValueError, "%s: not a whole number of items", what);
        PyBuffer_Release(&c->view);
        return -1;
    }
    c->n = c->view.len / size;
    return 0;
}

/* choose_threshold's vars of float dtype k: measured, not missing, not of another shape */
static inline int in_band(const int8_t *dt, const uint8_t *has_e, const int8_t *st, Py_ssize_t i, int k) {
    return dt[i] == k && has_e[i] && st[i] != ST_MISSING && st[i] != ST_SHAPE;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

PyDoc_STRVAR(band_errs_doc,
"band_errs(norm, dt, has_e, st, k) -> list\n\n"
"The distinct positive norm_err of the vars of float dtype index k (measured, not missing nor\n"
"of another shape), sorted: what choose_threshold looks for gaps in.");

static PyObject *py_band_errs(PyObject *self, PyObject *args) {
    PyObject *o[4];
    int k;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOi", &o[0], &o[1], &o[2], &o[3], &k)) return NULL;
    col_t c[4];
    const Py_ssize_t size[4] = {8, 1, 1, 1};
    int got = 0;
    PyObject *out = NULL;
    double *xs = NULL;
    for (; got < 4; got++)
        if (col_get(o[got], size[got], &c[got], "band_errs") < 0) goto done;
    Py_ssize_t n = c[0].n;
    if (c[1].n != n || c[2].n != n || c[3].n != n) { PyErr_SetString(PyExc_ValueError, "band_errs: lengths"); goto done; }
    const double *norm = c[0].view.buf;
    const int8_t *dt = c[1].view.buf, *st = c[3].view.buf;
    const uint8_t *has_e = c[2].view.buf;
    xs = PyMem_Malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!xs) { PyErr_NoMemory(); goto done; }
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (in_band(dt, has_e, st, i, k) && norm[i] > 0.0) xs[m++] = norm[i];
    qsort(xs, (size_t)m, sizeof(double), cmp_double);
    Py_ssize_t u = 0;
    for (Py_ssize_t i = 0; i < m; i++)
        if (u == 0 || xs[i] != xs[u - 1]) xs[u++] = xs[i];
    if (!(out = PyList_New(u))) goto done;
    for (Py_ssize_t i = 0; i < u; i++) {
        PyObject *f = PyFloat_FromDouble(xs[i]);
        if (!f) { Py_CLEAR(out); goto done; }
        PyList_SET_ITEM(out, i, f);
    }
done:
    PyMem_Free(xs);
    while (got > 0) PyBuffer_Release(&c[--got].view);
    return out;
}

PyDoc_STRVAR(count_roots_doc,
"count_roots(norm, dt, has_e, st, k, src, dst, t) -> int\n\n"
"RecordRootCounter.roots(t) over the vars of band_errs(norm, dt, has_e, st, k): those above t none of\n"
"whose inputs among them is above t.");

static PyObject *py_count_roots(PyObject *self, PyObject *args) {
    PyObject *o[6];
    int k;
    double t;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOiOOd", &o[0], &o[1], &o[2], &o[3], &k, &o[4], &o[5], &t)) return NULL;
    col_t c[6];
    const Py_ssize_t size[6] = {8, 1, 1, 1, 8, 8};
    int got = 0;
    PyObject *out = NULL;
    uint8_t *blocked = NULL;
    for (; got < 6; got++)
        if (col_get(o[got], size[got], &c[got], "count_roots") < 0) goto done;
    Py_ssize_t n = c[0].n, ne = c[4].n;
    if (c[1].n != n || c[2].n != n || c[3].n != n || c[5].n != ne) {
        PyErr_SetString(PyExc_ValueError, "count_roots: lengths");
        goto done;
    }
    const double *norm = c[0].view.buf;
    const int8_t *dt = c[1].view.buf, *st = c[3].view.buf;
    const uint8_t *has_e = c[2].view.buf;
    const int64_t *src = c[4].view.buf, *dst = c[5].view.buf;
    blocked = PyMem_Calloc((size_t)(n ? n : 1), 1);
    if (!blocked) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t j = 0; j < ne; j++) {
        int64_t a = src[j], b = dst[j];
        if (a < 0 || a >= n || b < 0 || b >= n) { PyErr_SetString(PyExc_ValueError, "count_roots: an edge out of range"); goto done; }
        if (in_band(dt, has_e, st, a, k) && in_band(dt, has_e, st, b, k) && norm[a] > t) blocked[b] = 1;
    }
    Py_ssize_t roots = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        roots += in_band(dt, has_e, st, i, k) && norm[i] > t && !blocked[i];
    out = PyLong_FromSsize_t(roots);
done:
    PyMem_Free(blocked);
    while (got > 0) PyBuffer_Release(&c[--got].view);
    return out;
}

/* np.median of xs[0..m) (sorted here): the middle value, or the two middle ones' mean; NaN if any is */
static double median_of(double *xs, Py_ssize_t m) {
    for (Py_ssize_t i = 0; i < m; i++)
        if (xs[i] != xs[i]) return NAN;
    qsort(xs, (size_t)m, sizeof(double), cmp_double);
    return m % 2 ? xs[m / 2] : (xs[m / 2 - 1] + xs[m / 2]) / 2.0;
}

/* growth._calibrate: MEDIAN_FACTOR x the median, bounded (Python's min/max), or the default */
static double calibrate(double *xs, Py_ssize_t m, double lo, double hi, double dflt, double factor, Py_ssize_t min_n) {
    if (m < min_n) return dflt;
    double v = factor * median_of(xs, m);
    double a = lo > v ? lo : v;   /* max(v, lo) */
    return hi < a ? hi : a;       /* min(., hi) */
}

PyDoc_STRVAR(grow_columns_doc,
"grow_columns(ids, status, threshold, n_over, columns, consts, base, scaled, profiled, pos, words,\n"
"             opr_type, shape, k_of, recheck_of) -> tuple or None\n\n"
"lar_prec.compare.growth.grow_columns' arithmetic: columns is auto_columns' tuple, status,\n"
"threshold and n_over the lists as the band judged them (changed in place), consts the rule's\n"
"constants (growth._CONSTS), base each float dtype's band threshold; k_of(keys) gives the\n"
"reduction length and whether Winograd may have run of each reducing var from its key\n"
"(opr_type, shape, its inputs' shapes among the vars, in input order), recheck_of(made,\n"
"explained, err, winograd_ids) is growth._rechecked (it changes made and explained). Returns\n"
"(scale, gain_reducing, gain_elementwise, made, explained, rechecked, carried, changed), or None\n"
"when no float var has a compared input.");

static PyObject *py_grow_columns(PyObject *self, PyObject *args) {
    PyObject *ids, *status, *threshold, *n_over, *columns, *consts, *base, *pos, *words, *oprs, *shapes, *k_of,
             *recheck_of;
    int scaled, profiled;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!O!O!O!O!O!ppO!O!O!O!OO", &ids, &PyList_Type, &status, &PyList_Type, &threshold,
                          &PyList_Type, &n_over, &PyTuple_Type, &columns, &PyTuple_Type, &consts, &PyTuple_Type, &base,
                          &scaled, &profiled, &PyDict_Type, &pos, &PyTuple_Type, &words, &PyTuple_Type, &oprs,
                          &PyTuple_Type, &shapes, &k_of, &recheck_of))
        return NULL;
    /* consts: EPS x3, FLOOR_EPS x3, ELEMWISE_ULPS, GAIN_MOVE, SCALE_MIN, SCALE_MAX, GAIN_MIN, GAIN_MAX,
     * GAIN_DEFAULT, MEDIAN_FACTOR, MIN_SAMPLES, WINOGRAD_ALLOWANCE, SCALE_FLOOR */
    if (PyTuple_GET_SIZE(columns) != 10 || PyTuple_GET_SIZE(consts) != 17 || PyTuple_GET_SIZE(base) != 3
        || PyTuple_GET_SIZE(words) != 4) {
        PyErr_SetString(PyExc_ValueError, "grow_columns: columns (10), consts (17), base (3), words (4)");
        return NULL;
    }
    double C[17], B[3];
    for (int j = 0; j < 17; j++)
        if ((C[j] = PyFloat_AsDouble(PyTuple_GET_ITEM(consts, j))) == -1.0 && PyErr_Occurred()) return NULL;
    for (int j = 0; j < 3; j++)
        if ((B[j] = PyFloat_AsDouble(PyTuple_GET_ITEM(base, j))) == -1.0 && PyErr_Occurred()) return NULL;
    const double *EPSK = C, *FLOORK = C + 3;
    const double ELEM_ULPS = C[6], GAIN_MOVE_ = C[7], S_MIN = C[8], S_MAX = C[9], G_MIN = C[10], G_MAX = C[11],
                 G_DEFAULT = C[12], FACTOR = C[13], WINO = C[15], SFLOOR = C[16];
    const Py_ssize_t MIN_N = (Py_ssize_t)C[14];
    PyObject *result = NULL, *ids_fast = NULL, *red = NULL, *red_at = NULL, *kw = NULL, *made = NULL, *explained = NULL,
             *err_made = NULL, *wino_ids = NULL, *rechecked = NULL, *changed = NULL, *zero = NULL;
    col_t c[10];
    int got = 0;
    const Py_ssize_t size[10] = {8, 8, 1, 1, 8, 1, 1, 1, 8, 8};
    for (; got < 10; got++)
        if (col_get(PyTuple_GET_ITEM(columns, got), size[got], &c[got], "grow_columns") < 0) goto done;
    Py_ssize_t n = c[0].n, ne = c[8].n;
    if (!(ids_fast = PySequence_Fast(ids, "grow_columns: ids must be a sequence"))) goto done;
    if (c[1].n != n || c[2].n != n || c[3].n != n || c[4].n != n || c[5].n != n || c[6].n != n || c[7].n != n
        || c[9].n != ne || PySequence_Fast_GET_SIZE(ids_fast) != n || PyList_GET_SIZE(status) != n
        || PyList_GET_SIZE(threshold) != n || PyList_GET_SIZE(n_over) != n || PyTuple_GET_SIZE(oprs) != n
        || PyTuple_GET_SIZE(shapes) != n) {
        PyErr_SetString(PyExc_ValueError, "grow_columns: columns of different lengths");
        goto done;
    }
    const double *me = c[0].view.buf, *sc = c[1].view.buf, *norm = c[4].view.buf;
    const uint8_t *has_s = c[2].view.buf;
    const int8_t *dt = c[5].view.buf, *kind = c[6].view.buf;
    const int64_t *src = c[8].view.buf, *dst = c[9].view.buf;
    PyObject **ID = PySequence_Fast_ITEMS(ids_fast);
    for (Py_ssize_t j = 0; j < ne; j++)
        if (src[j] < 0 || src[j] >= n || dst[j] < 0 || dst[j] >= n || (j && dst[j] < dst[j - 1])) {
            PyErr_SetString(PyExc_ValueError, "grow_columns: an edge out of range or out of order");
            goto done;
        }
    /* one block of per-var scratch: doubles, then bytes */
    enum { D_EPS, D_ERR, D_EIN, D_EPSIN, D_UNITS, D_K, D_MAG, D_MAGN, D_EXPL, D_SF, D_BAND, D_XS, D_THIGH, D_T, D_N };
    enum { B_ST, B_HAS, B_UNM, B_CAND, B_WINO, B_MADE, B_DIV, B_HANGS, B_BEHIND, B_JUDGED, B_OMADE, B_OBAND, B_OHIGH,
           B_COUNT, B_N };
    double *dv = PyMem_Malloc(sizeof(double) * (size_t)(n ? n : 1) * D_N);
    uint8_t *bv = PyMem_Calloc((size_t)(n ? n : 1) * B_N, 1);
    double *xs = PyMem_Malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!dv || !bv || !xs) { PyMem_Free(dv); PyMem_Free(bv); PyMem_Free(xs); PyErr_NoMemory(); goto done; }
#define DV(k) (dv + (size_t)(k) * (size_t)n)
#define BV(k) (bv + (size_t)(k) * (size_t)n)
    double *eps = DV(D_EPS), *err = DV(D_ERR), *e_in = DV(D_EIN), *eps_in = DV(D_EPSIN), *units = DV(D_UNITS),
           *kk = DV(D_K), *mag = DV(D_MAG), *magn = DV(D_MAGN), *expl = DV(D_EXPL), *sf = DV(D_SF),
           *band_t = DV(D_BAND), *xsv = DV(D_XS), *t_high = DV(D_THIGH), *tt = DV(D_T);
    uint8_t *stc = BV(B_ST), *has = BV(B_HAS), *unm = BV(B_UNM), *cand = BV(B_CAND), *wino = BV(B_WINO),
            *made_at = BV(B_MADE), *div = BV(B_DIV), *hangs = BV(B_HANGS), *behind = BV(B_BEHIND),
            *judged = BV(B_JUDGED), *o_made = BV(B_OMADE), *o_band = BV(B_OBAND), *o_high = BV(B_OHIGH),
            *counted = BV(B_COUNT);
    Py_ssize_t n_cand = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        stc[i] = (uint8_t)status_code(PyList_GET_ITEM(status, i), words);
        eps[i] = dt[i] >= 0 && dt[i] < 3 ? EPSK[dt[i]] : 0.0;
        int flt = eps[i] > 0.0;
        has[i] = (stc[i] == ST_OK || (stc[i] == ST_DIV && flt)) && isfinite(norm[i]);
        err[i] = has[i] ? norm[i] : 0.0;
        e_in[i] = 0.0;
        eps_in[i] = INFINITY;
    }
    for (Py_ssize_t j = 0; j < ne; j++) {
        int64_t a = src[j], b = dst[j];
        counted[b] = 1;
        if (!has[a] && stc[a] != ST_OK && stc[a] != ST_MISSING) unm[b] = 1;  /* an input error cannot measure */
        if (err[a] > e_in[b]) e_in[b] = err[a];   /* np.maximum.at: err has no NaN */
        if (eps[a] < eps_in[b]) eps_in[b] = eps[a];
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        cand[i] = has[i] && eps[i] > 0.0 && counted[i] && !unm[i];
        n_cand += cand[i];
    }
    if (!n_cand) { result = Py_None; Py_INCREF(result); goto free_all; }
    /* the reducing vars' reduction length and Winograd, from Python (shapes, memoised) */
    if (!(red = PyList_New(0)) || !(red_at = PyList_New(0))) goto free_all;
    Py_ssize_t je = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double sv = has_s[i] ? sc[i] : 0.0;
        magn[i] = sv != sv ? 1.0 : (1.0 > sv ? 1.0 : sv);   /* np.fmax(1, .) */
        mag[i] = dt[i] == 0 ? 1.0 : magn[i];                 /* float16/bfloat16 follow their magnitude */
        kk[i] = 1.0;
        units[i] = 0.0;
        if (!cand[i]) continue;
        if (kind[i] == K_ELEMWISE) units[i] = ELEM_ULPS * eps[i] * mag[i];
        else if (kind[i] == K_MOVE) units[i] = eps_in[i] < eps[i] ? 0.5 * eps[i] * mag[i] : 0.0;
        else {  /* its key: (operator, shape, its inputs' shapes), the edges into it in input order */
            while (je < ne && dst[je] < i) je++;
            Py_ssize_t j1 = je;
            while (j1 < ne && dst[j1] == i) j1++;
            PyObject *in_shapes = PyTuple_New(j1 - je), *key;
            if (!in_shapes) goto free_all;
            for (Py_ssize_t j = je; j < j1; j++) {
                PyObject *sh = PyTuple_GET_ITEM(shapes, src[j]);
                Py_INCREF(sh);
                PyTuple_SET_ITEM(in_shapes, j - je, sh);
            }
            key = PyTuple_Pack(3, PyTuple_GET_ITEM(oprs, i), PyTuple_GET_ITEM(shapes, i), in_shapes);
            Py_DECREF(in_shapes);
            if (!key || PyList_Append(red, key) < 0) { Py_XDECREF(key); goto free_all; }
            Py_DECREF(key);
            PyObject *q = PyLong_FromSsize_t(i);
            if (!q || PyList_Append(red_at, q) < 0) { Py_XDECREF(q); goto free_all; }
            Py_DECREF(q);
        }
    }
    if (!(kw = PyObject_CallFunctionObjArgs(k_of, red, NULL))) goto free_all;
    if (!PyTuple_Check(kw) || PyTuple_GET_SIZE(kw) != 2 || !PyList_Check(PyTuple_GET_ITEM(kw, 0))
        || !PyList_Check(PyTuple_GET_ITEM(kw, 1)) || PyList_GET_SIZE(PyTuple_GET_ITEM(kw, 0)) != PyList_GET_SIZE(red)
        || PyList_GET_SIZE(PyTuple_GET_ITEM(kw, 1)) != PyList_GET_SIZE(red)) {
        PyErr_SetString(PyExc_TypeError, "grow_columns: k_of must give two lists, one item per position");
        goto free_all;
    }
    for (Py_ssize_t r = 0; r < PyList_GET_SIZE(red); r++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(red_at, r));
        double kv = PyFloat_AsDouble(PyList_GET_ITEM(PyTuple_GET_ITEM(kw, 0), r));
        int w = PyObject_IsTrue(PyList_GET_ITEM(PyTuple_GET_ITEM(kw, 1), r));
        if ((kv == -1.0 && PyErr_Occurred()) || w < 0) goto free_all;
        kk[i] = kv;
        wino[i] = (uint8_t)(profiled && w);
        units[i] = eps[i] * sqrt(kk[i]) * mag[i];
    }
    /* calibration: what reductions add beyond their inputs, and the gains (growth.grow_columns) */
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (cand[i] && kind[i] == K_REDUCING && !wino[i]) {
            double d = err[i] - e_in[i];
            xs[m++] = np_max(0.0, d) / units[i];
        }
    double s = calibrate(xs, m, S_MIN, S_MAX, S_MIN, FACTOR, MIN_N);
    double g_red = 0.0, g_elem = 0.0;
    for (int pass = 0; pass < 2; pass++) {
        int want = pass ? K_ELEMWISE : K_REDUCING;
        m = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            if (cand[i] && kind[i] == want && e_in[i] >= 4.0 * eps[i]) xs[m++] = err[i] / e_in[i];
        double g = calibrate(xs, m, G_MIN, G_MAX, G_DEFAULT, FACTOR, MIN_N);
        if (pass) g_elem = g; else g_red = g;
    }
    double s_wino = WINO > s ? WINO : s;   /* max(s, WINOGRAD_ALLOWANCE) */
    if (!(made = PyDict_New()) || !(explained = PyDict_New()) || !(err_made = PyDict_New()) || !(wino_ids = PySet_New(NULL)))
        goto free_all;
    for (Py_ssize_t i = 0; i < n; i++) {
        double own = wino[i] ? s_wino * units[i] * magn[i] : s * units[i];
        double guard = (dt[i] >= 0 && dt[i] < 3 ? FLOORK[dt[i]] : 0.0) * eps[i];
        double g = kind[i] == K_MOVE ? GAIN_MOVE_ : kind[i] == K_REDUCING ? g_red : g_elem;
        expl[i] = np_max(guard, own) + g * e_in[i];
        made_at[i] = cand[i] && err[i] > expl[i];
        if (wino[i] && PySet_Add(wino_ids, ID[i]) < 0) goto free_all;
        if (!cand[i]) continue;
        PyObject *x = PyFloat_FromDouble(expl[i]);
        if (!x || PyDict_SetItem(explained, ID[i], x) < 0) { Py_XDECREF(x); goto free_all; }
        Py_DECREF(x);
        if (!made_at[i]) continue;
        PyObject *ratio = PyFloat_FromDouble(err[i] / expl[i]), *ev = PyFloat_FromDouble(err[i]);
        int bad = !ratio || !ev || PyDict_SetItem(made, ID[i], ratio) < 0 || PyDict_SetItem(err_made, ID[i], ev) < 0;
        Py_XDECREF(ratio);
        Py_XDECREF(ev);
        if (bad) goto free_all;
    }
    /* the vars the rule names, recomputed from each side's inputs (Python: numpy, the files) */
    if (!(rechecked = PyObject_CallFunctionObjArgs(recheck_of, made, explained, err_made, wino_ids, NULL))) goto free_all;
    if (!PyDict_Check(rechecked)) { PyErr_SetString(PyExc_TypeError, "grow_columns: recheck_of must give a dict"); goto free_all; }
    {
        Py_ssize_t it = 0;
        PyObject *vid, *val;
        while (PyDict_Next(rechecked, &it, &vid, &val)) {
            PyObject *at = PyDict_GetItemWithError(pos, vid), *x = PyDict_GetItemWithError(explained, vid);
            if (!at || !x) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "grow_columns: a rechecked var"); goto free_all; }
            Py_ssize_t i = PyLong_AsSsize_t(at);
            double v = PyFloat_AsDouble(x);
            if ((i == -1 || v == -1.0) && PyErr_Occurred()) goto free_all;
            if (i < 0 || i >= n) { PyErr_SetString(PyExc_ValueError, "grow_columns: a position out of range"); goto free_all; }
            made_at[i] = 0;
            expl[i] = v;
        }
    }
    /* each float var the rule explains, re-judged: made (its own threshold), behind a divergent
     * input (the band), else the higher of the band and what its inputs explain */
    Py_ssize_t carried = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        judged[i] = cand[i] && (stc[i] == ST_OK || stc[i] == ST_DIV);
        double sv = sc[i];
        if (has_s[i] && sv == sv) {
            double mx = sv > SFLOOR ? sv : SFLOOR;   /* scale_factor: min(1, max(scale, floor)) */
            sf[i] = mx < 1.0 ? mx : 1.0;
        } else sf[i] = 1.0;
        double b = dt[i] >= 0 && dt[i] < 3 ? B[dt[i]] : 0.0;
        band_t[i] = scaled && has_s[i] ? b * sf[i] : b;
        xsv[i] = expl[i] * sf[i];
        t_high[i] = np_max(band_t[i], xsv[i]);
        /* compared in float32, as to_float32 (NaN max_err: None, never over) */
        o_made[i] = me[i] > to_f32(xsv[i]);
        o_band[i] = me[i] > to_f32(band_t[i]);
        o_high[i] = me[i] > to_f32(t_high[i]);
        int mj = judged[i] && made_at[i];
        div[i] = judged[i] ? (mj ? o_made[i] : o_high[i]) : stc[i] != ST_OK;
        hangs[i] = judged[i] && !mj && o_band[i] && !o_high[i];  /* divergent only behind a divergent input */
    }
    /* edges run from earlier to later positions only matter here; they come by position, so one
     * pass in execution order settles each var after all of its inputs */
    for (Py_ssize_t j = 0; j < ne; j++) {
        int64_t a = src[j], b = dst[j];
        if (a >= b) continue;
        if (hangs[b] && div[a]) div[b] = 1;
    }
    for (Py_ssize_t j = 0; j < ne; j++)
        if (src[j] < dst[j] && div[src[j]]) behind[dst[j]] = 1;
    if (!(changed = PyList_New(0)) || !(zero = PyLong_FromLong(0))) goto free_all;
    for (Py_ssize_t i = 0; i < n; i++) {
        int mj = judged[i] && made_at[i];
        tt[i] = mj ? xsv[i] : behind[i] ? band_t[i] : t_high[i];
        carried += judged[i] && !mj && !behind[i] && o_band[i];
        if (!judged[i]) continue;
        PyObject *old = PyList_GET_ITEM(threshold, i);
        double ov = NAN;
        if (old != Py_None) {
            ov = PyFloat_AsDouble(old);
            if (ov == -1.0 && PyErr_Occurred()) goto free_all;
        }
        if (!((div[i] != 0) != (stc[i] == ST_DIV) || tt[i] != ov)) continue;
        PyObject *q = PyLong_FromSsize_t(i);
        if (!q || PyList_Append(changed, q) < 0) { Py_XDECREF(q); goto free_all; }
        Py_DECREF(q);
        PyObject *word = PyTuple_GET_ITEM(words, div[i] ? ST_DIV : ST_OK), *no;
        if (!div[i]) no = zero;
        else no = (old != Py_None && tt[i] == ov) ? PyList_GET_ITEM(n_over, i) : Py_None;
        PyObject *tv = PyFloat_FromDouble(tt[i]);
        if (!tv) goto free_all;
        Py_INCREF(word);
        Py_INCREF(no);
        PyList_SetItem(n_over, i, no);
        PyList_SetItem(status, i, word);
        PyList_SetItem(threshold, i, tv);
    }
    result = Py_BuildValue("dddOOOnO", s, g_red, g_elem, made, explained, rechecked, carried, changed);
free_all:
#undef DV
#undef BV
    PyMem_Free(dv);
    PyMem_Free(bv);
    PyMem_Free(xs);
done:
    while (got > 0) PyBuffer_Release(&c[--got].view);
    Py_XDECREF(ids_fast); Py_XDECREF(red); Py_XDECREF(red_at); Py_XDECREF(kw); Py_XDECREF(made); Py_XDECREF(explained);
    Py_XDECREF(err_made); Py_XDECREF(wino_ids); Py_XDECREF(rechecked); Py_XDECREF(changed); Py_XDECREF(zero);
    return result;
}


#define MAX_RECHECK_CANDS 8  /* explain.MAX_CANDIDATES */

/* ---- the dump-only rule's recheck in float64 (compare/explain.py: recompute_f32; its
 * numpy twin is explain.recompute): a float32 convolution or matrix product recomputed from
 * each side's own inputs, each side's output measured against it in rounding units (bounds.py:
 * measure), without numpy. The candidates' parameters come from explain.py; the one whose
 * exact result is nearest side A's output is kept, as recompute keeps it. */

/* dims of a convolution: N C H W G OCG ICG KH KW OH OW; of a product: BATCH RA CA RB CB */
enum { CV_N, CV_C, CV_H, CV_W, CV_G, CV_OCG, CV_ICG, CV_KH, CV_KW, CV_OH, CV_OW, CV_DIMS };
enum { MM_B, MM_RA, MM_CA, MM_RB, MM_CB, MM_DIMS };

/* out = x conv w (cross-correlation, NCHW, zero padding), or |x| conv |w| with absv */
static void conv64(const float *x, const float *w, double *out, const long long *d, const long long *p, int absv) {
    long long N = d[CV_N], C = d[CV_C], H = d[CV_H], W = d[CV_W], G = d[CV_G], OCG = d[CV_OCG], ICG = d[CV_ICG];
    long long KH = d[CV_KH], KW = d[CV_KW], OH = d[CV_OH], OW = d[CV_OW];
    long long sh = p[0], sw = p[1], ph = p[2], pw = p[3], dh = p[4], dw = p[5];
    memset(out, 0, (size_t)(N * G * OCG * OH * OW) * sizeof(double));
    for (long long n = 0; n < N; n++)
        for (long long g = 0; g < G; g++)
            for (long long oc = 0; oc < OCG; oc++) {
                double *o = out + ((n * G + g) * OCG + oc) * OH * OW;
                for (long long ic = 0; ic < ICG; ic++) {
                    const float *xc = x + (n * C + g * ICG + ic) * H * W;
                    const float *wk = w + ((g * OCG + oc) * ICG + ic) * KH * KW;
                    for (long long i = 0; i < KH; i++)
                        for (long long j = 0; j < KW; j++) {
                            double wv = wk[i * KW + j];
                            if (absv) wv = fabs(wv);
                            for (long long oh = 0; oh < OH; oh++) {
                                long long ih = oh * sh - ph + i * dh;
                                if (ih < 0 || ih >= H) continue;
                                const float *xr = xc + ih * W;
                                double *orow = o + oh * OW;
                                for (long long ow = 0; ow < OW; ow++) {
                                    long long iw = ow * sw - pw + j * dw;
                                    if (iw < 0 || iw >= W) continue;
                                    double xv = xr[iw];
                                    orow[ow] += wv * (absv ? fabs(xv) : xv);
                                }
                            }
                        }
                }
            }
}

/* out = op(a) . op(b) over the last two axes, batch by batch (op: the transpose or not) */
static void mm64(const float *a, const float *b, double *out, const long long *d, int ta, int tb, int absv) {
    long long B = d[MM_B], RA = d[MM_RA], CA = d[MM_CA], RB = d[MM_RB], CB = d[MM_CB];
    long long M = ta ? CA : RA, K = ta ? RA : CA, NN = tb ? RB : CB;
    for (long long q = 0; q < B; q++) {
        const float *aq = a + q * RA * CA, *bq = b + q * RB * CB;
        double *oq = out + q * M * NN;
        for (long long i = 0; i < M; i++)
            for (long long j = 0; j < NN; j++) {
                double s = 0.0;
                for (long long k = 0; k < K; k++) {
                    double u = ta ? aq[k * CA + i] : aq[i * CA + k], v = tb ? bq[j * CB + k] : bq[k * CB + j];
                    s += absv ? fabs(u) * fabs(v) : u * v;
                }
                oq[i * NN + j] = s;
            }
    }
}

/* Python's max(a, b): b only when it is larger (a NaN first stays) */
static inline double py_max(double a, double b) { return b > a ? b : a; }

/* bounds.measure(...).worst of y against e with scale s: 0 when a scale is not finite (None) */
static int measure64(const float *y, const double *e, const double *s, Py_ssize_t n, double eps, double tiny,
                     double rnd, double shared, double *worst) {
    double units = 0.0, norm2 = 0.0, num = 0.0;
    int inf = 0, nan_units = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!isfinite(s[i])) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double l = y[i], r = e[i];
        int fin = isfinite(l) && isfinite(r);
        double signed_ = fin ? l - r : 0.0, diff = fabs(signed_), unit = eps * s[i] + tiny * rnd;
        double ratio = diff > 0 ? diff / unit : 0.0;
        if (ratio != ratio) nan_units = 1;
        else if (ratio > units) units = ratio;
        double weight = unit > 0 ? r / unit : 0.0;
        norm2 += weight * weight;
        num += (unit > 0 ? signed_ / unit : 0.0) * weight;
        if (!fin && !(l == r || (isnan(l) && isnan(r)))) inf = 1;
    }
    if (nan_units) units = NAN;
    double factor = norm2 > 0 ? num / norm2 : 0.0;
    double scale_units = py_max(0.0, fabs(factor) - shared * eps) * sqrt(norm2);
    if (inf) units = INFINITY;
    if (!isfinite(scale_units)) scale_units = INFINITY;
    *worst = py_max(units, scale_units);
    return 1;
}

PyDoc_STRVAR(recheck_f32_doc,
"recheck_f32(op, candidates, dims, ya, xa, wa, yb, xb, wb, k, eps, tiny, shared) -> (units_a, units_b, index) or None\n\n"
"A float32 convolution (op 0: dims N C H W G OCG ICG KH KW OH OW, candidates of (sh, sw, ph, pw, dh, dw))\n"
"or matrix product (op 1: dims BATCH RA CA RB CB, candidates of (transpose_a, transpose_b)) recomputed\n"
"in float64 from each side's own inputs (x, w: the two inputs' float32 bytes), the candidate nearest\n"
"A's output kept (index), each side's output in rounding units of its exact result: the worse of\n"
"bounds.measure's two tests, with U = (sqrt(k) + 1) |op(|x|, |w|)|. None where explain.recompute\n"
"gives None (no finite candidate, a scale not finite).");

static PyObject *py_recheck_f32(PyObject *self, PyObject *args) {
    int op;
    PyObject *cands, *dims_obj;
    Py_buffer bv[6];
    long long k;
    double eps, tiny, shared;
    memset(bv, 0, sizeof bv);
    if (!PyArg_ParseTuple(args, "iOOy*y*y*y*y*y*Lddd", &op, &cands, &dims_obj, &bv[0], &bv[1], &bv[2], &bv[3], &bv[4],
                          &bv[5], &k, &eps, &tiny, &shared))
        return NULL;
    PyObject *result = NULL;
    double *got = NULL, *best = NULL, *mag = NULL;
    long long d[CV_DIMS];
    Py_ssize_t nd = op == 0 ? CV_DIMS : MM_DIMS;
    if (!PyTuple_Check(dims_obj) || PyTuple_GET_SIZE(dims_obj) != nd || !PyTuple_Check(cands) || (op != 0 && op != 1)) {
        PyErr_SetString(PyExc_ValueError, "recheck_f32: op 0 or 1, a tuple of its dims and a tuple of candidates");
        goto done;
    }
    for (Py_ssize_t i = 0; i < nd; i++) {
        d[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(dims_obj, i));
        if (d[i] == -1 && PyErr_Occurred()) goto done;
        if (d[i] < 1) { PyErr_SetString(PyExc_ValueError, "recheck_f32: dims must be >= 1"); goto done; }
    }
    /* the buffers' sizes, in float32 values, as the dims say */
    long long nx, nw, ny;
    if (op == 0) {
        nx = d[CV_N] * d[CV_C] * d[CV_H] * d[CV_W];
        nw = d[CV_G] * d[CV_OCG] * d[CV_ICG] * d[CV_KH] * d[CV_KW];
        ny = d[CV_N] * d[CV_G] * d[CV_OCG] * d[CV_OH] * d[CV_OW];
        if (d[CV_C] != d[CV_G] * d[CV_ICG]) { PyErr_SetString(PyExc_ValueError, "recheck_f32: C != G x ICG"); goto done; }
    } else {
        nx = d[MM_B] * d[MM_RA] * d[MM_CA];
        nw = d[MM_B] * d[MM_RB] * d[MM_CB];
        ny = -1;  /* by candidate */
    }
    for (int s = 0; s < 2; s++)
        if (bv[3 * s + 1].len != nx * 4 || bv[3 * s + 2].len != nw * 4 || bv[3 * s].len % 4 != 0 ||
            (ny >= 0 && bv[3 * s].len != ny * 4) || bv[3 * s].len != bv[0].len) {
            PyErr_SetString(PyExc_ValueError, "recheck_f32: buffer sizes do not match the dims");
            goto done;
        }
    Py_ssize_t n = bv[0].len / 4;
    Py_ssize_t nc = PyTuple_GET_SIZE(cands);
    long long params[MAX_RECHECK_CANDS][6];
    if (nc > MAX_RECHECK_CANDS) nc = MAX_RECHECK_CANDS;
    for (Py_ssize_t c = 0; c < nc; c++) {
        PyObject *t = PyTuple_GET_ITEM(cands, c);
        Py_ssize_t want = op == 0 ? 6 : 2;
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != want) {
            PyErr_SetString(PyExc_ValueError, "recheck_f32: a candidate of the wrong length");
            goto done;
        }
        for (Py_ssize_t i = 0; i < want; i++) {
            params[c][i] = PyLong_AsLongLong(PyTuple_GET_ITEM(t, i));
            if (params[c][i] == -1 && PyErr_Occurred()) goto done;
        }
        if (op == 0) {
            long long sh = params[c][0], sw = params[c][1], ph = params[c][2], pw = params[c][3], dh = params[c][4],
                      dw = params[c][5];
            if (sh < 1 || sw < 1 || ph < 0 || pw < 0 || dh < 1 || dw < 1 ||
                (d[CV_H] + 2 * ph - dh * (d[CV_KH] - 1) - 1) / sh + 1 != d[CV_OH] ||
                (d[CV_W] + 2 * pw - dw * (d[CV_KW] - 1) - 1) / sw + 1 != d[CV_OW]) {
                PyErr_SetString(PyExc_ValueError, "recheck_f32: a convolution candidate that does not give the output's shape");
                goto done;
            }
        } else {
            long long M = params[c][0] ? d[MM_CA] : d[MM_RA], K = params[c][0] ? d[MM_RA] : d[MM_CA];
            long long KB = params[c][1] ? d[MM_CB] : d[MM_RB], NN = params[c][1] ? d[MM_RB] : d[MM_CB];
            if (K != KB || d[MM_B] * M * NN != n) {
                PyErr_SetString(PyExc_ValueError, "recheck_f32: a product candidate that does not give the output's size");
                goto done;
            }
        }
    }
    if (nc == 0) { result = Py_None; Py_INCREF(result); goto done; }
    got = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(double));
    best = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(double));
    mag = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!got || !best || !mag) { PyErr_NoMemory(); goto done; }
    const float *y[2] = {bv[0].buf, bv[3].buf}, *x[2] = {bv[1].buf, bv[4].buf}, *w[2] = {bv[2].buf, bv[5].buf};
    double units[2];
    int chosen = -1, ok = 1;
    double rnd = sqrt((double)(k > 1 ? k : 1)) + 1.0;
    Py_BEGIN_ALLOW_THREADS
    double best_dist = 0.0;
    for (Py_ssize_t c = 0; c < nc; c++) {
        if (op == 0) conv64(x[0], w[0], got, d, params[c], 0);
        else mm64(x[0], w[0], got, d, (int)params[c][0], (int)params[c][1], 0);
        /* np.max(np.abs(got - ya)): NaN when any is */
        double dist = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) {
            double v = fabs(got[i] - (double)y[0][i]);
            if (v != v) { dist = NAN; break; }
            if (v > dist) dist = v;
        }
        if (chosen < 0 || dist < best_dist) {
            chosen = (int)c;
            best_dist = dist;
            double *t = best; best = got; got = t;
        }
    }
    if (!isfinite(best_dist)) ok = 0;
    for (int s = 0; ok && s < 2; s++) {
        const long long *pc = params[chosen];
        double *ex = best;
        if (s == 1) {
            ex = got;
            if (op == 0) conv64(x[1], w[1], ex, d, pc, 0);
            else mm64(x[1], w[1], ex, d, (int)pc[0], (int)pc[1], 0);
        }
        if (op == 0) conv64(x[s], w[s], mag, d, pc, 1);
        else mm64(x[s], w[s], mag, d, (int)pc[0], (int)pc[1], 1);
        for (Py_ssize_t i = 0; i < n; i++) mag[i] = rnd * fabs(mag[i]);  /* bounds.terms_scale */
        if (!measure64(y[s], ex, mag, n, eps, tiny, rnd, shared, &units[s])) ok = 0;
    }
    Py_END_ALLOW_THREADS
    if (!ok) { result = Py_None; Py_INCREF(result); }
    else result = Py_BuildValue("(ddi)", units[0], units[1], chosen);
done:
    PyMem_Free(got);
    PyMem_Free(best);
    PyMem_Free(mag);
    for (int i = 0; i < 6; i++) PyBuffer_Release(&bv[i]);
    return result;
}

/* ======================================================================== list_dumps
 * A dump folder's listing (DumpFolder's, lar_prec/dumps/folder.py) without a DirEntry per file:
 * a folder of tens of thousands of dumps is listed in a tenth of the time. Regular files named
 * as load_and_run names a main dump ("%06zx": six or more lower-case hex digits, no zero before
 * a seventh) go into a dict var id -> path; every other entry is handed back by name, with
 * whether it is a regular file, for the folder's own rules (-inp<k> files, the marker, strays).
 * A symlink, or a file system that does not say an entry's type, gives None: the folder lists
 * that directory itself (its rules for links need a stat per entry). */
#include <dirent.h>

PyDoc_STRVAR(list_dumps_doc,
"list_dumps(path) -> (files, others) or None\n\n"
"files: {var id: path} of the regular files named as main dumps, in the directory's order;\n"
"others: [(name, is regular file)] of every other entry. None: the directory cannot be\n"
"opened, or holds a symlink or an entry of unknown type.");

static PyObject *py_list_dumps(PyObject *self, PyObject *arg) {
    PyObject *enc = PyUnicode_EncodeFSDefault(arg);
    if (!enc) return NULL;
    const char *dir = PyBytes_AS_STRING(enc);
    size_t dlen = (size_t)PyBytes_GET_SIZE(enc);
    DIR *d;
    Py_BEGIN_ALLOW_THREADS
    d = opendir(dir);
    Py_END_ALLOW_THREADS
    if (!d) { Py_DECREF(enc); Py_RETURN_NONE; }
    PyObject *files = PyDict_New(), *others = PyList_New(0), *result = NULL;
    char *path = PyMem_Malloc(dlen + 2 + 256 + 1);
    if (!files || !others || !path) { if (!PyErr_Occurred()) PyErr_NoMemory(); goto done; }
    memcpy(path, dir, dlen);
    size_t base = dlen;
    if (dlen == 0 || dir[dlen - 1] != '/') path[base++] = '/';  /* as os.path.join writes it */
    struct dirent *e;
    for (;;) {
        errno = 0;
        e = readdir(d);
        if (!e) {
            if (errno) { result = Py_None; Py_INCREF(result); goto done; }
            break;
        }
        const char *name = e->d_name;
        if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
        if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) { result = Py_None; Py_INCREF(result); goto done; }
        int reg = e->d_type == DT_REG;
        size_t n = strlen(name);
        int main_name = reg && n >= 6 && n <= 15 && !(name[0] == '0' && n > 6);
        unsigned long long vid = 0;
        for (size_t i = 0; main_name && i < n; i++) {
            char c = name[i];
            if (c >= '0' && c <= '9') vid = vid * 16 + (unsigned)(c - '0');
            else if (c >= 'a' && c <= 'f') vid = vid * 16 + (unsigned)(c - 'a' + 10);
            else main_name = 0;
        }
        if (main_name) {
            memcpy(path + base, name, n + 1);
            PyObject *k = PyLong_FromUnsignedLongLong(vid);
            PyObject *v = PyUnicode_DecodeFSDefaultAndSize(path, (Py_ssize_t)(base + n));
            int bad = !k || !v || PyDict_SetItem(files, k, v) < 0;
            Py_XDECREF(k);
            Py_XDECREF(v);
            if (bad) goto done;
        } else {
            PyObject *t = Py_BuildValue("(NO)", PyUnicode_DecodeFSDefaultAndSize(name, (Py_ssize_t)n),
                                        reg ? Py_True : Py_False);
            if (!t || PyList_Append(others, t) < 0) { Py_XDECREF(t); goto done; }
            Py_DECREF(t);
        }
    }
    result = PyTuple_Pack(2, files, others);
done:
    closedir(d);
    PyMem_Free(path);
    Py_XDECREF(files);
    Py_XDECREF(others);
    Py_DECREF(enc);
    return result;
}

/* ======================================================================== file_records
 * The batch reader's filing of one block (lar_prec/compare/engine/batch.py _file) for the
 * usual var: its header kept in folder A as DumpFolder.note_head keeps it (checked as
 * dumps.binary.head_shape checks it, the layout text already known good), B's noted as A's
 * (the same bytes), and its record made as compare.records.diff_from makes it (a copy of the
 * template's key-sharing dict, the keys overwritten in order, no __init__). Anything else (a
 * header that would fail a check or whose layout text is new, B's title not A's, a quantized
 * var, an odd value) is left untouched to the Python filing, by position: the same records
 * and the same kept headers either way (tests/compare/test_batch.py holds the two equal). */

PyDoc_STRVAR(file_records_doc,
"file_records(block, got, dtypes, template, keys, cls, heads_a, like_b, header_shapes, shape_texts,\n"
"             header_size, ok, empty, measured, rows, row_index, zero) -> (left, made)\n\n"
"left: the positions in block left to the Python filing; made: the var ids whose records\n"
"were made (into measured, and their rows into rows unless it is None).");

static PyObject *py_file_records(PyObject *self, PyObject *args) {
    PyObject *block, *got, *dtypes, *tmpl, *keys, *cls, *heads_a, *like_b, *hshapes, *texts, *ok, *empty, *measured,
        *rows, *row_index, *zero;
    long long hsize;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!O!O!O!LUUO!OOO", &PyList_Type, &block, &PyList_Type, &got,
                          &PyDict_Type, &dtypes, &PyDict_Type, &tmpl, &PyTuple_Type, &keys, &PyType_Type, &cls,
                          &PyDict_Type, &heads_a, &PyDict_Type, &like_b, &PyDict_Type, &hshapes, &PyDict_Type, &texts,
                          &hsize, &ok, &empty, &PyDict_Type, &measured, &rows, &row_index, &zero))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(block), nkeys = PyTuple_GET_SIZE(keys), nrow = 0;
    if (PyList_GET_SIZE(got) != n || nkeys < 11) {
        PyErr_SetString(PyExc_ValueError, "file_records: one result per var, and the 11 keys before the measured ones");
        return NULL;
    }
    if (rows != Py_None) {
        if (!PyDict_Check(rows) || !PyTuple_Check(row_index)) {
            PyErr_SetString(PyExc_TypeError, "file_records: rows must be a dict and row_index a tuple");
            return NULL;
        }
        nrow = PyTuple_GET_SIZE(row_index);
    }
    PyObject *left = PyList_New(0), *made = PyList_New(0), *noargs = PyTuple_New(0);
    PyObject *values[128];
    if (!left || !made || !noargs) goto fail;
    if (nkeys > 128) { PyErr_SetString(PyExc_ValueError, "file_records: at most 128 keys"); goto fail; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(block, i), *item = PyList_GET_ITEM(got, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 4) goto leave;
        PyObject *ha = PyTuple_GET_ITEM(item, 0), *hb = PyTuple_GET_ITEM(item, 1), *same = PyTuple_GET_ITEM(item, 2),
                 *fields = PyTuple_GET_ITEM(item, 3);
        if (ha == Py_None) continue;
        if (!PyTuple_CheckExact(ha) || PyTuple_GET_SIZE(ha) != 7) goto leave;
        if (hb != Py_None && same != Py_True) goto leave;  /* B's own title: the name note */
        PyObject *dt = PyDict_GetItemWithError(dtypes, PyTuple_GET_ITEM(ha, 0));
        if (!dt) { if (PyErr_Occurred()) goto fail; goto leave; }
        if (!PyTuple_CheckExact(dt) || PyTuple_GET_SIZE(dt) != 4) goto leave;
        long long bits, size, fsize, tlen;
        PyObject *parsed = PyTuple_GET_ITEM(ha, 5);
        if (!ll_of(PyTuple_GET_ITEM(dt, 1), &bits) || !ll_of(PyTuple_GET_ITEM(ha, 2), &size) ||
            !ll_of(PyTuple_GET_ITEM(ha, 3), &fsize) || !ll_of(PyTuple_GET_ITEM(ha, 6), &tlen))
            goto leave;
        if (!PyTuple_CheckExact(parsed) || PyTuple_GET_SIZE(parsed) < 16 || PyTuple_GET_ITEM(parsed, 0) != Py_None ||
            PyTuple_GET_ITEM(parsed, 15) == Py_None)
            goto leave;
        int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(parsed, 1), v, Py_EQ);
        if (eq < 0) goto fail;
        if (!eq || size < 0 || bits <= 0 || size > (LLONG_MAX - 7) / bits || fsize - hsize - tlen != (size * bits + 7) / 8)
            goto leave;
        int known = PyDict_Contains(texts, PyTuple_GET_ITEM(parsed, 3));  /* a layout text checked before */
        if (known < 0) goto fail;
        if (!known || PyDict_GET_SIZE(hshapes) > 4096) goto leave;  /* Python checks it, or clears the cache */
        int record = fields != Py_None && hb != Py_None;
        if (record && (PyTuple_GET_ITEM(dt, 2) != Py_False || !PyTuple_CheckExact(fields) ||
                       PyTuple_GET_SIZE(fields) != nkeys - 11))
            goto leave;  /* a quantized var's note, or values of another layout */
        /* the usual var: nothing above changed anything */
        PyObject *shape = PyDict_SetDefault(hshapes, PyTuple_GET_ITEM(ha, 1), PyTuple_GET_ITEM(ha, 1));
        if (!shape) goto fail;
        PyObject *h = PyTuple_Pack(7, PyTuple_GET_ITEM(dt, 0), shape, PyTuple_GET_ITEM(ha, 2), PyTuple_GET_ITEM(ha, 3),
                                   PyTuple_GET_ITEM(ha, 4), PyTuple_GET_ITEM(ha, 6), parsed);
        if (!h) goto fail;
        if (PyDict_SetItem(heads_a, v, h) < 0 || (hb != Py_None && PyDict_SetItem(like_b, v, h) < 0)) {
            Py_DECREF(h);
            goto fail;
        }
        Py_DECREF(h);
        if (!record) continue;
        values[0] = v; values[1] = PyTuple_GET_ITEM(parsed, 8); values[2] = PyTuple_GET_ITEM(parsed, 5);
        values[3] = PyTuple_GET_ITEM(parsed, 6); values[4] = PyTuple_GET_ITEM(dt, 3); values[5] = shape;
        values[6] = PyTuple_GET_ITEM(parsed, 15); values[7] = PyTuple_GET_ITEM(ha, 2); values[8] = ok;
        values[9] = empty; values[10] = Py_False;
        for (Py_ssize_t k = 11; k < nkeys; k++) values[k] = PyTuple_GET_ITEM(fields, k - 11);
        PyObject *d = PyDict_Copy(tmpl);
        if (!d) goto fail;
        for (Py_ssize_t k = 0; k < nkeys; k++)
            if (PyDict_SetItem(d, PyTuple_GET_ITEM(keys, k), values[k]) < 0) { Py_DECREF(d); goto fail; }
        PyObject *rec = ((PyTypeObject *)cls)->tp_new((PyTypeObject *)cls, noargs, NULL);
        if (!rec) { Py_DECREF(d); goto fail; }
        int bad = PyObject_GenericSetDict(rec, d, NULL);
        Py_DECREF(d);
        if (bad < 0 || PyDict_SetItem(measured, v, rec) < 0) { Py_DECREF(rec); goto fail; }
        Py_DECREF(rec);
        if (rows != Py_None) {
            PyObject *row = PyTuple_New(nrow);
            if (!row) goto fail;
            for (Py_ssize_t k = 0; k < nrow; k++) {
                Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(row_index, k));
                if (at < 0 || at > nkeys) {
                    Py_DECREF(row);
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "file_records: a row index out of range");
                    goto fail;
                }
                PyObject *x = at == nkeys ? zero : values[at];
                Py_INCREF(x);
                PyTuple_SET_ITEM(row, k, x);
            }
            int r = PyDict_SetItem(rows, v, row);
            Py_DECREF(row);
            if (r < 0) goto fail;
        }
        if (PyList_Append(made, v) < 0) goto fail;
        continue;
    leave:;
        PyObject *at = PyLong_FromSsize_t(i);
        if (!at || PyList_Append(left, at) < 0) { Py_XDECREF(at); goto fail; }
        Py_DECREF(at);
    }
    Py_DECREF(noargs);
    return Py_BuildValue("(NN)", left, made);
fail:
    Py_XDECREF(left);
    Py_XDECREF(made);
    Py_XDECREF(noargs);
    return NULL;
}

static PyMethodDef methods[] = {
    {"float32", py_float32, METH_VARARGS, float32_doc},
    {"float16", py_float16, METH_VARARGS, float16_doc},
    {"measure", py_measure, METH_VARARGS, measure_doc},
    {"same", py_same, METH_VARARGS, same_doc},
    {"hist_stats", py_hist_stats, METH_VARARGS, hist_stats_doc},
    {"hist_add", py_hist_add, METH_VARARGS, hist_add_doc},
    {"scan_pairs", py_scan_pairs, METH_VARARGS, scan_pairs_doc},
    {"scan_start", py_scan_start, METH_VARARGS, scan_start_doc},
    {"scan_finish", py_scan_finish, METH_O, scan_finish_doc},
    {"scan_poll", py_scan_poll, METH_VARARGS, scan_poll_doc},
    {"count_pairs", py_count_pairs, METH_VARARGS, count_pairs_doc},
    {"json_rows", py_json_rows, METH_VARARGS, json_rows_doc},
    {"grisu_repr", py_grisu_repr, METH_O, grisu_repr_doc},
    {"judge_vars", py_judge_vars, METH_VARARGS, judge_vars_doc},
    {"apply_judged", py_apply_judged, METH_VARARGS, apply_judged_doc},
    {"auto_columns", py_auto_columns, METH_VARARGS, auto_columns_doc},
    {"band_errs", py_band_errs, METH_VARARGS, band_errs_doc},
    {"count_roots", py_count_roots, METH_VARARGS, count_roots_doc},
    {"grow_columns", py_grow_columns, METH_VARARGS, grow_columns_doc},
    {"recheck_f32", py_recheck_f32, METH_VARARGS, recheck_f32_doc},
    {"list_dumps", py_list_dumps, METH_O, list_dumps_doc},
    {"file_records", py_file_records, METH_VARARGS, file_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "lar_prec._kernel", "One-pass float32 comparison kernel (optional).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernel(void) { return PyModule_Create(&module); }
