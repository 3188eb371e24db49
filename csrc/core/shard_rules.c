/*
 * shard_rules.c -- the C shard rule table of global mode: per aten op, how
 * the shard dims of its operands on one mesh axis flow to its results, as
 * DTensor's propagation on a 1-D mesh of that axis' size decides it with
 * no redistribution allowed (the reference's method, without building
 * DTensors per op).  Global sizes are the local ones with the sharded dim
 * scaled by the axis' size, so a local op whose global counterpart would
 * not even be well-shaped is rejected too.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define SHARD_RULE_FILE
#include "shard_rules.h"

int cspmdi_shard_fail(shard_io_t *io, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(io->why, sizeof io->why, fmt, ap);
    va_end(ap);
    return SHARD_NO_STRATEGY;
}

const cspmd_gtensor_t *cspmdi_shard_tensor(const shard_io_t *io, int i)
{
    return i < io->call->ntensors ? &io->call->tensors[i] : NULL;
}

int64_t cspmdi_shard_gsize(const shard_io_t *io, int i, int d)
{
    const cspmd_gtensor_t *t = &io->call->tensors[i];
    return t->sizes[d] * (io->in[i] == d ? io->k : 1);
}

int64_t cspmdi_shard_int_arg(const shard_io_t *io, int a, int64_t dflt)
{
    if (a >= io->call->nargs || io->call->args[a].n < 1)
        return dflt;
    return io->call->args[a].v[0];
}

int cspmdi_shard_wrap_dim(int64_t d, int ndim)
{
    int n = ndim > 0 ? ndim : 1;
    return (int)(d < 0 ? d + n : d);
}

void cspmdi_shard_all_results(shard_io_t *io, int8_t place, int ndim)
{
    for (int r = 0; r < CSPMD_MAX_RESULTS; r++) {
        io->out[r] = r < io->call->nresults ? place : CSPMD_PLACE_NONE;
        io->ndim[r] = (int8_t)ndim;
    }
}

const char *cspmdi_shard_place_text(int8_t p, char *buf, size_t len)
{
    if (p >= 0)
        snprintf(buf, len, "S(%d)", p);
    else
        snprintf(buf, len, "%s", p == P_ ? "P" : "R");
    return buf;
}

int cspmdi_shard_tensor_of_arg(const shard_io_t *io, int arg)
{
    for (int i = 0; i < io->call->ntensors; i++)
        if (io->call->tensors[i].arg == arg)
            return i;
    return -1;
}

/* ---- pointwise -------------------------------------------------------- */

/* Every tensor operand broadcasts to the result; shards must all land on
 * one result dim, which no replicated operand may span (it would need a
 * slice of itself), and no operand may be Partial next to a shard. */
