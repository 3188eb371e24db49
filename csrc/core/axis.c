/*
 * axis.c -- mesh axes: interned canonical layouts, ranks ->
 * layout, subgroup order, orthogonality (radix separability), flattening,
 * the process-wide name registry and display texts.
 *
 * Storage: an interning table of canonical layouts (lock-free lookup by
 * id).  Names live in a registry under one mutex; display texts are cached
 * per axis and tagged with the registry's generation, so a name change
 * invalidates every cached text.  Stale texts are kept alive (on a list,
 * never freed) so that returned pointers stay valid for the process.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "table.h"

#define AXIS_CAP 16384u
#define ALL_MODES (CSPMD_MAX_MODES * CSPMD_MAX_AXES)
#define TEXT_MAX 1024

struct disp {
    _Atomic uint32_t gen; /* registry generation the text was derived at */
    struct disp *next; /* every text ever built, for valgrind reachability */
    char text[];
};

typedef struct axis_rec {
    /* key (memcmp'd): canonical modes, unused slots zero */
    int64_t sizes[CSPMD_MAX_MODES];
    int64_t strides[CSPMD_MAX_MODES];
    int32_t n;
    int32_t pad;
    /* derived */
    int64_t size;
    int64_t max_stride;
    int32_t separable; /* own modes radix separable (distinct ranks) */
    int32_t pad2;
    _Atomic(struct disp *) disp[2];
} axis_rec_t;

#define AXIS_KEY offsetof(axis_rec_t, size)

static axis_rec_t axis_chunk0[CSPMDI_CHUNK] = {{.size = 1, .separable = 1}};
CSPMDI_TABLE_DEFINE(axis_tab, "axis", axis_rec_t, AXIS_KEY, AXIS_CAP, 1, axis_chunk0);

static axis_rec_t *axis_get(cspmd_axis_t a)
{
    return cspmdi_table_get(&axis_tab, a);
}

int cspmdi_axis_valid(cspmd_axis_t axis)
{
    return axis_get(axis) != NULL;
}

/* ---- mode arithmetic ---------------------------------------------------- */

