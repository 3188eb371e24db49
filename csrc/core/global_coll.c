/*
 * global_coll.c -- global mode's part of a collective: on a global axis
 * the input's shard must be the innermost axis of its spec entry (only
 * that one can move without reordering the others' chunks), V must be a
 * shard, an S(i) src must name the input's shard dim, and the result's
 * partition spec follows dst; on a local axis the spec is carried.
 */
#include <stdio.h>
#include <string.h>

#include "core.h"

static const char *ax(cspmd_axis_t a)
{
    return cspmd_axis_display(a, cspmd_axis_print_debug());
}

/* Remove a from spec; returns the dim it was on (-1 if absent). */
static int spec_remove(cspmd_spec_t *s, cspmd_axis_t a)
{
    for (int d = 0; d < s->ndim; d++)
        for (int i = 0; i < s->nentry[d]; i++)
            if (s->entry[d][i] == a) {
                for (int j = i + 1; j < s->nentry[d]; j++)
                    s->entry[d][j - 1] = s->entry[d][j];
                s->entry[d][--s->nentry[d]] = 0;
                return d;
            }
    return -1;
}

static int spec_any(const cspmd_spec_t *s)
{
    for (int d = 0; d < s->ndim; d++)
        if (s->nentry[d])
            return 1;
    return 0;
}

/* The resolved axes of a collective over axis on a tensor typed in: axis
 * itself, or the input's axes that flatten to it. */
static int resolve(cspmd_type_t in, cspmd_axis_t axis, cspmd_axis_t *res)
{
    cspmd_axis_t axes[CSPMD_MAX_AXES];
    int n = cspmdi_type_axes(in, axes, NULL), nres = 0;
    for (int i = 0; i < n; i++)
        if (axes[i] == axis)
            res[nres++] = axis;
    if (nres || axis == CSPMD_AXIS_TRIVIAL)
        return nres;
    for (int i = 0; i < n; i++)
        if (cspmd_axis_le(axes[i], axis))
            res[nres++] = axes[i];
    cspmd_axis_t flat;
    if (nres && cspmd_axes_flatten(res, nres, &flat) == CSPMD_OK && flat == axis)
        return nres;
    return 0;
}

static cspmd_status_t global_axis(const char *fn, cspmd_axis_t a, cspmd_ctype_t src,
                                  cspmd_ctype_t dst, cspmd_type_t in, cspmd_spec_t *spec)
{
    for (int d = 0; d < spec->ndim; d++)
        for (int i = 0; i + 1 < spec->nentry[d]; i++)
            if (spec->entry[d][i] == a) {
                char group[256];
                int len = snprintf(group, sizeof group, "(");
                for (int j = 0; j < spec->nentry[d] && len < (int)sizeof group; j++)
                    len += snprintf(group + len, sizeof group - (size_t)len, "%s%s",
                                    j ? ", " : "", ax(spec->entry[d][j]));
                if (len < (int)sizeof group)
                    snprintf(group + len, sizeof group - (size_t)len, ")");
                return cspmd_error_set(
                    CSPMD_ERR_REDISTRIBUTE,
                    "redistribute on axis %s is not allowed because it is not the innermost axis "
                    "in its PartitionSpec group %s. Only the innermost axis (%s) can be directly "
                    "redistributed.",
                    ax(a), group, ax(spec->entry[d][spec->nentry[d] - 1]));
            }
    int shard = spec_remove(spec, a);
    if (cspmd_type_get(in, a) == CSPMD_LT_V && shard < 0)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "%s: axis %s is global but the input tensor has V without a "
                               "corresponding S(i) in its PartitionSpec. Use assert_type() to "
                               "set an S(i) type.",
                               fn, ax(a));
    if (src.ltype == CSPMD_LT_V && src.shard_dim >= 0 && shard >= 0 && shard != src.shard_dim)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "%s: expected input shard S(%d) on axis %s, got S(%d)", fn,
                               (int)src.shard_dim, ax(a), shard);
    if (dst.ltype == CSPMD_LT_V && dst.shard_dim >= 0) {
        int j = (int)dst.shard_dim;
        if (j >= spec->ndim || spec->nentry[j] >= CSPMD_MAX_AXES)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "%s: dst S(%d) is out of range for a result of %d dims", fn, j,
                                   (int)spec->ndim);
        spec->entry[j][spec->nentry[j]++] = a;
    }
    return CSPMD_OK;
}

