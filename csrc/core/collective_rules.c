/*
 * collective_rules.c -- the collectives' (src, dst) tables, expert-mode
 * gating and backward pairs, and the checker rule (a collective's output type from its input).
 *
 * Type values in messages are R/I/V/P and S(d), as everywhere in cspmd (the
 * reference prints "PerMeshAxisLocalSpmdType.R"; docs/differences.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "cspmd.h"

cspmdi_ctype_text_t cspmdi_ctype_text(cspmd_ctype_t t)
{
    cspmdi_ctype_text_t r;
    if (cspmdi_is_shard(t))
        snprintf(r.s, sizeof r.s, "S(%d)", (int)t.shard_dim);
    else
        snprintf(r.s, sizeof r.s, "%s", cspmd_ltype_letter(t.ltype));
    return r;
}

int cspmdi_is_shard(cspmd_ctype_t t)
{
    return t.ltype == CSPMD_LT_V && t.shard_dim >= 0;
}

static int is_plain(cspmd_ctype_t t, cspmd_ltype_t lt)
{
    return t.ltype == lt && !cspmdi_is_shard(t);
}

static int ct_valid(cspmd_ctype_t t)
{
    if (t.ltype < CSPMD_LT_R || t.ltype > CSPMD_LT_P)
        return 0;
    if (t.shard_dim < -1)
        return 0;
    return t.shard_dim == -1 || t.ltype == CSPMD_LT_V;
}

static cspmd_status_t bad_value(const char *msg)
{
    return cspmd_error_set(CSPMD_ERR_VALUE, "%s", msg);
}

/* The (src, dst) checks below name src and dst by s and d: their texts
 * (cspmdi_ctype_text, or a shard's dim as the caller wrote it). */

/* all_reduce / reduce_scatter src: P, or V (implicit reinterpret). */
static cspmd_status_t check_reduce_src(const char *fn, cspmd_ctype_t src, const char *s)
{
    if (is_plain(src, CSPMD_LT_P) || is_plain(src, CSPMD_LT_V))
        return CSPMD_OK;
    if (is_plain(src, CSPMD_LT_R) || is_plain(src, CSPMD_LT_I))
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "%s src must be P, got %s. %s on replicated/invariant data is "
                               "usually a bug. If you really want to scale by mesh size, use "
                               "reinterpret(src=%s, dst=P) first.",
                               fn, s, fn, s);
    return cspmd_error_set(CSPMD_ERR_VALUE, "%s src must be P, got %s", fn, s);
}

static cspmd_status_t validate_reinterpret(cspmd_ctype_t src, cspmd_ctype_t dst, int expert,
                                           const char *s, const char *d)
{
    if (cspmdi_is_shard(src) || cspmdi_is_shard(dst))
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "reinterpret does not support S(i). Use V instead, or use convert "
                               "for semantics-preserving conversions. Got src=%s, dst=%s",
                               s, d);
    cspmd_ltype_t a = src.ltype, b = dst.ltype;
    if (a == b)
        return CSPMD_OK;
    if (!expert) {
        if (a == CSPMD_LT_R && b == CSPMD_LT_I)
            return bad_value("reinterpret(R, I) requires expert_mode=True. This is rarely what "
                             "you want in the forward pass; it exists as a backward for "
                             "convert(I, P). Prefer convert(R, I) which is the primary API for "
                             "R<->I transitions.");
        if (a == CSPMD_LT_R && b == CSPMD_LT_P)
            return bad_value("reinterpret(R, P) requires expert_mode=True. This scales the "
                             "semantic value by the mesh axis size, which is rarely intentional. "
                             "If you want to preserve semantics, use convert(R, P) instead.");
        if (a == CSPMD_LT_I && b == CSPMD_LT_R)
            return bad_value("reinterpret(I, R) requires expert_mode=True. Use convert(I, R) "
                             "instead, which is the primary API for I<->R transitions.");
        if (a == CSPMD_LT_R && b == CSPMD_LT_V)
            return bad_value("reinterpret(R, V) requires expert_mode=True. This makes N copies "
                             "of the input, which is rarely what you want in the forward pass. "
                             "If you want to shard a replicated value, use convert(R, V) or "
                             "convert(R, S(i)) instead.");
    }
    if ((a == CSPMD_LT_R && (b == CSPMD_LT_I || b == CSPMD_LT_V || b == CSPMD_LT_P)) ||
        (a == CSPMD_LT_I && (b == CSPMD_LT_R || b == CSPMD_LT_V || b == CSPMD_LT_P)) ||
        (a == CSPMD_LT_V && b == CSPMD_LT_P))
        return CSPMD_OK;
    if (a == CSPMD_LT_P)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "reinterpret(%s, %s) is not supported; it is semantically "
                               "ill-defined. Call all_reduce(src=P, dst=R) first to materialize "
                               "the sum, then do whatever conversion you need from R.",
                               s, d);
    if (a == CSPMD_LT_V)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "reinterpret(%s, %s) is not supported. We cannot unsafely assert "
                               "that varying values on all ranks are actually the same. Ensure "
                               "your source is already %s instead.",
                               s, d, d);
    return cspmd_error_set(CSPMD_ERR_VALUE, "reinterpret(%s, %s) is not supported.", s, d);
}