static int64_t sat_add(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

static int64_t sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

/* Radix separability of a multiset of modes (size >= 2 each, or ignored). */
static int modes_separable(const int64_t *sz, const int64_t *st, int n)
{
    int64_t s[ALL_MODES], d[ALL_MODES];
    int m = 0;
    for (int k = 0; k < n; k++) {
        if (sz[k] <= 1)
            continue;
        /* insertion by stride ascending */
        int j = m++;
        while (j > 0 && d[j - 1] > st[k]) {
            s[j] = s[j - 1];
            d[j] = d[j - 1];
            j--;
        }
        s[j] = sz[k];
        d[j] = st[k];
    }
    int64_t span = 0;
    for (int k = 0; k < m; k++) {
        if (d[k] == 0 || d[k] <= span)
            return 0;
        span = sat_add(span, sat_mul(s[k] - 1, d[k]));
    }
    return 1;
}

/* Coalesce: drop size-1 modes, merge (s1,d1)(s2,d2) into
 * (s1*s2, d2) when d1 == s2*d2, to a fixpoint.  Returns the mode count. */
static int canon(const int64_t *sz, const int64_t *st, int n, int64_t *osz, int64_t *ost)
{
    int m = 0;
    for (int k = 0; k < n; k++) {
        if (sz[k] == 1)
            continue;
        osz[m] = sz[k];
        ost[m] = st[k];
        m++;
        while (m >= 2) {
            int64_t p;
            if (__builtin_mul_overflow(osz[m - 1], ost[m - 1], &p) || ost[m - 2] != p)
                break;
            osz[m - 2] *= osz[m - 1];
            ost[m - 2] = ost[m - 1];
            m--;
        }
    }
    return m;
}

static void axis_init(void *slot, uint32_t id)
{
    (void)id;
    axis_rec_t *r = slot;
    r->size = 1;
    r->max_stride = 0;
    for (int k = 0; k < r->n; k++) {
        r->size *= r->sizes[k];
        if (r->strides[k] > r->max_stride)
            r->max_stride = r->strides[k];
    }
    r->separable = modes_separable(r->sizes, r->strides, r->n);
}

/* Intern canonical modes (m <= CSPMD_MAX_MODES). */
static cspmd_status_t intern_canon(const int64_t *sz, const int64_t *st, int m, cspmd_axis_t *out)
{
    if (m == 0) {
        *out = CSPMD_AXIS_TRIVIAL;
        return CSPMD_OK;
    }
    axis_rec_t rec;
    memset(&rec, 0, sizeof rec);
    rec.n = m;
    for (int k = 0; k < m; k++) {
        rec.sizes[k] = sz[k];
        rec.strides[k] = st[k];
    }
    return cspmdi_table_intern(&axis_tab, &rec, axis_init, out);
}

/* Product of sizes and the largest rank must fit in int64. */
static int modes_fit(const int64_t *sz, const int64_t *st, int n)
{
    int64_t size = 1, top = 0;
    for (int k = 0; k < n; k++) {
        if (__builtin_mul_overflow(size, sz[k], &size))
            return 0;
        int64_t t;
        if (__builtin_mul_overflow(sz[k] - 1, st[k], &t) || __builtin_add_overflow(top, t, &top))
            return 0;
    }
    return 1;
}

cspmd_status_t cspmd_axis_intern(const int64_t *sizes, const int64_t *strides, int n,
                                 cspmd_axis_t *out)
{
    if (out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_axis_intern: out is NULL");
    if (n < 0 || n > ALL_MODES)
        return cspmd_error_set(CSPMD_ERR_MISUSE,
                               "cspmd_axis_intern: %d modes (expected 0..%d)", n, ALL_MODES);
    if (n > 0 && (sizes == NULL || strides == NULL))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_axis_intern: sizes or strides is NULL");
    for (int k = 0; k < n; k++) {
        if (sizes[k] < 1)
            return cspmd_error_set(CSPMD_ERR_MISUSE,
                                   "cspmd_axis_intern: mode %d has size %lld (must be >= 1)", k,
                                   (long long)sizes[k]);
        if (strides[k] < 0)
            return cspmd_error_set(CSPMD_ERR_MISUSE,
                                   "cspmd_axis_intern: mode %d has stride %lld (must be >= 0)",
                                   k, (long long)strides[k]);
    }
    if (!modes_fit(sizes, strides, n))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_axis_intern: layout overflows int64");
    int64_t sz[ALL_MODES], st[ALL_MODES]; /* more modes may merge into few */
    int m = canon(sizes, strides, n, sz, st);
    if (m > CSPMD_MAX_MODES)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "a mesh axis layout of %d modes (after merging); cspmd supports "
                               "layouts of at most %d modes",
                               m, CSPMD_MAX_MODES);
    return intern_canon(sz, st, m, out);
}

/* ---- ranks -> layout ----------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b != 0) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int sorted_has(const int64_t *v, size_t n, int64_t x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid] < x)
            lo = mid + 1;
        else if (v[mid] > x)
            hi = mid;
        else
            return 1;
    }
    return 0;
}

/* The recursive layout algorithm on sorted distinct indices from 0.  Modes
 * are written innermost-last into sz/st (outermost first); scratch has
 * room for n values.  Returns the mode count, -1 if not a layout. */
static int indices_to_layout(int64_t *idx, size_t n, int64_t *scratch, int64_t *sz, int64_t *st)
{
    int64_t rsz[CSPMD_MAX_MODES], rst[CSPMD_MAX_MODES];
    int m = 0;
    while (n > 1) {
        int64_t g = 0;
        for (size_t i = 1; i < n; i++)
            g = gcd64(g, idx[i] - idx[i - 1]);
        size_t ns = 0;
        for (size_t i = 0; i < n; i++)
            if (!sorted_has(idx, n, idx[i] - g))
                scratch[ns++] = idx[i];
        if (ns == 0 || n % ns != 0 || n / ns < 2 || m == CSPMD_MAX_MODES)
            return -1;
        rsz[m] = (int64_t)(n / ns);
        rst[m] = g;
        m++;
        memcpy(idx, scratch, ns * sizeof *idx);
        n = ns;
    }
    for (int k = 0; k < m; k++) { /* innermost was found first */
        sz[k] = rsz[m - 1 - k];
        st[k] = rst[m - 1 - k];
    }
    return m;
}

static void format_ranks(char *buf, size_t len, const int64_t *r, size_t n)
{
    size_t o = 0;
    o += (size_t)snprintf(buf, len, "[");
    for (size_t i = 0; i < n && o < len; i++) {
        if (i == 16) {
            o += (size_t)snprintf(buf + o, len - o, ", ...");
            break;
        }
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)r[i]);
    }
    if (o < len)
        snprintf(buf + o, len - o, "]");
}

