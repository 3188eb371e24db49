/*
 * type.c -- interned type values: a set of (axis, local
 * type) pairs over mutually orthogonal non-trivial axes plus an optional
 * partition spec; assert_type refinement and the
 * in-place / out= mutation check.
 *
 * Storage order of a type's pairs is axis id ascending (what is interned
 * and what cspmdi_type_axes returns); cspmd_type_entry and
 * cspmd_type_format present them sorted by display name, then id, which
 * can change when names are registered.  Partition specs are interned in
 * their own table and referenced by id (0 = none).  A type's dual and
 * spec-less form are cached in its record, so cspmd_type_dual/local are
 * lock-free after the first call.
 */
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "table.h"

#define TYPE_CAP 65536u
#define SPEC_CAP 16384u
#define SPEC_AXES_MAX (CSPMD_MAX_DIMS * CSPMD_MAX_AXES)

typedef struct type_rec {
    /* key */
    cspmd_axis_t axes[CSPMD_MAX_AXES]; /* axis id ascending, unused 0 */
    uint8_t lt[CSPMD_MAX_AXES];
    uint32_t spec; /* spec table id, 0 = none */
    uint32_t n;
    /* derived (id + 1, 0 = not yet computed) */
    _Atomic uint32_t dual1, local1;
} type_rec_t;

#define TYPE_KEY offsetof(type_rec_t, dual1)

static type_rec_t type_chunk0[CSPMDI_CHUNK];
CSPMDI_TABLE_DEFINE(type_tab, "type", type_rec_t, TYPE_KEY, TYPE_CAP, 2, type_chunk0);

static cspmd_spec_t spec_chunk0[CSPMDI_CHUNK];
CSPMDI_TABLE_DEFINE(spec_tab, "partition spec", cspmd_spec_t, sizeof(cspmd_spec_t), SPEC_CAP, 1,
                    spec_chunk0);

static type_rec_t *type_get(cspmd_type_t t)
{
    return cspmdi_table_get(&type_tab, t);
}

static const cspmd_spec_t *spec_get(uint32_t id)
{
    return id ? cspmdi_table_get(&spec_tab, id) : NULL;
}

int cspmdi_type_valid(cspmd_type_t type)
{
    return type_get(type) != NULL;
}

const char *cspmdi_untyped_hint(cspmd_type_t type)
{
    return type == CSPMD_TYPE_UNTYPED ? " It has no type at all: annotate it with assert_type()."
                                      : "";
}

int cspmdi_type_axes(cspmd_type_t type, cspmd_axis_t *axes, cspmd_ltype_t *ltypes)
{
    type_rec_t *r = type_get(type);
    if (r == NULL)
        return -1;
    int n = (int)r->n;
    for (int i = 0; i < n; i++) {
        if (axes)
            axes[i] = r->axes[i];
        if (ltypes)
            ltypes[i] = (cspmd_ltype_t)r->lt[i];
    }
    return n;
}

int cspmdi_type_has_spec(cspmd_type_t type)
{
    type_rec_t *r = type_get(type);
    return r != NULL && r->spec != 0;
}

const cspmd_spec_t *cspmdi_type_spec_ref(cspmd_type_t type)
{
    type_rec_t *r = type_get(type);
    return r != NULL ? spec_get(r->spec) : NULL;
}

int cspmdi_spec_strided(const cspmd_spec_t *spec)
{
    if (spec == NULL)
        return 0;
    for (int d = 0; d < spec->ndim; d++)
        for (int i = 0; i < spec->nentry[d]; i++)
            if (spec->split[d][i] > 1)
                return 1;
    return 0;
}

cspmd_status_t cspmdi_type_refuse_strided(cspmd_type_t type, const char *what)
{
    if (!cspmdi_spec_strided(cspmdi_type_spec_ref(type)))
        return CSPMD_OK;
    char buf[512];
    cspmd_type_format(type, buf, sizeof buf);
    return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                           "%s: the tensor (%s) has a dim sharded in strides -- a view merged "
                           "a sharded dim behind other dims -- which %s does not take; view it "
                           "back to the dims it was merged from first",
                           what, buf, what);
}

/* ---- small helpers ---------------------------------------------------- */

static int lt_valid(cspmd_ltype_t lt)
{
    return lt >= CSPMD_LT_R && lt <= CSPMD_LT_P;
}