static cspmd_status_t validate_convert(cspmd_ctype_t src, cspmd_ctype_t dst, int expert,
                                       const char *s, const char *d)
{
    cspmd_ltype_t a = src.ltype, b = dst.ltype; /* S(.) -> V */
    if (!expert) {
        if (a == CSPMD_LT_R && b == CSPMD_LT_I)
            return bad_value("convert(R, I) requires expert_mode=True. This treats a replicate "
                             "tensor as invariant, which is rarely what you want in the forward "
                             "pass. It exists as a backward for convert(I, P).");
        if (a == CSPMD_LT_I && b == CSPMD_LT_P)
            return bad_value("convert(I, P) requires expert_mode=True. This zeros out all "
                             "non-rank-0 tensors, which is rarely what you want. It exists as a "
                             "backward for convert(R, I).");
        if (a == CSPMD_LT_V && b == CSPMD_LT_P)
            return cspmd_error_set(CSPMD_ERR_VALUE,
                                   "convert(%s, P) requires expert_mode=True. This pads with "
                                   "zeros to create a partial tensor, which is rarely what you "
                                   "want in the forward pass. It exists as a backward for "
                                   "convert(R, %s).",
                                   s, s);
    }
    if (a == b) {
        if (cspmdi_is_shard(src) && cspmdi_is_shard(dst) && src.shard_dim != dst.shard_dim)
            return cspmd_error_set(CSPMD_ERR_VALUE,
                                   "convert(%s, %s) cannot change the shard dimension "
                                   "without communication. Use all_to_all() instead.",
                                   s, d);
        return CSPMD_OK;
    }
    /* a != b here: R|I -> anything, and V|S -> P, are conversions. */
    if (a == CSPMD_LT_R || a == CSPMD_LT_I || (a == CSPMD_LT_V && b == CSPMD_LT_P))
        return CSPMD_OK;
    if (a == CSPMD_LT_P) {
        if (b == CSPMD_LT_R || b == CSPMD_LT_I)
            return cspmd_error_set(CSPMD_ERR_VALUE,
                                   "convert(%s, %s) is not supported. Use all_reduce(src=P, "
                                   "dst=%s) to perform the reduction and get the full sum.",
                                   s, d, d);
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "convert(%s, %s) is not supported. Use reduce_scatter(src=P, "
                               "dst=%s) to perform the reduction and get shards of the sum.",
                               s, d, d);
    }
    return cspmd_error_set(CSPMD_ERR_VALUE, "convert(%s, %s) is not supported.", s, d);
}

/* broadcast: V -> R|I copies root's value to every rank; R -> R and I -> I
 * are no-ops (the value is the same everywhere already).  Its backward
 * pairs, expert only: P -> V sums the gradient onto root, I -> V keeps it
 * there (zeros on every other rank). */
static cspmd_status_t validate_broadcast(cspmd_ctype_t src, cspmd_ctype_t dst, int expert,
                                         const char *s, const char *d)
{
    cspmd_ltype_t a = src.ltype, b = dst.ltype;
    if (cspmdi_is_shard(src))
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "broadcast src must be V, got %s: a broadcast copies root's shard, "
                               "not the whole tensor. Use all_gather(src=%s, dst=R) to gather "
                               "the shards.",
                               s, s);
    int replicated_dst = is_plain(dst, CSPMD_LT_R) || is_plain(dst, CSPMD_LT_I);
    if (a == CSPMD_LT_V && replicated_dst)
        return CSPMD_OK;
    if ((a == CSPMD_LT_R || a == CSPMD_LT_I) && a == b)
        return CSPMD_OK;
    if (expert && is_plain(dst, CSPMD_LT_V) && (a == CSPMD_LT_P || a == CSPMD_LT_I))
        return CSPMD_OK;
    if (a == CSPMD_LT_P)
        return bad_value("broadcast src must be V, got P. A partial value is summed with "
                         "all_reduce(src=P, dst=R), not broadcast.");
    if ((a == CSPMD_LT_R || a == CSPMD_LT_I) && replicated_dst)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "broadcast(%s, %s) is not supported: an %s value is the same on "
                               "every rank already, and broadcast keeps R and I as they are. Use "
                               "convert(src=%s, dst=%s) to change between R and I.",
                               s, d, s, s, d);
    return cspmd_error_set(CSPMD_ERR_VALUE, "broadcast dst must be R or I, got %s", d);
}

/* The (src, dst) table and expert gate; s and d are the texts messages
 * show for src and dst.  src and dst are valid (ct_valid). */
static cspmd_status_t validate_pair(cspmd_coll_t op, cspmd_ctype_t src, cspmd_ctype_t dst,
                                    int expert_mode, const char *s, const char *d)
{
    cspmd_status_t st;
    switch (op) {
    case CSPMD_COLL_ALL_REDUCE:
        if ((st = check_reduce_src("all_reduce", src, s)) != CSPMD_OK)
            return st;
        if (is_plain(dst, CSPMD_LT_R) || is_plain(dst, CSPMD_LT_I))
            return CSPMD_OK;
        return cspmd_error_set(CSPMD_ERR_VALUE, "all_reduce dst must be R or I, got %s", d);
    case CSPMD_COLL_ALL_GATHER:
        if (src.ltype != CSPMD_LT_V)
            return cspmd_error_set(CSPMD_ERR_VALUE, "all_gather src must be V or S(i), got %s",
                                   s);
        if (is_plain(dst, CSPMD_LT_R) || is_plain(dst, CSPMD_LT_I))
            return CSPMD_OK;
        return cspmd_error_set(CSPMD_ERR_VALUE, "all_gather dst must be R or I, got %s", d);
    case CSPMD_COLL_REDUCE_SCATTER:
        if ((st = check_reduce_src("reduce_scatter", src, s)) != CSPMD_OK)
            return st;
        if (dst.ltype == CSPMD_LT_V)
            return CSPMD_OK;
        return cspmd_error_set(CSPMD_ERR_VALUE, "reduce_scatter dst must be V or S(i), got %s",
                               d);
    case CSPMD_COLL_ALL_TO_ALL:
        if (src.ltype != CSPMD_LT_V)
            return cspmd_error_set(CSPMD_ERR_VALUE, "all_to_all src must be V or S(i), got %s",
                                   s);
        if (dst.ltype != CSPMD_LT_V)
            return cspmd_error_set(CSPMD_ERR_VALUE, "all_to_all dst must be V or S(i), got %s",
                                   d);
        return CSPMD_OK;
    case CSPMD_COLL_REINTERPRET:
        return validate_reinterpret(src, dst, expert_mode, s, d);
    case CSPMD_COLL_CONVERT:
        return validate_convert(src, dst, expert_mode, s, d);
    case CSPMD_COLL_BROADCAST:
        return validate_broadcast(src, dst, expert_mode, s, d);
    case CSPMD_COLL_REDISTRIBUTE:
        return CSPMD_OK; /* all 16 base combinations route somewhere */
    case CSPMD_COLL_INVARIANT_TO_REPLICATE:
        if (is_plain(src, CSPMD_LT_I) && is_plain(dst, CSPMD_LT_R))
            return CSPMD_OK;
        return cspmd_error_set(CSPMD_ERR_MISUSE,
                               "invariant_to_replicate is typed (I, R), got src=%s, dst=%s", s,
                               d);
    }
    /* Every listed op returned above: a value outside the list. */
    return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_coll_validate: unknown op %d", (int)op);
}