cspmd_status_t cspmd_axis_from_ranks(const int64_t *ranks, int n, cspmd_axis_t *out)
{
    if (out == NULL || (n > 0 && ranks == NULL))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_axis_from_ranks: NULL argument");
    if (n <= 0)
        return cspmd_error_set(CSPMD_ERR_VALUE, "ProcessGroup has no ranks");
    if (n == 1) {
        *out = CSPMD_AXIS_TRIVIAL;
        return CSPMD_OK;
    }
    size_t un = (size_t)n;
    int64_t *buf = malloc(3 * un * sizeof *buf);
    if (buf == NULL)
        return cspmd_error_set(CSPMD_ERR_NOMEM, "cspmd_axis_from_ranks: out of memory");
    int64_t *idx = buf, *scratch = buf + un, *check = buf + 2 * un;
    memcpy(idx, ranks, un * sizeof *idx);
    qsort(idx, un, sizeof *idx, cmp_i64);
    char text[256];
    format_ranks(text, sizeof text, idx, un);
    cspmd_status_t st = CSPMD_OK;
    int bad = 0;
    for (size_t i = 1; i < un; i++)
        if (idx[i] == idx[i - 1])
            bad = 1;
    int64_t base = idx[0];
    int64_t msz[CSPMD_MAX_MODES], mst[CSPMD_MAX_MODES];
    int m = -1;
    if (!bad) {
        for (size_t i = 0; i < un; i++)
            idx[i] -= base; /* sorted, distinct: differences cannot overflow */
        memcpy(check, idx, un * sizeof *idx);
        m = indices_to_layout(idx, un, scratch, msz, mst);
    }
    if (m >= 0) {
        /* The algorithm can produce a layout that generates other ranks:
         * enumerate it and compare. */
        size_t cnt = 0;
        int64_t ctr[CSPMD_MAX_MODES] = {0};
        for (;;) {
            int64_t r = 0;
            for (int k = 0; k < m; k++)
                r += ctr[k] * mst[k];
            if (cnt == un) {
                cnt++;
                break;
            }
            scratch[cnt++] = r;
            int k = m - 1;
            while (k >= 0 && ++ctr[k] == msz[k])
                ctr[k--] = 0;
            if (k < 0)
                break;
        }
        if (cnt != un) {
            m = -1;
        } else {
            qsort(scratch, un, sizeof *scratch, cmp_i64);
            if (memcmp(scratch, check, un * sizeof *scratch) != 0)
                m = -1;
        }
    }
    if (m < 0) {
        st = cspmd_error_set(CSPMD_ERR_VALUE,
                             "Ranks %s do not form a strided layout, so they are not a mesh axis",
                             text);
    } else {
        int64_t csz[CSPMD_MAX_MODES], cst[CSPMD_MAX_MODES];
        int c = canon(msz, mst, m, csz, cst);
        st = intern_canon(csz, cst, c, out);
    }
    free(buf);
    return st;
}

/* ---- queries ------------------------------------------------------------- */

int cspmd_axis_layout(cspmd_axis_t axis, int64_t *sizes, int64_t *strides)
{
    axis_rec_t *r = axis_get(axis);
    if (r == NULL)
        return -1;
    for (int k = 0; k < r->n; k++) {
        if (sizes)
            sizes[k] = r->sizes[k];
        if (strides)
            strides[k] = r->strides[k];
    }
    return r->n;
}

int64_t cspmd_axis_size(cspmd_axis_t axis)
{
    axis_rec_t *r = axis_get(axis);
    return r ? r->size : 0;
}

int64_t cspmd_axis_max_stride(cspmd_axis_t axis)
{
    axis_rec_t *r = axis_get(axis);
    return r ? r->max_stride : 0;
}

/* Is x a rank of b?  b's modes sorted by stride descending in (s, d). */
static int member_sep(const int64_t *s, const int64_t *d, int n, int64_t x)
{
    for (int k = 0; k < n; k++) {
        int64_t i = x / d[k];
        if (i >= s[k])
            return 0;
        x -= i * d[k];
    }
    return x == 0;
}

/* General membership (b not separable): bounded depth-first search. */
static int member_dfs(const int64_t *s, const int64_t *d, int n, int k, int64_t x, long *budget)
{
    if (--*budget < 0)
        return 0;
    if (k == n)
        return x == 0;
    if (d[k] == 0)
        return member_dfs(s, d, n, k + 1, x, budget);
    for (int64_t i = 0; i < s[k] && i * d[k] <= x; i++)
        if (member_dfs(s, d, n, k + 1, x - i * d[k], budget))
            return 1;
    return 0;
}