static void sort_display(cspmd_axis_t *axes, uint8_t *lts, int n)
{
    for (int i = 1; i < n; i++) {
        cspmd_axis_t a = axes[i];
        uint8_t l = lts[i];
        const char *da = cspmd_axis_display(a, 0);
        int j = i;
        while (j > 0) {
            int c = strcmp(cspmd_axis_display(axes[j - 1], 0), da);
            if (c < 0 || (c == 0 && axes[j - 1] < a))
                break;
            axes[j] = axes[j - 1];
            lts[j] = lts[j - 1];
            j--;
        }
        axes[j] = a;
        lts[j] = l;
    }
}

/* Orthogonality of an arbitrary list (spec axes may exceed MAX_AXES). */
static cspmd_status_t check_orth_list(const cspmd_axis_t *axes, int n)
{
    if (n <= CSPMD_MAX_AXES)
        return cspmd_axes_check_orthogonal(axes, n);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            cspmd_axis_t pair[2] = {axes[i], axes[j]};
            cspmd_status_t st = cspmd_axes_check_orthogonal(pair, 2);
            if (st != CSPMD_OK)
                return st;
        }
    return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd: more than %d axes in one type",
                           CSPMD_MAX_AXES);
}

/* Text of a spec entry as Python's repr: "tp", "(dp, tp)", "None"; a
 * strided shard reads "tp (strided by 2)". */
static void entry_text(const cspmd_spec_t *s, int d, char *buf, size_t len)
{
    int k = s->nentry[d];
    if (k == 0) {
        snprintf(buf, len, "None");
        return;
    }
    size_t o = k > 1 ? (size_t)snprintf(buf, len, "(") : 0;
    if (len > 0)
        buf[o < len ? o : len - 1] = '\0';
    for (int i = 0; i < k && o < len; i++) {
        o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "",
                              cspmd_axis_display(s->entry[d][i], 0));
        if (s->split[d][i] > 1 && o < len)
            o += (size_t)snprintf(buf + o, len - o, " (strided by %u)", (unsigned)s->split[d][i]);
    }
    if (k > 1 && o < len)
        snprintf(buf + o, len - o, ")");
}

/* Validate and normalize a user spec into *out (zeroed, trivial axes
 * dropped, orthogonality across the spec checked). */
static cspmd_status_t spec_normalize(const cspmd_spec_t *in, cspmd_spec_t *out)
{
    memset(out, 0, sizeof *out);
    out->ndim = -1;
    if (in == NULL || in->ndim == -1)
        return CSPMD_OK;
    if (in->ndim < 0 || in->ndim > CSPMD_MAX_DIMS)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd: partition spec ndim %d (expected -1..%d)",
                               (int)in->ndim, CSPMD_MAX_DIMS);
    out->ndim = in->ndim;
    cspmd_axis_t all[SPEC_AXES_MAX];
    int nall = 0;
    for (int d = 0; d < in->ndim; d++) {
        if (in->nentry[d] > CSPMD_MAX_AXES)
            return cspmd_error_set(CSPMD_ERR_MISUSE,
                                   "cspmd: partition spec dim %d has %d axes (max %d)", d,
                                   (int)in->nentry[d], CSPMD_MAX_AXES);
        int k = 0;
        for (int i = 0; i < in->nentry[d]; i++) {
            cspmd_axis_t a = in->entry[d][i];
            if (!cspmdi_axis_valid(a))
                return cspmd_error_set(CSPMD_ERR_MISUSE,
                                       "cspmd: unknown axis id %u in partition spec",
                                       (unsigned)a);
            if (a == CSPMD_AXIS_TRIVIAL || cspmd_axis_size(a) == 1)
                continue;
            out->split[d][k] = in->split[d][i] > 1 ? in->split[d][i] : 0;
            out->entry[d][k++] = a;
            all[nall++] = a;
        }
        out->nentry[d] = (uint8_t)k;
    }
    return check_orth_list(all, nall);
}

/* Intern a type from distinct, valid, non-trivial axes (n <= MAX_AXES)
 * and a normalized spec (ndim -1 = none).  Spec axes absent from the pairs
 * are added as V; present non-V is an error.  Orthogonality of the pairs
 * is checked in the given order. */