cspmd_status_t cspmd_coll_root_check(int64_t root, int64_t group_size)
{
    if (group_size < 1)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_coll_root_check: group size %lld",
                               (long long)group_size);
    if (root < 0 || root >= group_size)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "broadcast: root=%lld is out of range for an axis group of %lld "
                               "ranks (expected 0..%lld: root is a rank's index within the "
                               "group)",
                               (long long)root, (long long)group_size,
                               (long long)group_size - 1);
    return CSPMD_OK;
}

cspmd_status_t cspmd_coll_validate(cspmd_coll_t op, cspmd_ctype_t src, cspmd_ctype_t dst,
                                   int expert_mode)
{
    if (!ct_valid(src) || !ct_valid(dst))
        return cspmd_error_set(CSPMD_ERR_MISUSE,
                               "cspmd_coll_validate: bad src/dst (ltype %d/%d, shard_dim %d/%d)",
                               (int)src.ltype, (int)dst.ltype, (int)src.shard_dim,
                               (int)dst.shard_dim);
    cspmdi_ctype_text_t s = cspmdi_ctype_text(src), d = cspmdi_ctype_text(dst);
    return validate_pair(op, src, dst, expert_mode, s.s, d.s);
}

/* ===================================================================== */
/* Shards out of range: which error a call reports first                 */
/* ===================================================================== */

enum { RESOLVES_SRC = 1, RESOLVES_DST = 2 };

/* The arguments whose S(d) the reference resolves against the input's dims
 * before it checks the (src, dst) pair (RESOLVES_* bits). */
static int resolved_before_pair(cspmd_coll_t op)
{
    switch (op) {
    case CSPMD_COLL_ALL_REDUCE:  /* takes no shard: any is a bad pair */
    case CSPMD_COLL_REINTERPRET: /* refuses every shard before anything */
        return 0;
    case CSPMD_COLL_ALL_GATHER:
        return RESOLVES_SRC;
    case CSPMD_COLL_REDUCE_SCATTER:
        return RESOLVES_DST;
    case CSPMD_COLL_ALL_TO_ALL:
    case CSPMD_COLL_CONVERT:
    case CSPMD_COLL_REDISTRIBUTE:
    case CSPMD_COLL_INVARIANT_TO_REPLICATE:
    case CSPMD_COLL_BROADCAST: /* cspmd's own: src then dst, as the others */
        return RESOLVES_SRC | RESOLVES_DST;
    }
    return -1; /* a value outside the list */
}

/* One argument as written: its type for the pair check (an out-of-range
 * shard keeps a placeholder dim: only convert and all_to_all compare shard
 * dims, and they resolve both arguments before the pair), its text as
 * written, and whether its shard is out of range. */
typedef struct written_arg {
    cspmd_ctype_t ct;
    cspmdi_ctype_text_t text;
    int out_of_range;
} written_arg_t;

static int read_written(cspmd_ltype_t lt, int is_shard, int64_t dim, int64_t ndim,
                        written_arg_t *w)
{
    w->ct.ltype = lt;
    w->ct.shard_dim = -1;
    w->out_of_range = 0;
    if (lt < CSPMD_LT_R || lt > CSPMD_LT_P || (is_shard && lt != CSPMD_LT_V))
        return 0;
    if (!is_shard) {
        w->text = cspmdi_ctype_text(w->ct);
        return 1;
    }
    w->out_of_range = dim < -ndim || dim >= ndim;
    w->ct.shard_dim = w->out_of_range ? 0 : (int32_t)(dim < 0 ? dim + ndim : dim);
    snprintf(w->text.s, sizeof w->text.s, "S(%lld)", (long long)dim);
    return 1;
}

static cspmd_status_t out_of_range(cspmd_coll_t op, const char *what, int64_t dim, int64_t ndim)
{
    return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                           "%s: %s=S(%lld) is out of range for a tensor with %lld dims",
                           cspmd_coll_name(op), what, (long long)dim, (long long)ndim);
}

