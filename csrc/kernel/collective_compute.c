/*
 * collective_compute.c -- what each collective and conversion does to local data.
 *
 * `ws` is the group size, `r` this rank's index in the group.  Gathers and
 * scatters along a dim d move d to the front, run c10d's dim-0 collective,
 * and move it back.  Uneven splits pad to the largest piece (all_gather) or
 * reduce in full and keep this rank's piece (reduce_scatter).
 */
#include <stdio.h>
#include <stdlib.h>

#include "collective_compute.h"

/* Owned temporaries are released on every path: each function keeps them
 * in a small pool and frees the pool once.  Every keep() is a checked
 * statement of straight-line code (none in a loop), at most 6 in one
 * function (all_to_all), so POOL_MAX is never reached; were it, keep() releases the
 * tensor and fails the call rather than drop it. */
#define POOL_MAX 8
typedef struct pool {
    cspmd_tensor_t *t[POOL_MAX];
    int n;
} pool_t;

#if defined(__GNUC__)
__attribute__((warn_unused_result))
#endif
static cspmd_status_t keep(pool_t *p, cspmd_tensor_t *t)
{
    if (p->n < POOL_MAX) {
        p->t[p->n++] = t;
        return CSPMD_OK;
    }
    cspmd_tensor_release(t);
    return cspmd_error_set(CSPMD_ERR_RUNTIME,
                           "cspmd internal error: a collective kept more than %d temporaries",
                           POOL_MAX);
}

static void drain(pool_t *p)
{
    for (int i = 0; i < p->n; i++)
        cspmd_tensor_release(p->t[i]);
    p->n = 0;
}

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        st = (expr);                                                                               \
        if (st != CSPMD_OK)                                                                        \
            goto done;                                                                             \
    } while (0)

/* Per-rank tables (offsets, split sizes) are as long as the group: any
 * number of ranks.  NULL with a NOMEM error set when out of memory. */
static void *table_alloc(int64_t n, size_t elem)
{
    void *p = n > 0 && (uint64_t)n <= SIZE_MAX / elem ? calloc((size_t)n, elem) : NULL;
    if (p == NULL)
        cspmd_error_set(CSPMD_ERR_NOMEM, "cspmd: cannot allocate a table for %lld ranks",
                        (long long)n);
    return p;
}

static cspmd_status_t value_error(const char *fmt, long long a, long long b, long long c)
{
    return cspmd_error_set(CSPMD_ERR_VALUE, fmt, a, b, c);
}

static cspmd_status_t check_sizes(const char *fn, const int64_t *sizes, int n, int64_t ws,
                                  int64_t total)
{
    if (n != ws)
        return cspmd_error_set(CSPMD_ERR_VALUE, "%s: expected %lld split sizes (one per rank), "
                                                "got %d", fn, (long long)ws, n);
    int64_t sum = 0;
    for (int i = 0; i < n; i++) {
        if (sizes[i] < 0)
            return cspmd_error_set(CSPMD_ERR_VALUE, "%s: split sizes must be >= 0, got %lld",
                                   fn, (long long)sizes[i]);
        sum += sizes[i];
    }
    if (total >= 0 && sum != total)
        return cspmd_error_set(CSPMD_ERR_VALUE, "%s: split sizes sum to %lld but the tensor's "
                                                "dim has %lld", fn, (long long)sum,
                               (long long)total);
    return CSPMD_OK;
}

static int64_t offset_of(const int64_t *sizes, int64_t r)
{
    int64_t off = 0;
    for (int64_t i = 0; i < r; i++)
        off += sizes[i];
    return off;
}

/* How cat_pieces cuts piece s out of its source. */
typedef enum piece_kind {
    PIECE_NARROW,   /* src.narrow(dim, off[s], len[s])                 */
    PIECE_STACKED,  /* the same with a new leading dim (cat = stack)   */
    PIECE_SELECT    /* src.select(dim, s)                              */
} piece_kind_t;