/* Rank tests axis containment may make: containment of axes of up to this
 * many ranks is decided, beyond it the answer is "undecided" (-1). */
#define LE_BUDGET (1L << 26)

/* 1 if a's ranks are a subset of b's, 0 if not, -1 if undecided within
 * LE_BUDGET rank tests. */
static int axis_le3(cspmd_axis_t a, cspmd_axis_t b)
{
    axis_rec_t *ra = axis_get(a), *rb = axis_get(b);
    if (ra == NULL || rb == NULL)
        return 0;
    if (a == b || ra->n == 0)
        return 1; /* rank 0 is in every axis */
    if (ra->separable && ra->size > rb->size)
        return 0; /* more distinct ranks than b has at all */
    int64_t s[CSPMD_MAX_MODES], d[CSPMD_MAX_MODES];
    int n = 0;
    for (int k = 0; k < rb->n; k++) { /* sort b's modes by stride descending */
        int j = n++;
        while (j > 0 && d[j - 1] < rb->strides[k]) {
            s[j] = s[j - 1];
            d[j] = d[j - 1];
            j--;
        }
        s[j] = rb->sizes[k];
        d[j] = rb->strides[k];
    }
    /* Every rank of a is a sum of one multiple of each of a's strides; as
     * ranks of b are closed under nothing in general, test them all (an
     * odometer over a's modes; sizes of real meshes keep this small). */
    long budget = LE_BUDGET;
    int64_t ctr[CSPMD_MAX_MODES] = {0};
    for (;;) {
        int64_t x = 0;
        for (int k = 0; k < ra->n; k++)
            x += ctr[k] * ra->strides[k];
        int in = rb->separable ? member_sep(s, d, n, x) : member_dfs(s, d, n, 0, x, &budget);
        if (--budget < 0)
            return -1;
        if (!in)
            return 0;
        int k = ra->n - 1;
        while (k >= 0 && ++ctr[k] == ra->sizes[k])
            ctr[k--] = 0;
        if (k < 0)
            return 1;
    }
}

int cspmd_axis_le(cspmd_axis_t a, cspmd_axis_t b)
{
    return axis_le3(a, b) == 1;
}

cspmd_status_t cspmd_axis_le_checked(cspmd_axis_t a, cspmd_axis_t b, int *out)
{
    int r = axis_le3(a, b);
    if (r < 0) {
        char an[TEXT_MAX];
        snprintf(an, sizeof an, "%s", cspmd_axis_display(a, 0));
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "cannot decide whether axis %s (%lld ranks) is within axis %s "
                               "(%lld ranks): cspmd tests at most %ld ranks for axis "
                               "containment",
                               an, (long long)cspmd_axis_size(a), cspmd_axis_display(b, 0),
                               (long long)cspmd_axis_size(b), LE_BUDGET);
    }
    if (out != NULL)
        *out = r;
    return CSPMD_OK;
}

/* Gather the modes of axes (all valid) into s/d; returns the count. */
static int gather_modes(const cspmd_axis_t *axes, int n, int64_t *s, int64_t *d)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        axis_rec_t *r = axis_get(axes[i]);
        for (int k = 0; k < r->n; k++) {
            s[m] = r->sizes[k];
            d[m] = r->strides[k];
            m++;
        }
    }
    return m;
}

static int orthogonal_valid(const cspmd_axis_t *axes, int n)
{
    int64_t s[ALL_MODES], d[ALL_MODES];
    int m = gather_modes(axes, n, s, d);
    return modes_separable(s, d, m);
}

static int all_valid(const cspmd_axis_t *axes, int n)
{
    for (int i = 0; i < n; i++)
        if (axis_get(axes[i]) == NULL)
            return 0;
    return 1;
}

int cspmd_axes_orthogonal(const cspmd_axis_t *axes, int n)
{
    if (n <= 0)
        return 1;
    if (axes == NULL || n > CSPMD_MAX_AXES || !all_valid(axes, n))
        return 0;
    return orthogonal_valid(axes, n);
}

/* "a, b, c": the axes' display texts, truncated to len. */
static void axes_text(const cspmd_axis_t *axes, int n, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "",
                              cspmd_axis_display(axes[i], 0));
}