cspmd_status_t cspmd_coll_check_shard_range(cspmd_coll_t op, cspmd_ltype_t src, int src_is_shard,
                                            int64_t src_dim, cspmd_ltype_t dst, int dst_is_shard,
                                            int64_t dst_dim, int64_t ndim, int expert_mode)
{
    written_arg_t s, d;
    int first = resolved_before_pair(op);
    if (first < 0 || ndim < 0 || ndim > INT32_MAX ||
        !read_written(src, src_is_shard, src_dim, ndim, &s) ||
        !read_written(dst, dst_is_shard, dst_dim, ndim, &d))
        return cspmd_error_set(CSPMD_ERR_MISUSE,
                               "cspmd_coll_check_shard_range: bad op %d, src/dst (ltype %d/%d, "
                               "shard %d/%d) or ndim %lld",
                               (int)op, (int)src, (int)dst, src_is_shard, dst_is_shard,
                               (long long)ndim);
    if (!s.out_of_range && !d.out_of_range)
        return CSPMD_OK;
    if (s.out_of_range && (first & RESOLVES_SRC))
        return out_of_range(op, "src", src_dim, ndim);
    if (d.out_of_range && (first & RESOLVES_DST))
        return out_of_range(op, "dst", dst_dim, ndim);
    cspmd_status_t st = validate_pair(op, s.ct, d.ct, expert_mode, s.text.s, d.text.s);
    if (st != CSPMD_OK)
        return st;
    return s.out_of_range ? out_of_range(op, "src", src_dim, ndim)
                          : out_of_range(op, "dst", dst_dim, ndim);
}

cspmd_status_t cspmd_coll_src_as(cspmd_coll_t op, cspmd_ltype_t src, cspmd_ltype_t *as)
{
    if (as == NULL || (src != CSPMD_LT_R && src != CSPMD_LT_I && src != CSPMD_LT_V &&
                       src != CSPMD_LT_P))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_coll_src_as: bad arguments");
    switch (op) {
    case CSPMD_COLL_ALL_REDUCE:
    case CSPMD_COLL_REDUCE_SCATTER:
        /* A reduction of V sums the ranks' values as partial sums. */
        *as = src == CSPMD_LT_V ? CSPMD_LT_P : src;
        return CSPMD_OK;
    case CSPMD_COLL_ALL_GATHER:
    case CSPMD_COLL_ALL_TO_ALL:
    case CSPMD_COLL_REINTERPRET:
    case CSPMD_COLL_CONVERT:
    case CSPMD_COLL_REDISTRIBUTE:
    case CSPMD_COLL_INVARIANT_TO_REPLICATE:
    case CSPMD_COLL_BROADCAST:
        *as = src;
        return CSPMD_OK;
    }
    return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_coll_src_as: unknown op %d", (int)op);
}

/* ===================================================================== */
/* Backward pairs                                                        */
/* ===================================================================== */

static cspmd_ctype_t CT(cspmd_ltype_t lt, int32_t dim)
{
    cspmd_ctype_t t = {lt, dim};
    return t;
}

static cspmd_status_t set_bwd(cspmd_coll_t *bop, cspmd_ctype_t *bsrc, cspmd_ctype_t *bdst,
                              cspmd_coll_t op, cspmd_ctype_t s, cspmd_ctype_t d)
{
    *bop = op;
    *bsrc = s;
    *bdst = d;
    return CSPMD_OK;
}

/* The backward of convert(src, dst). */
static cspmd_status_t convert_bwd(cspmd_ctype_t src, cspmd_ctype_t dst, cspmd_coll_t *bop,
                                  cspmd_ctype_t *bsrc, cspmd_ctype_t *bdst)
{
    cspmd_ltype_t a = src.ltype, b = dst.ltype;
    if (a == b) /* no-op: the gradient passes through unchanged */
        return set_bwd(bop, bsrc, bdst, CSPMD_COLL_CONVERT, dst, src);
    if (a == CSPMD_LT_I && b == CSPMD_LT_R)
        return set_bwd(bop, bsrc, bdst, CSPMD_COLL_ALL_REDUCE, CT(CSPMD_LT_P, -1),
                       CT(CSPMD_LT_I, -1));
    if (a == CSPMD_LT_R && b == CSPMD_LT_I)
        return set_bwd(bop, bsrc, bdst, CSPMD_COLL_CONVERT, CT(CSPMD_LT_I, -1),
                       CT(CSPMD_LT_P, -1));
    if (a == CSPMD_LT_R && b == CSPMD_LT_V) /* R -> V|S(d): convert(V|S(d), P) */
        return set_bwd(bop, bsrc, bdst, CSPMD_COLL_CONVERT, dst, CT(CSPMD_LT_P, -1));
    if (a == CSPMD_LT_I && b == CSPMD_LT_V) /* I -> V|S(d): all_gather(V|S(d), I) */
        return set_bwd(bop, bsrc, bdst, CSPMD_COLL_ALL_GATHER, dst, CT(CSPMD_LT_I, -1));
    if (a == CSPMD_LT_R && b == CSPMD_LT_P)
        return set_bwd(bop, bsrc, bdst, CSPMD_COLL_CONVERT, CT(CSPMD_LT_R, -1),
                       CT(CSPMD_LT_P, -1));
    if (a == CSPMD_LT_I && b == CSPMD_LT_P)
        return set_bwd(bop, bsrc, bdst, CSPMD_COLL_CONVERT, CT(CSPMD_LT_R, -1),
                       CT(CSPMD_LT_I, -1));
    if (a == CSPMD_LT_V && b == CSPMD_LT_P) /* V|S(d) -> P: convert(R, V|S(d)) */
        return set_bwd(bop, bsrc, bdst, CSPMD_COLL_CONVERT, CT(CSPMD_LT_R, -1), src);
    return cspmd_error_set(CSPMD_ERR_VALUE, "convert(%s, %s) has no backward",
                           cspmdi_ctype_text(src).s, cspmdi_ctype_text(dst).s);
}

