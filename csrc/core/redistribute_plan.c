/*
 * redistribute_plan.c -- a spec-to-spec redistribution as a list of
 * per-axis collectives (spmd.redistribute_spec).
 *
 * The tensor's type says, per mesh axis, S(d) at some position of dim d's
 * spec entry, or R, I, P.  The wanted type says the same.  Every step is a
 * collective global mode accepts as it stands: one that takes a shard away
 * (all_gather, all_to_all, redistribute(S, P)) works on the innermost axis
 * of its dim's entry, and one that adds a shard (reduce_scatter,
 * convert(R|I, S), all_to_all) puts it innermost.  So the plan
 *   1. takes shards off every dim whose entry is not a prefix of the wanted
 *      one, innermost first: all_to_all straight onto the wanted dim when
 *      that keeps the wanted dim's entry a prefix, else all_gather (to I
 *      when I is wanted, else R) or redistribute(S, P) when P is wanted;
 *   2. changes the unsharded axes' types: all_reduce(P, R|I), and
 *      redistribute between R, I and P (the per-axis, meaning-preserving
 *      conversion: convert(R, I), convert(I, P) and convert(S, P) alone
 *      need expert mode);
 *   3. adds the missing shards dim by dim, outermost first:
 *      reduce_scatter(P, S) from P, convert(R|I, S) from R or I.
 * Local sizes are tracked so that a split that does not divide evenly is
 * refused before anything runs.
 */
#include <string.h>

#include "core.h"

typedef struct state {
    int ndim;
    int64_t size[CSPMD_MAX_DIMS];
    int nent[CSPMD_MAX_DIMS];
    cspmd_axis_t ent[CSPMD_MAX_DIMS][CSPMD_MAX_AXES];
} state_t;

typedef struct plan {
    cspmd_redist_step_t *steps;
    int cap, n;
} plan_t;

static const char *ax(cspmd_axis_t a)
{
    return cspmd_axis_display(a, cspmd_axis_print_debug());
}

static cspmd_ctype_t ct(cspmd_ltype_t lt, int32_t dim)
{
    cspmd_ctype_t t = {lt, dim};
    return t;
}

static void emit(plan_t *p, cspmd_coll_t op, cspmd_axis_t a, cspmd_ctype_t src, cspmd_ctype_t dst)
{
    if (p->n < p->cap) {
        cspmd_redist_step_t *s = &p->steps[p->n];
        s->op = op;
        s->axis = a;
        s->src = src;
        s->dst = dst;
    }
    p->n++;
}

/* Where axis a shards (dim and position) in spec s; -1 when it does not. */
static int find(const cspmd_spec_t *s, cspmd_axis_t a, int *pos)
{
    for (int d = 0; s != NULL && d < s->ndim; d++)
        for (int e = 0; e < s->nentry[d]; e++)
            if (s->entry[d][e] == a) {
                *pos = e;
                return d;
            }
    return -1;
}

/* Is dim d's current entry, with `extra` appended (0 for none), a prefix
 * of the wanted one? */
static int prefix(const state_t *st, const cspmd_spec_t *want, int d, cspmd_axis_t extra)
{
    int n = st->nent[d], wn = want != NULL && d < want->ndim ? want->nentry[d] : 0;
    if (n + (extra != 0) > wn)
        return 0;
    for (int e = 0; e < n; e++)
        if (st->ent[d][e] != want->entry[d][e])
            return 0;
    return extra == 0 || want->entry[d][n] == extra;
}

static cspmd_status_t split_check(const state_t *st, int d, cspmd_axis_t a)
{
    int64_t k = cspmd_axis_size(a);
    if (k < 1 || st->size[d] % k != 0)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "redistribute_spec: dim %d of local size %lld cannot be sharded "
                               "evenly over axis %s of size %lld",
                               d, (long long)st->size[d], ax(a), (long long)k);
    return CSPMD_OK;
}

static const char *type_text(cspmd_type_t t, char *buf, size_t len)
{
    cspmd_type_format(t, buf, len);
    return buf;
}