static cspmd_status_t type_build(const cspmd_axis_t *axes_in, const uint8_t *lt_in, int n,
                                 const cspmd_spec_t *spec, cspmd_type_t *out)
{
    cspmd_axis_t axes[CSPMD_MAX_AXES + 1] = {0};
    uint8_t lts[CSPMD_MAX_AXES + 1] = {0};
    memcpy(axes, axes_in, (size_t)n * sizeof *axes);
    memcpy(lts, lt_in, (size_t)n);
    uint32_t spec_id = 0;
    if (spec != NULL && spec->ndim >= 0) {
        for (int d = 0; d < spec->ndim; d++)
            for (int i = 0; i < spec->nentry[d]; i++) {
                cspmd_axis_t a = spec->entry[d][i];
                int j = 0;
                while (j < n && axes[j] != a)
                    j++;
                if (j < n) {
                    if (lts[j] != CSPMD_LT_V)
                        return cspmd_error_set(
                            CSPMD_ERR_SPMD_TYPE,
                            "Mesh axis %s appears in partition_spec (implying Varying/Shard) "
                            "but is specified as %s in type.",
                            cspmd_axis_display(a, 0), cspmd_ltype_letter((cspmd_ltype_t)lts[j]));
                    continue;
                }
                if (n == CSPMD_MAX_AXES)
                    return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd: more than %d axes in one type",
                                           CSPMD_MAX_AXES);
                axes[n] = a;
                lts[n] = CSPMD_LT_V;
                n++;
            }
    }
    cspmd_status_t st = cspmd_axes_check_orthogonal(axes, n);
    if (st != CSPMD_OK)
        return st;
    if (spec != NULL && spec->ndim >= 0) {
        st = cspmdi_table_intern(&spec_tab, spec, NULL, &spec_id);
        if (st != CSPMD_OK)
            return st;
    }
    if (n == 0 && spec_id == 0) {
        *out = CSPMD_TYPE_EMPTY;
        return CSPMD_OK;
    }
    type_rec_t rec;
    memset(&rec, 0, sizeof rec);
    /* insertion sort by axis id */
    for (int i = 0; i < n; i++) {
        int j = i;
        while (j > 0 && rec.axes[j - 1] > axes[i]) {
            rec.axes[j] = rec.axes[j - 1];
            rec.lt[j] = rec.lt[j - 1];
            j--;
        }
        rec.axes[j] = axes[i];
        rec.lt[j] = lts[i];
    }
    rec.n = (uint32_t)n;
    rec.spec = spec_id;
    return cspmdi_table_intern(&type_tab, &rec, NULL, out);
}

/* Remove from spec every axis not typed V among (axes, lts). */
static void spec_keep_v(cspmd_spec_t *s, const cspmd_axis_t *axes, const uint8_t *lts, int n)
{
    if (s->ndim < 0)
        return;
    for (int d = 0; d < s->ndim; d++) {
        int k = 0;
        for (int i = 0; i < s->nentry[d]; i++) {
            cspmd_axis_t a = s->entry[d][i];
            int keep = 0;
            for (int j = 0; j < n; j++)
                if (axes[j] == a && lts[j] == CSPMD_LT_V)
                    keep = 1;
            if (keep) {
                s->split[d][k] = s->split[d][i];
                s->entry[d][k++] = a;
            }
        }
        for (int i = k; i < s->nentry[d]; i++) {
            s->entry[d][i] = 0;
            s->split[d][i] = 0;
        }
        s->nentry[d] = (uint8_t)k;
    }
}

static void spec_copy(uint32_t id, cspmd_spec_t *out)
{
    const cspmd_spec_t *s = spec_get(id);
    if (s)
        *out = *s;
    else {
        memset(out, 0, sizeof *out);
        out->ndim = -1;
    }
}

/* ---- public API ------------------------------------------------------------ */