/* out = cat(piece 0, ..., piece n-1; dim=cat_dim). */
static cspmd_status_t cat_pieces(cspmd_tensor_t *src, int64_t dim, const int64_t *off,
                                 const int64_t *len, int64_t n, piece_kind_t kind,
                                 int64_t cat_dim, cspmd_tensor_t **out)
{
    if (n > INT32_MAX)
        return cspmd_error_set(CSPMD_ERR_VALUE, "cspmd: more than %d pieces in one collective",
                               INT32_MAX);
    cspmd_tensor_t **pieces = table_alloc(n, sizeof *pieces);
    if (pieces == NULL)
        return CSPMD_ERR_NOMEM;
    int made = 0;
    cspmd_status_t st = CSPMD_OK;
    for (int64_t s = 0; s < n && st == CSPMD_OK; s++) {
        cspmd_tensor_t *piece;
        st = kind == PIECE_SELECT ? cspmd_op_select(src, dim, s, &piece)
                                  : cspmd_op_narrow(src, dim, off[s], len[s], &piece);
        if (st == CSPMD_OK && kind == PIECE_STACKED) {
            cspmd_tensor_t *u;
            st = cspmd_op_unsqueeze(piece, 0, &u);
            cspmd_tensor_release(piece);
            piece = u;
        }
        if (st == CSPMD_OK)
            pieces[made++] = piece;
    }
    if (st == CSPMD_OK)
        st = cspmd_op_cat(pieces, made, cat_dim, out);
    for (int i = 0; i < made; i++)
        cspmd_tensor_release(pieces[i]);
    free(pieces);
    return st;
}

/* A step whose result depends on the rank: r is its index in the group. */
typedef cspmd_status_t (*rank_step_t)(const cspmd_coll_call_t *c, cspmd_tensor_t *x, int64_t r,
                                      int64_t ws, cspmd_tensor_t **out);

/* Run step on x as rank r; on a LocalTensor (LocalTensorMode), once per
 * simulated rank on that rank's tensor, as that rank, joined back into a
 * LocalTensor.  The rank-free steps run on the LocalTensor itself: torch
 * runs their ops, and the c10d collectives, per rank. */
static cspmd_status_t per_rank(rank_step_t step, const cspmd_coll_call_t *c, cspmd_tensor_t *x,
                               int64_t r, int64_t ws, cspmd_tensor_t **out)
{
    cspmd_local_t *l;
    cspmd_status_t st = cspmd_local_split(x, c->group, &l);
    if (st != CSPMD_OK)
        return st;
    if (l == NULL)
        return step(c, x, r, ws, out);
    int n = cspmd_local_count(l);
    for (int i = 0; i < n && st == CSPMD_OK; i++) {
        int64_t gr;
        cspmd_tensor_t *xi = cspmd_local_get(l, i, &gr), *yi;
        st = step(c, xi, gr, ws, &yi);
        if (st == CSPMD_OK)
            cspmd_local_put(l, i, yi);
    }
    if (st == CSPMD_OK)
        st = cspmd_local_join(l, out);
    cspmd_local_free(l);
    return st;
}

/* Gather x along dim d (concat); every rank's piece has x's shape. */
static cspmd_status_t gather_cat(cspmd_tensor_t *x, int64_t d, const char *group, int64_t ws,
                                 cspmd_tensor_t **out)
{
    pool_t p = {{0}, 0};
    cspmd_status_t st;
    cspmd_tensor_t *t, *g;
    TRY(cspmd_op_movedim(x, d, 0, &t));
    TRY(keep(&p, t));
    TRY(cspmd_op_contiguous(t, &t));
    TRY(keep(&p, t));
    TRY(cspmd_c10d_all_gather(t, group, ws, &g));
    TRY(keep(&p, g));
    TRY(cspmd_op_movedim(g, 0, d, out));
done:
    drain(&p);
    return st;
}

static int64_t largest(const int64_t *sizes, int n)
{
    int64_t most = 0;
    for (int i = 0; i < n; i++)
        most = sizes[i] > most ? sizes[i] : most;
    return most;
}

/* Uneven all_gather, rank r's part: its piece, checked against
 * split_sizes and padded to the largest piece. */
static cspmd_status_t pad_piece(const cspmd_coll_call_t *c, cspmd_tensor_t *x, int64_t r,
                                int64_t ws, cspmd_tensor_t **out)
{
    (void)ws;
    int64_t d = c->dim_a;
    if (cspmd_tensor_size(x, d) != c->sizes_a[r])
        return value_error("all_gather: rank %lld has extent %lld on the gather dim but "
                           "split_sizes says %lld", (long long)r,
                           (long long)cspmd_tensor_size(x, d), (long long)c->sizes_a[r]);
    cspmd_tensor_t *pad;
    cspmd_status_t st = cspmd_op_zeros(x, d, largest(c->sizes_a, c->nsizes_a), 0, &pad);
    if (st == CSPMD_OK)
        st = cspmd_op_copy_into(pad, d, 0, x);
    if (st == CSPMD_OK)
        *out = pad;
    else
        cspmd_tensor_release(pad);
    return st;
}

