/*
 * shard_spec.c -- the partition spec that S(d) annotations describe
 * ({tp: S(0)} written in assert_type, a Scalar or a module annotation).
 */
#include <string.h>

#include "cspmd.h"

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
    for (int i = 0; i < n; i++) {
        if (axes[i] == CSPMD_AXIS_TRIVIAL)
            continue;
        int d = dims[i] < 0 ? dims[i] + ndim : dims[i];
        if (d < 0 || d >= ndim)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "S(%d) is out of range for a tensor with %d dims",
                                   (int)dims[i], ndim);
        if (spec.nentry[d] > 0)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "Axes %s and %s both shard tensor dim %d. Use an explicit "
                                   "PartitionSpec to specify the axis ordering.",
                                   cspmd_axis_display(spec.entry[d][0], debug),
                                   cspmd_axis_display(axes[i], debug), d);
        spec.entry[d][0] = axes[i];
        spec.nentry[d] = 1;
    }
    *out = spec;
    return CSPMD_OK;
}