cspmd_status_t cspmd_type_make(const cspmd_axis_t *axes, const cspmd_ltype_t *ltypes, int n,
                               const cspmd_spec_t *spec, cspmd_type_t *out)
{
    if (out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_make: out is NULL");
    if (n < 0 || (n > 0 && (axes == NULL || ltypes == NULL)))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_make: bad arguments (n = %d)", n);
    cspmd_axis_t ax[CSPMD_MAX_AXES];
    uint8_t lt[CSPMD_MAX_AXES];
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!cspmdi_axis_valid(axes[i]))
            return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_make: unknown axis id %u",
                                   (unsigned)axes[i]);
        if (!lt_valid(ltypes[i]))
            return cspmd_error_set(CSPMD_ERR_TYPE,
                                   "Expected a local type (R, I, V or P) for axis %s, got %d",
                                   cspmd_axis_display(axes[i], 0), (int)ltypes[i]);
        if (cspmd_axis_size(axes[i]) == 1)
            continue; /* trivial axes are not tracked */
        for (int j = 0; j < m; j++)
            if (ax[j] == axes[i])
                return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_make: duplicate axis %s",
                                       cspmd_axis_display(axes[i], 0));
        if (m == CSPMD_MAX_AXES)
            return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd: more than %d axes in one type",
                                   CSPMD_MAX_AXES);
        ax[m] = axes[i];
        lt[m] = (uint8_t)ltypes[i];
        m++;
    }
    cspmd_spec_t ns;
    cspmd_status_t st = spec_normalize(spec, &ns);
    if (st != CSPMD_OK)
        return st;
    return type_build(ax, lt, m, &ns, out);
}

int cspmd_type_naxes(cspmd_type_t type)
{
    type_rec_t *r = type_get(type);
    return r ? (int)r->n : -1;
}

cspmd_status_t cspmd_type_entry(cspmd_type_t type, int i, cspmd_axis_t *axis,
                                cspmd_ltype_t *ltype)
{
    type_rec_t *r = type_get(type);
    if (r == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_entry: unknown type id %u",
                               (unsigned)type);
    if (i < 0 || i >= (int)r->n)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_entry: index %d out of range (%u)",
                               i, (unsigned)r->n);
    cspmd_axis_t ax[CSPMD_MAX_AXES];
    uint8_t lt[CSPMD_MAX_AXES];
    memcpy(ax, r->axes, sizeof ax);
    memcpy(lt, r->lt, sizeof lt);
    sort_display(ax, lt, (int)r->n);
    if (axis)
        *axis = ax[i];
    if (ltype)
        *ltype = (cspmd_ltype_t)lt[i];
    return CSPMD_OK;
}

cspmd_ltype_t cspmd_type_get(cspmd_type_t type, cspmd_axis_t axis)
{
    type_rec_t *r = type_get(type);
    if (r == NULL)
        return CSPMD_LT_NONE;
    for (uint32_t i = 0; i < r->n; i++)
        if (r->axes[i] == axis)
            return (cspmd_ltype_t)r->lt[i];
    return CSPMD_LT_NONE;
}

cspmd_status_t cspmd_type_spec(cspmd_type_t type, cspmd_spec_t *spec)
{
    type_rec_t *r = type_get(type);
    if (r == NULL || spec == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_spec: unknown type id %u or NULL",
                               (unsigned)type);
    spec_copy(r->spec, spec);
    return CSPMD_OK;
}

cspmd_status_t cspmd_type_spec_plain(cspmd_type_t type, const char *what, cspmd_spec_t *spec)
{
    if (type_get(type) == NULL || spec == NULL)
        return cspmd_type_spec(type, spec);
    cspmd_status_t st = cspmdi_type_refuse_strided(type, what != NULL ? what : "this call");
    return st != CSPMD_OK ? st : cspmd_type_spec(type, spec);
}

/* Cached derived ids: compute once (interning), then lock-free. */
static cspmd_type_t derived(cspmd_type_t type, int dual)
{
    type_rec_t *r = type_get(type);
    if (r == NULL || type == CSPMD_TYPE_UNTYPED)
        return CSPMD_TYPE_UNTYPED;
    if (type == CSPMD_TYPE_EMPTY)
        return CSPMD_TYPE_EMPTY;
    _Atomic uint32_t *cache = dual ? &r->dual1 : &r->local1;
    uint32_t c = atomic_load_explicit(cache, memory_order_acquire);
    if (c != 0)
        return c - 1;
    if (!dual && r->spec == 0) {
        atomic_store_explicit(cache, type + 1, memory_order_release);
        return type;
    }
    uint8_t lt[CSPMD_MAX_AXES];
    for (uint32_t i = 0; i < r->n; i++)
        lt[i] = dual ? (uint8_t)cspmd_ltype_dual((cspmd_ltype_t)r->lt[i]) : r->lt[i];
    cspmd_type_t out;
    if (type_build(r->axes, lt, (int)r->n, NULL, &out) != CSPMD_OK)
        return CSPMD_TYPE_UNTYPED; /* only NOMEM: the axes were valid */
    atomic_store_explicit(cache, out + 1, memory_order_release);
    return out;
}