static cspmd_status_t all_gather(const cspmd_coll_call_t *c, cspmd_tensor_t *x, int64_t r,
                                 int64_t ws, cspmd_tensor_t **out)
{
    pool_t p = {{0}, 0};
    cspmd_status_t st = CSPMD_OK;
    int64_t *offs = NULL;
    int64_t d = c->dim_a;
    if (c->src.shard_dim < 0) { /* V: stack along gather_dim */
        cspmd_tensor_t *u;
        TRY(cspmd_op_unsqueeze(x, d, &u));
        TRY(keep(&p, u));
        TRY(gather_cat(u, d, c->group, ws, out));
    } else if (c->sizes_a == NULL) {
        TRY(gather_cat(x, d, c->group, ws, out));
    } else { /* uneven: pad every piece to the largest, gather, cut */
        TRY(check_sizes("all_gather", c->sizes_a, c->nsizes_a, ws, -1));
        int64_t most = largest(c->sizes_a, c->nsizes_a);
        cspmd_tensor_t *pad, *g;
        offs = table_alloc(ws, sizeof *offs);
        if (offs == NULL) {
            st = CSPMD_ERR_NOMEM;
            goto done;
        }
        for (int64_t s = 0; s < ws; s++)
            offs[s] = s * most;
        TRY(per_rank(pad_piece, c, x, r, ws, &pad));
        TRY(keep(&p, pad));
        TRY(gather_cat(pad, d, c->group, ws, &g));
        TRY(keep(&p, g));
        TRY(cat_pieces(g, d, offs, c->sizes_a, ws, PIECE_NARROW, d, out));
    }
done:
    drain(&p);
    free(offs);
    return st;
}

/* Uneven reduce_scatter, rank r's part: its piece of the reduced whole. */
static cspmd_status_t keep_piece(const cspmd_coll_call_t *c, cspmd_tensor_t *s, int64_t r,
                                 int64_t ws, cspmd_tensor_t **out)
{
    (void)ws;
    return cspmd_op_narrow(s, c->dim_a, offset_of(c->sizes_a, r), c->sizes_a[r], out);
}

static cspmd_status_t reduce_scatter(const cspmd_coll_call_t *c, cspmd_tensor_t *x, int64_t r,
                                     int64_t ws, cspmd_tensor_t **out)
{
    pool_t p = {{0}, 0};
    cspmd_status_t st = CSPMD_OK;
    int64_t d = c->dim_a, n = cspmd_tensor_size(x, d);
    cspmd_tensor_t *t, *s;
    if (c->sizes_a != NULL) { /* uneven: reduce all, keep this rank's piece */
        TRY(check_sizes("reduce_scatter", c->sizes_a, c->nsizes_a, ws, n));
        TRY(cspmd_op_contiguous(x, &t));
        TRY(keep(&p, t));
        TRY(cspmd_c10d_all_reduce(t, c->group, 0, &s));
        TRY(keep(&p, s));
        TRY(per_rank(keep_piece, c, s, r, ws, out));
        goto done;
    }
    if (c->dst.shard_dim < 0 && n != ws) {
        st = value_error("reduce_scatter: dst=V needs extent %lld (the group size) on "
                         "scatter_dim %lld, got %lld", (long long)ws, (long long)d, (long long)n);
        goto done;
    }
    if (n % ws != 0) {
        st = value_error("reduce_scatter: input dimension %lld (%lld) must be a multiple of "
                         "group_size %lld", (long long)d, (long long)n, (long long)ws);
        goto done;
    }
    TRY(cspmd_op_movedim(x, d, 0, &t));
    TRY(keep(&p, t));
    TRY(cspmd_op_contiguous(t, &t));
    TRY(keep(&p, t));
    TRY(cspmd_c10d_reduce_scatter(t, c->group, ws, &s));
    TRY(keep(&p, s));
    if (c->dst.shard_dim < 0)
        TRY(cspmd_op_select(s, 0, 0, out)); /* V: unbind semantics */
    else
        TRY(cspmd_op_movedim(s, 0, d, out));
done:
    drain(&p);
    return st;
}

