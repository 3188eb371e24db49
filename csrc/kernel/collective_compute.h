/*
 * collective_compute.h -- the local computation of every collective and conversion,
 * in C over the shim's tensor ops and c10d's functional collectives.
 * Validation, dims, dtypes and types are the core's
 * (cspmd_coll_*); this module only moves data.
 */
#ifndef CSPMD_COLLECTIVE_COMPUTE_H
#define CSPMD_COLLECTIVE_COMPUTE_H

#include "torch/shim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One resolved call: dims and dtypes already resolved by the core. */
typedef struct cspmd_coll_call {
    cspmd_coll_t op;      /* never REDISTRIBUTE: route it first          */
    const char *group;    /* c10d process group name                     */
    cspmd_ctype_t src, dst;
    int inplace;          /* all_reduce only                             */
    int64_t dim_a, dim_b; /* see cspmd_coll_dims                         */
    const int64_t *sizes_a; /* split_sizes / output_split_sizes, or NULL */
    int nsizes_a;
    const int64_t *sizes_b; /* input_split_sizes, or NULL                */
    int nsizes_b;
    int op_dtype, out_dtype; /* -1: unchanged                            */
} cspmd_coll_call_t;

/* Run the call on x (with cspmd's key off); *out is an owned reference.
 * Errors: VALUE for shapes that do not fit (with the reference's
 * messages), PENDING for a torch exception. */
cspmd_status_t cspmd_collective_compute(const cspmd_coll_call_t *c, cspmd_tensor_t *x,
                                        cspmd_tensor_t **out);

#ifdef __cplusplus
}
#endif

#endif /* CSPMD_COLLECTIVE_COMPUTE_H */
