/*
 * shard_pick_rules.c -- shard rules of the ops that pick parts of a tensor
 * (select, slice, split, unbind, gather, index_select), put them back
 * (their backward ops, scatter_add) or look rows up (embedding's
 * backward).  One mesh axis at a time, as in shard_rules.c: a picked dim
 * must not be sharded (each rank would pick from its own shard), the
 * other dims carry their shard through.
 */
#include <stdint.h>

#define SHARD_RULE_FILE
#include "shard_rules.h"

/* A shard on a dim after `removed` moves down one. */
static int8_t after_remove(int8_t p, int removed)
{
    return p >= 0 && p > removed ? (int8_t)(p - 1) : p;
}

/* select.int(self, dim, index) */
int cspmdi_shard_select(shard_io_t *io)
{
    const cspmd_gtensor_t *t = tensor(io, 0);
    int d = wrap_dim(int_arg(io, 1, 0), t->ndim);
    int8_t p = io->in[0];
    if (p == d)
        return fail(io, "it selects an index of the sharded dim %d", d);
    all_results(io, after_remove(p, d), t->ndim - 1);
    return CSPMD_OK;
}

/* select_backward(grad, input_sizes, dim, index): the grad gains dim back. */
int cspmdi_shard_select_backward(shard_io_t *io)
{
    const cspmd_gtensor_t *g = tensor(io, 0);
    int d = wrap_dim(int_arg(io, 2, 0), g->ndim + 1);
    int8_t p = io->in[0];
    all_results(io, p >= 0 && p >= d ? (int8_t)(p + 1) : p, g->ndim + 1);
    return CSPMD_OK;
}

/* Whether slice(start, end, step) keeps every index of a dim of global
 * size n (then a shard of it passes). */
static int whole_slice(int64_t start, int64_t end, int64_t step, int64_t n)
{
    if (start < 0)
        start += n;
    return start <= 0 && end >= n && step == 1;
}

/* slice.Tensor(self, dim=0, start=None, end=None, step=1) */
int cspmdi_shard_slice(shard_io_t *io)
{
    const cspmd_gtensor_t *t = tensor(io, 0);
    int d = wrap_dim(int_arg(io, 1, 0), t->ndim);
    int8_t p = io->in[0];
    if (p == d && !whole_slice(int_arg(io, 2, 0), int_arg(io, 3, INT64_MAX), int_arg(io, 4, 1),
                               gsize(io, 0, d)))
        return fail(io, "it slices the sharded dim %d", d);
    all_results(io, p, t->ndim);
    return CSPMD_OK;
}

/* slice_backward(grad, input_sizes, dim, start, end, step): the grad is
 * written into zeros of the input's size; a shard of the sliced dim
 * passes only when the slice kept every index (the grad is the input's
 * size there). */
int cspmdi_shard_slice_backward(shard_io_t *io)
{
    const cspmd_gtensor_t *g = tensor(io, 0);
    const cspmd_garg_t *sizes = io->call->nargs > 1 ? &io->call->args[1] : NULL;
    int d = wrap_dim(int_arg(io, 2, 0), g->ndim);
    int8_t p = io->in[0];
    if (sizes == NULL || sizes->n != g->ndim)
        return fail(io, "input_sizes is not a list of %d integers", g->ndim);
    if (p == d && !(sizes->v[d] == g->sizes[d] && int_arg(io, 3, 0) == 0 && int_arg(io, 5, 1) == 1))
        return fail(io, "the sharded dim %d was sliced", d);
    all_results(io, p, g->ndim);
    return CSPMD_OK;
}

/* constant_pad_nd(self, pad, value=0): pad holds (before, after) pairs
 * from the last dim backwards.  A shard passes when its dim is not padded
 * (each rank pads the other dims of its own rows alike); a Partial input
 * only when the pad value is 0 (else each rank would add it). */