static cspmd_status_t all_to_all_bwd(cspmd_ctype_t src, cspmd_ctype_t dst, cspmd_coll_t *bop,
                                     cspmd_ctype_t *bsrc, cspmd_ctype_t *bdst)
{
    if (!cspmdi_is_shard(src) && !cspmdi_is_shard(dst)) /* V->V: stack, dims swapped */
        return set_bwd(bop, bsrc, bdst, CSPMD_COLL_ALL_TO_ALL, CT(CSPMD_LT_V, -1),
                       CT(CSPMD_LT_V, -1));
    /* Shard semantics: forward split_dim / concat_dim; the
     * backward splits on the forward's concat dim and concatenates on its
     * split dim: all_to_all(S(split_dim), S(concat_dim)). */
    int32_t split, concat;
    if (cspmdi_is_shard(src) && cspmdi_is_shard(dst)) {
        split = dst.shard_dim;
        concat = src.shard_dim;
    } else if (cspmdi_is_shard(src)) {
        split = src.shard_dim;
        concat = 0;
    } else {
        split = 0;
        concat = dst.shard_dim;
    }
    return set_bwd(bop, bsrc, bdst, CSPMD_COLL_ALL_TO_ALL, CT(CSPMD_LT_V, split),
                   CT(CSPMD_LT_V, concat));
}