cspmd_status_t cspmd_global_coll(const char *fn, cspmd_axis_t axis, cspmd_ctype_t src,
                                 cspmd_ctype_t dst, cspmd_type_t in, cspmd_type_t local_out,
                                 int out_ndim, cspmd_type_t *out)
{
    if (fn == NULL || out == NULL || out_ndim < 0 || out_ndim > CSPMD_MAX_DIMS ||
        !cspmdi_type_valid(in) || !cspmdi_type_valid(local_out))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_global_coll: bad argument");
    if (cspmd_checker_local() || local_out <= CSPMD_TYPE_EMPTY) {
        *out = local_out;
        return CSPMD_OK;
    }
    cspmd_status_t st = cspmd_global_check_operand(in);
    if (st != CSPMD_OK)
        return st;
    cspmd_axis_t res[CSPMD_MAX_AXES];
    int nres = resolve(in, axis, res), nglobal = 0;
    int global[CSPMD_MAX_AXES];
    for (int i = 0; i < nres; i++) {
        if ((st = cspmd_axis_is_global(res[i], &global[i])) != CSPMD_OK)
            return st;
        nglobal += global[i];
    }
    if (nglobal && nglobal != nres) {
        char loc[256] = "", glo[256] = "";
        size_t nl = 0, ng = 0;
        for (int i = 0; i < nres; i++) {
            char *b = global[i] ? glo : loc;
            size_t *n = global[i] ? &ng : &nl;
            if (*n < sizeof loc)
                *n += (size_t)snprintf(b + *n, sizeof loc - *n, "%s%s", *n ? ", " : "",
                                       ax(res[i]));
        }
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "Collective axis %s spans mesh axes with mixed typechecking "
                               "policies: local axes (%s) and global axes (%s). Pass a collective "
                               "axis whose component axes are all local or all global.",
                               ax(axis), loc, glo);
    }
    /* A global axis' V is one shard of a global tensor: copying root's
     * shard everywhere would make another tensor of it. */
    if (nglobal && src.ltype != dst.ltype && strcmp(fn, cspmd_coll_name(CSPMD_COLL_BROADCAST)) == 0)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "broadcast: axis %s is global, where each rank's V is a shard of "
                               "one global tensor: broadcasting root's shard would make another "
                               "tensor of it. Use all_gather(src=S(i), dst=R) or redistribute "
                               "on a global axis; broadcast works on local axes.",
                               ax(axis));
    cspmd_spec_t spec;
    memset(&spec, 0, sizeof spec);
    if ((st = cspmd_type_spec_plain(in, fn, &spec)) != CSPMD_OK)
        return st;
    if (spec.ndim < 0) {
        memset(&spec, 0, sizeof spec);
        spec.ndim = (int8_t)out_ndim;
    }
    for (int i = 0; i < nres; i++)
        if (global[i] && (st = global_axis(fn, res[i], src, dst, in, &spec)) != CSPMD_OK)
            return st;
    if (spec.ndim != out_ndim) {
        if (spec_any(&spec))
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "%s: the result has %d dims but the input's PartitionSpec "
                                   "has %d, so it no longer lines up with the result. Use S(i) "
                                   "instead of V.",
                                   fn, out_ndim, (int)spec.ndim);
        memset(&spec, 0, sizeof spec);
        spec.ndim = (int8_t)out_ndim;
    }
    /* Only axes the result holds as V stay in its spec. */
    for (int d = 0; d < spec.ndim; d++)
        for (int i = spec.nentry[d] - 1; i >= 0; i--)
            if (cspmd_type_get(local_out, spec.entry[d][i]) != CSPMD_LT_V)
                (void)spec_remove(&spec, spec.entry[d][i]);
    cspmd_axis_t axes[CSPMD_MAX_AXES];
    cspmd_ltype_t lts[CSPMD_MAX_AXES];
    int na = cspmdi_type_axes(local_out, axes, lts);
    return cspmd_type_make(axes, lts, na, spec_any(&spec) ? &spec : NULL, out);
}
