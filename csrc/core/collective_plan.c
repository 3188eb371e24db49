/*
 * collective_plan.c -- what a collective call does beyond its type rule:
 * whether it is a no-op, whether it runs as two nodes, how a dim is
 * chunked over the ranks, and which call its backward makes.  The shim and the Python front ask here rather
 * than decide.
 */
#include "cspmd.h"

/* The NOOP column of CSPMD_COLL_LIST. */
static cspmd_coll_noop_kind_t noop_kind(cspmd_coll_t op)
{
    switch (op) {
#define COLL_NOOP(name, text, noop)                                                           \
    case CSPMD_COLL_##name: return CSPMD_NOOP_##noop;
        CSPMD_COLL_LIST(COLL_NOOP)
#undef COLL_NOOP
    }
    return CSPMD_NOOP_NEVER;
}

int cspmd_coll_noop(cspmd_coll_t op, cspmd_ctype_t src, cspmd_ctype_t dst)
{
    if (src.ltype != dst.ltype)
        return 0;
    switch (noop_kind(op)) {
    case CSPMD_NOOP_NEVER:
        return 0; /* a collective communicates or retypes even between equal types */
    case CSPMD_NOOP_REPLICATED:
        return src.ltype == CSPMD_LT_R || src.ltype == CSPMD_LT_I;
    case CSPMD_NOOP_EQUAL:
        if (op == CSPMD_COLL_REINTERPRET && (src.shard_dim >= 0 || dst.shard_dim >= 0))
            return 0; /* reinterpret refuses S(i) (cspmd_coll_validate), equal or not */
        /* V and S(d) share the local type V: a no-op unless both are
         * shards of different dims. */
        return !(src.shard_dim >= 0 && dst.shard_dim >= 0 && src.shard_dim != dst.shard_dim);
    }
    return 0;
}

int cspmd_coll_split(cspmd_coll_t op, cspmd_ctype_t src, cspmd_ctype_t dst, cspmd_ctype_t *mid)
{
    if (mid == NULL || op != CSPMD_COLL_REINTERPRET || src.ltype != CSPMD_LT_I ||
        src.shard_dim >= 0 || (dst.ltype != CSPMD_LT_V && dst.ltype != CSPMD_LT_P) ||
        dst.shard_dim >= 0)
        return 0;
    mid->ltype = CSPMD_LT_R;
    mid->shard_dim = -1;
    return 1;
}

cspmd_dtype_source_t cspmd_coll_split_backward_dtype(int has_backward_op_dtype,
                                                     int input_is_float, int has_op_dtype)
{
    if (has_backward_op_dtype)
        return CSPMD_DTYPE_FROM_BACKWARD;
    if (!input_is_float)
        return CSPMD_DTYPE_FROM_NONE;
    return has_op_dtype ? CSPMD_DTYPE_FROM_OP : CSPMD_DTYPE_FROM_INPUT;
}

cspmd_status_t cspmd_coll_chunk(int64_t n, int64_t ws, int64_t s, int64_t *off, int64_t *len)
{
    if (off == NULL || len == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_coll_chunk: NULL output");
    if (n < 0 || ws < 1 || s < 0 || s >= ws)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "cspmd_coll_chunk: piece %lld of an extent %lld over %lld ranks",
                               (long long)s, (long long)n, (long long)ws);
    int64_t k = n / ws + (n % ws != 0); /* ceil(n / ws), without overflow */
    /* Past the end (s * k >= n, tested without forming s * k): clip to n
     * so an empty piece still narrows. */
    int64_t start = s > 0 && k > (n - 1) / s ? n : s * k;
    *off = start;
    *len = n - start < k ? n - start : k;
    return CSPMD_OK;
}

static cspmd_ctype_t shard_or_v(int stack, int64_t dim)
{
    cspmd_ctype_t t = {CSPMD_LT_V, stack ? -1 : (int32_t)dim};
    return t;
}

cspmd_status_t cspmd_coll_backward_step(const cspmd_coll_step_t *fwd, int has_sizes,
                                        cspmd_coll_step_t *bwd, cspmd_coll_sizes_t *sizes)
{
    if (fwd == NULL || bwd == NULL || sizes == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_coll_backward_step: NULL argument");
    cspmd_coll_step_t b;
    cspmd_status_t st = cspmd_coll_backward(fwd->op, fwd->src, fwd->dst, &b.op, &b.src, &b.dst);
    if (st != CSPMD_OK)
        return st;
    *sizes = CSPMD_COLL_SIZES_SAME;
    b.dim_a = fwd->dim_a;
    b.dim_b = fwd->dim_b;
    if (fwd->op == CSPMD_COLL_ALL_TO_ALL) {
        /* The reverse exchange: split on the forward's concat dim, concat
         * on its split dim, sizes swapped. */
        int stack = fwd->src.shard_dim < 0 && fwd->dst.shard_dim < 0;
        b.src = shard_or_v(stack, fwd->dim_a);
        b.dst = shard_or_v(stack, fwd->dim_b);
        b.dim_a = fwd->dim_b;
        b.dim_b = fwd->dim_a;
        *sizes = CSPMD_COLL_SIZES_SWAPPED;
    } else if (b.src.shard_dim >= 0 || b.dst.shard_dim >= 0) {
        b.dim_a = b.dim_b = -1; /* the shard dims decide */
    }
    if (fwd->op == CSPMD_COLL_CONVERT && fwd->dst.shard_dim >= 0 && !has_sizes &&
        fwd->src.ltype != CSPMD_LT_V)
        *sizes = CSPMD_COLL_SIZES_CHUNKS;
    *bwd = b;
    return CSPMD_OK;
}