int cspmdi_shard_constant_pad(shard_io_t *io)
{
    const cspmd_gtensor_t *t = tensor(io, 0);
    const cspmd_garg_t *pad = io->call->nargs > 1 ? &io->call->args[1] : NULL;
    int8_t p = io->in[0];
    if (pad == NULL || pad->n < 0 || pad->n % 2 != 0 || pad->n > 2 * t->ndim)
        return fail(io, "pad is not a list of (before, after) pairs for at most %d dims",
                    t->ndim);
    if (p >= 0) {
        int pair = t->ndim - 1 - p; /* the pair of the sharded dim */
        if (2 * pair + 1 < pad->n && (pad->v[2 * pair] != 0 || pad->v[2 * pair + 1] != 0))
            return fail(io, "it pads the sharded dim %d by (%lld, %lld)", p,
                        (long long)pad->v[2 * pair], (long long)pad->v[2 * pair + 1]);
    }
    if (p == P_) {
        const cspmd_garg_t *v = io->call->nargs > 2 ? &io->call->args[2] : NULL;
        if (v != NULL && !(v->n == 1 && v->v[0] == 0))
            return fail(io, "the input is Partial and the pad value is not the integer 0");
    }
    all_results(io, p, t->ndim);
    return CSPMD_OK;
}

/* An op that cuts its input into pieces along the dim in argument dim_arg
 * (default 0), which must not be sharded; the pieces are placed as the
 * input, less that dim when drop. */
static int cut(shard_io_t *io, int dim_arg, int drop, const char *verb)
{
    const cspmd_gtensor_t *t = tensor(io, 0);
    int d = wrap_dim(int_arg(io, dim_arg, 0), t->ndim);
    int8_t p = io->in[0];
    if (p == d)
        return fail(io, "it %s the sharded dim %d", verb, d);
    all_results(io, drop ? after_remove(p, d) : p, drop ? t->ndim - 1 : t->ndim);
    return CSPMD_OK;
}

/* split.Tensor / split_with_sizes(self, split, dim=0) */
int cspmdi_shard_split(shard_io_t *io) { return cut(io, 2, 0, "splits"); }

/* unbind.int(self, dim=0) */
int cspmdi_shard_unbind(shard_io_t *io) { return cut(io, 1, 1, "unbinds"); }

/* The same shard dim d (not dim) on every operand listed, of equal global
 * size on d across them: the pairing of rows is then local.  Returns d, or
 * a fail. */
static int same_shard(shard_io_t *io, const int *ops, int n, int dim, int8_t *out)
{
    int8_t p = io->in[ops[0]];
    for (int i = 1; i < n; i++)
        if (io->in[ops[i]] != p) {
            char a[16], b[16];
            return fail(io, "operands are placed differently (%s and %s)",
                        place_text(p, a, sizeof a), place_text(io->in[ops[i]], b, sizeof b));
        }
    if (p == P_)
        return fail(io, "a Partial operand");
    if (p == dim)
        return fail(io, "the operands are sharded on the indexed dim %d", dim);
    if (p >= 0)
        for (int i = 1; i < n; i++)
            if (tensor(io, ops[i])->ndim <= p ||
                gsize(io, ops[i], p) != gsize(io, ops[0], p))
                return fail(io, "the operands' sizes on the sharded dim %d differ", p);
    *out = p;
    return CSPMD_OK;
}

/* gather(self, dim, index): self and index sharded alike on a dim other
 * than dim (of equal size), or self replicated and index sharded on dim
 * (each rank gathers its own index rows). */
int cspmdi_shard_gather(shard_io_t *io)
{
    if (io->call->ntensors < 2)
        return fail(io, "expected self and index");
    const cspmd_gtensor_t *t = tensor(io, 0);
    int d = wrap_dim(int_arg(io, 1, 0), t->ndim);
    int8_t ps = io->in[0], pi = io->in[1], p = R_;
    if (ps == R_ && pi == d) {
        p = pi;
    } else {
        int ops[2] = {0, 1};
        int st = same_shard(io, ops, 2, d, &p);
        if (st != CSPMD_OK)
            return st;
    }
    all_results(io, p, tensor(io, 1)->ndim);
    return CSPMD_OK;
}