cspmd_type_t cspmd_type_local(cspmd_type_t type)
{
    return derived(type, 0);
}

cspmd_type_t cspmd_type_dual(cspmd_type_t type)
{
    return derived(type, 1);
}

cspmd_status_t cspmd_type_with(cspmd_type_t type, cspmd_axis_t axis, cspmd_ltype_t lt,
                               cspmd_type_t *out)
{
    type_rec_t *r = type_get(type);
    if (r == NULL || out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_with: unknown type id %u or NULL",
                               (unsigned)type);
    if (!cspmdi_axis_valid(axis))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_with: unknown axis id %u",
                               (unsigned)axis);
    if (lt != CSPMD_LT_NONE && !lt_valid(lt))
        return cspmd_error_set(CSPMD_ERR_TYPE,
                               "Expected a local type (R, I, V or P) for axis %s, got %d",
                               cspmd_axis_display(axis, 0), (int)lt);
    if (cspmd_axis_size(axis) == 1) {
        *out = type; /* trivial axes are not tracked */
        return CSPMD_OK;
    }
    cspmd_axis_t ax[CSPMD_MAX_AXES + 1];
    uint8_t l[CSPMD_MAX_AXES + 1];
    int n = 0, found = 0;
    for (uint32_t i = 0; i < r->n; i++) {
        if (r->axes[i] == axis) {
            found = 1;
            if (lt == CSPMD_LT_NONE)
                continue;
            ax[n] = axis;
            l[n++] = (uint8_t)lt;
        } else {
            ax[n] = r->axes[i];
            l[n++] = r->lt[i];
        }
    }
    if (!found && lt != CSPMD_LT_NONE) {
        if (n == CSPMD_MAX_AXES)
            return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd: more than %d axes in one type",
                                   CSPMD_MAX_AXES);
        ax[n] = axis;
        l[n++] = (uint8_t)lt;
    }
    cspmd_spec_t s;
    spec_copy(r->spec, &s);
    spec_keep_v(&s, ax, l, n);
    return type_build(ax, l, n, &s, out);
}

/* ---- formatting ------------------------------------------------------------ */

typedef struct writer {
    char *buf;
    size_t len, pos;
} writer_t;

static void w_put(writer_t *w, const char *s)
{
    size_t n = strlen(s);
    if (w->len > 0 && w->pos < w->len - 1) {
        size_t room = w->len - 1 - w->pos;
        memcpy(w->buf + w->pos, s, n < room ? n : room);
    }
    w->pos += n;
    if (w->len > 0)
        w->buf[w->pos < w->len - 1 ? w->pos : w->len - 1] = '\0';
}

static void spec_write(writer_t *w, const cspmd_spec_t *s)
{
    w_put(w, "PartitionSpec(");
    for (int d = 0; d < s->ndim; d++) {
        char e[1024];
        entry_text(s, d, e, sizeof e);
        if (d)
            w_put(w, ", ");
        w_put(w, e);
    }
    w_put(w, ")");
}

size_t cspmd_type_format(cspmd_type_t type, char *buf, size_t len)
{
    writer_t w = {buf, buf ? len : 0, 0};
    if (w.len > 0)
        buf[0] = '\0';
    type_rec_t *r = type_get(type);
    if (r == NULL) {
        w_put(&w, "<unknown type>");
        return w.pos;
    }
    cspmd_axis_t ax[CSPMD_MAX_AXES];
    uint8_t lt[CSPMD_MAX_AXES];
    memcpy(ax, r->axes, sizeof ax);
    memcpy(lt, r->lt, sizeof lt);
    sort_display(ax, lt, (int)r->n);
    w_put(&w, "{");
    for (uint32_t i = 0; i < r->n; i++) {
        if (i)
            w_put(&w, ", ");
        w_put(&w, cspmd_axis_display(ax[i], 0));
        w_put(&w, ": ");
        w_put(&w, cspmd_ltype_letter((cspmd_ltype_t)lt[i]));
    }
    w_put(&w, "}");
    const cspmd_spec_t *s = spec_get(r->spec);
    if (s) {
        w_put(&w, " ");
        spec_write(&w, s);
    }
    return w.pos;
}

/* ---- refinement ------------------------------------------------------------- */

