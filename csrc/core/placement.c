/*
 * placement.c -- DTensor placements and local types, each way.  The front
 * names a placement by its torch class (a cspmd_placement_t); the local
 * type it means, and the placement a local type needs, are decided here.
 */
#include "cspmd.h"

cspmd_status_t cspmd_placement_ltype(cspmd_placement_t placement,
                                     cspmd_placement_t grad_placement, cspmd_ltype_t *ltype)
{
    if (ltype == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_placement_ltype: NULL ltype");
    switch (placement) {
    case CSPMD_PLACEMENT_REPLICATE:
        /* A replicated value whose gradient is a partial sum is R; with a
         * replicated (or no) gradient placement it is I. */
        *ltype = grad_placement == CSPMD_PLACEMENT_PARTIAL ? CSPMD_LT_R : CSPMD_LT_I;
        return CSPMD_OK;
    case CSPMD_PLACEMENT_SHARD:
        *ltype = CSPMD_LT_V; /* S(d): V with the placement's dim */
        return CSPMD_OK;
    case CSPMD_PLACEMENT_PARTIAL:
        *ltype = CSPMD_LT_P;
        return CSPMD_OK;
    case CSPMD_PLACEMENT_NONE:
        break;
    }
    return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_placement_ltype: not a placement (%d)",
                           (int)placement);
}

cspmd_status_t cspmd_ltype_placement(cspmd_ltype_t ltype, int32_t shard_dim,
                                     cspmd_placement_t *placement)
{
    if (placement == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_ltype_placement: NULL placement");
    switch (ltype) {
    case CSPMD_LT_R:
    case CSPMD_LT_I:
        *placement = CSPMD_PLACEMENT_REPLICATE;
        return CSPMD_OK;
    case CSPMD_LT_V:
        if (shard_dim < 0)
            return cspmd_error_set(CSPMD_ERR_VALUE,
                                   "Cannot convert plain Varying to a DTensor placement. Use "
                                   "S(dim) to specify which tensor dimension is sharded.");
        *placement = CSPMD_PLACEMENT_SHARD;
        return CSPMD_OK;
    case CSPMD_LT_P:
        *placement = CSPMD_PLACEMENT_PARTIAL;
        return CSPMD_OK;
    case CSPMD_LT_NONE:
        break;
    }
    return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_ltype_placement: bad local type %d",
                           (int)ltype);
}