static cspmd_status_t all_to_all(const cspmd_coll_call_t *c, cspmd_tensor_t *x, int64_t ws,
                                 cspmd_tensor_t **out)
{
    pool_t p = {{0}, 0};
    cspmd_status_t st = CSPMD_OK;
    int64_t a = c->dim_a, b = c->dim_b, n = cspmd_tensor_size(x, a);
    cspmd_tensor_t *t, *g;
    /* One allocation for the five per-rank tables. */
    int64_t *tables = table_alloc(ws > 0 && ws <= INT64_MAX / 5 ? 5 * ws : -1, sizeof *tables);
    if (tables == NULL)
        return CSPMD_ERR_NOMEM;
    int64_t *even = tables, *outs = tables + ws, *ins = tables + 2 * ws, *offs = tables + 3 * ws,
            *lens = tables + 4 * ws;
    if (c->sizes_a != NULL || c->sizes_b != NULL) { /* uneven, along dim 0 */
        for (int64_t s = 0; s < ws; s++)
            even[s] = n / ws;
        const int64_t *in_sizes = c->sizes_b ? c->sizes_b : even;
        int nin = c->sizes_b ? c->nsizes_b : (int)ws;
        TRY(check_sizes("all_to_all input_split_sizes", in_sizes, nin, ws, n));
        const int64_t *out_sizes = c->sizes_a ? c->sizes_a : even;
        TRY(check_sizes("all_to_all output_split_sizes", out_sizes, c->sizes_a ? c->nsizes_a
                                                                              : (int)ws,
                        ws, -1));
        for (int64_t s = 0; s < ws; s++) {
            outs[s] = out_sizes[s];
            ins[s] = in_sizes[s];
        }
        TRY(cspmd_op_contiguous(x, &t));
        TRY(keep(&p, t));
        TRY(cspmd_c10d_all_to_all(t, outs, ins, (int)ws, c->group, out));
        goto done;
    }
    int stack = c->src.shard_dim < 0 && c->dst.shard_dim < 0;
    if (stack ? n != ws : n % ws != 0) {
        st = stack ? value_error("all_to_all: V->V needs extent %lld (the group size) on "
                                 "split_dim %lld, got %lld", (long long)ws, (long long)a,
                                 (long long)n)
                   : value_error("all_to_all: tensor dimension %lld (size %lld) is not evenly "
                                 "divisible by world_size (%lld)", (long long)a, (long long)n,
                                 (long long)ws);
        goto done;
    }
    for (int64_t s = 0; s < ws; s++)
        outs[s] = ins[s] = 1;
    if (stack) { /* out_r = stack_s(xs[s].select(a, r), dim=b) */
        TRY(cspmd_op_movedim(x, a, 0, &t));
        TRY(keep(&p, t));
        TRY(cspmd_op_contiguous(t, &t));
        TRY(keep(&p, t));
        TRY(cspmd_c10d_all_to_all(t, outs, ins, (int)ws, c->group, &g));
        TRY(keep(&p, g));
        TRY(cspmd_op_movedim(g, 0, b, out));
        goto done;
    }
    /* Shard: chunk along a, send chunk s to rank s, concatenate along b. */
    int64_t k = n / ws;
    for (int64_t s = 0; s < ws; s++) {
        offs[s] = s * k;
        lens[s] = k;
    }
    TRY(cat_pieces(x, a, offs, lens, ws, PIECE_STACKED, 0, &t));
    TRY(keep(&p, t));
    TRY(cspmd_c10d_all_to_all(t, outs, ins, (int)ws, c->group, &g));
    TRY(keep(&p, g));
    TRY(cat_pieces(g, 0, NULL, NULL, ws, PIECE_SELECT, b, out));
done:
    drain(&p);
    free(tables);
    return st;
}