cspmd_status_t cspmd_redistribute_plan(cspmd_type_t cur, cspmd_type_t src, cspmd_type_t dst,
                                       const int64_t *sizes, int ndim,
                                       cspmd_redist_step_t *steps, int cap, int *nsteps)
{
    if (cur == CSPMD_TYPE_UNTYPED || cur == CSPMD_TYPE_EMPTY)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "redistribute_spec: the tensor has no SPMD type to plan from "
                               "(annotate it with assert_type)");
    if (!cspmdi_type_valid(cur) || !cspmdi_type_valid(src) || !cspmdi_type_valid(dst) ||
        nsteps == NULL || cap < 0 || (cap > 0 && steps == NULL) || (ndim > 0 && sizes == NULL))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_redistribute_plan: bad arguments");
    if (ndim < 0 || ndim > CSPMD_MAX_DIMS)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "redistribute_spec: tensors of 0 to %d dims, got %d",
                               CSPMD_MAX_DIMS, ndim);
    char a_txt[256], b_txt[256];
    if (src != cur)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "redistribute_spec: src_partition_spec does not describe the "
                               "tensor: it is %s, src_partition_spec says %s",
                               type_text(cur, a_txt, sizeof a_txt),
                               type_text(src, b_txt, sizeof b_txt));
    const cspmd_spec_t *cs = cspmdi_type_spec_ref(cur), *ws = cspmdi_type_spec_ref(dst);
    if (ws != NULL && ws->ndim != ndim)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "redistribute_spec: dst_partition_spec has %d dims, the tensor %d",
                               ws->ndim, ndim);

    /* The wanted local type of every axis: dst's, else kept (R, I, P) or,
     * for a shard, R. */
    cspmd_axis_t axes[CSPMD_MAX_AXES];
    cspmd_ltype_t lt[CSPMD_MAX_AXES], want[CSPMD_MAX_AXES];
    int na = cspmdi_type_axes(cur, axes, lt);
    for (int i = 0; i < cspmd_type_naxes(dst); i++) {
        cspmd_axis_t a;
        cspmd_ltype_t l;
        cspmd_type_entry(dst, i, &a, &l);
        if (cspmd_type_get(cur, a) == CSPMD_LT_NONE)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "redistribute_spec: axis %s is in the destination but not in "
                                   "the tensor's type %s",
                                   ax(a), type_text(cur, a_txt, sizeof a_txt));
    }
    for (int i = 0; i < na; i++) {
        cspmd_ltype_t w = cspmd_type_get(dst, axes[i]);
        int pos, cd = find(cs, axes[i], &pos);
        int global = 1; /* in local mode the tensor's spec is all there is */
        cspmd_status_t gst = cspmd_checker_local() ? CSPMD_OK
                                                   : cspmd_axis_is_global(axes[i], &global);
        if (gst != CSPMD_OK)
            return gst;
        if (lt[i] == CSPMD_LT_V && cd < 0) {
            /* Varying with no spec: a local axis; it can only stay so. */
            if (w != CSPMD_LT_NONE && w != CSPMD_LT_V)
                return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                       "redistribute_spec: axis %s is Varying with no "
                                       "PartitionSpec entry: there is no global value to "
                                       "redistribute on it",
                                       ax(axes[i]));
            w = CSPMD_LT_V;
        } else if (!global) {
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "redistribute_spec: axis %s is a local axis; spec-to-spec "
                                   "redistribution plans global axes only",
                                   ax(axes[i]));
        } else if (w == CSPMD_LT_NONE) {
            w = lt[i] == CSPMD_LT_V ? CSPMD_LT_R : lt[i];
        } else if (w == CSPMD_LT_V && find(ws, axes[i], &pos) < 0) {
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "redistribute_spec: axis %s is Varying in the destination "
                                   "with no dst_partition_spec entry",
                                   ax(axes[i]));
        }
        want[i] = w;
    }

    state_t st;
    memset(&st, 0, sizeof st);
    st.ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        if (sizes[d] < 0)
            return cspmd_error_set(CSPMD_ERR_VALUE, "redistribute_spec: negative size");
        st.size[d] = sizes[d];
        st.nent[d] = cs != NULL && d < cs->ndim ? cs->nentry[d] : 0;
        if (st.nent[d])
            memcpy(st.ent[d], cs->entry[d], (size_t)st.nent[d] * sizeof(cspmd_axis_t));
    }
    if (cs != NULL && cs->ndim != ndim)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "redistribute_spec: the tensor's PartitionSpec has %d dims, the "
                               "tensor %d",
                               cs->ndim, ndim);
    plan_t p = {steps, cap, 0};
    cspmd_status_t rc;

    /* 1. Take shards off, innermost first, until every entry is a prefix. */
    for (int d = 0; d < ndim; d++) {
        while (!prefix(&st, ws, d, 0)) {
            cspmd_axis_t a = st.ent[d][--st.nent[d]];
            int i = 0, pos;
            while (axes[i] != a)
                i++;
            int64_t k = cspmd_axis_size(a);
            int j = want[i] == CSPMD_LT_V ? find(ws, a, &pos) : -1;
            st.size[d] *= k;
            if (j >= 0 && j != d && prefix(&st, ws, j, a)) {
                if ((rc = split_check(&st, j, a)) != CSPMD_OK)
                    return rc;
                emit(&p, CSPMD_COLL_ALL_TO_ALL, a, ct(CSPMD_LT_V, d), ct(CSPMD_LT_V, j));
                st.size[j] /= k;
                st.ent[j][st.nent[j]++] = a;
            } else if (want[i] == CSPMD_LT_P) {
                emit(&p, CSPMD_COLL_REDISTRIBUTE, a, ct(CSPMD_LT_V, d), ct(CSPMD_LT_P, -1));
                lt[i] = CSPMD_LT_P;
            } else {
                cspmd_ltype_t to = want[i] == CSPMD_LT_I ? CSPMD_LT_I : CSPMD_LT_R;
                emit(&p, CSPMD_COLL_ALL_GATHER, a, ct(CSPMD_LT_V, d), ct(to, -1));
                lt[i] = to;
            }
        }
    }
    /* 2. The unsharded axes' types (an axis to be sharded keeps R, I or P
     * for step 3: P -> S is one reduce_scatter). */
    for (int i = 0; i < na; i++) {
        cspmd_ltype_t from = lt[i], to = want[i];
        if (from == CSPMD_LT_V || to == CSPMD_LT_V || from == to)
            continue;
        emit(&p, from == CSPMD_LT_P ? CSPMD_COLL_ALL_REDUCE : CSPMD_COLL_REDISTRIBUTE, axes[i],
             ct(from, -1), ct(to, -1));
        lt[i] = to;
    }
    /* 3. Add the missing shards, outermost first. */
    for (int d = 0; ws != NULL && d < ndim; d++) {
        while (st.nent[d] < ws->nentry[d]) {
            cspmd_axis_t a = ws->entry[d][st.nent[d]];
            int i = 0;
            while (axes[i] != a)
                i++;
            if ((rc = split_check(&st, d, a)) != CSPMD_OK)
                return rc;
            if (lt[i] == CSPMD_LT_P)
                emit(&p, CSPMD_COLL_REDUCE_SCATTER, a, ct(CSPMD_LT_P, -1), ct(CSPMD_LT_V, d));
            else
                emit(&p, CSPMD_COLL_CONVERT, a, ct(lt[i], -1), ct(CSPMD_LT_V, d));
            st.size[d] /= cspmd_axis_size(a);
            st.ent[d][st.nent[d]++] = a;
            lt[i] = CSPMD_LT_V;
        }
    }
    *nsteps = p.n;
    if (p.n > cap)
        return cspmd_error_set(CSPMD_ERR_NOMEM,
                               "cspmd_redistribute_plan: %d steps, room for %d", p.n, cap);
    return CSPMD_OK;
}

