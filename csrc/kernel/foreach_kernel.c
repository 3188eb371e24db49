/*
 * foreach_kernel.c -- list ops (_foreach_*, the fused optimizers), element
 * by element.
 *
 * A list op applies one single-tensor op to element i of each of its list
 * arguments (and to its plain arguments, the same for every i).  One type
 * for the whole list would be wrong -- parameters of one model are R on
 * some axes and V on others -- so element i gets its own operands and its
 * own inference (cspmd_infer_element: the single op's rule, memoised, so
 * 10,000 parameters of a few distinct types cost a few misses).  Every
 * element is checked before the real kernel runs; a rejected op changes
 * nothing.  Elements none of whose operands carry a type stay unchecked
 * and untyped, as ops over untyped tensors do.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cspmd.h"
#include "kernel_internal.h"

/* Rule masks and the per-argument cursors are 64 wide. */
#define ARGS_MAX 64
#define OUTS_INLINE 256

typedef struct list_state {
    int begin[ARGS_MAX], end[ARGS_MAX]; /* tensors of each argument      */
    int is_list[ARGS_MAX];
    int cursor[ARGS_MAX];               /* next ref of a list argument   */
    int64_t nelem;
} list_state_t;

static void index_arguments(const cspmd_args_t *a, list_state_t *ls)
{
    for (int arg = 0; arg < a->nargs; arg++) {
        ls->begin[arg] = ls->end[arg] = ls->cursor[arg] = 0;
        ls->is_list[arg] = 0;
    }
    ls->nelem = 0;
    for (int t = 0; t < a->ntensors; t++) {
        const cspmd_tensor_ref_t *r = &a->tensors[t];
        int arg = r->arg;
        if (ls->end[arg] == 0)
            ls->begin[arg] = ls->cursor[arg] = t;
        ls->end[arg] = t + 1;
        if (r->elem >= 0) {
            ls->is_list[arg] = 1;
            if (r->elem + 1 > ls->nelem)
                ls->nelem = r->elem + 1;
        }
    }
}

/* The ref of element i of list argument arg, or NULL (None, or a shorter
 * list).  Cursors only move forward: i must not decrease between calls. */
static const cspmd_tensor_ref_t *element_ref(const cspmd_args_t *a, list_state_t *ls, int arg,
                                             int64_t i)
{
    int c = ls->cursor[arg];
    while (c < ls->end[arg] && a->tensors[c].elem < i)
        c++;
    ls->cursor[arg] = c;
    return c < ls->end[arg] && a->tensors[c].elem == i ? &a->tensors[c] : NULL;
}

/* Element i's tensors, for global mode's shard rule (more than the core
 * takes are counted, and refused there). */
typedef struct element_refs {
    int n;
    const cspmd_tensor_ref_t *v[CSPMD_GLOBAL_MAX_TENSORS];
} element_refs_t;

static void element_ref_add(element_refs_t *er, const cspmd_tensor_ref_t *r)
{
    if (er->n < CSPMD_GLOBAL_MAX_TENSORS)
        er->v[er->n] = r;
    er->n++;
}

/* Global mode: element i as one op of the element's shard rule; *out, its
 * local type, becomes its global type (with the spec). */
static cspmd_status_t element_global(cspmd_shard_rule_t shard,
                                     const char *name, const element_refs_t *er,
                                     cspmd_type_t *out)
{
    cspmd_gtensor_t g[CSPMD_GLOBAL_MAX_TENSORS];
    if (er->n > CSPMD_GLOBAL_MAX_TENSORS)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "global mode: %s has more than %d tensor operands per element",
                               name, CSPMD_GLOBAL_MAX_TENSORS);
    for (int k = 0; k < er->n; k++) {
        const cspmd_tensor_ref_t *r = er->v[k];
        int64_t nd = cspmd_tensor_dim(r->tensor);
        if (nd > CSPMD_MAX_DIMS)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "global mode: %s has an operand of %lld dims (at most %d)",
                                   name, (long long)nd, CSPMD_MAX_DIMS);
        g[k].type = r->type;
        g[k].arg = r->arg;
        g[k].ndim = (int8_t)nd;
        g[k].scalar = r->number != 0;
        for (int d = 0; d < nd; d++)
            g[k].sizes[d] = cspmd_tensor_size(r->tensor, d);
    }
    cspmd_gcall_t gc = {name, er->n, g, 0, NULL, 1};
    cspmd_type_t outs[CSPMD_MAX_RESULTS];
    cspmd_status_t st = cspmd_global_infer(shard, &gc, *out, outs);
    if (st == CSPMD_OK)
        *out = outs[0];
    return st;
}