cspmd_status_t cspmd_coll_backward(cspmd_coll_t op, cspmd_ctype_t src, cspmd_ctype_t dst,
                                   cspmd_coll_t *bop, cspmd_ctype_t *bsrc, cspmd_ctype_t *bdst)
{
    if (bop == NULL || bsrc == NULL || bdst == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_coll_backward: NULL output");
    cspmd_status_t st = cspmd_coll_validate(op, src, dst, 1);
    if (st != CSPMD_OK)
        return st;
    cspmd_ltype_t a = src.ltype, b = dst.ltype;
    switch (op) {
    case CSPMD_COLL_ALL_REDUCE:
        if (b == CSPMD_LT_R)
            return set_bwd(bop, bsrc, bdst, CSPMD_COLL_ALL_REDUCE, CT(CSPMD_LT_P, -1),
                           CT(CSPMD_LT_R, -1));
        return set_bwd(bop, bsrc, bdst, CSPMD_COLL_CONVERT, CT(CSPMD_LT_I, -1),
                       CT(CSPMD_LT_R, -1));
    case CSPMD_COLL_ALL_GATHER:
        if (b == CSPMD_LT_R) /* reduce_scatter(P, V|S(i)) */
            return set_bwd(bop, bsrc, bdst, CSPMD_COLL_REDUCE_SCATTER, CT(CSPMD_LT_P, -1), src);
        return set_bwd(bop, bsrc, bdst, CSPMD_COLL_CONVERT, CT(CSPMD_LT_I, -1), src);
    case CSPMD_COLL_REDUCE_SCATTER: /* all_gather(V|S(i), R) */
        return set_bwd(bop, bsrc, bdst, CSPMD_COLL_ALL_GATHER, dst, CT(CSPMD_LT_R, -1));
    case CSPMD_COLL_ALL_TO_ALL:
        return all_to_all_bwd(src, dst, bop, bsrc, bdst);
    case CSPMD_COLL_REINTERPRET:
        if (a == b)
            return set_bwd(bop, bsrc, bdst, CSPMD_COLL_REINTERPRET, dst, src);
        if (a == CSPMD_LT_R && b == CSPMD_LT_V)
            return set_bwd(bop, bsrc, bdst, CSPMD_COLL_REINTERPRET, CT(CSPMD_LT_V, -1),
                           CT(CSPMD_LT_P, -1));
        if (a == CSPMD_LT_V && b == CSPMD_LT_P)
            return set_bwd(bop, bsrc, bdst, CSPMD_COLL_REINTERPRET, CT(CSPMD_LT_R, -1),
                           CT(CSPMD_LT_V, -1));
        if (a == CSPMD_LT_R && b == CSPMD_LT_P)
            return set_bwd(bop, bsrc, bdst, CSPMD_COLL_REINTERPRET, CT(CSPMD_LT_R, -1),
                           CT(CSPMD_LT_P, -1));
        if (a == CSPMD_LT_R && b == CSPMD_LT_I)
            return set_bwd(bop, bsrc, bdst, CSPMD_COLL_CONVERT, CT(CSPMD_LT_I, -1),
                           CT(CSPMD_LT_P, -1));
        if (a == CSPMD_LT_I && b == CSPMD_LT_R)
            return set_bwd(bop, bsrc, bdst, CSPMD_COLL_ALL_REDUCE, CT(CSPMD_LT_P, -1),
                           CT(CSPMD_LT_I, -1));
        /* Compositions I->R->V and I->R->P: the reverse chain starts with
         * the backward of the second node. */
        if (a == CSPMD_LT_I && b == CSPMD_LT_V)
            return set_bwd(bop, bsrc, bdst, CSPMD_COLL_REINTERPRET, CT(CSPMD_LT_V, -1),
                           CT(CSPMD_LT_P, -1));
        return set_bwd(bop, bsrc, bdst, CSPMD_COLL_REINTERPRET, CT(CSPMD_LT_R, -1),
                       CT(CSPMD_LT_P, -1)); /* I -> P */
    case CSPMD_COLL_CONVERT:
        return convert_bwd(src, dst, bop, bsrc, bdst);
    case CSPMD_COLL_REDISTRIBUTE:
        /* The backward of the op redistribute routes to. */
        if (a == b) {
            if (cspmdi_is_shard(src) && cspmdi_is_shard(dst) && src.shard_dim != dst.shard_dim)
                return all_to_all_bwd(src, dst, bop, bsrc, bdst);
            return set_bwd(bop, bsrc, bdst, CSPMD_COLL_REDISTRIBUTE, dst, src);
        }
        if (a == CSPMD_LT_V && (b == CSPMD_LT_R || b == CSPMD_LT_I))
            return cspmd_coll_backward(CSPMD_COLL_ALL_GATHER, src, dst, bop, bsrc, bdst);
        if (a == CSPMD_LT_P && (b == CSPMD_LT_R || b == CSPMD_LT_I))
            return cspmd_coll_backward(CSPMD_COLL_ALL_REDUCE, src, dst, bop, bsrc, bdst);
        if (a == CSPMD_LT_P && b == CSPMD_LT_V)
            return cspmd_coll_backward(CSPMD_COLL_REDUCE_SCATTER, src, dst, bop, bsrc, bdst);
        return convert_bwd(src, dst, bop, bsrc, bdst);
    case CSPMD_COLL_INVARIANT_TO_REPLICATE:
        return set_bwd(bop, bsrc, bdst, CSPMD_COLL_ALL_REDUCE, CT(CSPMD_LT_P, -1),
                       CT(CSPMD_LT_I, -1));
    case CSPMD_COLL_BROADCAST:
        /* V -> R: the P gradient is summed onto root; V -> I: the I
         * gradient stays on root; zeros elsewhere, typed V either way. */
        if (a == CSPMD_LT_V)
            return set_bwd(bop, bsrc, bdst, CSPMD_COLL_BROADCAST,
                           CT(b == CSPMD_LT_R ? CSPMD_LT_P : CSPMD_LT_I, -1), CT(CSPMD_LT_V, -1));
        if (b == CSPMD_LT_V) /* those backward pairs: root's gradient broadcast back */
            return set_bwd(bop, bsrc, bdst, CSPMD_COLL_BROADCAST, CT(CSPMD_LT_V, -1),
                           CT(a == CSPMD_LT_P ? CSPMD_LT_R : CSPMD_LT_I, -1));
        /* R -> R, I -> I change nothing: the gradient (P, I) passes as it is */
        return set_bwd(bop, bsrc, bdst, CSPMD_COLL_REINTERPRET,
                       CT(a == CSPMD_LT_R ? CSPMD_LT_P : CSPMD_LT_I, -1),
                       CT(a == CSPMD_LT_R ? CSPMD_LT_P : CSPMD_LT_I, -1));
    }
    return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_coll_backward: unknown op %d", (int)op);
}

/* ===================================================================== */
/* The checker rule                                                      */
/* ===================================================================== */

cspmd_status_t cspmd_coll_infer(const char *fn, cspmd_axis_t axis, cspmd_ltype_t src,
                                cspmd_ltype_t dst, cspmd_type_t in, cspmd_type_t *out)
{
    return cspmd_coll_infer_input(fn, axis, src, dst, in, 0, out);
}

/* The input's axes in its key order (canonical: by display name) into
 * axes/lts (*np of them), and the indices of those the collective axis
 * resolves to (*nresp): the axis itself, or sub-axes that flatten to it. */
static cspmd_status_t resolve_input(cspmd_type_t in, cspmd_axis_t axis, cspmd_axis_t *axes,
                                    cspmd_ltype_t *lts, int *np, int *resolved, int *nresp)
{
    int n = *np = cspmd_type_naxes(in);
    *nresp = 0;
    for (int i = 0; i < n; i++) {
        cspmd_status_t st = cspmd_type_entry(in, i, &axes[i], &lts[i]);
        if (st != CSPMD_OK)
            return st;
    }

    int nres = 0;
    for (int i = 0; i < n; i++)
        if (axes[i] == axis)
            resolved[nres++] = i;
    if (nres == 0 && axis != CSPMD_AXIS_TRIVIAL) {
        cspmd_axis_t sub[CSPMD_MAX_AXES];
        int idx[CSPMD_MAX_AXES], nsub = 0;
        for (int i = 0; i < n; i++) {
            int le = 0;
            if (axes[i] == axis)
                continue;
            cspmd_status_t lst = cspmd_axis_le_checked(axes[i], axis, &le);
            if (lst != CSPMD_OK)
                return lst;
            if (le) {
                idx[nsub] = i;
                sub[nsub++] = axes[i];
            }
        }
        cspmd_axis_t flat;
        if (nsub > 0 && cspmd_axes_flatten(sub, nsub, &flat) == CSPMD_OK && flat == axis) {
            for (int k = 0; k < nsub; k++)
                resolved[nres++] = idx[k];
        }
    }

    *nresp = nres;
    return CSPMD_OK;
}

cspmd_status_t cspmd_coll_infer_input(const char *fn, cspmd_axis_t axis, cspmd_ltype_t src,
                                      cspmd_ltype_t dst, cspmd_type_t in, int input_no_grad,
                                      cspmd_type_t *out)
{
    if (fn == NULL || out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_coll_infer: NULL argument");
    if (src < CSPMD_LT_R || src > CSPMD_LT_P || dst < CSPMD_LT_R || dst > CSPMD_LT_P)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_coll_infer: bad src/dst %d/%d",
                               (int)src, (int)dst);
    if (!cspmdi_axis_valid(axis))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_coll_infer: unknown axis id %u",
                               (unsigned)axis);
    if (!cspmdi_type_valid(in))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_coll_infer: unknown type id %u",
                               (unsigned)in);

    /* Resolve the collective axis (step 3); an input typed on another
     * presentation of the ranks (no axis of it resolves) is first retagged
     * onto the current mesh, as ops retag their operands. */
    cspmd_axis_t axes[CSPMD_MAX_AXES];
    cspmd_ltype_t lts[CSPMD_MAX_AXES];
    int resolved[CSPMD_MAX_AXES];
    int n, nres;
    cspmd_status_t rst = resolve_input(in, axis, axes, lts, &n, resolved, &nres);
    if (rst != CSPMD_OK)
        return rst;
    if (nres == 0 && axis != CSPMD_AXIS_TRIVIAL) {
        cspmd_type_t moved;
        if ((rst = cspmd_type_to_mesh(in, 0, &moved)) != CSPMD_OK)
            return rst;
        if (moved != in) {
            in = moved;
            if ((rst = resolve_input(in, axis, axes, lts, &n, resolved, &nres)) != CSPMD_OK)
                return rst;
        }
    }

    if (nres == 0) { /* step 4, unresolved */
        if (axis == CSPMD_AXIS_TRIVIAL || cspmd_axis_size(axis) == 1 ||
            !cspmd_checker_strict()) {
            *out = in;
            return CSPMD_OK;
        }
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "%s: tensor has no type for axis %s. Use assert_type() to "
                               "annotate the tensor on this axis before calling collectives.%s",
                               fn, cspmd_axis_display(axis, 0), cspmdi_untyped_hint(in));
    }
    for (int k = 0; k < nres; k++) {
        cspmd_ltype_t t = lts[resolved[k]];
        if (t == src || (t == CSPMD_LT_V && src == CSPMD_LT_P))
            continue;
        if (input_no_grad && (t == CSPMD_LT_R || t == CSPMD_LT_I) &&
            (src == CSPMD_LT_R || src == CSPMD_LT_I))
            continue; /* R and I differ only in the gradient, which x cannot take */
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "%s: expected input type %s on axis %s, got %s",
                               fn, cspmd_ltype_letter(src),
                               cspmd_axis_display(axes[resolved[k]], 0), cspmd_ltype_letter(t));
    }
    /* Step 5: the resolved axes become dst; other axes carry through. */
    for (int k = 0; k < nres; k++)
        lts[resolved[k]] = dst;
    if (n == 0) {
        *out = in;
        return CSPMD_OK;
    }
    return cspmd_type_make(axes, lts, n, NULL, out);
}