static int entries_equal(const cspmd_spec_t *a, int da, const cspmd_spec_t *b, int db)
{
    if (a->nentry[da] != b->nentry[db])
        return 0;
    for (int i = 0; i < a->nentry[da]; i++)
        if (a->entry[da][i] != b->entry[db][i] ||
            (a->split[da][i] > 1 ? a->split[da][i] : 1) != (b->split[db][i] > 1 ? b->split[db][i] : 1))
            return 0;
    return 1;
}

static int r_or_i(cspmd_ltype_t lt) { return lt == CSPMD_LT_R || lt == CSPMD_LT_I; }

/* declared: next is what an autograd Function declares of its own output,
 * whose backward the Function writes, so R and I (which differ only in the
 * gradient they take) give way to it. */
static cspmd_status_t refine(cspmd_type_t existing, cspmd_type_t next, int declared,
                             cspmd_type_t *out)
{
    type_rec_t *re = type_get(existing), *rn = type_get(next);
    if (re == NULL || rn == NULL || out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_refine: unknown type id (%u, %u)",
                               (unsigned)existing, (unsigned)next);
    if (existing == CSPMD_TYPE_UNTYPED) {
        *out = next;
        return CSPMD_OK;
    }
    if (next == CSPMD_TYPE_UNTYPED) {
        *out = existing;
        return CSPMD_OK;
    }
    /* 1. per-axis check and merge; union listed existing-first. */
    cspmd_axis_t ax[2 * CSPMD_MAX_AXES], nax[CSPMD_MAX_AXES];
    uint8_t lt[2 * CSPMD_MAX_AXES], nlt[CSPMD_MAX_AXES];
    int n = (int)re->n, nn = (int)rn->n;
    memcpy(ax, re->axes, (size_t)n * sizeof *ax);
    memcpy(lt, re->lt, (size_t)n);
    sort_display(ax, lt, n);
    memcpy(nax, rn->axes, (size_t)nn * sizeof *nax);
    memcpy(nlt, rn->lt, (size_t)nn);
    sort_display(nax, nlt, nn);
    for (int i = 0; i < nn; i++) {
        int j = 0;
        while (j < n && ax[j] != nax[i])
            j++;
        if (j == n)
            continue;
        if (lt[j] == nlt[i])
            continue;
        if (lt[j] == CSPMD_LT_V && nlt[i] == CSPMD_LT_P)
            continue; /* implicit V -> P, applied below */
        if (declared && r_or_i((cspmd_ltype_t)lt[j]) && r_or_i((cspmd_ltype_t)nlt[i]))
            continue; /* the declared flavour, applied below */
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "SPMD type mismatch on axis %s: tensor has %s, expected %s",
                               cspmd_axis_display(nax[i], 0),
                               cspmd_ltype_letter((cspmd_ltype_t)lt[j]),
                               cspmd_ltype_letter((cspmd_ltype_t)nlt[i]));
    }
    int m = n;
    for (int i = 0; i < nn; i++) {
        int j = 0;
        while (j < n && ax[j] != nax[i])
            j++;
        if (j < n) {
            lt[j] = nlt[i];
        } else {
            ax[m] = nax[i];
            lt[m++] = nlt[i];
        }
    }
    cspmd_status_t st = check_orth_list(ax, m);
    if (st != CSPMD_OK)
        return st;
    /* 2. spec refinement */
    cspmd_spec_t es, ns;
    spec_copy(re->spec, &es);
    spec_copy(rn->spec, &ns);
    if (ns.ndim >= 0) {
        if (es.ndim < 0) {
            es = ns;
        } else {
            int dims = es.ndim < ns.ndim ? es.ndim : ns.ndim;
            cspmd_spec_t merged = es;
            for (int d = 0; d < dims; d++) {
                if (ns.nentry[d] == 0)
                    continue;
                if (es.nentry[d] == 0) {
                    for (int i = 0; i < ns.nentry[d]; i++) {
                        cspmd_axis_t a = ns.entry[d][i];
                        for (int d2 = 0; d2 < es.ndim; d2++)
                            for (int k = 0; k < es.nentry[d2]; k++)
                                if (es.entry[d2][k] == a)
                                    return cspmd_error_set(
                                        CSPMD_ERR_SPMD_TYPE,
                                        "PartitionSpec conflict: axis %s already shards dim %d, "
                                        "cannot also shard dim %d",
                                        cspmd_axis_display(a, 0), d2, d);
                    }
                    merged.nentry[d] = ns.nentry[d];
                    memcpy(merged.entry[d], ns.entry[d], sizeof merged.entry[d]);
                    memcpy(merged.split[d], ns.split[d], sizeof merged.split[d]);
                    continue;
                }
                if (!entries_equal(&es, d, &ns, d)) {
                    char et[1024], nt[1024];
                    entry_text(&es, d, et, sizeof et);
                    entry_text(&ns, d, nt, sizeof nt);
                    return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                           "PartitionSpec conflict at dim %d: tensor has %s, new "
                                           "assert has %s",
                                           d, et, nt);
                }
            }
            es = merged;
        }
    }
    /* An axis that went V -> P leaves the spec (it no longer shards). */
    spec_keep_v(&es, ax, lt, m);
    if (m > CSPMD_MAX_AXES)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd: more than %d axes in one type",
                               CSPMD_MAX_AXES);
    return type_build(ax, lt, m, &es, out);
}

