/*
 * mesh_compat.c -- cross-mesh compatibility: reinterpret_mesh's
 * algorithm (shared axes, the two-pointer walk over stride-sorted axes,
 * group checks, partition spec remapping), the automatic reinterpretation
 * of an operand onto the current mesh, the cross-mesh advice of strict-mode
 * missing-axis errors, and the process-wide axis print option that error
 * texts honour.
 *
 * Everything here works on fixed-size stack arrays (at most CSPMD_MAX_AXES
 * axes per type or mesh); only the advice (an error path) allocates.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "table.h"

#define MAXA CSPMD_MAX_AXES
#define MSG 2048

/* ---- print option ------------------------------------------------------- */

static _Atomic int print_debug;

void cspmd_axis_print_debug_set(int debug)
{
    atomic_store_explicit(&print_debug, debug != 0, memory_order_relaxed);
}

int cspmd_axis_print_debug(void)
{
    return atomic_load_explicit(&print_debug, memory_order_relaxed);
}

static const char *ad(cspmd_axis_t a)
{
    return cspmd_axis_display(a, cspmd_axis_print_debug());
}

/* ---- a small string builder ----------------------------------------------- */

typedef struct sb {
    char *buf;
    size_t len, pos; /* pos counts every byte asked for (snprintf-style) */
} sb_t;

