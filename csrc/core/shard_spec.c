/*
 * shard_spec.c -- the partition spec that S(d) entries describe
 * ({tp: S(0)} written in assert_type, a Scalar or a module annotation, and
 * shard_types_to_partition_spec with its axis_order).
 *
 * Entries are placed on their dim in "placement order": the entries that
 * order names first (in that order, each once), then the others as given.
 * Each entry's place is its dim and its position on that dim.  No array is
 * kept: positions are counted by scanning (n is a handful of axes).
 */
#include <string.h>

#include "core.h"

static int norm_dim(int32_t dim, int ndim)
{
    return dim < 0 ? dim + ndim : dim;
}

/* The first index j with order[j] == i, or -1: entry i's rank among the
 * ordered entries (a repeated index counts once, at its first place). */
static int order_rank(int i, const int32_t *order, int norder)
{
    for (int j = 0; j < norder; j++)
        if (order[j] == i)
            return j;
    return -1;
}

/* The entry at rank r of placement order (r < norder + n): order's entries
 * first, each at its first place, then the entries order does not name;
 * -1 where rank r holds none (a repeat or a negative index in order). */
static int entry_at_rank(int64_t r, const int32_t *order, int norder)
{
    if (r < norder) {
        int i = order[r];
        return i >= 0 && order_rank(i, order, norder) == r ? i : -1;
    }
    int i = (int)(r - norder);
    return order_rank(i, order, norder) >= 0 ? -1 : i;
}

/* Entry i's rank in placement order: its first place in order, else
 * norder + i. */
static int64_t rank_of(int i, const int32_t *order, int norder)
{
    int j = order_rank(i, order, norder);
    return j >= 0 ? j : (int64_t)norder + i;
}

static int skipped(const cspmd_axis_key_t *keys, int i, int by_order)
{
    /* An annotation's trivial axis carries no sharding; shard_types_to_
     * partition_spec keeps every entry it is given. */
    return !by_order && keys[i] == (cspmd_axis_key_t)CSPMD_AXIS_TRIVIAL;
}

/* The names of the entries on dim d: those ranked below `below` (all when
 * below < 0), in placement order, then entry `last` (when >= 0). */
static void names_on_dim(cspmdi_text_t *t, const cspmd_axis_key_t *keys, const int32_t *dims,
                         int n, const int32_t *order, int norder, int ndim, int by_order, int d,
                         int64_t below, int last)
{
    int debug = cspmd_axis_print_debug(), count = 0;
    for (int64_t r = 0; r < (int64_t)norder + n; r++) {
        int i = entry_at_rank(r, order, norder);
        if (i < 0)
            continue;
        if ((below >= 0 && r >= below) || skipped(keys, i, by_order) ||
            norm_dim(dims[i], ndim) != d)
            continue;
        const char *q, *k = cspmdi_axis_key_text(keys[i], debug, &q);
        cspmdi_text_putf(t, "%s%s%s%s", count++ ? ", " : "", q, k, q);
    }
    if (last >= 0) {
        const char *q, *k = cspmdi_axis_key_text(keys[last], debug, &q);
        cspmdi_text_putf(t, "%s%s%s%s", count ? ", " : "", q, k, q);
    }
}

static cspmd_status_t conflict_error(const cspmd_axis_key_t *keys, const int32_t *dims, int n,
                                     const int32_t *order, int norder, int ndim, int by_order,
                                     int d, int64_t below, int last)
{
    char buf[256];
    cspmdi_text_t t;
    cspmdi_text_init(&t, buf, sizeof buf);
    names_on_dim(&t, keys, dims, n, order, norder, ndim, by_order, d, below, last);
    cspmd_status_t st =
        by_order ? cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "Tensor dim %d is sharded on multiple axes (%s) but axis_order "
                                   "does not resolve their ordering. Pass all conflicting axes "
                                   "in axis_order.",
                                   d, t.buf)
                 : cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "Tensor dim %d is sharded on multiple axes (%s). Use an "
                                   "explicit PartitionSpec to specify the axis ordering.",
                                   d, t.buf);
    cspmdi_text_free(&t);
    return st;
}

static cspmd_status_t range_error(int32_t dim, int ndim, int by_order)
{
    if (by_order)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "S(%d) is out of bounds for tensor with ndim=%d",
                               (int)dim, ndim);
    return cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "S(%d) is out of range for a tensor with %d dims",
                           (int)dim, ndim);
}

/* Entries on entry i's dim ranked below it. */
static int64_t placed_before(int i, const cspmd_axis_key_t *keys, const int32_t *dims, int n,
                             const int32_t *order, int norder, int ndim, int by_order)
{
    int d = norm_dim(dims[i], ndim);
    int64_t r = rank_of(i, order, norder), count = 0;
    for (int k = 0; k < n; k++)
        if (k != i && !skipped(keys, k, by_order) && norm_dim(dims[k], ndim) == d &&
            rank_of(k, order, norder) < r)
            count++;
    return count;
}