cspmd_status_t cspmd_type_refine(cspmd_type_t existing, cspmd_type_t next, cspmd_type_t *out)
{
    return refine(existing, next, 0, out);
}

cspmd_status_t cspmd_type_refine_declared(cspmd_type_t existing, cspmd_type_t next,
                                          cspmd_type_t *out)
{
    return refine(existing, next, 1, out);
}

/* ---- in-place / out= -------------------------------------------- */

cspmd_status_t cspmd_type_check_mutation(const char *op, cspmd_type_t old, cspmd_type_t inferred,
                                         int requires_grad, cspmd_type_t *out)
{
    type_rec_t *ro = type_get(old), *ri = type_get(inferred);
    if (ro == NULL || ri == NULL || out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE,
                               "cspmd_type_check_mutation: unknown type id (%u, %u)",
                               (unsigned)old, (unsigned)inferred);
    cspmd_axis_t ax[CSPMD_MAX_AXES];
    uint8_t lt[CSPMD_MAX_AXES];
    int n = (int)ri->n;
    memcpy(ax, ri->axes, sizeof ax);
    memcpy(lt, ri->lt, sizeof lt);
    sort_display(ax, lt, n);
    /* Backward accumulation into a gradient buffer the autograd engine
     * owns (add_ of a second contribution; the engine writes in place only
     * with grad mode off, so the buffer never requires grad): R and I are
     * both complete sums and the buffer keeps its own flavour; a V buffer
     * that received a pending sum (the relaxed add gave P) becomes P. */
    int relaxed = cspmdi_backward_relaxed() && !requires_grad;
    cspmd_type_t kept = inferred;
    for (int i = 0; i < n; i++) {
        cspmd_ltype_t was = cspmd_type_get(old, ax[i]);
        cspmd_ltype_t now = (cspmd_ltype_t)lt[i];
        if (was == CSPMD_LT_NONE || was == now)
            continue;
        if (!requires_grad && now == CSPMD_LT_V && (was == CSPMD_LT_R || was == CSPMD_LT_I))
            continue;
        if (relaxed && now == CSPMD_LT_P && was == CSPMD_LT_V)
            continue;
        if (relaxed && (now == CSPMD_LT_R || now == CSPMD_LT_I) &&
            (was == CSPMD_LT_R || was == CSPMD_LT_I)) {
            cspmd_status_t st = cspmd_type_with(kept, ax[i], was, &kept);
            if (st != CSPMD_OK)
                return st;
            continue;
        }
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "%s: in-place/out operation would change SPMD type on axis %s from "
                               "%s to %s. In-place and out= operations cannot change a tensor's "
                               "SPMD type.",
                               op ? op : "?", cspmd_axis_display(ax[i], 0), cspmd_ltype_letter(was),
                               cspmd_ltype_letter(now));
    }
    *out = kept;
    return CSPMD_OK;
}

/* ===================================================================== */
/* mutate_type and Scalar arithmetic                                     */
/* ===================================================================== */