static void sb_add(sb_t *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void sb_add(sb_t *b, const char *fmt, ...)
{
    char *dst = b->buf && b->pos < b->len ? b->buf + b->pos : NULL;
    size_t room = dst ? b->len - b->pos : 0;
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (r > 0)
        b->pos += (size_t)r;
}

/* "{a, b}" in the given order. */
static void sb_group(sb_t *b, const cspmd_axis_t *axes, int n)
{
    sb_add(b, "{");
    for (int i = 0; i < n; i++)
        sb_add(b, "%s%s", i ? ", " : "", ad(axes[i]));
    sb_add(b, "}");
}

/* "{dp, cp}": outermost first, ties by name. */
static void sb_axis_set(sb_t *b, const cspmd_axis_t *axes_in, int n)
{
    cspmd_axis_t axes[MAXA];
    memcpy(axes, axes_in, (size_t)n * sizeof *axes);
    cspmd_axes_sort_outer(axes, n);
    sb_group(b, axes, n);
}

/* Sort by display name (Python's sorted(..., key=repr)). */
static void sort_name(cspmd_axis_t *axes, int n)
{
    for (int i = 1; i < n; i++) {
        cspmd_axis_t a = axes[i];
        int j = i;
        while (j > 0 && strcmp(ad(a), ad(axes[j - 1])) < 0) {
            axes[j] = axes[j - 1];
            j--;
        }
        axes[j] = a;
    }
}

/* "[a, b]" sorted by name. */
static void sb_name_list(sb_t *b, const cspmd_axis_t *axes_in, int n)
{
    cspmd_axis_t axes[MAXA];
    memcpy(axes, axes_in, (size_t)n * sizeof *axes);
    sort_name(axes, n);
    sb_add(b, "[");
    for (int i = 0; i < n; i++)
        sb_add(b, "%s%s", i ? ", " : "", ad(axes[i]));
    sb_add(b, "]");
}

/* "{a: V, b: R}" sorted by name. */
static void sb_type_dict(sb_t *b, const cspmd_axis_t *axes_in, const cspmd_ltype_t *lts_in, int n)
{
    cspmd_axis_t axes[MAXA];
    cspmd_ltype_t lts[MAXA];
    memcpy(axes, axes_in, (size_t)n * sizeof *axes);
    memcpy(lts, lts_in, (size_t)n * sizeof *lts);
    for (int i = 1; i < n; i++) {
        cspmd_axis_t a = axes[i];
        cspmd_ltype_t l = lts[i];
        int j = i;
        while (j > 0 && strcmp(ad(a), ad(axes[j - 1])) < 0) {
            axes[j] = axes[j - 1];
            lts[j] = lts[j - 1];
            j--;
        }
        axes[j] = a;
        lts[j] = l;
    }
    sb_add(b, "{");
    for (int i = 0; i < n; i++)
        sb_add(b, "%s%s: %s", i ? ", " : "", ad(axes[i]), cspmd_ltype_letter(lts[i]));
    sb_add(b, "}");
}

static cspmd_status_t fail(cspmd_status_t st, const sb_t *b)
{
    return cspmd_error_set(st, "%s", b->buf);
}

/* ---- the algorithm ---------------------------------------------------------- */

typedef struct group_pair {
    cspmd_axis_t s[MAXA], d[MAXA];
    int ns, nd;
} group_pair_t;

static int find_axis(const cspmd_axis_t *axes, int n, cspmd_axis_t a)
{
    for (int i = 0; i < n; i++)
        if (axes[i] == a)
            return i;
    return -1;
}

static int64_t sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

/* *ok = every axis of e[0..n) has a destination group and, with checking
 * on, no destination axis is global: then an unmatched suffix may decay
 * (its shards are dropped, the outer prefix kept) instead of failing.
 * Policy errors (an axis outside the current mesh) are returned. */
static cspmd_status_t may_decay(const cspmd_axis_t *e, int n, const group_pair_t *pairs,
                                int npairs, int *ok)
{
    *ok = 1;
    for (int i = 0; i < n && *ok; i++) {
        int found = 0;
        for (int p = 0; p < npairs && !found; p++) {
            if (find_axis(pairs[p].s, pairs[p].ns, e[i]) < 0)
                continue;
            found = 1;
            for (int q = 0; q < pairs[p].nd && cspmd_checker_enabled(); q++) {
                int global = 0;
                cspmd_status_t st = cspmd_axis_is_global(pairs[p].d[q], &global);
                if (st != CSPMD_OK)
                    return st;
                if (global)
                    *ok = 0;
            }
        }
        if (!found)
            *ok = 0;
    }
    return CSPMD_OK;
}

/* Remap spec through pairs, in place.  An entry's suffix that matches no
 * group decays when may_decay allows it (local axes keep no shard order). */
static cspmd_status_t remap_spec(cspmd_spec_t *spec, const group_pair_t *pairs, int npairs)
{
    cspmd_spec_t out = *spec;
    for (int d = 0; d < spec->ndim; d++) {
        int n = spec->nentry[d], k = 0;
        const cspmd_axis_t *e = spec->entry[d];
        cspmd_axis_t sub[MAXA];
        int i = 0;
        while (i < n) {
            int matched = 0;
            for (int end = i + 1; end <= n && !matched; end++) {
                for (int p = 0; p < npairs; p++) {
                    if (pairs[p].ns != end - i ||
                        memcmp(pairs[p].s, e + i, (size_t)(end - i) * sizeof *e) != 0)
                        continue;
                    for (int q = 0; q < pairs[p].nd && k < MAXA; q++)
                        sub[k++] = pairs[p].d[q];
                    i = end;
                    matched = 1;
                    break;
                }
            }
            if (!matched) {
                int decay;
                cspmd_status_t st = may_decay(e + i, n - i, pairs, npairs, &decay);
                if (st != CSPMD_OK)
                    return st;
                if (decay)
                    break;
                char m[MSG];
                sb_t b = {m, sizeof m, 0};
                sb_add(&b, "Cannot remap PartitionSpec: dim %d is sharded on ", d);
                if (n == 1) {
                    sb_add(&b, "%s", ad(e[0]));
                } else {
                    sb_add(&b, "(");
                    for (int q = 0; q < n; q++)
                        sb_add(&b, "%s%s", q ? ", " : "", ad(e[q]));
                    sb_add(&b, ")");
                }
                sb_add(&b, " which does not exactly match any remapped group.");
                return fail(CSPMD_ERR_SPMD_TYPE, &b);
            }
        }
        memset(out.entry[d], 0, sizeof out.entry[d]);
        memcpy(out.entry[d], sub, (size_t)k * sizeof *sub);
        out.nentry[d] = (uint8_t)k;
    }
    *spec = out;
    return CSPMD_OK;
}

/* *same = flatten(a) == flatten(b); flatten's error otherwise. */
static cspmd_status_t same_region(const cspmd_axis_t *a, int na, const cspmd_axis_t *b, int nb,
                                  int *same)
{
    cspmd_axis_t fa, fb;
    cspmd_status_t st = cspmd_axes_flatten(a, na, &fa);
    if (st == CSPMD_OK)
        st = cspmd_axes_flatten(b, nb, &fb);
    if (st == CSPMD_OK)
        *same = fa == fb;
    return st;
}

/*
 * The compatibility check.  dlt == NULL: axes-only mode (destination types
 * derived).  On success *out is the new type (with the remapped spec).
 */
static cspmd_status_t compat(cspmd_type_t src, const cspmd_axis_t *dax, const cspmd_ltype_t *dlt,
                             int nd, cspmd_type_t *out)
{
    int axes_only = dlt == NULL;
    cspmd_axis_t sax[MAXA];
    cspmd_ltype_t slt[MAXA];
    int ns = cspmdi_type_axes(src, sax, slt);
    char m[MSG];
    sb_t b = {m, sizeof m, 0};
    m[0] = '\0';

    /* 1. shared axes keep their type */
    cspmd_axis_t rax[MAXA];
    cspmd_ltype_t rlt[MAXA];
    int nr = 0;
    cspmd_axis_t srem[MAXA], drem[MAXA];
    int nsr = 0, ndr = 0;
    group_pair_t pairs[2 * MAXA];
    int npairs = 0;
    for (int i = 0; i < ns; i++) {
        int j = find_axis(dax, nd, sax[i]);
        if (j < 0) {
            srem[nsr++] = sax[i];
            continue;
        }
        if (!axes_only && dlt[j] != slt[i]) {
            sb_add(&b, "Shared mesh axis %s changes local type from %s to %s under "
                       "reinterpret_mesh.",
                   ad(sax[i]), cspmd_ltype_letter(slt[i]), cspmd_ltype_letter(dlt[j]));
            return fail(CSPMD_ERR_SPMD_TYPE, &b);
        }
        rax[nr] = sax[i];
        rlt[nr++] = slt[i];
        pairs[npairs].s[0] = pairs[npairs].d[0] = sax[i];
        pairs[npairs].ns = pairs[npairs].nd = 1;
        npairs++;
    }
    for (int j = 0; j < nd; j++)
        if (find_axis(sax, ns, dax[j]) < 0)
            drem[ndr++] = dax[j];

    /* 2. nothing foreign: the type (and spec) pass through */
    if (nsr == 0) {
        *out = src;
        return CSPMD_OK;
    }
    if (ndr == 0) {
        if (axes_only) {
            sb_add(&b, "Operand has axes ");
            sb_name_list(&b, srem, nsr);
            sb_add(&b, " not in the current mesh ");
            sb_name_list(&b, dax, nd);
            sb_add(&b, " and has no destination to fold into.");
        } else {
            cspmd_ltype_t srlt[MAXA];
            for (int i = 0; i < nsr; i++)
                srlt[i] = cspmd_type_get(src, srem[i]);
            sb_add(&b, "Cross-mesh reinterpretation is incomplete: ");
            sb_type_dict(&b, srem, srlt, nsr);
            sb_add(&b, " vs ");
            sb_type_dict(&b, dax, dlt, nd);
            sb_add(&b, ".");
        }
        return fail(CSPMD_ERR_SPMD_TYPE, &b);
    }

    /* 3. two-pointer walk, outermost first */
    cspmd_axes_sort_outer(srem, nsr);
    cspmd_axes_sort_outer(drem, ndr);
    int i = 0, j = 0;
    int64_t scum = 1, dcum = 1;
    group_pair_t g;
    memset(&g, 0, sizeof g);
    cspmd_ltype_t sg_t = CSPMD_LT_NONE, dg_t = CSPMD_LT_NONE;
    while (i < nsr || j < ndr) {
        if (scum <= dcum && i < nsr) {
            cspmd_axis_t a = srem[i];
            cspmd_ltype_t t = cspmd_type_get(src, a);
            scum = sat_mul(scum, cspmd_axis_size(a));
            g.s[g.ns++] = a;
            if (sg_t == CSPMD_LT_NONE) {
                sg_t = t;
            } else if (sg_t != t) {
                sb_add(&b, "Axes ");
                sb_group(&b, g.s, g.ns);
                sb_add(&b, " would need to be flattened, but ");
                for (int q = 0; q < g.ns - 1; q++)
                    sb_add(&b, "%s%s", q ? ", " : "", ad(g.s[q]));
                sb_add(&b, " %s type %s while %s has type %s.", g.ns <= 2 ? "has" : "have",
                       cspmd_ltype_letter(sg_t), ad(a), cspmd_ltype_letter(t));
                if (axes_only)
                    sb_add(&b, " Check that the operand has the local SPMD types you expect "
                               "and that the current mesh is correct for this region of code.");
                return fail(CSPMD_ERR_SPMD_TYPE, &b);
            }
            i++;
        } else if (j < ndr) {
            cspmd_axis_t a = drem[j];
            dcum = sat_mul(dcum, cspmd_axis_size(a));
            g.d[g.nd++] = a;
            if (!axes_only) {
                cspmd_ltype_t t = dlt[find_axis(dax, nd, a)];
                if (dg_t == CSPMD_LT_NONE) {
                    dg_t = t;
                } else if (dg_t != t) {
                    sb_add(&b, "Axes ");
                    sb_group(&b, g.d, g.nd);
                    sb_add(&b, " would need to be flattened, but they have mixed local types "
                               "in the destination.");
                    return fail(CSPMD_ERR_SPMD_TYPE, &b);
                }
            }
            j++;
        } else {
            break;
        }
        if (scum == dcum) {
            if (dg_t != CSPMD_LT_NONE && sg_t != dg_t) {
                sb_add(&b, "Source group ");
                sb_group(&b, g.s, g.ns);
                sb_add(&b, " has type %s but destination group ", cspmd_ltype_letter(sg_t));
                sb_group(&b, g.d, g.nd);
                sb_add(&b, " has type %s.", cspmd_ltype_letter(dg_t));
                return fail(CSPMD_ERR_SPMD_TYPE, &b);
            }
            int same = 0;
            cspmd_status_t fst = same_region(g.s, g.ns, g.d, g.nd, &same);
            if (fst != CSPMD_OK)
                return fst;
            if (!same) {
                sb_add(&b, "Source group ");
                sb_group(&b, g.s, g.ns);
                sb_add(&b, " and destination group ");
                sb_group(&b, g.d, g.nd);
                sb_add(&b, " flatten to different rank regions. Set MESH_AXIS_DEBUG=1 to see "
                           "underlying size/stride layouts.");
                return fail(CSPMD_ERR_SPMD_TYPE, &b);
            }
            for (int q = 0; q < g.nd; q++) {
                rax[nr] = g.d[q];
                rlt[nr++] = sg_t;
            }
            pairs[npairs++] = g;
            memset(&g, 0, sizeof g);
            scum = dcum = 1;
            sg_t = dg_t = CSPMD_LT_NONE;
        }
    }
    if (scum != 1 || dcum != 1) {
        sb_add(&b, "The source and destination meshes do not appear to be related. Set "
                   "MESH_AXIS_DEBUG=1 to see underlying size/stride layouts.");
        return fail(CSPMD_ERR_SPMD_TYPE, &b);
    }

    /* 4. the spec */
    cspmd_spec_t spec;
    cspmd_status_t st = cspmd_type_spec_plain(src, "reinterpret_mesh", &spec);
    if (st != CSPMD_OK)
        return st;
    if (spec.ndim >= 0) {
        st = remap_spec(&spec, pairs, npairs);
        if (st != CSPMD_OK)
            return st;
    }
    return cspmd_type_make(rax, rlt, nr, spec.ndim >= 0 ? &spec : NULL, out);
}

/* Validate and normalize a destination axis list (trivial and repeated
 * axes dropped). */
static cspmd_status_t dst_axes_norm(const char *fn, const cspmd_axis_t *in, int n,
                                    cspmd_axis_t *out, int *nout)
{
    if (n < 0 || (n > 0 && in == NULL))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "%s: bad axis list (n = %d)", fn, n);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!cspmdi_axis_valid(in[i]))
            return cspmd_error_set(CSPMD_ERR_MISUSE, "%s: unknown axis id %u", fn,
                                   (unsigned)in[i]);
        if (cspmd_axis_size(in[i]) == 1 || find_axis(out, m, in[i]) >= 0)
            continue;
        if (m == MAXA)
            return cspmd_error_set(CSPMD_ERR_MISUSE, "%s: more than %d axes", fn, MAXA);
        out[m++] = in[i];
    }
    *nout = m;
    return cspmd_axes_check_orthogonal(out, m);
}

