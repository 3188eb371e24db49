/*
 * global_infer.c -- global SPMD types (typecheck(local=False)): the operand
 * check (V on a global axis needs a partition spec entry, and a spec entry
 * needs V) and global inference of one op on top of its local type: the
 * shard axes in the order the operands' multi-axis spec entries impose,
 * one shard rule run per axis (shard_rules.c), the local/global
 * correspondence with V -> P promotion, and each result's spec.
 */
#include <stdio.h>
#include <string.h>

#include "global_memo.h"
#include "shard_rules.h"

static const char *ax(cspmd_axis_t a)
{
    return cspmd_axis_display(a, cspmd_axis_print_debug());
}

static int spec_has(const cspmd_spec_t *s, cspmd_axis_t a, int *dim)
{
    for (int d = 0; d < s->ndim; d++)
        for (int i = 0; i < s->nentry[d]; i++)
            if (s->entry[d][i] == a) {
                if (dim != NULL)
                    *dim = d;
                return 1;
            }
    return 0;
}

/* The stride factor of axis a's shard in s (0: ordinary or none). */
static uint32_t spec_split(const cspmd_spec_t *s, cspmd_axis_t a)
{
    for (int d = 0; d < s->ndim; d++)
        for (int i = 0; i < s->nentry[d]; i++)
            if (s->entry[d][i] == a)
                return s->split[d][i] > 1 ? s->split[d][i] : 0;
    return 0;
}

/* cspmd_axis_is_global under a policy read once per op (cspmdi_global_policy):
 * no mesh lookups unless the current mesh entry has local axes. */
static cspmd_status_t axis_global(uint32_t policy, cspmd_axis_t a, int *global)
{
    if (policy > CSPMDI_POLICY_ALL_GLOBAL)
        return cspmd_axis_is_global(a, global);
    *global = policy == CSPMDI_POLICY_ALL_GLOBAL;
    return CSPMD_OK;
}

static cspmd_status_t check_operand(cspmd_type_t type, uint32_t policy)
{
    cspmd_axis_t axes[CSPMD_MAX_AXES];
    cspmd_ltype_t lts[CSPMD_MAX_AXES];
    int n = cspmdi_type_axes(type, axes, lts);
    if (n < 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_global_check_operand: unknown type id %u",
                               (unsigned)type);
    int any_v = 0;
    for (int i = 0; i < n; i++)
        any_v |= lts[i] == CSPMD_LT_V;
    const cspmd_spec_t *ref = cspmdi_type_spec_ref(type);
    if (!any_v && ref == NULL)
        return CSPMD_OK; /* the common case: nothing to check */
    cspmd_spec_t none = {.ndim = -1};
    const cspmd_spec_t *spec = ref != NULL ? ref : &none;
    cspmd_status_t st;
    for (int i = 0; i < n; i++) {
        int global;
        if ((st = axis_global(policy, axes[i], &global)) != CSPMD_OK)
            return st;
        if (global && lts[i] == CSPMD_LT_V && !spec_has(spec, axes[i], NULL))
            return cspmd_error_set(
                CSPMD_ERR_SPMD_TYPE,
                "Tensor has Varying type on axis %s but no PartitionSpec entry. Use assert_type "
                "with S(i) or PartitionSpec to specify which dimension is sharded. Otherwise, "
                "reinterpret the tensor from V to P.",
                ax(axes[i]));
    }
    for (int d = 0; d < spec->ndim; d++)
        for (int i = 0; i < spec->nentry[d]; i++) {
            cspmd_axis_t a = spec->entry[d][i];
            cspmd_ltype_t lt = cspmd_type_get(type, a);
            int global;
            if ((st = axis_global(policy, a, &global)) != CSPMD_OK)
                return st;
            if (global && lt != CSPMD_LT_V)
                return cspmd_error_set(
                    CSPMD_ERR_SPMD_TYPE,
                    "Tensor has PartitionSpec on axis %s but local type is %s, not V. "
                    "PartitionSpec (sharding) is only valid for Varying axes.",
                    ax(a), lt == CSPMD_LT_NONE ? "None" : cspmd_ltype_letter(lt));
        }
    return CSPMD_OK;
}