static cspmd_status_t check_axes_arg(const char *fn, const cspmd_axis_t *axes, int n)
{
    if (n > CSPMD_MAX_AXES)
        return cspmd_error_set(CSPMD_ERR_VALUE, "cspmd: at most %d mesh axes are supported",
                               CSPMD_MAX_AXES);
    if (n < 0 || (n > 0 && axes == NULL))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "%s: bad axis list (n = %d)", fn, n);
    for (int i = 0; i < n; i++)
        if (axis_get(axes[i]) == NULL)
            return cspmd_error_set(CSPMD_ERR_MISUSE, "%s: unknown axis id %u", fn,
                                   (unsigned)axes[i]);
    return CSPMD_OK;
}

cspmd_status_t cspmd_axes_check_orthogonal(const cspmd_axis_t *axes, int n)
{
    cspmd_status_t st = check_axes_arg("cspmd_axes_check_orthogonal", axes, n);
    if (st != CSPMD_OK || n < 2)
        return st;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            cspmd_axis_t pair[2] = {axes[i], axes[j]};
            if (!orthogonal_valid(pair, 2))
                return cspmd_error_set(
                    CSPMD_ERR_SPMD_TYPE,
                    "Mesh axes %s and %s are not orthogonal (their layouts are not independent "
                    "radix dimensions). All axes in a LocalSpmdType must be mutually orthogonal.",
                    cspmd_axis_display(axes[i], 0), cspmd_axis_display(axes[j], 0));
        }
    if (!orthogonal_valid(axes, n)) {
        char list[TEXT_MAX];
        axes_text(axes, n, list, sizeof list);
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "Mesh axes [%s] are not mutually orthogonal.",
                               list);
    }
    return CSPMD_OK;
}

/* Flatten valid, orthogonal axes into canonical modes; -1 if > MAX_MODES. */
static int flatten_modes(const cspmd_axis_t *axes, int n, int64_t *osz, int64_t *ost)
{
    int64_t s[ALL_MODES], d[ALL_MODES];
    int m = gather_modes(axes, n, s, d);
    /* stable insertion sort by stride descending */
    for (int i = 1; i < m; i++) {
        int64_t ss = s[i], dd = d[i];
        int j = i;
        while (j > 0 && d[j - 1] < dd) {
            s[j] = s[j - 1];
            d[j] = d[j - 1];
            j--;
        }
        s[j] = ss;
        d[j] = dd;
    }
    int64_t cs[ALL_MODES], cd[ALL_MODES];
    int c = canon(s, d, m, cs, cd);
    if (c > CSPMD_MAX_MODES)
        return -1;
    memcpy(osz, cs, (size_t)c * sizeof *cs);
    memcpy(ost, cd, (size_t)c * sizeof *cd);
    return c;
}

cspmd_status_t cspmd_axes_flatten(const cspmd_axis_t *axes, int n, cspmd_axis_t *out)
{
    if (out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_axes_flatten: out is NULL");
    if (n == 0)
        return cspmd_error_set(CSPMD_ERR_VALUE, "flatten_axes requires at least one axis");
    cspmd_status_t st = check_axes_arg("cspmd_axes_flatten", axes, n);
    if (st != CSPMD_OK)
        return st;
    if (n > 1 && !orthogonal_valid(axes, n)) {
        char list[TEXT_MAX];
        axes_text(axes, n, list, sizeof list);
        return cspmd_error_set(CSPMD_ERR_VALUE, "flatten_axes requires orthogonal axes, got (%s)",
                               list);
    }
    int64_t s[CSPMD_MAX_MODES], d[CSPMD_MAX_MODES];
    int m = flatten_modes(axes, n, s, d);
    if (m < 0)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "flatten_axes: the flattened layout has more than %d modes",
                               CSPMD_MAX_MODES);
    return intern_canon(s, d, m, out);
}

void cspmdi_axes_sort(cspmd_axis_t *axes, int n, int by_name)
{
    for (int i = 1; i < n; i++) {
        cspmd_axis_t a = axes[i];
        axis_rec_t *ra = axis_get(a);
        int j = i;
        while (j > 0) {
            axis_rec_t *rp = axis_get(axes[j - 1]);
            int before; /* must a go before axes[j-1]? */
            if (ra == NULL)
                before = 0;
            else if (rp == NULL)
                before = 1;
            else if (ra->max_stride != rp->max_stride)
                before = ra->max_stride > rp->max_stride;
            else if (by_name) {
                int c = strcmp(cspmd_axis_display(a, 0), cspmd_axis_display(axes[j - 1], 0));
                before = c != 0 ? c < 0 : a < axes[j - 1];
            } else
                before = a < axes[j - 1];
            if (!before)
                break;
            axes[j] = axes[j - 1];
            j--;
        }
        axes[j] = a;
    }
}