cspmd_status_t cspmd_type_reinterpret_mesh(cspmd_type_t src, cspmd_type_t dst_full,
                                           const cspmd_axis_t *dst_axes, int n,
                                           cspmd_type_t *out)
{
    static const char fn[] = "cspmd_type_reinterpret_mesh";
    if (out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "%s: out is NULL", fn);
    if (!cspmdi_type_valid(src))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "%s: unknown source type id %u", fn,
                               (unsigned)src);
    if (!cspmdi_type_valid(dst_full))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "%s: unknown destination type id %u", fn,
                               (unsigned)dst_full);
    if (src == CSPMD_TYPE_UNTYPED)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "reinterpret_mesh requires a tensor with an existing local SPMD "
                               "type.");
    cspmd_axis_t dax[MAXA];
    cspmd_ltype_t dlt[MAXA];
    int nd = 0;
    if (dst_full != CSPMD_TYPE_UNTYPED) {
        if (n != 0)
            return cspmd_error_set(CSPMD_ERR_MISUSE,
                                   "%s: pass either a full destination type or axes, not both",
                                   fn);
        nd = cspmdi_type_axes(dst_full, dax, dlt);
        return compat(src, dax, dlt, nd, out);
    }
    cspmd_status_t st = dst_axes_norm(fn, dst_axes, n, dax, &nd);
    if (st != CSPMD_OK)
        return st;
    return compat(src, dax, NULL, nd, out);
}