/* The verdict depends only on the type (ids are never reused) and the
 * policy, and the same few types pass again and again: a per-thread memo
 * of the (type, policy) pairs that passed. */
#define PASSED_SLOTS 64

typedef struct passed {
    cspmd_type_t type;
    uint32_t policy;
} passed_t;

static _Thread_local passed_t tl_passed[PASSED_SLOTS];

static cspmd_status_t check_operand_memo(cspmd_type_t type, uint32_t policy)
{
    if (type == CSPMD_TYPE_UNTYPED || type == CSPMD_TYPE_EMPTY)
        return CSPMD_OK;
    passed_t *m = &tl_passed[((uint32_t)type * 2654435761u ^ policy) % PASSED_SLOTS];
    if (m->type == type && m->policy == policy)
        return CSPMD_OK;
    cspmd_status_t st = check_operand(type, policy);
    if (st == CSPMD_OK) {
        m->type = type;
        m->policy = policy;
    }
    return st;
}

cspmd_status_t cspmd_global_check_operand(cspmd_type_t type)
{
    return check_operand_memo(type, cspmdi_global_policy());
}

/* ---- shard axes and their order ---------------------------------------- */

typedef struct shard_axes {
    int n;
    cspmd_axis_t axis[CSPMD_MAX_AXES]; /* first-seen order, then sorted */
    uint8_t edge[CSPMD_MAX_AXES];      /* bit j of edge[i]: i before j   */
} shard_axes_t;

static int index_of(shard_axes_t *s, cspmd_axis_t a, int add)
{
    for (int i = 0; i < s->n; i++)
        if (s->axis[i] == a)
            return i;
    if (!add || s->n == CSPMD_MAX_AXES)
        return -1;
    s->axis[s->n] = a;
    s->edge[s->n] = 0;
    return s->n++;
}

/* Whether j is reachable from i over the edges. */
static int reaches(const shard_axes_t *s, int i, int j)
{
    uint8_t seen = 0, frontier = s->edge[i];
    while (frontier & (uint8_t)~seen) {
        seen |= frontier;
        uint8_t next = 0;
        for (int k = 0; k < s->n; k++)
            if (frontier >> k & 1u)
                next |= s->edge[k];
        frontier = next;
    }
    return (seen | frontier) >> j & 1u;
}

/* The global axes named by the operands' specs, ordering constraints from
 * adjacent axes of each multi-axis entry, then a topological sort with
 * first-seen order breaking ties. */
static cspmd_status_t collect_shard_axes(const cspmd_gcall_t *call, uint32_t policy,
                                         shard_axes_t *s)
{
    s->n = 0;
    for (int t = 0; t < call->ntensors; t++) {
        cspmd_type_t type = call->tensors[t].type;
        if (type <= CSPMD_TYPE_EMPTY || !cspmdi_type_has_spec(type))
            continue;
        const cspmd_spec_t *spec = cspmdi_type_spec_ref(type);
        cspmd_status_t st;
        for (int d = 0; d < spec->ndim; d++) {
            int prev = -1;
            for (int e = 0; e < spec->nentry[d]; e++) {
                int global;
                if ((st = axis_global(policy, spec->entry[d][e], &global)) != CSPMD_OK)
                    return st;
                if (!global)
                    continue;
                int cur = index_of(s, spec->entry[d][e], 1);
                if (cur < 0)
                    return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                           "global mode: more than %d shard axes in one op",
                                           CSPMD_MAX_AXES);
                if (prev >= 0) {
                    if (reaches(s, cur, prev) || cur == prev)
                        return cspmd_error_set(
                            CSPMD_ERR_SPMD_TYPE,
                            "PartitionSpec device ordering conflict: %s before %s vs %s before %s",
                            ax(s->axis[cur]), ax(s->axis[prev]), ax(s->axis[prev]),
                            ax(s->axis[cur]));
                    s->edge[prev] |= (uint8_t)(1u << cur);
                }
                prev = cur;
            }
        }
    }
    /* Kahn's algorithm; the smallest first-seen index goes first. */
    shard_axes_t sorted = {0};
    uint8_t done = 0;
    for (int step = 0; step < s->n; step++) {
        int pick = -1;
        for (int i = 0; i < s->n && pick < 0; i++) {
            if (done >> i & 1u)
                continue;
            int indeg = 0;
            for (int k = 0; k < s->n; k++)
                indeg |= !(done >> k & 1u) && (s->edge[k] >> i & 1u);
            if (!indeg)
                pick = i;
        }
        if (pick < 0)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "Cyclic ordering constraint among global shard axes");
        done |= (uint8_t)(1u << pick);
        sorted.axis[sorted.n++] = s->axis[pick];
    }
    /* Re-index the edges in sorted order. */
    for (int i = 0; i < s->n; i++) {
        int oi = index_of(s, sorted.axis[i], 0);
        for (int j = 0; j < s->n; j++)
            if (s->edge[oi] >> index_of(s, sorted.axis[j], 0) & 1u)
                sorted.edge[i] |= (uint8_t)(1u << j);
    }
    *s = sorted;
    return CSPMD_OK;
}