void cspmd_axes_sort_outer(cspmd_axis_t *axes, int n)
{
    if (axes != NULL && n > 1)
        cspmdi_axes_sort(axes, n, 1);
}

/* ---- names and display ----------------------------------------------------- */

typedef struct name_ent {
    cspmd_axis_t axis;
    char *name;
} name_ent_t;

static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;
static name_ent_t *names;          /* every (axis, name), registration order */
static size_t nnames, capnames;
static cspmd_axis_t *named_order;  /* axes in order of their first name     */
static size_t nnamed, capnamed;
static char **disamb;              /* base names that collided              */
static size_t ndisamb, capdisamb;
static _Atomic uint32_t names_gen = 1;
static struct disp *disp_all;      /* every display text ever built         */

static void layout_text(const axis_rec_t *r, char *buf, size_t len)
{
    if (r->n == 0) {
        snprintf(buf, len, "1:1");
    } else if (r->n == 1) {
        snprintf(buf, len, "%lld:%lld", (long long)r->sizes[0], (long long)r->strides[0]);
    } else {
        size_t o = (size_t)snprintf(buf, len, "(");
        for (int k = 0; k < r->n && o < len; k++)
            o += (size_t)snprintf(buf + o, len - o, "%s%lld", k ? ", " : "",
                                  (long long)r->sizes[k]);
        if (o < len)
            o += (size_t)snprintf(buf + o, len - o, "):(");
        for (int k = 0; k < r->n && o < len; k++)
            o += (size_t)snprintf(buf + o, len - o, "%s%lld", k ? ", " : "",
                                  (long long)r->strides[k]);
        if (o < len)
            snprintf(buf + o, len - o, ")");
    }
}

static char *str_dup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* "name[layout]", malloc'd. */
static char *str_suffixed(const char *name, const char *lay)
{
    size_t a = strlen(name), b = strlen(lay);
    char *p = malloc(a + b + 3);
    if (p) {
        memcpy(p, name, a);
        p[a] = '[';
        memcpy(p + a + 1, lay, b);
        p[a + b + 1] = ']';
        p[a + b + 2] = '\0';
    }
    return p;
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 1;
    size_t nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    void *p = realloc(*arr, nc * elem);
    if (p == NULL)
        return 0;
    *arr = p;
    *cap = nc;
    return 1;
}

static int axis_has_name_locked(cspmd_axis_t a, const char *name)
{
    for (size_t i = 0; i < nnames; i++)
        if (names[i].axis == a && strcmp(names[i].name, name) == 0)
            return 1;
    return 0;
}

cspmd_status_t cspmd_axis_name_add(cspmd_axis_t axis, const char *name)
{
    axis_rec_t *r = axis_get(axis);
    if (r == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_axis_name_add: unknown axis id %u",
                               (unsigned)axis);
    if (name == NULL || name[0] == '\0')
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_axis_name_add: empty name");
    char lay[TEXT_MAX];
    char *final = NULL;
    layout_text(r, lay, sizeof lay);
    cspmd_status_t st = CSPMD_OK;
    pthread_mutex_lock(&names_lock);
    int collided = 0;
    for (size_t i = 0; i < ndisamb; i++)
        if (strcmp(disamb[i], name) == 0)
            collided = 1;
    if (!collided) {
        for (size_t i = 0; i < nnames; i++) {
            if (names[i].axis == axis || strcmp(names[i].name, name) != 0)
                continue;
            /* First collision: rewrite the other registration, mark the base. */
            if (!grow((void **)&disamb, &capdisamb, ndisamb + 1, sizeof *disamb))
                goto nomem;
            char *base = str_dup(name);
            char olay[TEXT_MAX];
            layout_text(axis_get(names[i].axis), olay, sizeof olay);
            char *renamed = str_suffixed(name, olay);
            if (base == NULL || renamed == NULL) {
                free(base);
                free(renamed);
                goto nomem;
            }
            disamb[ndisamb++] = base;
            int dup = 0; /* already registered under the suffixed name? */
            for (size_t j = 0; j < nnames; j++)
                if (j != i && names[j].axis == names[i].axis &&
                    strcmp(names[j].name, renamed) == 0)
                    dup = 1;
            free(names[i].name);
            if (dup) {
                free(renamed);
                memmove(&names[i], &names[i + 1], (nnames - i - 1) * sizeof *names);
                nnames--;
            } else {
                names[i].name = renamed;
            }
            collided = 1;
            break;
        }
    }
    final = collided ? str_suffixed(name, lay) : str_dup(name);
    if (final == NULL)
        goto nomem;
    if (!axis_has_name_locked(axis, final)) {
        int first = 1;
        for (size_t i = 0; i < nnamed; i++)
            if (named_order[i] == axis)
                first = 0;
        if (!grow((void **)&names, &capnames, nnames + 1, sizeof *names) ||
            (first && !grow((void **)&named_order, &capnamed, nnamed + 1, sizeof *named_order)))
            goto nomem;
        names[nnames].axis = axis;
        names[nnames].name = final;
        final = NULL;
        nnames++;
        if (first)
            named_order[nnamed++] = axis;
    }
    free(final);
    atomic_fetch_add(&names_gen, 1);
    pthread_mutex_unlock(&names_lock);
    return st;
nomem:
    free(final);
    atomic_fetch_add(&names_gen, 1);
    pthread_mutex_unlock(&names_lock);
    return cspmd_error_set(CSPMD_ERR_NOMEM, "cspmd_axis_name_add: out of memory");
}