cspmd_status_t cspmd_type_mutate(cspmd_type_t type, const cspmd_axis_t *axes,
                                 const cspmd_ltype_t *src, const cspmd_ltype_t *dst, int n,
                                 cspmd_type_t *out)
{
    if (out == NULL || n < 0 || (n > 0 && (axes == NULL || src == NULL || dst == NULL)) ||
        type_get(type) == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_mutate: bad arguments");
    cspmd_type_t t = type == CSPMD_TYPE_UNTYPED ? CSPMD_TYPE_EMPTY : type;
    /* Every update is checked before any is made: a failure changes nothing. */
    for (int i = 0; i < n; i++) {
        if (cspmd_axis_size(axes[i]) == 1)
            continue;
        cspmd_ltype_t now = cspmd_type_get(t, axes[i]);
        if (now == CSPMD_LT_NONE) {
            char buf[256];
            cspmd_type_format(t, buf, sizeof buf);
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "mutate_type: axis %s not found in the tensor's type %s",
                                   cspmd_axis_display(axes[i], 0), buf);
        }
        if (now != src[i])
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "mutate_type: expected current type %s on axis %s, got %s",
                                   cspmd_ltype_letter(src[i]), cspmd_axis_display(axes[i], 0),
                                   cspmd_ltype_letter(now));
    }
    for (int i = 0; i < n; i++) {
        if (cspmd_axis_size(axes[i]) == 1)
            continue;
        cspmd_status_t st = cspmd_type_with(t, axes[i], dst[i], &t);
        if (st != CSPMD_OK)
            return st;
    }
    *out = t;
    return CSPMD_OK;
}


cspmd_status_t cspmd_type_reinterpret_no_grad(cspmd_type_t type, cspmd_axis_t axis,
                                              cspmd_ltype_t dst, int32_t dst_shard_dim,
                                              int requires_grad, cspmd_type_t *out)
{
    if (out == NULL || type_get(type) == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_reinterpret_no_grad: bad arguments");
    /* R and I hold the same values and differ only in the gradient they
     * accept, so only a tensor no gradient reaches may swap them. */
    if (requires_grad)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "reinterpret_no_grad requires tensor.requires_grad=False");
    if (dst_shard_dim >= 0)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "reinterpret_no_grad requires dst=R or dst=I; got dst=S(%d)",
                               (int)dst_shard_dim);
    if (!r_or_i(dst))
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "reinterpret_no_grad requires dst=R or dst=I; got dst=%s",
                               cspmd_ltype_letter(dst));
    if (cspmd_axis_size(axis) == 1) {
        *out = type;
        return CSPMD_OK;
    }
    cspmd_type_t t = type == CSPMD_TYPE_UNTYPED ? CSPMD_TYPE_EMPTY : type;
    cspmd_ltype_t now = cspmd_type_get(t, axis);
    if (now == CSPMD_LT_NONE) {
        char buf[256];
        cspmd_type_format(t, buf, sizeof buf);
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "reinterpret_no_grad: axis %s not found in the tensor's SPMD type %s",
                               cspmd_axis_display(axis, 0), buf);
    }
    if (!r_or_i(now))
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "reinterpret_no_grad requires the current type to be R or I; got "
                               "%s on axis %s",
                               cspmd_ltype_letter(now), cspmd_axis_display(axis, 0));
    return cspmd_type_with(t, axis, dst, out);
}

cspmd_status_t cspmd_type_merge_scalars(cspmd_type_t a, cspmd_type_t b, cspmd_type_t *out)
{
    if (out == NULL || type_get(a) == NULL || type_get(b) == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_merge_scalars: bad arguments");
    int n = cspmd_type_naxes(a);
    if (n != cspmd_type_naxes(b))
        return cspmd_error_set(CSPMD_ERR_TYPE, "Scalar arithmetic needs the same mesh axes on "
                                               "both sides");
    cspmd_type_t t = cspmd_type_local(a);
    for (int i = 0; i < n; i++) {
        cspmd_axis_t axis;
        cspmd_ltype_t x, y;
        cspmd_status_t st = cspmd_type_entry(a, i, &axis, &x);
        if (st != CSPMD_OK)
            return st;
        y = cspmd_type_get(b, axis);
        if (y == x)
            continue;
        if (!((x == CSPMD_LT_R && y == CSPMD_LT_V) || (x == CSPMD_LT_V && y == CSPMD_LT_R)))
            return cspmd_error_set(CSPMD_ERR_TYPE,
                                   "Scalar arithmetic cannot combine %s and %s on axis %s",
                                   cspmd_ltype_letter(x), cspmd_ltype_letter(y),
                                   y == CSPMD_LT_NONE ? "(missing)" : cspmd_axis_display(axis, 0));
        st = cspmd_type_with(t, axis, CSPMD_LT_V, &t); /* {R, V} -> V */
        if (st != CSPMD_OK)
            return st;
    }
    *out = t;
    return CSPMD_OK;
}