static cspmd_status_t convert(const cspmd_coll_call_t *c, cspmd_tensor_t *x, int64_t r,
                              int64_t ws, cspmd_tensor_t **out)
{
    pool_t p = {{0}, 0};
    cspmd_status_t st = CSPMD_OK;
    cspmd_ltype_t a = c->src.ltype, b = c->dst.ltype;
    int64_t d = c->dim_a;
    int from_shard = c->src.shard_dim >= 0, to_shard = c->dst.shard_dim >= 0;
    cspmd_tensor_t *z;
    if ((a == CSPMD_LT_I || a == CSPMD_LT_R) && b == CSPMD_LT_V) {
        int64_t n = cspmd_tensor_size(x, d);
        if (c->sizes_a != NULL) { /* uneven shard: this rank's piece */
            TRY(check_sizes("convert", c->sizes_a, c->nsizes_a, ws, n));
            TRY(cspmd_op_narrow(x, d, offset_of(c->sizes_a, r), c->sizes_a[r], out));
        } else if (!to_shard) { /* V: select */
            if (n != ws) {
                st = value_error("convert(R, V): needs extent %lld (the group size) on dim "
                                 "%lld, got %lld; use S(i) to split a dim", (long long)ws,
                                 (long long)d, (long long)n);
                goto done;
            }
            TRY(cspmd_op_select(x, d, r, out));
        } else { /* S(d): torch.chunk sizing */
            int64_t off, len;
            TRY(cspmd_coll_chunk(n, ws, r, &off, &len));
            if (off >= n && n != 0) {
                st = value_error("convert(R, S(%lld)): extent %lld splits into fewer than %lld "
                                 "chunks", (long long)d, (long long)n, (long long)ws);
                goto done;
            }
            TRY(cspmd_op_narrow(x, d, off, len, out));
        }
        goto done;
    }
    if (b == CSPMD_LT_P && (a == CSPMD_LT_R || a == CSPMD_LT_I)) {
        if (r == 0)
            TRY(cspmd_op_clone(x, out));
        else
            TRY(cspmd_op_zeros(x, 0, -1, 0, out));
        goto done;
    }
    if (b == CSPMD_LT_P && a == CSPMD_LT_V) {
        if (!from_shard && c->sizes_a == NULL) { /* V: new dim of size ws at d */
            cspmd_tensor_t *u;
            TRY(cspmd_op_zeros(x, d, ws, 1, &z));
            TRY(keep(&p, z));
            TRY(cspmd_op_unsqueeze(x, d, &u));
            TRY(keep(&p, u));
            TRY(cspmd_op_copy_into(z, d, r, u));
        } else { /* S(d): x placed at its offset in the full extent */
            int64_t n = cspmd_tensor_size(x, d), total = n * ws, off = r * n;
            if (c->sizes_a != NULL) {
                TRY(check_sizes("convert", c->sizes_a, c->nsizes_a, ws, -1));
                total = offset_of(c->sizes_a, ws);
                off = offset_of(c->sizes_a, r);
            }
            TRY(cspmd_op_zeros(x, d, total, 0, &z));
            TRY(keep(&p, z));
            TRY(cspmd_op_copy_into(z, d, off, x));
        }
        *out = cspmd_tensor_retain(z);
        goto done;
    }
    st = cspmd_error_set(CSPMD_ERR_VALUE, "convert: unsupported pair %s -> %s",
                         cspmd_ltype_letter(a), cspmd_ltype_letter(b));
done:
    drain(&p);
    return st;
}

/* broadcast's rank-dependent step: root (dim_a) keeps x, every other rank
 * gets zeros. */
static cspmd_status_t keep_on_root(const cspmd_coll_call_t *c, cspmd_tensor_t *x, int64_t r,
                                   int64_t ws, cspmd_tensor_t **out)
{
    (void)ws;
    return r == c->dim_a ? cspmd_op_clone(x, out) : cspmd_op_zeros(x, 0, -1, 0, out);
}

/* V -> R|I: c10d's broadcast from root.  Its backward pairs: I -> V keeps
 * the gradient on root, P -> V sums it there (c10d's reduce), zeros
 * elsewhere.  A LocalTensor (LocalTensorMode has no reduce, and reads a
 * broadcast's root as a global rank) takes root's value, or zeros, and
 * all-reduces: the same sums. */
static cspmd_status_t broadcast(const cspmd_coll_call_t *c, cspmd_tensor_t *x, int64_t r,
                                int64_t ws, cspmd_tensor_t **out)
{
    pool_t p = {{0}, 0};
    cspmd_status_t st;
    cspmd_ltype_t a = c->src.ltype;
    cspmd_local_t *l = NULL;
    cspmd_tensor_t *t, *s;
    TRY(cspmd_coll_root_check(c->dim_a, ws));
    if (a == c->dst.ltype) { /* R -> R, I -> I: the value is everywhere already */
        TRY(cspmd_op_alias(x, out));
        goto done;
    }
    if (a == CSPMD_LT_I) { /* I -> V */
        TRY(per_rank(keep_on_root, c, x, r, ws, out));
        goto done;
    }
    TRY(cspmd_op_contiguous(x, &t));
    TRY(keep(&p, t));
    TRY(cspmd_local_split(t, c->group, &l));
    if (l != NULL) {
        if (a == CSPMD_LT_V) {
            TRY(per_rank(keep_on_root, c, t, r, ws, &s));
            TRY(keep(&p, s));
            TRY(cspmd_c10d_all_reduce(s, c->group, 0, out));
        } else {
            TRY(cspmd_c10d_all_reduce(t, c->group, 0, &s));
            TRY(keep(&p, s));
            TRY(per_rank(keep_on_root, c, s, r, ws, out));
        }
    } else if (a == CSPMD_LT_V) {
        TRY(cspmd_c10d_broadcast(t, c->group, c->dim_a, out));
    } else { /* P -> V */
        TRY(cspmd_c10d_reduce(t, c->group, c->dim_a, &s));
        TRY(keep(&p, s));
        TRY(keep_on_root(c, s, r, ws, out));
    }
done:
    cspmd_local_free(l);
    drain(&p);
    return st;
}