/* Check every entry in placement order, as the front's APIs report:
 * by_order stops at the first entry that order does not place on a dim
 * already taken; an annotation reports, after the range checks, the
 * first dim (in the order the entries name dims) that several share. */
static cspmd_status_t check_layout(const cspmd_axis_key_t *keys, const int32_t *dims, int n,
                                   const int32_t *order, int norder, int ndim, int by_order)
{
    for (int64_t r = 0; r < (int64_t)norder + n; r++) {
        int i = entry_at_rank(r, order, norder), ordered = r < norder;
        if (i < 0)
            continue;
        if (skipped(keys, i, by_order))
            continue;
        int d = norm_dim(dims[i], ndim);
        if (d < 0 || d >= ndim)
            return range_error(dims[i], ndim, by_order);
        if (by_order && !ordered && placed_before(i, keys, dims, n, order, norder, ndim, 1) > 0)
            return conflict_error(keys, dims, n, order, norder, ndim, 1, d, r, i);
    }
    if (by_order)
        return CSPMD_OK;
    for (int i = 0; i < n; i++) {
        if (skipped(keys, i, 0))
            continue;
        int d = norm_dim(dims[i], ndim);
        for (int k = 0; k < n; k++)
            if (k != i && !skipped(keys, k, 0) && norm_dim(dims[k], ndim) == d)
                return conflict_error(keys, dims, n, order, norder, ndim, 0, d, -1, -1);
    }
    return CSPMD_OK;
}

cspmd_status_t cspmd_shards_layout(const cspmd_axis_key_t *keys, const int32_t *dims,
                                   int32_t *spec_dims, int32_t *spec_pos, int n,
                                   const int32_t *order, int norder, int ndim, int by_order)
{
    if (n < 0 || norder < 0 || (n > 0 && (keys == NULL || dims == NULL || spec_dims == NULL ||
                                          spec_pos == NULL)) ||
        (norder > 0 && order == NULL))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_shards_layout: bad arguments");
    if (ndim < 0)
        return cspmd_error_set(CSPMD_ERR_VALUE, "cspmd_shards_layout: negative ndim %d", ndim);
    for (int j = 0; j < norder; j++)
        if (order[j] < -1 || order[j] >= n)
            return cspmd_error_set(CSPMD_ERR_MISUSE,
                                   "cspmd_shards_layout: order[%d] = %d names no entry", j,
                                   (int)order[j]);
    cspmd_status_t st = check_layout(keys, dims, n, order, norder, ndim, by_order);
    if (st != CSPMD_OK)
        return st;
    for (int i = 0; i < n; i++) {
        if (skipped(keys, i, by_order)) {
            spec_dims[i] = spec_pos[i] = -1;
            continue;
        }
        spec_dims[i] = norm_dim(dims[i], ndim);
        spec_pos[i] = (int32_t)placed_before(i, keys, dims, n, order, norder, ndim, by_order);
    }
    return CSPMD_OK;
}

cspmd_status_t cspmd_spec_from_shards(const cspmd_axis_t *axes, const int32_t *dims, int n,
                                      int ndim, cspmd_spec_t *out)
{
    if (out == NULL || n < 0 || n > CSPMD_MAX_AXES || (n > 0 && (axes == NULL || dims == NULL)))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_spec_from_shards: bad arguments");
    if (ndim < 0 || ndim > CSPMD_MAX_DIMS)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "cspmd: partition specs support at most %d tensor dims",
                               CSPMD_MAX_DIMS);
    cspmd_axis_key_t keys[CSPMD_MAX_AXES] = {0}; /* n <= CSPMD_MAX_AXES, checked above */
    int32_t spec_dims[CSPMD_MAX_AXES] = {0}, spec_pos[CSPMD_MAX_AXES] = {0};
    for (int i = 0; i < n; i++)
        keys[i] = axes[i];
    cspmd_status_t st = cspmd_shards_layout(keys, dims, spec_dims, spec_pos, n, NULL, 0, ndim, 0);
    if (st != CSPMD_OK)
        return st;
    cspmd_spec_t spec;
    memset(&spec, 0, sizeof spec);
    spec.ndim = (int8_t)ndim;
    for (int i = 0; i < n; i++) {
        if (spec_dims[i] < 0)
            continue;
        /* One axis per dim (checked), so every position is 0. */
        spec.entry[spec_dims[i]][spec_pos[i]] = axes[i];
        spec.nentry[spec_dims[i]]++;
    }
    *out = spec;
    return CSPMD_OK;
}