/* ---- one op ------------------------------------------------------------------ */

static int8_t operand_place(const cspmd_gtensor_t *t, cspmd_axis_t a)
{
    if (t->scalar || t->type <= CSPMD_TYPE_EMPTY)
        return CSPMD_PLACE_REPLICATE;
    int d;
    const cspmd_spec_t *spec = cspmdi_type_spec_ref(t->type);
    if (spec != NULL && spec_has(spec, a, &d))
        return (int8_t)d;
    return cspmd_type_get(t->type, a) == CSPMD_LT_P ? CSPMD_PLACE_PARTIAL
                                                    : CSPMD_PLACE_REPLICATE;
}

static uint32_t operand_split(const cspmd_gtensor_t *t, cspmd_axis_t a)
{
    if (t->scalar || t->type <= CSPMD_TYPE_EMPTY)
        return 0;
    const cspmd_spec_t *spec = cspmdi_type_spec_ref(t->type);
    return spec != NULL ? spec_split(spec, a) : 0;
}

static void all_none(shard_io_t *io)
{
    for (int r = 0; r < CSPMD_MAX_RESULTS; r++) {
        io->out[r] = CSPMD_PLACE_NONE;
        io->ndim[r] = 0;
    }
}

/* What an oracle supplied must be placements of the results' dims. */
static int check_oracle(const char *op, const cspmd_gcall_t *call, const shard_io_t *io)
{
    for (int r = 0; r < call->nresults && r < CSPMD_MAX_RESULTS; r++) {
        int8_t p = io->out[r];
        if (io->ndim[r] < 0 || io->ndim[r] > CSPMD_MAX_DIMS || p < CSPMD_PLACE_NONE ||
            (p >= 0 && p >= io->ndim[r]))
            return cspmd_error_set(CSPMD_ERR_MISUSE,
                                   "cspmd: the fallback propagation of %s gave result %d the "
                                   "placement %d of %d dims",
                                   op, r, (int)p, (int)io->ndim[r]);
    }
    return CSPMD_OK;
}

static const char *place_name(int8_t p, char *buf, size_t len)
{
    if (p >= 0)
        snprintf(buf, len, "S(%d)", p);
    else
        snprintf(buf, len, "%s", p == CSPMD_PLACE_PARTIAL ? "P" : "R");
    return buf;
}

/* A result's placement must be what its local type allows: I and R
 * replicated, P partial, V sharded or partial. */
static int place_fits(cspmd_ltype_t lt, int8_t p)
{
    switch (lt) {
    case CSPMD_LT_V:
        return p >= 0 || p == CSPMD_PLACE_PARTIAL;
    case CSPMD_LT_P:
        return p == CSPMD_PLACE_PARTIAL;
    case CSPMD_LT_R:
    case CSPMD_LT_I:
    case CSPMD_LT_NONE:
        break;
    }
    return p == CSPMD_PLACE_REPLICATE;
}