static cspmd_status_t body(const cspmd_coll_call_t *c, cspmd_tensor_t *x, int64_t r, int64_t ws,
                           cspmd_tensor_t **out)
{
    switch (c->op) {
    case CSPMD_COLL_ALL_REDUCE: {
        if (c->inplace)
            return cspmd_c10d_all_reduce(x, c->group, 1, out);
        cspmd_tensor_t *t;
        cspmd_status_t st = cspmd_op_contiguous(x, &t);
        if (st != CSPMD_OK)
            return st;
        st = cspmd_c10d_all_reduce(t, c->group, 0, out);
        cspmd_tensor_release(t);
        return st;
    }
    case CSPMD_COLL_ALL_GATHER:
        return all_gather(c, x, r, ws, out);
    case CSPMD_COLL_REDUCE_SCATTER:
        return reduce_scatter(c, x, r, ws, out);
    case CSPMD_COLL_ALL_TO_ALL:
        return all_to_all(c, x, ws, out);
    case CSPMD_COLL_REINTERPRET:
    case CSPMD_COLL_INVARIANT_TO_REPLICATE:
        return cspmd_op_alias(x, out); /* the data never changes */
    case CSPMD_COLL_CONVERT:
        if ((c->src.ltype == CSPMD_LT_I || c->src.ltype == CSPMD_LT_R) &&
            (c->dst.ltype == CSPMD_LT_I || c->dst.ltype == CSPMD_LT_R))
            return cspmd_op_alias(x, out);
        return per_rank(convert, c, x, r, ws, out);
    case CSPMD_COLL_BROADCAST:
        return broadcast(c, x, r, ws, out);
    case CSPMD_COLL_REDISTRIBUTE:
        break; /* never runs itself: cspmd_coll_route names the op */
    }
    return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_collective_compute: op %d must be "
                                             "routed first", (int)c->op);
}

/* The collectives whose result torch returns as a new contiguous tensor. */
static int moves_data(cspmd_coll_t op)
{
    return op == CSPMD_COLL_ALL_GATHER || op == CSPMD_COLL_REDUCE_SCATTER ||
           op == CSPMD_COLL_ALL_TO_ALL;
}

cspmd_status_t cspmd_collective_compute(const cspmd_coll_call_t *c, cspmd_tensor_t *x,
                                        cspmd_tensor_t **out)
{
    int64_t r = 0, ws = 1;
    cspmd_status_t st = cspmd_group_info(c->group, &r, &ws);
    if (st != CSPMD_OK)
        return st;
    /* Both casts happen inside the op, so they share its autograd node. */
    cspmd_tensor_t *xin = NULL, *y = NULL;
    st = cspmd_op_to_dtype(x, c->op_dtype == cspmd_tensor_dtype(x) ? -1 : c->op_dtype, &xin);
    if (st != CSPMD_OK)
        return st;
    st = body(c, xin, r, ws, &y);
    cspmd_tensor_release(xin);
    if (st != CSPMD_OK)
        return st;
    if (moves_data(c->op)) { /* a gather or scatter along dim d > 0 ends in a movedim */
        cspmd_tensor_t *yc;
        st = cspmd_op_contiguous(y, &yc);
        cspmd_tensor_release(y);
        if (st != CSPMD_OK)
            return st;
        y = yc;
    }
    if (c->out_dtype < 0 || c->out_dtype == cspmd_tensor_dtype(y)) {
        *out = y;
        return CSPMD_OK;
    }
    st = cspmd_op_to_dtype(y, c->out_dtype, out);
    cspmd_tensor_release(y);
    return st;
}