void cspmd_axis_names_reset(void)
{
    pthread_mutex_lock(&names_lock);
    for (size_t i = 0; i < nnames; i++)
        free(names[i].name);
    for (size_t i = 0; i < ndisamb; i++)
        free(disamb[i]);
    nnames = nnamed = ndisamb = 0;
    atomic_fetch_add(&names_gen, 1);
    pthread_mutex_unlock(&names_lock);
}

/* Preferred name of an axis (NULL if unnamed): alphabetically first, but
 * any name before "default_pg". */
static const char *best_name_locked(cspmd_axis_t a)
{
    const char *best = NULL, *best_nd = NULL;
    for (size_t i = 0; i < nnames; i++) {
        if (names[i].axis != a)
            continue;
        const char *n = names[i].name;
        if (best == NULL || strcmp(n, best) < 0)
            best = n;
        if (strcmp(n, "default_pg") != 0 && (best_nd == NULL || strcmp(n, best_nd) < 0))
            best_nd = n;
    }
    return best_nd ? best_nd : best;
}

typedef struct infer_ctx {
    const axis_rec_t *target;
    cspmd_axis_t cand[ALL_MODES * 4];
    int ncand;
    cspmd_axis_t pick[64];
    long budget;
} infer_ctx_t;

static int flattens_to_target(infer_ctx_t *c, int k)
{
    int64_t s[CSPMD_MAX_MODES], d[CSPMD_MAX_MODES];
    int m = flatten_modes(c->pick, k, s, d);
    if (m != c->target->n)
        return 0;
    for (int i = 0; i < m; i++)
        if (s[i] != c->target->sizes[i] || d[i] != c->target->strides[i])
            return 0;
    return 1;
}

/* Choose k candidates (ascending index from start) whose sizes multiply to
 * the target's size, orthogonal, flattening to it.  Lexicographic order. */
static int infer_dfs(infer_ctx_t *c, int start, int depth, int k, int64_t prod)
{
    if (--c->budget < 0)
        return 0;
    if (depth == k)
        return prod == c->target->size && flattens_to_target(c, k);
    for (int i = start; i <= c->ncand - (k - depth); i++) {
        int64_t sz = axis_get(c->cand[i])->size;
        int64_t p = sat_mul(prod, sz);
        if (c->target->size % p != 0)
            continue;
        c->pick[depth] = c->cand[i];
        if (depth > 0 && !orthogonal_valid(c->pick, depth + 1))
            continue;
        if (infer_dfs(c, i + 1, depth + 1, k, p))
            return 1;
    }
    return 0;
}

/* "{dp,cp}" when the axis is the flattening of 2+ strictly smaller, named,
 * mutually orthogonal axes (fewest components first, then registration
 * order); components outermost first.  0 if none. */