/* ---- result types ------------------------------------------------------------ */

/* Interning a result type costs a hash and a lock, and an op on the same
 * layouts makes the same type again and again: a per-thread memo of
 * (local type, the axes promoted to P, the spec) -> type.  Type ids are
 * never reused, so an entry stays true. */
#define MEMO_SLOTS 64
#define MEMO_WORDS 24

typedef struct memo {
    cspmd_type_t local, out;
    uint32_t promo;
    int n;
    uint32_t key[MEMO_WORDS];
} memo_t;

static _Thread_local memo_t tl_memo[MEMO_SLOTS];

/* The spec as words (0 for none); -1 if it does not fit. */
static int spec_key(const cspmd_spec_t *s, uint32_t *key)
{
    if (s == NULL)
        return 0;
    int n = 0;
    key[n++] = (uint32_t)(s->ndim + 1);
    for (int d = 0; d < s->ndim; d++) {
        int strided = 0;
        for (int e = 0; e < s->nentry[d]; e++)
            strided |= s->split[d][e] > 1;
        if (n + 1 + (strided ? 2 : 1) * s->nentry[d] > MEMO_WORDS)
            return -1;
        key[n++] = s->nentry[d] | (strided ? 0x100u : 0u);
        for (int e = 0; e < s->nentry[d]; e++) {
            key[n++] = s->entry[d][e];
            if (strided)
                key[n++] = s->split[d][e];
        }
    }
    return n;
}

static cspmd_status_t make_result(cspmd_type_t local, uint32_t promo, const cspmd_axis_t *axes,
                                  const cspmd_ltype_t *lts, int na, const cspmd_spec_t *spec,
                                  cspmd_type_t *out)
{
    uint32_t key[MEMO_WORDS];
    int n = spec_key(spec, key);
    if (n < 0)
        return cspmd_type_make(axes, lts, na, spec, out);
    uint32_t h = (uint32_t)local * 2654435761u ^ promo * 40503u;
    for (int i = 0; i < n; i++)
        h = (h ^ key[i]) * 16777619u;
    memo_t *m = &tl_memo[(h ^ h >> 16) % MEMO_SLOTS];
    if (m->out != CSPMD_TYPE_UNTYPED && m->local == local && m->promo == promo && m->n == n &&
        memcmp(m->key, key, (size_t)n * sizeof *key) == 0) {
        *out = m->out;
        return CSPMD_OK;
    }
    cspmd_status_t st = cspmd_type_make(axes, lts, na, spec, out);
    if (st == CSPMD_OK) {
        m->local = local;
        m->promo = promo;
        m->n = n;
        memcpy(m->key, key, (size_t)n * sizeof *key);
        m->out = *out;
    }
    return st;
}

/* ---- backward: replicated gradients that lost their shard --------------- */

static _Thread_local int tl_backward_relax;

int cspmd_global_backward_relax(int on)
{
    int was = tl_backward_relax;
    tl_backward_relax = on != 0;
    return was;
}

/* A gradient that is R on an axis with no spec there holds the same values
 * on every rank.  Backward formulas broadcast such a gradient back to an
 * input's local sizes (sum's backward expands the reduced gradient to the
 * summed tensor's local shape), and when that input was sharded the result
 * is the shard of the same broadcast of the global gradient: equally read
 * as sharded on the lost dim.  So, in backward, when the rule finds no
 * strategy, each such operand is tried as sharded on each of its dims and
 * the first placement the rule accepts is taken.  Returns CSPMD_OK with io
 * filled, or SHARD_NO_STRATEGY with io untouched. */