cspmd_status_t cspmd_type_to_mesh(cspmd_type_t t, int arg_index, cspmd_type_t *out)
{
    if (out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_to_mesh: out is NULL");
    cspmd_axis_t tax[MAXA], mesh[MAXA];
    int nt = cspmdi_type_axes(t, tax, NULL);
    if (nt < 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_type_to_mesh: unknown type id %u",
                               (unsigned)t);
    *out = t;
    if (nt == 0)
        return CSPMD_OK; /* untyped or {}: nothing to fold */
    int nm = cspmdi_mesh_axes(cspmdi_mesh_id(), mesh);
    if (nm < 0)
        return CSPMD_OK; /* no current mesh: nothing is auto-converted */
    int inside = 1;
    for (int i = 0; i < nt && inside; i++)
        inside = find_axis(mesh, nm, tax[i]) >= 0;
    if (inside)
        return CSPMD_OK; /* the hot path: already on the mesh */
    cspmd_status_t st = compat(t, mesh, NULL, nm, out);
    if (st == CSPMD_OK)
        return st;
    *out = t;
    char reason[MSG], m[MSG + 512];
    snprintf(reason, sizeof reason, "%s", cspmd_last_error());
    sb_t b = {m, sizeof m, 0};
    sb_add(&b, "args[%d] cannot be auto-reinterpreted from ", arg_index);
    sb_axis_set(&b, tax, nt);
    sb_add(&b, " to the current mesh ");
    sb_axis_set(&b, mesh, nm);
    sb_add(&b, ". %s", reason);
    return fail(st, &b);
}

/* ---- cross-mesh advice (an error path: may allocate) ----------------------- */

#define RANKS_MAX 65536

/* The ranks from zero of axis, sorted, malloc'd into *out; returns the
 * count, -1 when too many or out of memory. */
static long axis_ranks(cspmd_axis_t axis, int64_t **out)
{
    int64_t sz[CSPMD_MAX_MODES], st[CSPMD_MAX_MODES];
    int m = cspmd_axis_layout(axis, sz, st);
    int64_t total = cspmd_axis_size(axis);
    *out = NULL;
    if (m < 0 || total < 1 || total > RANKS_MAX)
        return -1;
    int64_t *r = malloc((size_t)total * sizeof *r);
    if (r == NULL)
        return -1;
    int64_t ctr[CSPMD_MAX_MODES] = {0};
    for (long k = 0; k < total; k++) {
        int64_t x = 0;
        for (int q = 0; q < m; q++)
            x += ctr[q] * st[q];
        r[k] = x;
        for (int q = m - 1; q >= 0 && ++ctr[q] == sz[q]; q--)
            ctr[q] = 0;
    }
    for (long a = 1; a < total; a++) { /* insertion sort: small sets */
        int64_t v = r[a];
        long c = a;
        while (c > 0 && r[c - 1] > v) {
            r[c] = r[c - 1];
            c--;
        }
        r[c] = v;
    }
    *out = r;
    return (long)total;
}

static void sb_ranks(sb_t *b, cspmd_axis_t axis)
{
    int64_t *r;
    long n = axis_ranks(axis, &r);
    sb_add(b, "{");
    for (long i = 0; i < n; i++)
        sb_add(b, "%s%lld", i ? ", " : "", (long long)r[i]);
    if (n < 0)
        sb_add(b, "...");
    sb_add(b, "}");
    free(r);
}

static int is_lt(cspmd_axis_t a, cspmd_axis_t b)
{
    return a != b && cspmd_axis_le(a, b);
}

static int is_named(cspmd_axis_t a)
{
    const char *d = cspmd_axis_display(a, 0);
    return strncmp(d, "MeshAxis(", 9) != 0 && d[0] != '{';
}

typedef struct universe {
    cspmd_axis_t *ax;
    int n;
} universe_t;

/* Named, non-trivial axes that are members or strict sub-axes of ops. */
static void universe_build(universe_t *u, const cspmd_axis_t *ops, int nops)
{
    u->ax = NULL;
    u->n = 0;
    int cap = 0;
    for (cspmd_axis_t id = 1; cspmdi_axis_valid(id); id++) {
        if (cspmd_axis_size(id) < 2)
            continue;
        int rel = find_axis(ops, nops, id) >= 0;
        for (int i = 0; i < nops && !rel; i++)
            rel = is_lt(id, ops[i]);
        if (!rel || !is_named(id))
            continue;
        if (u->n == cap) {
            int nc = cap ? 2 * cap : 16;
            cspmd_axis_t *p = realloc(u->ax, (size_t)nc * sizeof *p);
            if (p == NULL)
                return;
            u->ax = p;
            cap = nc;
        }
        u->ax[u->n++] = id;
    }
}

static void sub_axis_advice(sb_t *b, cspmd_axis_t sub, cspmd_axis_t super,
                            const cspmd_axis_t *sub_set, int nsub, const universe_t *u)
{
    cspmd_axis_t complement = 0;
    int found = 0;
    for (int i = 0; i < u->n && !found; i++) {
        cspmd_axis_t c = u->ax[i];
        cspmd_axis_t pair[2] = {sub, c}, flat;
        if (c == sub || !cspmd_axis_le(c, super) || !cspmd_axes_orthogonal(pair, 2))
            continue;
        if (cspmd_axes_flatten(pair, 2, &flat) == CSPMD_OK && flat == super) {
            complement = c;
            found = 1;
        }
    }
    if (b->pos > 0)
        sb_add(b, " ");
    sb_add(b, "%s is a sub-axis of %s (ranks ", ad(sub), ad(super));
    sb_ranks(b, sub);
    sb_add(b, " vs ");
    sb_ranks(b, super);
    sb_add(b, "), so the operand with axes ");
    sb_axis_set(b, sub_set, nsub);
    if (found)
        sb_add(b, " is missing axis %s.", ad(complement));
    else
        sb_add(b, " is missing some mesh axes.");
}

/* Universe axes not in set and orthogonal to each member, sorted by name. */
static int complements(const cspmd_axis_t *set, int n, const universe_t *u, cspmd_axis_t *out,
                       int cap)
{
    int k = 0;
    for (int i = 0; i < u->n && k < cap; i++) {
        cspmd_axis_t c = u->ax[i];
        if (find_axis(set, n, c) >= 0)
            continue;
        int ok = 1;
        for (int j = 0; j < n && ok; j++) {
            cspmd_axis_t pair[2] = {c, set[j]};
            ok = cspmd_axes_orthogonal(pair, 2);
        }
        if (ok)
            out[k++] = c;
    }
    for (int i = 1; i < k; i++) {
        cspmd_axis_t a = out[i];
        int j = i;
        while (j > 0 && strcmp(ad(a), ad(out[j - 1])) < 0) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = a;
    }
    return k;
}

/* Flattened region of a set; 0 when not orthogonal (or empty). */
static int region_of(const cspmd_axis_t *set, int n, cspmd_axis_t *out)
{
    if (n == 0 || !cspmd_axes_orthogonal(set, n))
        return 0;
    return cspmd_axes_flatten(set, n, out) == CSPMD_OK;
}

/* 1 if two sorted rank lists share a rank other than 0. */
static int overlap_beyond_zero(const int64_t *a, long na, const int64_t *b, long nb)
{
    long i = 0, j = 0;
    while (i < na && j < nb) {
        if (a[i] < b[j])
            i++;
        else if (a[i] > b[j])
            j++;
        else if (a[i] != 0)
            return 1;
        else
            i++, j++;
    }
    return 0;
}

static void pair_advice(sb_t *b, const cspmd_axis_t *A, int na, const cspmd_axis_t *B, int nb)
{
    /* 1. compatible with uniform R types? */
    cspmd_ltype_t rs[MAXA];
    for (int i = 0; i < MAXA; i++)
        rs[i] = CSPMD_LT_R;
    cspmd_type_t ta, tb, tmp;
    if (cspmd_type_make(A, rs, na, NULL, &ta) == CSPMD_OK &&
        cspmd_type_make(B, rs, nb, NULL, &tb) == CSPMD_OK &&
        compat(ta, B, rs, nb, &tmp) == CSPMD_OK) {
        const cspmd_axis_t *fine = na >= nb ? A : B, *coarse = na >= nb ? B : A;
        int nf = na >= nb ? na : nb, nc = na >= nb ? nb : na;
        if (b->pos > 0)
            sb_add(b, " ");
        sb_add(b, "The operand axes ");
        sb_axis_set(b, coarse, nc);
        sb_add(b, " and ");
        sb_axis_set(b, fine, nf);
        sb_add(b, " are cross-mesh compatible. Use reinterpret_mesh() to convert the operand "
                  "with axes ");
        sb_axis_set(b, coarse, nc);
        sb_add(b, " to axes ");
        sb_axis_set(b, fine, nf);
        sb_add(b, " before this operation.");
        return;
    }
    /* 2. sub-axis relationships among the non-shared axes */
    cspmd_axis_t ao[MAXA], bo[MAXA], all[2 * MAXA];
    int nao = 0, nbo = 0, nall = 0;
    for (int i = 0; i < na; i++) {
        all[nall++] = A[i];
        if (find_axis(B, nb, A[i]) < 0)
            ao[nao++] = A[i];
    }
    for (int i = 0; i < nb; i++) {
        if (find_axis(A, na, B[i]) < 0) {
            bo[nbo++] = B[i];
            all[nall++] = B[i];
        }
    }
    if (nao == 0 || nbo == 0)
        return;
    universe_t u;
    universe_build(&u, all, nall);
    sort_name(ao, nao);
    sort_name(bo, nbo);
    int found = 0;
    for (int i = 0; i < nao; i++)
        for (int j = 0; j < nbo; j++) {
            if (is_lt(ao[i], bo[j])) {
                found = 1;
                sub_axis_advice(b, ao[i], bo[j], A, na, &u);
            } else if (is_lt(bo[j], ao[i])) {
                found = 1;
                sub_axis_advice(b, bo[j], ao[i], B, nb, &u);
            }
        }
    /* 3. partial rank overlap */
    cspmd_axis_t ra, rb;
    if (!found && region_of(ao, nao, &ra) && region_of(bo, nbo, &rb) && ra != rb) {
        int64_t *xa = NULL, *xb = NULL;
        long ka = axis_ranks(ra, &xa), kb = axis_ranks(rb, &xb);
        if (ka > 0 && kb > 0 && overlap_beyond_zero(xa, ka, xb, kb)) {
            cspmd_axis_t ma[64], mb[64];
            int nma = complements(A, na, &u, ma, 64), nmb = complements(B, nb, &u, mb, 64);
            if (nma > 0 || nmb > 0) {
                if (b->pos > 0)
                    sb_add(b, " ");
                sb_add(b, "The non-shared axes ");
                sb_axis_set(b, ao, nao);
                sb_add(b, " and ");
                sb_axis_set(b, bo, nbo);
                sb_add(b, " partially overlap. ");
                for (int side = 0; side < 2; side++) {
                    const cspmd_axis_t *set = side ? B : A, *miss = side ? mb : ma;
                    int nset = side ? nb : na, nmiss = side ? nmb : nma;
                    if (nmiss == 0)
                        continue;
                    int first = side == 0 || nma == 0;
                    sb_add(b, "%s operand with axes ", first ? "The" : "; the");
                    sb_axis_set(b, set, nset);
                    sb_add(b, " is missing ");
                    for (int q = 0; q < nmiss; q++)
                        sb_add(b, "%s%s", q ? ", " : "", ad(miss[q]));
                }
                sb_add(b, ".");
            }
        }
        free(xa);
        free(xb);
    }
    free(u.ax);
}

size_t cspmd_cross_mesh_advice(const cspmd_type_t *types, int n, char *buf, size_t len)
{
    sb_t b = {buf, buf ? len : 0, 0};
    if (b.len > 0)
        buf[0] = '\0';
    if (types == NULL || n < 2)
        return 0;
    char saved[MSG];
    snprintf(saved, sizeof saved, "%s", cspmd_last_error());
    /* distinct axis sets, first occurrence order; advice is about the first
     * 64 (an error's hint text: the error itself names every operand) */
    cspmd_axis_t sets[64][MAXA];
    int nsets[64], k = 0;
    for (int i = 0; i < n && k < 64; i++) {
        cspmd_axis_t ax[MAXA];
        int m = cspmdi_type_axes(types[i], ax, NULL);
        if (m < 0)
            continue;
        int dup = 0;
        for (int s = 0; s < k && !dup; s++) {
            if (nsets[s] != m)
                continue;
            int same = 1;
            for (int q = 0; q < m && same; q++)
                same = find_axis(sets[s], m, ax[q]) >= 0;
            dup = same;
        }
        if (dup)
            continue;
        memcpy(sets[k], ax, (size_t)m * sizeof *ax);
        nsets[k++] = m;
    }
    for (int i = 0; i < k; i++)
        for (int j = i + 1; j < k; j++)
            pair_advice(&b, sets[i], nsets[i], sets[j], nsets[j]);
    cspmd_error_set(CSPMD_OK, "%s", saved);
    return b.pos;
}