/* ===================================================================== */
/* Routing, dims and dtypes                                              */
/* ===================================================================== */

cspmd_status_t cspmd_coll_route(cspmd_ctype_t src, cspmd_ctype_t dst, cspmd_coll_t *op)
{
    if (op == NULL || !ct_valid(src) || !ct_valid(dst))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_coll_route: bad arguments");
    cspmd_ltype_t a = src.ltype, b = dst.ltype;
    if (a == b) {
        *op = cspmdi_is_shard(src) && cspmdi_is_shard(dst) && src.shard_dim != dst.shard_dim
                  ? CSPMD_COLL_ALL_TO_ALL
                  : CSPMD_COLL_REDISTRIBUTE; /* no-op: the input itself */
    } else if (a == CSPMD_LT_V && (b == CSPMD_LT_R || b == CSPMD_LT_I)) {
        *op = CSPMD_COLL_ALL_GATHER;
    } else if (a == CSPMD_LT_P && (b == CSPMD_LT_R || b == CSPMD_LT_I)) {
        *op = CSPMD_COLL_ALL_REDUCE;
    } else if (a == CSPMD_LT_P && b == CSPMD_LT_V) {
        *op = CSPMD_COLL_REDUCE_SCATTER;
    } else {
        *op = CSPMD_COLL_CONVERT; /* R<->I, R|I -> V|S|P, V|S -> P (expert) */
    }
    return CSPMD_OK;
}

static cspmd_status_t dim_conflict(const char *fn, const char *what, int64_t given, int64_t want)
{
    return cspmd_error_set(CSPMD_ERR_VALUE,
                           "%s: %s=%lld conflicts with the shard dim %lld of src/dst",
                           fn, what, (long long)given, (long long)want);
}