static int retry_replicated_as_shard(cspmd_shard_rule_t rule, shard_io_t *io, int8_t *in,
                                     uint32_t *split, cspmd_axis_t a)
{
    const cspmd_gcall_t *call = io->call;
    /* the stride a sharded operand has (such a gradient fits any layout) */
    uint32_t strided = 0;
    for (int t = 0; t < call->ntensors; t++)
        if (in[t] >= 0 && split[t] > 1)
            strided = split[t];
    for (int t = 0; t < call->ntensors; t++) {
        const cspmd_gtensor_t *g = &call->tensors[t];
        if (in[t] != CSPMD_PLACE_REPLICATE || g->scalar || g->ndim <= 0 ||
            g->type <= CSPMD_TYPE_EMPTY || cspmd_type_get(g->type, a) != CSPMD_LT_R)
            continue;
        for (int d = 0; d < g->ndim; d++)
            for (int s = 0; s < (strided ? 2 : 1); s++) {
                shard_io_t again;
                memset(&again, 0, sizeof again);
                again.call = call;
                again.in = in;
                again.split = split;
                again.k = io->k;
                in[t] = (int8_t)d;
                split[t] = s ? strided : 0;
                if (cspmdi_shard_apply(rule, &again) == CSPMD_OK) {
                    *io = again;
                    return CSPMD_OK;
                }
            }
        in[t] = CSPMD_PLACE_REPLICATE;
        split[t] = 0;
    }
    return SHARD_NO_STRATEGY;
}

/* The propagation proper (infer, below, memoises it): *promo gets the
 * axes of local_out promoted V -> P. */
