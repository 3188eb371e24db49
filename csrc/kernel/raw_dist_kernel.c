/*
 * raw_dist_kernel.c -- raw torch.distributed collectives in a checked region.
 *
 * The group's mesh axis comes from the core's group registry (the Python
 * front binds each group it sees).  The input must have the rule's src type
 * on that axis (for a reduction, the type its reduce op takes); pre-annotated
 * outputs must have its dst type; in-place reductions retype their input
 * (no mutation check: the collective defines the new type) and functional
 * ones type their results, result i from input i.  Checked before the
 * collective runs.  An op of torch.distributed's namespaces with no rule is
 * refused on typed tensors.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cspmd.h"
#include "kernel_internal.h"
#include "raw_dist_kernel.h"

static cspmd_status_t check_on_group(cspmd_call_t *call, const char *group, int named,
                                     const cspmd_raw_rule_t *r, const char *reduce_op,
                                     const cspmd_args_t *argsp, cspmd_args_t *results);

static cspmd_status_t run_typed(cspmd_call_t *call, const char *name,
                                const cspmd_raw_rule_t *r, cspmd_args_t *argsp,
                                cspmd_args_t *results)
{
    char group[160], reduce_buf[32];
    cspmd_status_t st = cspmd_call_args(call, argsp);
    if (st != CSPMD_OK)
        return st;
    const cspmd_args_t args = *argsp;
    /* Like any op over untyped tensors only (DTensor's own redistributions
     * of its local tensors, say), a collective of untyped data is not
     * checked. */
    int typed = 0;
    for (int i = 0; i < args.ntensors; i++)
        typed |= args.tensors[i].type != CSPMD_TYPE_UNTYPED;
    if (!typed)
        return cspmd_call_redispatch(call);
    if (r == NULL || r->effect == CSPMD_RAW_UNSUPPORTED)
        return cspmdk_with_context(cspmd_raw_refuse(name), call, &args);
    const char *reduce_op = NULL;
    if (r->reduces && cspmd_call_reduce_op(call, reduce_buf, sizeof reduce_buf))
        reduce_op = reduce_buf;
    /* Group names are short; a longer one is read again into a buffer of
     * its size (never cut: a cut name would be an unknown group). */
    char *whole = group;
    int need = cspmd_call_group_name(call, group, sizeof group);
    if (need > (int)sizeof group) {
        whole = malloc((size_t)need);
        if (whole == NULL)
            return cspmd_error_set(CSPMD_ERR_NOMEM, "%s: no memory for a %d-byte group name",
                                   r->fn, need);
        need = cspmd_call_group_name(call, whole, (size_t)need);
    }
    st = check_on_group(call, whole, need > 0, r, reduce_op, &args, results);
    if (whole != group)
        free(whole);
    return st;
}

/* The rest of run_typed, once the group's name is read. */
static cspmd_status_t check_on_group(cspmd_call_t *call, const char *group, int named,
                                     const cspmd_raw_rule_t *r, const char *reduce_op,
                                     const cspmd_args_t *argsp, cspmd_args_t *results)
{
    const cspmd_args_t args = *argsp;
    cspmd_axis_t axis = CSPMD_AXIS_TRIVIAL;
    cspmd_status_t st;
    if (!named || !cspmd_group_axis(group, &axis)) {
        if (!cspmd_checker_strict())
            return cspmd_call_redispatch(call);
        return cspmdk_with_context(
            cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                            "%s: process group '%s' is not known to cspmd, so its mesh axis is "
                            "unknown. Annotate a tensor with it first (assert_type(x, {group: "
                            "...})) or use cspmd's collectives.",
                            r->fn, group),
            call, &args);
    }

    int nout = 0;
    for (int i = 0; i < args.ntensors; i++) {
        const cspmd_tensor_ref_t *t = &args.tensors[i];
        if (t->arg == r->in_arg) {
            cspmd_type_t after;
            st = cspmd_raw_check_input(r, reduce_op, axis, t->type, &after);
            if (st != CSPMD_OK)
                return cspmdk_with_context(st, call, &args);
        } else if (t->arg == r->out_arg) {
            st = cspmd_raw_check_output(r, axis, t->type, r->out_is_list ? nout : -1);
            nout++;
            if (st != CSPMD_OK)
                return cspmdk_with_context(st, call, &args);
        }
    }

    st = cspmd_call_redispatch(call);
    if (st != CSPMD_OK)
        return st;
    if (r->effect != CSPMD_RAW_SET_INPUT && r->effect != CSPMD_RAW_SET_RESULT)
        return CSPMD_OK;
    st = cspmd_call_results(call, results);
    if (st != CSPMD_OK)
        return st;
    /* Every input passed the check above; the rule is a pure function, so
     * asking again gives the type each one has now (no per-tensor table to
     * size).  Input k retyped in place, and result k (the functional ops
     * return one per input, in order; the in-place ones return their
     * inputs) typed as it. */
    int k = 0;
    for (int i = 0; i < args.ntensors; i++) {
        cspmd_type_t after;
        if (args.tensors[i].arg != r->in_arg ||
            cspmd_raw_check_input(r, reduce_op, axis, args.tensors[i].type, &after) != CSPMD_OK)
            continue;
        if (r->effect == CSPMD_RAW_SET_INPUT && after != args.tensors[i].type)
            (void)cspmd_tensor_set_type(args.tensors[i].tensor, after);
        if (k < results->ntensors)
            (void)cspmd_tensor_set_type(results->tensors[k].tensor, after);
        k++;
    }
    return CSPMD_OK;
}

cspmd_status_t cspmd_raw_kernel_run(cspmd_call_t *call, const char *name)
{
    const cspmd_raw_rule_t *r = cspmd_raw_rule_find(name);
    if (r != NULL && r->effect == CSPMD_RAW_PASS)
        return cspmd_call_redispatch(call);
    cspmd_args_t args, results;
    args.tensors = args.inline_refs;
    results.tensors = results.inline_refs;
    cspmd_status_t st = run_typed(call, name, r, &args, &results);
    cspmd_args_release(&args);
    cspmd_args_release(&results);
    return st;
}