/* scatter_add(self, dim, index, src): all three sharded alike on a dim
 * other than dim, of equal sizes there. */
int cspmdi_shard_scatter_add(shard_io_t *io)
{
    if (io->call->ntensors < 3)
        return fail(io, "expected self, index and src");
    const cspmd_gtensor_t *t = tensor(io, 0);
    int d = wrap_dim(int_arg(io, 1, 0), t->ndim);
    int ops[3] = {0, 1, 2};
    int8_t p = R_;
    int st = same_shard(io, ops, 3, d, &p);
    if (st != CSPMD_OK)
        return st;
    all_results(io, p, t->ndim);
    return CSPMD_OK;
}

/* index_select(self, dim, index): self sharded on another dim with the
 * index replicated, or self replicated and the (1-D) index sharded: the
 * result is sharded on dim.  A Partial self with a replicated index stays
 * Partial (picking rows is linear). */
int cspmdi_shard_index_select(shard_io_t *io)
{
    if (io->call->ntensors < 2)
        return fail(io, "expected self and index");
    const cspmd_gtensor_t *t = tensor(io, 0);
    int d = wrap_dim(int_arg(io, 1, 0), t->ndim);
    int8_t ps = io->in[0], pi = io->in[1], p;
    if (ps == d)
        return fail(io, "it indexes the sharded dim %d", d);
    if (pi == R_)
        p = ps;
    else if (ps == R_ && pi == 0)
        p = (int8_t)d;
    else {
        char a[16], b[16];
        return fail(io, "no strategy for self placed %s and index %s",
                    place_text(ps, a, sizeof a), place_text(pi, b, sizeof b));
    }
    all_results(io, p, t->ndim);
    return CSPMD_OK;
}

/* index_add(self, dim, index, source, alpha) (index_select's backward
 * adds the gradient's rows into zeros): self and source placed alike --
 * sharded on a dim other than dim, both Partial, or both replicated --
 * with the index replicated. */
int cspmdi_shard_index_add(shard_io_t *io)
{
    if (io->call->ntensors < 3)
        return fail(io, "expected self, index and source");
    const cspmd_gtensor_t *t = tensor(io, 0);
    int d = wrap_dim(int_arg(io, 1, 0), t->ndim);
    int8_t ps = io->in[0], pi = io->in[1], pq = io->in[2];
    char a[16], b[16];
    if (pi != R_)
        return fail(io, "the index is placed %s, not replicated", place_text(pi, a, sizeof a));
    if (ps == d || pq == d)
        return fail(io, "it adds along the sharded dim %d", d);
    if (ps != pq)
        return fail(io, "self is placed %s and source %s", place_text(ps, a, sizeof a),
                    place_text(pq, b, sizeof b));
    all_results(io, ps, t->ndim);
    return CSPMD_OK;
}

/* embedding_dense_backward(grad, indices, num_weights, padding_idx,
 * scale_grad_by_freq): the table's gradient sums grad rows by index.
 * Rows sharded alike on grad and indices give a Partial sum; a sharded
 * embedding dim (grad's last) with replicated indices gives S(1). */
int cspmdi_shard_embedding_backward(shard_io_t *io)
{
    if (io->call->ntensors < 2)
        return fail(io, "expected grad_output and indices");
    const cspmd_gtensor_t *idx = tensor(io, 1);
    int8_t pg = io->in[0], pi = io->in[1], p;
    if (pg >= 0 && pg == idx->ndim && pi == R_)
        p = 1;
    else if (pg >= 0 && pg == pi) {
        if (int_arg(io, 4, 0) != 0)
            return fail(io, "scale_grad_by_freq counts the indices of one shard only");
        p = P_;
    } else if ((pg == R_ || pg == P_) && pi == R_)
        p = pg;
    else {
        char a[16], b[16];
        return fail(io, "no strategy for grad_output placed %s and indices %s",
                    place_text(pg, a, sizeof a), place_text(pi, b, sizeof b));
    }
    all_results(io, p, 2);
    return CSPMD_OK;
}
