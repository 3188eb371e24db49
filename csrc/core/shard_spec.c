/*
 * shard_spec.c -- the partition spec that S(d) annotations describe
 * ({tp: S(0)} written in assert_type, a Scalar or a module annotation).
 */
#include <stdio.h>
#include <string.h>

#include "cspmd.h"

static int norm_dim(int32_t dim, int ndim)
{
    return dim < 0 ? dim + ndim : dim;
}

/* The first tensor dim (in the order the axes name dims) that several axes
 * shard, with all of them, as the reference reports it.  Error texts are
 * capped (docs/limits.md); n is at most CSPMD_MAX_AXES. */
static cspmd_status_t multiple_axes_error(const cspmd_axis_t *axes, const int32_t *dims, int n,
                                          int ndim, int debug)
{
    for (int i = 0; i < n; i++) {
        if (axes[i] == CSPMD_AXIS_TRIVIAL)
            continue;
        int d = norm_dim(dims[i], ndim), count = 0;
        char names[4096];
        size_t o = 0;
        names[0] = '\0';
        for (int j = 0; j < n; j++) {
            if (axes[j] == CSPMD_AXIS_TRIVIAL || norm_dim(dims[j], ndim) != d)
                continue;
            if (o < sizeof names)
                o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", count ? ", " : "",
                                      cspmd_axis_display(axes[j], debug));
            count++;
        }
        if (count > 1)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "Tensor dim %d is sharded on multiple axes (%s). Use an "
                                   "explicit PartitionSpec to specify the axis ordering.",
                                   d, names);
    }
    return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_spec_from_shards: no dim is sharded twice");
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
    cspmd_spec_t spec;
    memset(&spec, 0, sizeof spec);
    spec.ndim = (int8_t)ndim;
    int debug = cspmd_axis_print_debug();
    int conflict = 0;
    for (int i = 0; i < n; i++) {
        if (axes[i] == CSPMD_AXIS_TRIVIAL)
            continue;
        int d = norm_dim(dims[i], ndim);
        if (d < 0 || d >= ndim)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "S(%d) is out of range for a tensor with %d dims",
                                   (int)dims[i], ndim);
        if (spec.nentry[d] > 0)
            conflict = 1;
        spec.entry[d][0] = axes[i];
        spec.nentry[d] = 1;
    }
    if (conflict)
        return multiple_axes_error(axes, dims, n, ndim, debug);
    *out = spec;
    return CSPMD_OK;
}