/* Element i's operands: scalars, plain tensors, element i of each list,
 * then the parked typed Scalars (shared by every element). */
static void element_operands(const cspmd_args_t *a, list_state_t *ls, int64_t i,
                             const operands_t *typed, operands_t *o, element_refs_t *er)
{
    o->n = 0;
    er->n = 0;
    for (int arg = 0; arg < a->nargs; arg++) {
        if ((a->scalar_args >> arg) & 1u) {
            cspmdk_operand_push(o, CSPMD_TYPE_UNTYPED, arg, CSPMD_OPERAND_SCALAR);
            if ((a->zero_scalars >> arg) & 1u)
                o->v[o->n - 1].flags = CSPMD_OPERAND_ZERO;
        } else if (ls->is_list[arg]) {
            const cspmd_tensor_ref_t *r = element_ref(a, ls, arg, i);
            if (r != NULL && !r->out) {
                cspmdk_operand_push_ref(o, a, r, arg);
                element_ref_add(er, r);
            }
        } else {
            for (int t = ls->begin[arg]; t < ls->end[arg]; t++)
                if (!a->tensors[t].out) {
                    cspmdk_operand_push_ref(o, a, &a->tensors[t], arg);
                    element_ref_add(er, &a->tensors[t]);
                }
        }
    }
    if (typed->n > 0) { /* typed Scalars replace the weak ones */
        int k = 0;
        for (int j = 0; j < o->n; j++)
            if (o->v[j].kind != CSPMD_OPERAND_SCALAR)
                o->v[k++] = o->v[j];
        for (int j = 0; j < typed->n; j++)
            o->v[k++] = typed->v[j];
        o->n = k;
    }
}

typedef struct foreach_work {
    cspmd_args_t args, results;
    operands_t ops, typed;
    element_refs_t refs;
    cspmd_type_t outs_inline[OUTS_INLINE], *outs;
    list_state_t ls;
} foreach_work_t;

static cspmd_status_t infer_elements(cspmd_call_t *call, cspmd_rule_t rule, foreach_work_t *w)
{
    cspmd_args_t *a = &w->args;
    int nplain = 0;
    for (int t = 0; t < a->ntensors; t++)
        nplain += a->tensors[t].elem < 0;
    cspmd_status_t st = cspmdk_operands_reserve(&w->ops, a->nargs + nplain + w->typed.n);
    if (st != CSPMD_OK)
        return st;
    int global = cspmdk_global_active();
    cspmdk_op_rules_t rules;
    st = cspmdk_op_rules(call, &rules);
    if (st != CSPMD_OK)
        return st;
    for (int64_t i = 0; i < w->ls.nelem; i++) {
        element_operands(a, &w->ls, i, &w->typed, &w->ops, &w->refs);
        w->outs[i] = CSPMD_TYPE_UNTYPED;
        if (!cspmdk_any_typed(w->ops.v, w->ops.n))
            continue;
        st = cspmd_infer_element(rule, i, w->ops.v, w->ops.n, &w->outs[i]);
        if (st == CSPMD_OK && global)
            st = element_global(rules.shard, rules.display, &w->refs, &w->outs[i]);
        if (st != CSPMD_OK)
            return cspmdk_with_context(st, call, a);
    }
    /* Written elements may not change their type (checked for all before
     * anything runs). */
    for (int t = 0; t < a->ntensors; t++) {
        const cspmd_tensor_ref_t *r = &a->tensors[t];
        if (!r->written || r->elem < 0 || r->type == CSPMD_TYPE_UNTYPED ||
            !cspmd_rule_takes_result(rule, r->arg))
            continue;
        cspmd_type_t out = w->outs[r->elem];
        if (out == CSPMD_TYPE_UNTYPED || out == r->type)
            continue;
        st = cspmdk_check_mutation(call, a, r, out);
        if (st != CSPMD_OK)
            return st;
    }
    for (int t = 0; t < a->ntensors; t++) {
        const cspmd_tensor_ref_t *r = &a->tensors[t];
        cspmd_type_t joined;
        if (!r->written || r->elem < 0 || !cspmd_rule_takes_result(rule, r->arg))
            continue;
        st = cspmdk_view_write_join(call, a, r, w->outs[r->elem], &joined);
        if (st != CSPMD_OK)
            return st;
    }
    return CSPMD_OK;
}