static int inferred_name_locked(cspmd_axis_t axis, char *buf, size_t len)
{
    static _Thread_local infer_ctx_t c;
    c.target = axis_get(axis);
    c.ncand = 0;
    c.budget = 1L << 20;
    if (c.target->n == 0)
        return 0;
    for (size_t i = 0; i < nnamed; i++) {
        cspmd_axis_t a = named_order[i];
        const axis_rec_t *r = axis_get(a);
        if (best_name_locked(a) == NULL || r->size >= c.target->size || r->size < 2 ||
            c.target->size % r->size != 0 || !cspmd_axis_le(a, axis))
            continue;
        if (c.ncand < (int)(sizeof c.cand / sizeof c.cand[0]))
            c.cand[c.ncand++] = a;
    }
    for (int k = 2; k <= c.ncand && k <= 64; k++) {
        if (infer_dfs(&c, 0, 0, k, 1)) {
            cspmdi_axes_sort(c.pick, k, 0); /* names locked; orthogonal axes never tie */
            size_t o = (size_t)snprintf(buf, len, "{");
            for (int i = 0; i < k && o < len; i++)
                o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? "," : "",
                                      best_name_locked(c.pick[i]));
            if (o < len)
                snprintf(buf + o, len - o, "}");
            return 1;
        }
        if (c.budget < 0)
            break;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void display_locked(cspmd_axis_t axis, int debug, char *buf, size_t len)
{
    const axis_rec_t *r = axis_get(axis);
    char lay[TEXT_MAX], inf[TEXT_MAX];
    layout_text(r, lay, sizeof lay);
    const char *tag = r->size == 1 ? "(trivial)" : "";
    const char *best = best_name_locked(axis);
    if (debug) {
        if (best != NULL) {
            const char *list[64]; /* the text lists 64 names, then counts the rest */
            size_t k = 0, more = 0;
            for (size_t i = 0; i < nnames; i++)
                if (names[i].axis == axis) {
                    if (k < 64)
                        list[k++] = names[i].name;
                    else
                        more++;
                }
            qsort(list, k, sizeof *list, cmp_str);
            size_t o = 0;
            buf[0] = '\0';
            for (size_t i = 0; i < k && o < len; i++)
                o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? "/" : "", list[i]);
            if (more > 0 && o < len)
                o += (size_t)snprintf(buf + o, len - o, "/...(%zu more)", more);
            if (o < len)
                snprintf(buf + o, len - o, "%s{%s}", tag, lay);
        } else if (inferred_name_locked(axis, inf, sizeof inf)) {
            snprintf(buf, len, "%s%s{%s}", inf, tag, lay);
        } else if (r->size == 1) {
            snprintf(buf, len, "MeshAxis(trivial){%s}", lay);
        } else {
            snprintf(buf, len, "MeshAxis(%s)", lay);
        }
    } else {
        if (best != NULL)
            snprintf(buf, len, "%s%s", best, tag);
        else if (inferred_name_locked(axis, inf, sizeof inf))
            snprintf(buf, len, "%s%s", inf, tag);
        else if (r->size == 1)
            snprintf(buf, len, "MeshAxis(trivial)");
        else
            snprintf(buf, len, "MeshAxis(%s)", lay);
    }
}

const char *cspmd_axis_display(cspmd_axis_t axis, int debug)
{
    axis_rec_t *r = axis_get(axis);
    if (r == NULL)
        return "MeshAxis(<unknown id>)";
    int which = debug != 0;
    uint32_t gen = atomic_load_explicit(&names_gen, memory_order_acquire);
    struct disp *d = atomic_load_explicit(&r->disp[which], memory_order_acquire);
    if (d != NULL && atomic_load_explicit(&d->gen, memory_order_relaxed) == gen)
        return d->text;
    pthread_mutex_lock(&names_lock);
    gen = atomic_load_explicit(&names_gen, memory_order_relaxed);
    d = atomic_load_explicit(&r->disp[which], memory_order_relaxed);
    if (d == NULL || atomic_load_explicit(&d->gen, memory_order_relaxed) != gen) {
        char text[TEXT_MAX * 3];
        display_locked(axis, which, text, sizeof text);
        if (d == NULL || strcmp(d->text, text) != 0) {
            size_t n = strlen(text) + 1;
            struct disp *nd = malloc(sizeof *nd + n);
            if (nd == NULL) {
                pthread_mutex_unlock(&names_lock);
                return d ? d->text : "MeshAxis(?)";
            }
            memcpy(nd->text, text, n);
            atomic_init(&nd->gen, 0);
            nd->next = disp_all;
            disp_all = nd;
            d = nd;
        }
        /* a new text, or the same text re-stamped for this generation */
        atomic_store_explicit(&d->gen, gen, memory_order_relaxed);
        atomic_store_explicit(&r->disp[which], d, memory_order_release);
    }
    pthread_mutex_unlock(&names_lock);
    return d->text;
}
