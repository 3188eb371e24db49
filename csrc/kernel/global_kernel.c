/*
 * global_kernel.c -- global mode's part of the op kernel: hands an op's
 * tensors (types and local sizes) and integer arguments to the core's
 * global inference, which decides each result's type.  Runs only under
 * typecheck(local=False); local mode never reaches this file.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_internal.h"

/* Schema arguments read as integers on the stack; an op with more gets a
 * heap array, so every argument reaches the rule and the memo key. */
#define GLOBAL_ARGS 16

/* The fallback for an op with no C shard rule: DTensor's propagation,
 * through the shim, supplies each axis' placements. */
typedef struct fallback_ctx {
    const cspmd_call_t *call;
    int ntensors;
    int nresults;
} fallback_ctx_t;

static int dtensor_oracle(void *ctx, const int8_t *in, int64_t size, int8_t *out, int8_t *ndim,
                          char *why, size_t whylen)
{
    const fallback_ctx_t *f = ctx;
    return cspmd_call_dtensor_placements(f->call, in, f->ntensors, size, out, ndim, f->nresults,
                                         why, whylen);
}

static cspmd_status_t global_types(const cspmd_call_t *call, const cspmd_args_t *args,
                                   cspmd_type_t local_out, cspmd_type_t *outs,
                                   cspmd_garg_t *gargs)
{
    int nresults = cspmd_call_nreturns(call);
    cspmd_gtensor_t tensors[CSPMD_GLOBAL_MAX_TENSORS];
    cspmdk_op_rules_t rules;
    cspmd_status_t rules_st = cspmdk_op_rules(call, &rules);
    if (rules_st != CSPMD_OK)
        return rules_st;
    const char *name = rules.display;
    int nt = 0, any_out = 0;
    uint64_t tensor_args = 0; /* arguments (< 64) that hold tensors: no integers there */
    for (int i = 0; i < args->ntensors; i++) {
        const cspmd_tensor_ref_t *r = &args->tensors[i];
        if (r->arg < 64)
            tensor_args |= UINT64_C(1) << r->arg;
        any_out |= r->out;
        if (r->out)
            continue;
        if (nt == CSPMD_GLOBAL_MAX_TENSORS)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "global mode: %s has more than %d tensor operands", name,
                                   CSPMD_GLOBAL_MAX_TENSORS);
        cspmd_gtensor_t *g = &tensors[nt++];
        int64_t nd = cspmd_tensor_dim(r->tensor);
        if (nd > CSPMD_MAX_DIMS)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "global mode: %s has an operand of %lld dims (at most %d)",
                                   name, (long long)nd, CSPMD_MAX_DIMS);
        g->type = r->type;
        g->arg = r->arg;
        g->ndim = (int8_t)nd;
        g->scalar = r->number != 0;
        cspmd_tensor_sizes(r->tensor, g->sizes, nd);
    }
    int na = args->nargs;
    for (int a = 0; a < na; a++)
        if (a < 64 ? (tensor_args >> a) & 1u : cspmd_call_arg_is_tensor(call, a) == 1)
            gargs[a].n = CSPMD_GARG_OTHER; /* what cspmd_call_arg_ints says of a tensor */
        else if ((gargs[a].n = cspmd_call_arg_ints(call, a, gargs[a].v, CSPMD_MAX_DIMS)) >
                 CSPMD_MAX_DIMS)
            gargs[a].n = CSPMD_GARG_OTHER;
    cspmd_gcall_t g = {name, nt, tensors, na, gargs, nresults};
    cspmd_shard_rule_t rule = rules.shard;
    /* No C rule: DTensor's propagation decides the placements (not for
     * out= forms, whose written tensors it would not see). */
    if (rule < 0 && !any_out && nresults <= CSPMD_MAX_RESULTS) {
        fallback_ctx_t f = {call, nt, nresults};
        return cspmd_global_infer_oracle(&g, dtensor_oracle, &f, local_out, outs);
    }
    cspmd_status_t st = cspmd_global_infer(rule, &g, local_out, outs);
    /* Backward, on the error path: a replicated gradient may stand for the
     * shard of a broadcast one (cspmd_global_backward_relax). */
    if (st == CSPMD_ERR_SPMD_TYPE && cspmdk_in_backward()) {
        int was = cspmd_global_backward_relax(1);
        cspmd_status_t again = cspmd_global_infer(rule, &g, local_out, outs);
        (void)cspmd_global_backward_relax(was);
        if (again == CSPMD_OK)
            return CSPMD_OK;
        (void)cspmd_global_infer(rule, &g, local_out, outs); /* the first message */
    }
    return st;
}

cspmd_status_t cspmdk_global_types(const cspmd_call_t *call, const cspmd_args_t *args,
                                   cspmd_type_t local_out, cspmd_type_t *outs)
{
    cspmd_garg_t small[GLOBAL_ARGS];
    cspmd_garg_t *gargs = small;
    if (args->nargs > GLOBAL_ARGS &&
        (gargs = malloc((size_t)args->nargs * sizeof *gargs)) == NULL)
        return cspmd_error_set(CSPMD_ERR_NOMEM, "global mode: out of memory for %d arguments",
                               args->nargs);
    cspmd_status_t st = global_types(call, args, local_out, outs, gargs);
    if (gargs != small)
        free(gargs);
    return st;
}