cspmd_status_t cspmd_coll_dims(cspmd_coll_t op, cspmd_ctype_t src, cspmd_ctype_t dst,
                               int has_split_sizes, int64_t *dim_a, int64_t *dim_b)
{
    if (dim_a == NULL || dim_b == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_coll_dims: NULL output");
    switch (op) {
    case CSPMD_COLL_ALL_GATHER: /* a = gather_dim */
        if (has_split_sizes && !cspmdi_is_shard(src))
            return cspmd_error_set(CSPMD_ERR_VALUE, "all_gather: split_sizes is only supported "
                                                    "with src=S(i), got src=%s",
                                   cspmdi_ctype_text(src).s);
        if (cspmdi_is_shard(src)) {
            if (*dim_a >= 0 && *dim_a != src.shard_dim)
                return dim_conflict("all_gather", "gather_dim", *dim_a, src.shard_dim);
            *dim_a = src.shard_dim;
        } else if (*dim_a < 0) {
            *dim_a = 0;
        }
        return CSPMD_OK;
    case CSPMD_COLL_REDUCE_SCATTER: /* a = scatter_dim */
        if (has_split_sizes && !cspmdi_is_shard(dst))
            return cspmd_error_set(CSPMD_ERR_VALUE, "reduce_scatter: split_sizes is only "
                                                    "supported with dst=S(i), got dst=%s",
                                   cspmdi_ctype_text(dst).s);
        if (cspmdi_is_shard(dst)) {
            if (*dim_a >= 0 && *dim_a != dst.shard_dim)
                return dim_conflict("reduce_scatter", "scatter_dim", *dim_a, dst.shard_dim);
            *dim_a = dst.shard_dim;
        } else if (*dim_a < 0) {
            *dim_a = 0;
        }
        return CSPMD_OK;
    case CSPMD_COLL_ALL_TO_ALL: /* a = split_dim, b = concat_dim */
        /* S(i)->S(j): split j, concat i.  S(i)->V: split i.  V->S(j):
         * concat j.  Defaults 0 (asymmetric on purpose). */
        if (cspmdi_is_shard(src) && cspmdi_is_shard(dst)) {
            if (*dim_a >= 0 && *dim_a != dst.shard_dim)
                return dim_conflict("all_to_all", "split_dim", *dim_a, dst.shard_dim);
            if (*dim_b >= 0 && *dim_b != src.shard_dim)
                return dim_conflict("all_to_all", "concat_dim", *dim_b, src.shard_dim);
            *dim_a = dst.shard_dim;
            *dim_b = src.shard_dim;
        } else if (cspmdi_is_shard(src)) {
            if (*dim_a >= 0 && *dim_a != src.shard_dim)
                return dim_conflict("all_to_all", "split_dim", *dim_a, src.shard_dim);
            *dim_a = src.shard_dim;
        } else if (cspmdi_is_shard(dst)) {
            if (*dim_b >= 0 && *dim_b != dst.shard_dim)
                return dim_conflict("all_to_all", "concat_dim", *dim_b, dst.shard_dim);
            *dim_b = dst.shard_dim;
        }
        if (*dim_a < 0)
            *dim_a = 0;
        if (*dim_b < 0)
            *dim_b = 0;
        if (has_split_sizes && (*dim_a != 0 || *dim_b != 0))
            return cspmd_error_set(CSPMD_ERR_VALUE,
                                   "all_to_all: uneven split sizes need split_dim == concat_dim "
                                   "== 0, got split_dim=%lld, concat_dim=%lld",
                                   (long long)*dim_a, (long long)*dim_b);
        return CSPMD_OK;
    case CSPMD_COLL_CONVERT:
    case CSPMD_COLL_REDISTRIBUTE: /* a = the shard dim (dst's, else src's, else 0) */
        if (*dim_a < 0)
            *dim_a = cspmdi_is_shard(dst)   ? dst.shard_dim
                     : cspmdi_is_shard(src) ? src.shard_dim
                                            : 0;
        return CSPMD_OK;
    case CSPMD_COLL_BROADCAST: /* a = root, as given: cspmd_coll_root_check checks it */
        if (*dim_b < 0)
            *dim_b = 0;
        return CSPMD_OK;
    case CSPMD_COLL_ALL_REDUCE:
    case CSPMD_COLL_REINTERPRET:
    case CSPMD_COLL_INVARIANT_TO_REPLICATE:
        break; /* no dim: 0 */
    }
    if (*dim_a < 0)
        *dim_a = 0;
    if (*dim_b < 0)
        *dim_b = 0;
    return CSPMD_OK;
}

/* Ops whose tensor gets smaller: an out_dtype alone keeps the input dtype
 * for the operation itself. */
static int reducing(cspmd_coll_t op, cspmd_ctype_t src, cspmd_ctype_t dst)
{
    return op == CSPMD_COLL_ALL_REDUCE || op == CSPMD_COLL_REDUCE_SCATTER ||
           (op == CSPMD_COLL_BROADCAST && src.ltype == CSPMD_LT_P) ||
           (op == CSPMD_COLL_CONVERT && (src.ltype == CSPMD_LT_R || src.ltype == CSPMD_LT_I) &&
            dst.ltype == CSPMD_LT_V);
}

/* Ops whose backward performs a reduction (all_reduce or reduce_scatter). */
static int backward_reduces(cspmd_coll_t op, cspmd_ctype_t src, cspmd_ctype_t dst)
{
    switch (op) {
    case CSPMD_COLL_ALL_REDUCE:
    case CSPMD_COLL_ALL_GATHER:
        return dst.ltype == CSPMD_LT_R;
    case CSPMD_COLL_CONVERT:
    case CSPMD_COLL_REINTERPRET:
        return src.ltype == CSPMD_LT_I && dst.ltype == CSPMD_LT_R;
    case CSPMD_COLL_INVARIANT_TO_REPLICATE:
        return 1;
    case CSPMD_COLL_BROADCAST: /* V -> R: the gradient is summed onto root */
        return src.ltype == CSPMD_LT_V && dst.ltype == CSPMD_LT_R;
    case CSPMD_COLL_REDUCE_SCATTER: /* all_gather back: nothing reduces */
    case CSPMD_COLL_ALL_TO_ALL:
    case CSPMD_COLL_REDISTRIBUTE: /* routed before it runs */
        return 0;
    }
    return 0;
}

cspmd_status_t cspmd_coll_dtypes(cspmd_coll_t op, cspmd_ctype_t src, cspmd_ctype_t dst,
                                 const cspmd_dtype_info_t *d, int *op_dtype, int *out_dtype)
{
    if (d == NULL || op_dtype == NULL || out_dtype == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_coll_dtypes: NULL argument");
    /* The reduced-precision rule, checked before anything runs. */
    if (backward_reduces(op, src, dst) && d->needs_grad && !d->has_backward_op_dtype) {
        int narrow = (d->in_bits > 0 && d->in_bits < 32) ||
                     (d->op_dtype >= 0 && d->op_bits > 0 && d->op_bits < 32) ||
                     (d->out_dtype >= 0 && d->out_bits > 0 && d->out_bits < 32);
        if (narrow)
            return cspmd_error_set(
                CSPMD_ERR_VALUE,
                "When using reduced precision with an operation whose backward involves a "
                "reduction (all_reduce or reduce_scatter), you must explicitly specify "
                "backward_options={\"op_dtype\": ...} to choose the precision of the backward "
                "reduction (e.g. torch.float32).");
    }
    if (d->op_dtype < 0 && d->out_dtype < 0) {
        *op_dtype = d->in_dtype;
        *out_dtype = d->in_dtype;
    } else if (d->out_dtype < 0) {
        *op_dtype = d->op_dtype;
        *out_dtype = d->op_dtype;
    } else if (d->op_dtype < 0) {
        *out_dtype = d->out_dtype;
        if (reducing(op, src, dst))
            *op_dtype = d->in_dtype;
        else /* the narrower of in and out by float bits; a tie keeps in */
            *op_dtype = d->out_bits > 0 && d->out_bits < d->in_bits ? d->out_dtype : d->in_dtype;
    } else {
        *op_dtype = d->op_dtype;
        *out_dtype = d->out_dtype;
    }
    return CSPMD_OK;
}