static int pointwise(shard_io_t *io)
{
    int nd = 0;
    for (int i = 0; i < io->call->ntensors; i++)
        if (!tensor(io, i)->scalar && tensor(io, i)->ndim > nd)
            nd = tensor(io, i)->ndim;
    int64_t shape[CSPMD_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        shape[d] = 1;
    int sdim = -1, partial = 0;
    for (int i = 0; i < io->call->ntensors; i++) {
        const cspmd_gtensor_t *t = tensor(io, i);
        if (t->scalar)
            continue;
        int off = nd - t->ndim;
        for (int d = 0; d < t->ndim; d++) {
            int64_t g = gsize(io, i, d);
            if (shape[off + d] == 1)
                shape[off + d] = g;
            else if (g != 1 && g != shape[off + d])
                return fail(io, "the global shapes do not broadcast (dim %d: %lld vs %lld)",
                            off + d, (long long)shape[off + d], (long long)g);
        }
        if (io->in[i] >= 0) {
            int D = io->in[i] + off;
            if (sdim >= 0 && sdim != D)
                return fail(io, "operands are sharded on different dims (%d and %d)", sdim, D);
            sdim = D;
        }
        partial |= io->in[i] == P_;
    }
    if (sdim >= 0) {
        if (partial)
            return fail(io, "a Partial operand next to a sharded one");
        for (int i = 0; i < io->call->ntensors; i++) {
            const cspmd_gtensor_t *t = tensor(io, i);
            int d = sdim - (nd - t->ndim);
            if (!t->scalar && io->in[i] == R_ && d >= 0 && t->sizes[d] != 1)
                return fail(io, "operand %d is replicated along the sharded dim %d", i, sdim);
        }
    }
    all_results(io, sdim >= 0 ? (int8_t)sdim : partial ? P_ : R_, nd);
    return CSPMD_OK;
}

/* new_empty / new_empty_strided(self, size, ...): an uninitialized tensor
 * that takes self's type.  Of self's own local
 * sizes (autograd's gradient buffers) it is placed as self; of other sizes
 * it is replicated, which a sharded or Partial self cannot give. */
static int new_sized(shard_io_t *io)
{
    const cspmd_gtensor_t *self = tensor(io, 0);
    const cspmd_garg_t *size = io->call->nargs > 1 ? &io->call->args[1] : NULL;
    if (size == NULL || size->n < 0)
        return fail(io, "no size list");
    int same = size->n == self->ndim;
    for (int d = 0; same && d < self->ndim; d++)
        same = size->v[d] == self->sizes[d];
    if (same) {
        all_results(io, io->in[0], self->ndim);
        return CSPMD_OK;
    }
    if (io->in[0] != R_) {
        char a[16];
        return fail(io, "a new tensor of other sizes than its %s self",
                    place_text(io->in[0], a, sizeof a));
    }
    all_results(io, R_, size->n);
    return CSPMD_OK;
}

/* new_zeros / new_ones / new_full(self, size, ...): factories that take
 * only self's dtype and device; the result is the same constant on every
 * rank, replicated whatever self's placement (the reference types them R
 * too). */
static int new_factory(shard_io_t *io)
{
    const cspmd_garg_t *size = io->call->nargs > 1 ? &io->call->args[1] : NULL;
    if (size == NULL || size->n < 0)
        return fail(io, "no size list");
    all_results(io, R_, size->n);
    return CSPMD_OK;
}

/* ---- matmul family ------------------------------------------------------ */

/* a @ b on one axis: a's dims (.., m, k), b's (.., k, n), batch dims 0..nb.
 * Shards of m or n pass; a shard of the contraction on both sides makes a
 * Partial; Partial times Replicate stays Partial. */
static int matmul_place(shard_io_t *io, int ia, int ib, int nb, int8_t *out)
{
    const cspmd_gtensor_t *a = tensor(io, ia), *b = tensor(io, ib);
    if (a->ndim != nb + 2 || b->ndim != nb + 2)
        return fail(io, "operands of %d and %d dims", a->ndim, b->ndim);
    for (int d = 0; d < nb; d++)
        if (gsize(io, ia, d) != gsize(io, ib, d))
            return fail(io, "the global batch sizes differ");
    if (gsize(io, ia, nb + 1) != gsize(io, ib, nb))
        return fail(io, "the global contraction sizes differ (%lld vs %lld)",
                    (long long)gsize(io, ia, nb + 1), (long long)gsize(io, ib, nb));
    int8_t pa = io->in[ia], pb = io->in[ib];
    if (pa >= 0 && pa < nb && pb == pa)
        *out = pa; /* batch */
    else if (pa == nb && pb == R_)
        *out = (int8_t)nb; /* rows */
    else if (pa == R_ && pb == nb + 1)
        *out = (int8_t)(nb + 1); /* columns */
    else if (pa == nb + 1 && pb == nb)
        *out = P_; /* the contraction */
    else if ((pa == P_ && pb == R_) || (pa == R_ && pb == P_))
        *out = P_;
    else if (pa == R_ && pb == R_)
        *out = R_;
    else {
        char sa[16], sb[16];
        return fail(io, "no strategy for operands placed %s and %s", place_text(pa, sa, 16),
                    place_text(pb, sb, 16));
    }
    return CSPMD_OK;
}

/* mm (nb = 0) and bmm (nb = 1): the product placed by matmul_place. */
static int product(shard_io_t *io, int nb)
{
    int8_t p = R_;
    int st = matmul_place(io, 0, 1, nb, &p);
    if (st == CSPMD_OK)
        all_results(io, p, nb + 2);
    return st;
}

static int mm(shard_io_t *io) { return product(io, 0); }
static int bmm(shard_io_t *io) { return product(io, 1); }

/* addmm(self, m1, m2) / baddbmm(self, b1, b2): self broadcast-added to the
 * product must be placed as the product is. */
static int add_product(shard_io_t *io, int nb)
{
    if (io->call->ntensors != 3)
        return fail(io, "expected 3 tensor operands");
    int8_t p = R_;
    int st = matmul_place(io, 1, 2, nb, &p);
    if (st != CSPMD_OK)
        return st;
    const cspmd_gtensor_t *s = tensor(io, 0);
    int nd = nb + 2, off = nd - s->ndim, ps = io->in[0];
    if (off < 0)
        return fail(io, "self has more dims than the product");
    if (p >= 0) {
        int d = p - off;
        int ok = ps == R_ ? d < 0 || s->sizes[d] == 1 : ps >= 0 && ps + off == p;
        if (!ok)
            return fail(io, "the product is sharded on dim %d but self is not", p);
    } else if (p != ps) {
        char sp[16], ss[16];
        return fail(io, "the product is %s but self is %s", place_text(p, sp, 16),
                    place_text((int8_t)ps, ss, 16));
    }
    all_results(io, p, nd);
    return CSPMD_OK;
}

static int addmm(shard_io_t *io) { return add_product(io, 0); }
static int baddbmm(shard_io_t *io) { return add_product(io, 1); }

/* ---- dims moved ---------------------------------------------------------- */

static int transpose_dims(shard_io_t *io, int d0, int d1)
{
    const cspmd_gtensor_t *t = tensor(io, 0);
    int8_t p = io->in[0];
    if (p == d0)
        p = (int8_t)d1;
    else if (p == d1)
        p = (int8_t)d0;
    all_results(io, p, t->ndim);
    return CSPMD_OK;
}

static int t_(shard_io_t *io)
{
    return tensor(io, 0)->ndim < 2 ? transpose_dims(io, 0, 0) : transpose_dims(io, 0, 1);
}

static int transpose(shard_io_t *io)
{
    int nd = tensor(io, 0)->ndim;
    return transpose_dims(io, wrap_dim(int_arg(io, 1, 0), nd), wrap_dim(int_arg(io, 2, 0), nd));
}

static int permute(shard_io_t *io)
{
    const cspmd_gtensor_t *t = tensor(io, 0);
    const cspmd_garg_t *dims = io->call->nargs > 1 ? &io->call->args[1] : NULL;
    if (dims == NULL || dims->n != t->ndim)
        return fail(io, "permute dims do not match the tensor's %d dims", t->ndim);
    int8_t p = io->in[0];
    if (p >= 0)
        for (int i = 0; i < dims->n; i++)
            if (wrap_dim(dims->v[i], t->ndim) == io->in[0])
                p = (int8_t)i;
    all_results(io, p, t->ndim);
    return CSPMD_OK;
}

static int unsqueeze(shard_io_t *io)
{
    const cspmd_gtensor_t *t = tensor(io, 0);
    int d = wrap_dim(int_arg(io, 1, 0), t->ndim + 1);
    int8_t p = io->in[0];
    all_results(io, p >= 0 && p >= d ? (int8_t)(p + 1) : p, t->ndim + 1);
    return CSPMD_OK;
}

/* squeeze / squeeze.dim / squeeze.dims: a sharded dim of local size 1 has
 * global size k, which the global op would keep. */
static int squeeze(shard_io_t *io)
{
    const cspmd_gtensor_t *t = tensor(io, 0);
    int drop[CSPMD_MAX_DIMS] = {0};
    const cspmd_garg_t *dims = io->call->nargs > 1 ? &io->call->args[1] : NULL;
    if (dims == NULL || dims->n < 1) {
        for (int d = 0; d < t->ndim; d++)
            drop[d] = 1;
    } else {
        for (int i = 0; i < dims->n; i++) {
            int d = wrap_dim(dims->v[i], t->ndim);
            if (d >= 0 && d < t->ndim)
                drop[d] = 1;
        }
    }
    int8_t p = io->in[0];
    int nd = 0, np = p;
    for (int d = 0; d < t->ndim; d++) {
        if (drop[d] && t->sizes[d] == 1) {
            if (d == p)
                return fail(io, "squeezes the sharded dim %d (local size 1, global size %lld)", d,
                            (long long)io->k);
            if (p >= 0 && d < p)
                np--;
            continue;
        }
        nd++;
    }
    all_results(io, p >= 0 ? (int8_t)np : p, nd);
    return CSPMD_OK;
}

/* ---- reductions ---------------------------------------------------------- */

/* sum / mean / amax / amin over dims (argument 1, an int list; absent or
 * empty: all dims) with keepdim (argument kd, -1: none).  A reduced shard
 * makes a pending sum, which only sum is; Partial passes only through the
 * linear ones. */
static int reduce(shard_io_t *io, int kd, int is_sum, int linear)
{
    const cspmd_gtensor_t *t = tensor(io, 0);
    int red[CSPMD_MAX_DIMS] = {0};
    /* kd < 0: the full reductions (sum(self, *, dtype)), whose argument 1
     * is a dtype, not dims */
    const cspmd_garg_t *dims = kd >= 0 && io->call->nargs > 1 ? &io->call->args[1] : NULL;
    int all = dims == NULL || dims->n < 1;
    for (int d = 0; d < t->ndim; d++)
        red[d] = all;
    if (!all)
        for (int i = 0; i < dims->n; i++) {
            int d = wrap_dim(dims->v[i], t->ndim);
            if (d >= 0 && d < t->ndim)
                red[d] = 1;
        }
    int keep = kd >= 0 && int_arg(io, kd, 0) != 0;
    int8_t p = io->in[0];
    int nd = 0, np = p;
    for (int d = 0; d < t->ndim; d++) {
        if (red[d] && !keep) {
            if (p >= 0 && d < p)
                np--;
            continue;
        }
        nd++;
    }
    if (p >= 0 && red[p]) {
        if (!is_sum)
            return fail(io, "it reduces over the sharded dim %d, and only a sum gives a Partial "
                            "sum (all_gather first, or reduce a sum)", p);
        all_results(io, P_, nd);
        return CSPMD_OK;
    }
    if (p == P_ && !linear)
        return fail(io, "a Partial operand");
    all_results(io, p >= 0 ? (int8_t)np : p, nd);
    return CSPMD_OK;
}

static int sum_all(shard_io_t *io) { return reduce(io, -1, 1, 1); }
static int sum_dim(shard_io_t *io) { return reduce(io, 2, 1, 1); }
static int mean_dim(shard_io_t *io) { return reduce(io, 2, 0, 1); }
static int mean_all(shard_io_t *io) { return reduce(io, -1, 0, 1); }
static int amax(shard_io_t *io) { return reduce(io, 2, 0, 0); }

/* softmax(self, dim, ...), its log form and their backward ops (every
 * operand placed alike): the normalized dim must not be sharded. */
static int softmax(shard_io_t *io)
{
    int dim_arg = io->call->ntensors > 1 ? 2 : 1;
    int nd = tensor(io, 0)->ndim;
    int d = wrap_dim(int_arg(io, dim_arg, 0), nd);
    for (int i = 0; i < io->call->ntensors; i++) {
        if (io->in[i] == d)
            return fail(io, "it normalizes over the sharded dim %d", d);
        if (io->in[i] != io->in[0])
            return fail(io, "operands are placed differently");
    }
    all_results(io, io->in[0], nd);
    return CSPMD_OK;
}

/* Ops along one dim (argument dim_arg, default dflt; a None dim with
 * reduces: every dim): the dim must not be sharded; a reducing op drops
 * it unless keepdim (argument kd) is set.  Every result is placed alike
 * (sort's values and indices, max.dim's). */
static int along(shard_io_t *io, int dim_arg, int64_t dflt, int reduces, int kd)
{
    const cspmd_gtensor_t *t = tensor(io, 0);
    int all = reduces && dim_arg < io->call->nargs && io->call->args[dim_arg].n == CSPMD_GARG_NONE;
    int d = wrap_dim(int_arg(io, dim_arg, dflt), t->ndim);
    int8_t p = io->in[0];
    if (p >= 0 && (all || p == d))
        return fail(io, "it works along the sharded dim %d", p);
    if (p == P_)
        return fail(io, "a Partial operand");
    int keep = kd >= 0 && int_arg(io, kd, 0) != 0;
    int nd = t->ndim;
    if (reduces && !keep) {
        nd = all ? 0 : nd - 1;
        if (p >= 0 && p > d)
            p--;
    }
    all_results(io, p, nd);
    return CSPMD_OK;
}

static int scan(shard_io_t *io) { return along(io, 1, 0, 0, -1); }
static int sort_(shard_io_t *io) { return along(io, 1, -1, 0, -1); }
static int sort_stable(shard_io_t *io) { return along(io, 2, -1, 0, -1); }
static int topk(shard_io_t *io) { return along(io, 2, -1, 0, -1); }
static int reduce_dim(shard_io_t *io) { return along(io, 1, 0, 1, 2); }

/* cat(tensors, dim) / stack(tensors, dim): every (non-empty) operand
 * placed alike, the joined dim not sharded. */
static int join(shard_io_t *io, int is_stack)
{
    int nd = -1, first = -1;
    for (int i = 0; i < io->call->ntensors; i++) {
        const cspmd_gtensor_t *t = tensor(io, i);
        if (!is_stack && t->ndim == 1 && t->sizes[0] == 0)
            continue; /* cat's legacy empty operands */
        if (first < 0) {
            first = i;
            nd = t->ndim;
        } else if (io->in[i] != io->in[first]) {
            char a[16], b[16];
            return fail(io, "operands are placed differently (%s and %s)",
                        place_text(io->in[first], a, 16), place_text(io->in[i], b, 16));
        }
    }
    if (first < 0)
        return fail(io, "no non-empty operand");
    int d = wrap_dim(int_arg(io, 1, 0), nd + is_stack);
    int8_t p = io->in[first];
    if (!is_stack && p == d)
        return fail(io, "it concatenates along the sharded dim %d", d);
    if (is_stack && p >= d)
        p++;
    all_results(io, p, nd + is_stack);
    return CSPMD_OK;
}

static int cat(shard_io_t *io) { return join(io, 0); }
static int stack(shard_io_t *io) { return join(io, 1); }

/* native_layer_norm(input, normalized_shape, weight, bias, eps) and its
 * backward (grad_out, input, normalized_shape, mean, rstd, weight, bias,
 * mask): the normalized (trailing) dims must not be sharded, the affine
 * parameters replicated; every result (out, mean, rstd -- or the input's
 * gradient) is placed as the input. */
static int layer_norm(shard_io_t *io, int input, int shape_arg)
{
    const cspmd_gtensor_t *t = tensor(io, input);
    const cspmd_garg_t *shape = shape_arg < io->call->nargs ? &io->call->args[shape_arg] : NULL;
    if (shape == NULL || shape->n < 0 || shape->n > t->ndim)
        return fail(io, "normalized_shape is not a list of integers");
    int8_t p = io->in[input];
    if (p >= t->ndim - shape->n)
        return fail(io, "it normalizes over the sharded dim %d", p);
    if (p == P_)
        return fail(io, "a Partial operand");
    for (int i = 0; i < io->call->ntensors; i++) {
        const cspmd_gtensor_t *g = tensor(io, i);
        int is_param = g->ndim == shape->n && i != input;
        if (is_param && io->in[i] != R_)
            return fail(io, "the affine parameter (operand %d) is not replicated", i);
        if (!is_param && io->in[i] != p && !(g->ndim == t->ndim && io->in[i] == R_ &&
                                              (p < 0 || g->sizes[p] == 1)))
            return fail(io, "operand %d is placed differently from the input", i);
    }
    all_results(io, p, t->ndim);
    return CSPMD_OK;
}

static int layer_norm_fwd(shard_io_t *io) { return layer_norm(io, 0, 1); }
static int layer_norm_bwd(shard_io_t *io)
{
    int st = layer_norm(io, 1, 2);
    if (st == CSPMD_OK) /* grad_input, grad_weight, grad_bias */
        for (int r = 1; r < CSPMD_MAX_RESULTS && r < io->call->nresults; r++)
            io->out[r] = CSPMD_PLACE_NONE;
    return st;
}

/* embedding(weight, indices): rows looked up by (possibly sharded)
 * indices, the embedding dim may be sharded; a vocabulary-sharded table
 * would give a masked partial sum, which is not a plain sum. */
static int embedding(shard_io_t *io)
{
    if (io->call->ntensors < 2)
        return fail(io, "expected weight and indices");
    const cspmd_gtensor_t *idx = tensor(io, 1);
    int8_t pw = io->in[0], pi = io->in[1];
    int8_t p;
    if (pw == 0)
        return fail(io, "the vocabulary dim of the table is sharded");
    if (pw == 1 && pi == R_)
        p = (int8_t)idx->ndim;
    else if (pw == R_ && pi >= 0)
        p = pi;
    else if (pw == R_ && pi == R_)
        p = R_;
    else if (pw == P_ && pi == R_)
        p = P_;
    else
        return fail(io, "the table and the indices are both sharded");
    all_results(io, p, idx->ndim + 1);
    return CSPMD_OK;
}

/* ---- reshapes -------------------------------------------------------------- */

/* "input shape (local): (4, 8), target shape (local): (2, 2, 8)" for the
 * reshape errors (built on the error path only). */
static const char *reshape_shapes(const cspmd_gtensor_t *t, const cspmd_garg_t *size, char *shapes,
                                  size_t cap)
{
    int no = size->n;
    int len = snprintf(shapes, cap, "input shape (local): (");
    for (int d = 0; d < t->ndim && len < (int)cap; d++)
        len += snprintf(shapes + len, cap - (size_t)len, "%s%lld", d ? ", " : "",
                        (long long)t->sizes[d]);
    if (len < (int)cap)
        len += snprintf(shapes + len, cap - (size_t)len, "%s), target shape (local): (",
                        t->ndim == 1 ? "," : "");
    for (int i = 0; i < no && len < (int)cap; i++)
        len += snprintf(shapes + len, cap - (size_t)len, "%s%lld", i ? ", " : "",
                        (long long)size->v[i]);
    if (len < (int)cap)
        snprintf(shapes + len, cap - (size_t)len, "%s)", no == 1 ? "," : "");
    return shapes;
}

/* view / reshape / _unsafe_view(self, size).  The dims of self and of the
 * target fall into groups of equal products; the group holding the sharded
 * dim p is read as F equal chunks, where F is the product of the local
 * sizes of the group's dims before p (times p's own stride factor, for a
 * shard that is strided already), and a rank holds its contiguous block of
 * every chunk.  The shard goes to the first target dim j of the group that
 * the chunk boundaries do not cover, strided by F over the product of the
 * target dims before j, provided each chunk is whole rows of j (the
 * product of the target dims after j divides a chunk).
 *
 * So a plain shard (F = 1) that is split -- (heads * head_dim) into
 * (heads, head_dim) -- keeps the shard on the outermost piece, whose global
 * size is its local size times the axis size (DTensor's propagation
 * agrees; the reference refuses the split, docs/differences.md); a shard
 * merged behind other dims -- (b, h) into b * h, h sharded, as torch's
 * matmul folds batch dims -- becomes a strided shard of the merged dim, and
 * the view back to (b, h) makes it plain again (DTensor and the reference
 * refuse the merge, docs/differences.md).  A sharded dim of local size 1
 * (which vanishes) is rejected with the reference's message. */
static int view(shard_io_t *io)
{
    const cspmd_gtensor_t *t = tensor(io, 0);
    const cspmd_garg_t *size = io->call->nargs > 1 ? &io->call->args[1] : NULL;
    if (size == NULL || size->n < 0)
        return fail(io, "the target size is not a list of integers");
    int64_t numel = 1, known = 1, out[CSPMD_MAX_DIMS];
    int infer = -1, no = size->n;
    for (int d = 0; d < t->ndim; d++)
        numel *= t->sizes[d];
    for (int i = 0; i < no; i++) {
        out[i] = size->v[i];
        if (out[i] == -1)
            infer = i;
        else
            known *= out[i];
    }
    if (infer >= 0)
        out[infer] = known ? numel / known : 0;
    int8_t p = io->in[0];
    if (p < 0) {
        all_results(io, p, no);
        return CSPMD_OK;
    }
    char shapes[160];
    if (t->sizes[p] == 1)
        return cspmd_error_set(
            CSPMD_ERR_PROPAGATION,
            "Reshaping a tensor sharded on dim %d (local size 1) is ambiguous: the sharded "
            "dimension disappears in the reshape so we cannot determine which output dimension "
            "carries the sharding. Consider redistributing to unshard dim %d before reshaping. %s",
            p, p, reshape_shapes(t, size, shapes, sizeof shapes));
    /* Walk both shapes in groups of equal products (size-1 dims skipped). */
    int i = 0, o = 0;
    while (i < t->ndim || o < no) {
        while (i < t->ndim && t->sizes[i] == 1 && i != p)
            i++;
        while (o < no && out[o] == 1)
            o++;
        if (i >= t->ndim || o >= no)
            break;
        int i0 = i, o0 = o;
        int64_t pi = t->sizes[i++], po = out[o++];
        while (pi != po) {
            if (pi < po && i < t->ndim)
                pi *= t->sizes[i++];
            else if (po < pi && o < no)
                po *= out[o++];
            else
                return fail(io, "the sizes do not match");
        }
        if (p < i0 || p >= i)
            continue;
        int64_t F = io->split != NULL && io->split[0] > 1 ? io->split[0] : 1;
        for (int d = i0; d < p; d++)
            F *= t->sizes[d];
        int64_t chunk = pi / F, before = 1;
        int j = o0;
        while (j < o && before * out[j] <= F)
            before *= out[j++];
        int64_t after = 1;
        for (int d = j + 1; d < o; d++)
            after *= out[d];
        if (j >= o || F % before != 0 || chunk % after != 0)
            return fail(io, "the sharded dim %d, in %lld chunks of the merged dims, has no "
                            "counterpart in the target size",
                        p, (long long)F);
        if (F / before > UINT32_MAX)
            return fail(io, "the sharded dim %d is strided by more than %u", p,
                        (unsigned)UINT32_MAX);
        all_results(io, (int8_t)j, no);
        io->out_split[0] = (uint32_t)(F / before);
        return CSPMD_OK;
    }
    return fail(io, "the sharded dim %d has no counterpart in the target size", p);
}

/* expand(self, size): a sharded dim keeps its size (-1 or its local size). */
static int expand(shard_io_t *io)
{
    const cspmd_gtensor_t *t = tensor(io, 0);
    const cspmd_garg_t *size = io->call->nargs > 1 ? &io->call->args[1] : NULL;
    if (size == NULL || size->n < t->ndim)
        return fail(io, "the target size is not a list of integers");
    int8_t p = io->in[0];
    if (p >= 0) {
        int D = p + size->n - t->ndim;
        if (size->v[D] != -1 && size->v[D] != t->sizes[p])
            return fail(io, "it expands the sharded dim %d", p);
        p = (int8_t)D;
    }
    all_results(io, p, size->n);
    return CSPMD_OK;
}

/* ---- the table ------------------------------------------------------------- */

typedef int (*shard_fn)(shard_io_t *io);

typedef struct shard_entry {
    const char *name;     /* without "aten::"                          */
    const char *overload; /* NULL: any overload                        */
    const char *family;
    shard_fn fn;
} shard_entry_t;

/* Pointwise ops; their in-place forms (trailing '_') share the rule. */
/* _foreach_norm, per element: the norm of a sharded tensor is no sum of
 * the shards' norms (their squares' sum is), so it has no placement. */
static int foreach_norm(shard_io_t *io)
{
    if (io->in[0] >= 0)
        return cspmd_error_set(CSPMD_ERR_PROPAGATION,
                               "%s: the norm of a tensor sharded on dim %d is not a sum of the "
                               "shards' norms; sum each shard's |x|**p in spmd.local(), "
                               "all_reduce the sums and take the p-th root",
                               io->call->name, io->in[0]);
    if (io->in[0] == P_)
        return fail(io, "the norm of a Partial tensor");
    all_results(io, R_, 0);
    return CSPMD_OK;
}

static const char *const pointwise_ops[] = {
    "add", "sub", "rsub", "mul", "div", "neg", "abs", "exp", "log", "log1p", "expm1", "sqrt",
    "rsqrt", "reciprocal", "pow", "relu", "gelu", "silu", "sigmoid", "tanh", "sin", "cos",
    "erf", "sign", "floor", "ceil", "round", "trunc", "clamp", "clamp_min", "clamp_max",
    "maximum", "minimum", "where", "masked_fill", "eq", "ne", "lt", "le", "gt", "ge",
    "logical_and", "logical_or", "logical_not", "bitwise_and", "bitwise_or", "bitwise_not",
    "lerp", "addcmul", "addcdiv", "square", "clone", "_to_copy", "detach", "alias", "copy",
    "fill", "zero", "native_dropout", "native_dropout_backward", "threshold_backward",
    "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward", "lift_fresh",
    "hardtanh", "hardtanh_backward", "leaky_relu", "leaky_relu_backward", "isnan", "isinf",
    "nan_to_num", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
    "randn_like", "bernoulli",
};

static const shard_entry_t table[] = {
    {"mm", NULL, "mm", mm},
    {"bmm", NULL, "bmm", bmm},
    {"addmm", NULL, "addmm", addmm},
    {"baddbmm", NULL, "baddbmm", baddbmm},
    {"t", NULL, "t", t_},
    {"numpy_T", NULL, "t", t_},
    {"transpose", "int", "transpose", transpose},
    {"permute", NULL, "permute", permute},
    {"unsqueeze", NULL, "unsqueeze", unsqueeze},
    {"squeeze", NULL, "squeeze", squeeze},
    {"sum", "", "sum", sum_all},
    {"sum", "dim_IntList", "sum", sum_dim},
    {"mean", "", "mean", mean_all},
    {"mean", "dim", "mean", mean_dim},
    {"amax", NULL, "amax", amax},
    {"amin", NULL, "amax", amax},
    {"_softmax", NULL, "softmax", softmax},
    {"_log_softmax", NULL, "softmax", softmax},
    {"_softmax_backward_data", NULL, "softmax", softmax},
    {"_log_softmax_backward_data", NULL, "softmax", softmax},
    {"view", "", "view", view},
    {"_unsafe_view", NULL, "view", view},
    {"reshape", NULL, "view", view},
    {"_reshape_alias", NULL, "view", view},
    {"expand", NULL, "expand", expand},
    /* list ops: element i of each list as one pointwise op (the fused
     * optimizers' param, grad and state; _foreach_<op> maps to <op>) */
    {"_fused_adam_", NULL, "pointwise", pointwise},
    {"_fused_adam", NULL, "pointwise", pointwise},
    {"_fused_adamw_", NULL, "pointwise", pointwise},
    {"_fused_adamw", NULL, "pointwise", pointwise},
    {"_fused_sgd_", NULL, "pointwise", pointwise},
    {"_fused_sgd", NULL, "pointwise", pointwise},
    {"_fused_adagrad_", NULL, "pointwise", pointwise},
    {"_fused_adagrad", NULL, "pointwise", pointwise},
    {"_foreach_norm", NULL, "norm", foreach_norm},
    {"new_empty", NULL, "new_sized", new_sized},
    {"new_empty_strided", NULL, "new_sized", new_sized},
    {"new_zeros", NULL, "new_factory", new_factory},
    {"new_ones", NULL, "new_factory", new_factory},
    {"new_full", NULL, "new_factory", new_factory},
    {"native_layer_norm", NULL, "layer_norm", layer_norm_fwd},
    {"native_layer_norm_backward", NULL, "layer_norm", layer_norm_bwd},
    {"embedding", NULL, "embedding", embedding},
    {"embedding_dense_backward", NULL, "embedding", cspmdi_shard_embedding_backward},
    {"_fused_rms_norm", NULL, "layer_norm", layer_norm_fwd},
    {"_fused_rms_norm_backward", NULL, "layer_norm", layer_norm_bwd},
    {"nll_loss_forward", NULL, "nll_loss", cspmdi_shard_nll_loss},
    {"nll_loss_backward", NULL, "nll_loss", cspmdi_shard_nll_loss_backward},
    {"_scaled_dot_product_flash_attention_for_cpu", NULL, "attention", cspmdi_shard_sdpa},
    {"_scaled_dot_product_flash_attention_for_cpu_backward", NULL, "attention",
     cspmdi_shard_sdpa_backward},
    {"select", "int", "select", cspmdi_shard_select},
    {"select_backward", NULL, "select", cspmdi_shard_select_backward},
    {"slice", "Tensor", "slice", cspmdi_shard_slice},
    {"slice_backward", NULL, "slice", cspmdi_shard_slice_backward},
    {"constant_pad_nd", NULL, "slice", cspmdi_shard_constant_pad},
    {"split", "Tensor", "split", cspmdi_shard_split},
    {"split_with_sizes", NULL, "split", cspmdi_shard_split},
    {"unbind", "int", "split", cspmdi_shard_unbind},
    {"gather", NULL, "gather", cspmdi_shard_gather},
    {"scatter_add", NULL, "gather", cspmdi_shard_scatter_add},
    {"index_select", NULL, "gather", cspmdi_shard_index_select},
    {"index_add", NULL, "gather", cspmdi_shard_index_add},
    {"index_add_", NULL, "gather", cspmdi_shard_index_add},
    {"cat", NULL, "cat", cat},
    {"stack", NULL, "cat", stack},
    {"cumsum", NULL, "scan", scan},
    {"cumprod", NULL, "scan", scan},
    {"logcumsumexp", NULL, "scan", scan},
    {"sort", "", "sort", sort_},
    {"sort", "stable", "sort", sort_stable},
    {"topk", NULL, "sort", topk},
    {"max", "dim", "reduce_dim", reduce_dim},
    {"min", "dim", "reduce_dim", reduce_dim},
    {"argmax", NULL, "reduce_dim", reduce_dim},
    {"argmin", NULL, "reduce_dim", reduce_dim},
};

#define NPOINTWISE ((int)(sizeof pointwise_ops / sizeof *pointwise_ops))
#define NTABLE ((int)(sizeof table / sizeof *table))
/* Rules 0..NTABLE-1 are the table's; NTABLE is pointwise. */
#define RULE_POINTWISE NTABLE

cspmd_shard_rule_t cspmd_shard_rule_find(const char *name, const char *overload)
{
    if (name == NULL || strncmp(name, "aten::", 6) != 0)
        return -1;
    name += 6;
    if (overload == NULL)
        overload = "";
    for (int i = 0; i < NTABLE; i++)
        if (strcmp(table[i].name, name) == 0 &&
            (table[i].overload == NULL || strcmp(table[i].overload, overload) == 0))
            return i;
    /* _foreach_<op>: element i follows <op>'s rule where that is pointwise
     * (the list's overloads -- List, Scalar, ScalarList -- are all one) */
    if (strncmp(name, "_foreach_", 9) == 0) {
        char single[64];
        if (snprintf(single, sizeof single, "aten::%s", name + 9) >= (int)sizeof single)
            return -1;
        return cspmd_shard_rule_find(single, "") == RULE_POINTWISE ? RULE_POINTWISE : -1;
    }
    size_t n = strlen(name);
    for (int i = 0; i < NPOINTWISE; i++) {
        size_t m = strlen(pointwise_ops[i]);
        if (strncmp(pointwise_ops[i], name, m) == 0 &&
            (n == m || (n == m + 1 && name[m] == '_')))
            return RULE_POINTWISE;
    }
    return -1;
}

const char *cspmd_shard_rule_name(cspmd_shard_rule_t rule)
{
    if (rule == RULE_POINTWISE)
        return "pointwise";
    if (rule < 0 || rule >= NTABLE)
        return "none";
    return table[rule].family;
}

/* The one stride factor of the sharded operands (0: ordinary shards). */
static int strided_common(shard_io_t *io, uint32_t *common)
{
    int first = -1;
    uint32_t f = 0;
    for (int i = 0; i < io->call->ntensors; i++) {
        if (io->in[i] < 0)
            continue;
        uint32_t s = io->split != NULL && io->split[i] > 1 ? io->split[i] : 0;
        if (first < 0) {
            first = i;
            f = s;
        } else if (s != f) {
            return fail(io, "operands %d and %d are sharded in different strides (%u and %u)",
                        first, i, f > 1 ? f : 1, s > 1 ? s : 1);
        }
    }
    *common = f;
    return CSPMD_OK;
}

static void strided_results(shard_io_t *io, uint32_t common)
{
    for (int r = 0; r < CSPMD_MAX_RESULTS; r++)
        io->out_split[r] = io->out[r] >= 0 ? common : 0;
}

int cspmdi_shard_apply(cspmd_shard_rule_t rule, shard_io_t *io)
{
    if (rule == RULE_POINTWISE) {
        uint32_t common = 0;
        int st = strided_common(io, &common);
        if (st == CSPMD_OK)
            st = pointwise(io);
        if (st == CSPMD_OK)
            strided_results(io, common);
        return st;
    }
    if (rule < 0 || rule >= NTABLE)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd: unknown shard rule %d", (int)rule);
    if (io->call->ntensors < 1)
        return fail(io, "no tensor operand");
    if (table[rule].fn == view)
        return view(io);
    uint32_t common = 0;
    int st = strided_common(io, &common);
    if (st == CSPMD_OK)
        st = table[rule].fn(io);
    if (st == CSPMD_OK)
        strided_results(io, common);
    return st;
}