cspmd_status_t cspmd_redistribute_src(cspmd_type_t cur, const int64_t *spec, int n,
                                      cspmd_type_t *out)
{
    if (cur == CSPMD_TYPE_UNTYPED || cur == CSPMD_TYPE_EMPTY)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "redistribute_spec: the tensor has no SPMD type to plan from "
                               "(annotate it with assert_type)");
    if (out == NULL || n < 0 || (n > 0 && spec == NULL) || !cspmdi_type_valid(cur))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_redistribute_src: bad arguments");
    cspmd_spec_t s;
    memset(&s, 0, sizeof s);
    s.ndim = -1;
    if (n > 0) {
        int k = 0;
        int64_t nd = spec[k++];
        if (nd < 0 || nd > CSPMD_MAX_DIMS)
            return cspmd_error_set(CSPMD_ERR_VALUE,
                                   "cspmd: partition specs support at most %d tensor dims",
                                   CSPMD_MAX_DIMS);
        s.ndim = (int8_t)nd;
        for (int64_t d = 0; d < nd; d++) {
            int64_t m = k < n ? spec[k++] : -1;
            if (m < 0 || m > CSPMD_MAX_AXES || m > n - k)
                return cspmd_error_set(CSPMD_ERR_MISUSE,
                                       "cspmd_redistribute_src: malformed spec encoding");
            s.nentry[d] = (uint8_t)m;
            for (int64_t j = 0; j < m; j++) {
                if (spec[k] < 0 || spec[k] > UINT32_MAX)
                    return cspmd_error_set(CSPMD_ERR_MISUSE,
                                           "cspmd_redistribute_src: axis id out of range");
                s.entry[d][j] = (cspmd_axis_t)spec[k++];
            }
        }
        if (k != n)
            return cspmd_error_set(CSPMD_ERR_MISUSE,
                                   "cspmd_redistribute_src: malformed spec encoding");
    }
    /* The tensor's local types, with every axis the spec names V: the
     * type that src_partition_spec claims, for the planner to compare
     * with the tensor's own. */
    cspmd_axis_t axes[CSPMD_MAX_AXES];
    cspmd_ltype_t lt[CSPMD_MAX_AXES];
    int na = cspmdi_type_axes(cur, axes, lt);
    for (int i = 0; i < na; i++)
        for (int d = 0; d < s.ndim; d++)
            for (int j = 0; j < s.nentry[d]; j++)
                if (s.entry[d][j] == axes[i])
                    lt[i] = CSPMD_LT_V;
    return cspmd_type_make(axes, lt, na, s.ndim >= 0 ? &s : NULL, out);
}