static cspmd_status_t propagate(cspmd_shard_rule_t rule, cspmd_shard_oracle_t oracle, void *ctx,
                                const cspmd_gcall_t *call, uint32_t policy,
                                cspmd_type_t local_out, cspmd_type_t *outs, uint32_t *promo_out)
{
    const char *op = call->name != NULL ? call->name : "?";
    cspmd_status_t st;
    *promo_out = 0;
    for (int t = 0; t < call->ntensors; t++)
        if (!call->tensors[t].scalar &&
            (st = check_operand_memo(call->tensors[t].type, policy)) != CSPMD_OK)
            return st;
    shard_axes_t s;
    if ((st = collect_shard_axes(call, policy, &s)) != CSPMD_OK)
        return st;
    /* In permissive mode the local type may lack an axis some operand
     * lacks: no propagation there either (its ordering edges still count). */
    uint8_t active = 0;
    for (int i = 0; i < s.n; i++)
        if (cspmd_type_get(local_out, s.axis[i]) != CSPMD_LT_NONE)
            active |= (uint8_t)(1u << i);
    if (active == 0)
        return CSPMD_OK;
    int first = 0;
    while (!(active >> first & 1u))
        first++;
    if (rule < 0 && oracle == NULL)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "global mode: no shard rule for %s yet (an operand is sharded on "
                               "%s); use local mode (spmd.local()) or local_map around it",
                               op, ax(s.axis[first]));
    if (call->nresults > CSPMD_MAX_RESULTS)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "global mode: %s has %d results; shard rules handle at most %d",
                               op, call->nresults, CSPMD_MAX_RESULTS);

    cspmd_axis_t axes[CSPMD_MAX_AXES];
    cspmd_ltype_t lts[CSPMD_MAX_AXES];
    int na = cspmdi_type_axes(local_out, axes, lts);
    if (na < 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_global_infer: unknown type id %u",
                               (unsigned)local_out);
    int8_t in[CSPMD_GLOBAL_MAX_TENSORS];
    uint32_t split[CSPMD_GLOBAL_MAX_TENSORS];
    int8_t place[CSPMD_MAX_AXES][CSPMD_MAX_RESULTS];
    uint32_t stride[CSPMD_MAX_AXES][CSPMD_MAX_RESULTS];
    int8_t ndim[CSPMD_MAX_RESULTS] = {0};
    uint32_t promo = 0; /* bit j: axes[j] promoted V -> P */
    for (int i = 0; i < s.n; i++) {
        if (!(active >> i & 1u))
            continue;
        cspmd_axis_t a = s.axis[i];
        for (int t = 0; t < call->ntensors; t++) {
            const cspmd_gtensor_t *g = &call->tensors[t];
            if (!g->scalar && g->type == CSPMD_TYPE_UNTYPED && g->ndim > 0)
                return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                       "No valid sharding strategy for %s on axis %s: operand %d "
                                       "has no type (annotate it with assert_type)",
                                       op, ax(a), t);
            in[t] = operand_place(g, a);
            split[t] = operand_split(g, a);
        }
        shard_io_t io;
        memset(&io, 0, sizeof io);
        io.call = call;
        io.in = in;
        io.split = split;
        io.k = cspmd_axis_size(a);
        int rc;
        if (rule < 0) {
            for (int t = 0; t < call->ntensors; t++)
                if (split[t] > 1)
                    return cspmd_error_set(
                        CSPMD_ERR_SPMD_TYPE,
                        "No valid sharding strategy for %s on axis %s: operand %d is sharded in "
                        "strides on dim %d (a view merged it behind other dims), which DTensor's "
                        "propagation does not take; view it back first",
                        op, ax(a), t, in[t]);
            all_none(&io);
            rc = oracle(ctx, in, io.k, io.out, io.ndim, io.why, sizeof io.why);
            io.why[sizeof io.why - 1] = '\0';
            if (rc == CSPMD_OK && (rc = check_oracle(op, call, &io)) != CSPMD_OK)
                return (cspmd_status_t)rc;
        } else {
            rc = cspmdi_shard_apply(rule, &io);
            if (rc == SHARD_NO_STRATEGY && tl_backward_relax &&
                retry_replicated_as_shard(rule, &io, in, split, a) == CSPMD_OK)
                rc = CSPMD_OK;
        }
        if (rc == SHARD_NO_STRATEGY)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "No valid sharding strategy for %s on axis %s: %s", op, ax(a),
                                   io.why);
        if (rc != CSPMD_OK)
            return (cspmd_status_t)rc;
        memcpy(place[i], io.out, sizeof io.out);
        memcpy(stride[i], io.out_split, sizeof io.out_split);
        memcpy(ndim, io.ndim, sizeof ndim);
        /* local <-> global correspondence, V -> P promotion */
        int j = 0;
        while (j < na && axes[j] != a)
            j++;
        int any_p = 0, all_p = 1;
        for (int r = 0; r < call->nresults; r++) {
            int8_t p = place[i][r];
            if (p == CSPMD_PLACE_NONE)
                continue;
            if (!place_fits(lts[j], p)) {
                char b[16];
                return cspmd_error_set(
                    CSPMD_ERR_SPMD_TYPE,
                    "Local SPMD produces %s on axis %s but the shard rule of %s produces %s for "
                    "output %d: the local and global types of this op disagree",
                    cspmd_ltype_letter(lts[j]), ax(a), op, place_name(p, b, sizeof b), r);
            }
            any_p |= p == CSPMD_PLACE_PARTIAL;
            all_p &= p == CSPMD_PLACE_PARTIAL;
        }
        if (lts[j] == CSPMD_LT_V && any_p) {
            if (!all_p)
                return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                       "global mode: %s gives some outputs Partial and others "
                                       "sharded on axis %s",
                                       op, ax(a));
            lts[j] = CSPMD_LT_P;
            promo |= 1u << j;
        }
    }
    /* Each result's spec, axes in the sorted order.  Two axes on one
     * result dim need an order: one that some operand's spec gives, else
     * (a view merged dims sharded on each) the ordinary or less strided
     * shard first -- it shards an outer one of the merged dims. */
    for (int r = 0; r < call->nresults; r++) {
        cspmd_spec_t spec; /* entries are written before they are read */
        spec.ndim = ndim[r];
        memset(spec.nentry, 0, sizeof spec.nentry);
        int any = 0;
        for (int i = 0; i < s.n; i++) {
            int8_t p = active >> i & 1u ? place[i][r] : CSPMD_PLACE_NONE;
            if (p < 0)
                continue;
            if (p >= spec.ndim || p >= CSPMD_MAX_DIMS)
                return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd: shard rule of %s gave dim %d",
                                       op, p);
            uint32_t f = stride[i][r] > 1 ? stride[i][r] : 0;
            int at = spec.nentry[p];
            for (int e = spec.nentry[p] - 1; e >= 0; e--) {
                int prev = index_of(&s, spec.entry[p][e], 0);
                uint32_t fe = spec.split[p][e] > 1 ? spec.split[p][e] : 1, fi = f > 1 ? f : 1;
                if (reaches(&s, prev, i) || (!reaches(&s, i, prev) && fe < fi))
                    break; /* e before i */
                if (reaches(&s, i, prev) || fi < fe) {
                    at = e; /* i before e */
                    continue;
                }
                return cspmd_error_set(
                    CSPMD_ERR_SPMD_TYPE,
                    "Op %s: axes %s and %s both shard output dim %d but no input "
                    "PartitionSpec provides an ordering constraint between them. This likely "
                    "indicates a bug in combining per mesh axis shard propagation.",
                    op, ax(spec.entry[p][e]), ax(s.axis[i]), p);
            }
            for (int e = spec.nentry[p]; e > at; e--) {
                spec.entry[p][e] = spec.entry[p][e - 1];
                spec.split[p][e] = spec.split[p][e - 1];
            }
            spec.entry[p][at] = s.axis[i];
            spec.split[p][at] = f;
            spec.nentry[p]++;
            any = 1;
        }
        st = make_result(local_out, promo, axes, lts, na, any ? &spec : NULL, &outs[r]);
        if (st != CSPMD_OK)
            return st;
    }
    *promo_out = promo;
    return CSPMD_OK;
}