/* The type a result at (return j, element i) gets: the element's inferred
 * type, or -- for the fused ops' bookkeeping lists -- the type of the
 * matching input element (argument j).  Results come in (j, i) order, so
 * the argument cursors (reset after inference) only move forward. */
static cspmd_type_t result_type(cspmd_rule_t rule, foreach_work_t *w,
                                const cspmd_tensor_ref_t *r)
{
    if (r->elem < 0 || r->elem >= w->ls.nelem)
        return CSPMD_TYPE_UNTYPED;
    if (cspmd_rule_takes_result(rule, r->arg))
        return w->outs[r->elem];
    if (r->arg >= w->args.nargs || !w->ls.is_list[r->arg])
        return CSPMD_TYPE_UNTYPED;
    const cspmd_tensor_ref_t *in = element_ref(&w->args, &w->ls, r->arg, r->elem);
    return in != NULL ? in->type : CSPMD_TYPE_UNTYPED;
}

static cspmd_status_t run(cspmd_call_t *call, cspmd_rule_t rule, foreach_work_t *w)
{
    cspmd_status_t st = cspmd_call_args(call, &w->args);
    if (st != CSPMD_OK)
        return st;
    cspmd_args_t *a = &w->args;
    cspmdk_refresh_view_types(a);
    if (a->nargs > ARGS_MAX)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "%s: %d schema arguments; cspmd checks list ops of at most %d",
                               cspmd_call_op_name(call), a->nargs, ARGS_MAX);
    index_arguments(a, &w->ls);
    if (w->ls.nelem > OUTS_INLINE) {
        w->outs = malloc((size_t)w->ls.nelem * sizeof *w->outs);
        if (w->outs == NULL)
            return cspmd_error_set(CSPMD_ERR_NOMEM, "%s: out of memory for %lld list elements",
                                   cspmd_call_op_name(call), (long long)w->ls.nelem);
    }
    st = infer_elements(call, rule, w);
    if (st != CSPMD_OK)
        return st;

    st = cspmd_call_redispatch(call);
    if (st != CSPMD_OK)
        return st;
    for (int t = 0; t < a->ntensors; t++) {
        const cspmd_tensor_ref_t *r = &a->tensors[t];
        if (r->written && r->elem >= 0 && cspmd_rule_takes_result(rule, r->arg) &&
            w->outs[r->elem] != CSPMD_TYPE_UNTYPED) {
            (void)cspmd_tensor_set_type(r->tensor, w->outs[r->elem]);
            cspmdk_view_write_apply(call, a, r, w->outs[r->elem]);
        }
    }
    st = cspmd_call_results(call, &w->results);
    if (st != CSPMD_OK)
        return st;
    for (int arg = 0; arg < a->nargs; arg++)
        w->ls.cursor[arg] = w->ls.begin[arg];
    for (int t = 0; t < w->results.ntensors; t++) {
        const cspmd_tensor_ref_t *r = &w->results.tensors[t];
        cspmd_type_t want = result_type(rule, w, r);
        if (want != CSPMD_TYPE_UNTYPED && want != r->type) {
            st = cspmd_tensor_set_type(r->tensor, want);
            if (st != CSPMD_OK)
                return st;
        }
    }
    return CSPMD_OK;
}

cspmd_status_t cspmdk_foreach_run(cspmd_call_t *call, cspmd_rule_t rule)
{
    /* The work area is large (two argument views, operand and type
     * arrays): on the heap, as list ops are rare next to plain ops. */
    foreach_work_t *w = malloc(sizeof *w);
    if (w == NULL) {
        (void)cspmd_pending_scalars_take(NULL, 0);
        return cspmd_error_set(CSPMD_ERR_NOMEM, "cspmd: out of memory for a list op");
    }
    w->args.tensors = w->args.inline_refs;
    w->results.tensors = w->results.inline_refs;
    w->outs = w->outs_inline;
    cspmdk_operands_init(&w->ops);
    cspmdk_operands_init(&w->typed);
    int npending = cspmd_pending_scalars_count();
    cspmd_status_t st = cspmdk_operands_reserve(&w->typed, npending);
    if (st == CSPMD_OK)
        w->typed.n = cspmd_pending_scalars_take(w->typed.v, w->typed.cap);
    else
        (void)cspmd_pending_scalars_take(NULL, 0);
    if (st == CSPMD_OK)
        st = run(call, rule, w);
    cspmd_args_release(&w->args);
    cspmd_args_release(&w->results);
    cspmdk_operands_free(&w->ops);
    cspmdk_operands_free(&w->typed);
    if (w->outs != w->outs_inline)
        free(w->outs);
    free(w);
    return st;
}