static cspmd_status_t infer(cspmd_shard_rule_t rule, cspmd_shard_oracle_t oracle, void *ctx,
                            const cspmd_gcall_t *call, cspmd_type_t local_out,
                            cspmd_type_t *outs)
{
    if (call == NULL || outs == NULL || call->ntensors < 0 ||
        call->ntensors > CSPMD_GLOBAL_MAX_TENSORS || (call->ntensors && call->tensors == NULL) ||
        call->nargs < 0 || (call->nargs && call->args == NULL) || call->nresults < 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_global_infer: bad call");
    for (int r = 0; r < CSPMD_MAX_RESULTS; r++)
        outs[r] = local_out;
    uint32_t policy = cspmdi_global_policy(), promo = 0;
    cspmdi_gmemo_key_t key;
    int memo = oracle == NULL &&
               cspmdi_gmemo_key(&key, rule, call, policy, tl_backward_relax, local_out);
    cspmd_status_t st;
    if (!(memo && cspmdi_gmemo_get(&key, call->nresults, outs, &promo))) {
        st = propagate(rule, oracle, ctx, call, policy, local_out, outs, &promo);
        if (st != CSPMD_OK)
            return st;
        if (memo)
            cspmdi_gmemo_put(&key, call->nresults, outs, promo);
    }
    if (promo == 0)
        return CSPMD_OK;
    /* out_partial_axes: checked (and marked) on every call, memoised or not */
    cspmd_axis_t axes[CSPMD_MAX_AXES];
    int na = cspmdi_type_axes(local_out, axes, NULL);
    return cspmdi_partial_decl_check(call->name != NULL ? call->name : "?", axes, na, promo);
}

cspmd_status_t cspmd_global_infer(cspmd_shard_rule_t rule, const cspmd_gcall_t *call,
                                  cspmd_type_t local_out, cspmd_type_t *outs)
{
    return infer(rule, NULL, NULL, call, local_out, outs);
}

cspmd_status_t cspmd_global_infer_oracle(const cspmd_gcall_t *call, cspmd_shard_oracle_t oracle,
                                         void *ctx, cspmd_type_t local_out, cspmd_type_t *outs)
{
    if (oracle == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_global_infer_oracle: no oracle");
    return infer(-1, oracle, ctx, call, local_out, outs);
}
