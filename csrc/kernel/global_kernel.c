/*
 * global_kernel.c -- global mode's part of the op kernel: hands an op's
 * tensors (types and local sizes) and integer arguments to the core's
 * global inference, which decides each result's type.  Runs only under
 * typecheck(local=False); local mode never reaches this file.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernel_internal.h"

/* op -> shard rule, cached per operator as the op kernel caches its rule:
 * open addressing over the operator's identity, lock-free reads, inserts
 * under a mutex, never shrinks. */
#define SHARD_SLOTS 4096u

typedef struct shard_slot {
    _Atomic(const void *) key;
    cspmd_shard_rule_t rule;
} shard_slot_t;

static shard_slot_t shard_slots[SHARD_SLOTS];
static pthread_mutex_t shard_mutex = PTHREAD_MUTEX_INITIALIZER;

static cspmd_shard_rule_t shard_rule_for(const cspmd_call_t *call)
{
    const void *key = cspmd_call_op_key(call);
    uint64_t x = (uint64_t)(uintptr_t)key;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    uint32_t h = (uint32_t)(x ^ (x >> 33)) & (SHARD_SLOTS - 1);
    for (uint32_t i = 0; i < SHARD_SLOTS; i++) {
        shard_slot_t *s = &shard_slots[(h + i) & (SHARD_SLOTS - 1)];
        const void *k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (k == key)
            return s->rule;
        if (k == NULL)
            break;
    }
    cspmd_shard_rule_t rule =
        cspmd_shard_rule_find(cspmd_call_op_name(call), cspmd_call_op_overload(call));
    pthread_mutex_lock(&shard_mutex);
    for (uint32_t i = 0; i < SHARD_SLOTS; i++) {
        shard_slot_t *s = &shard_slots[(h + i) & (SHARD_SLOTS - 1)];
        const void *k = atomic_load_explicit(&s->key, memory_order_relaxed);
        if (k == key)
            break;
        if (k == NULL) {
            s->rule = rule;
            atomic_store_explicit(&s->key, key, memory_order_release);
            break;
        }
    }
    pthread_mutex_unlock(&shard_mutex);
    return rule;
}

/* Schema arguments read as integers (later ones are left out: no shard
 * rule reads past the first few). */
#define GLOBAL_ARGS 16

cspmd_status_t cspmdk_global_types(const cspmd_call_t *call, const cspmd_args_t *args,
                                   cspmd_type_t local_out, cspmd_type_t *outs)
{
    int nresults = cspmd_call_nreturns(call);
    cspmd_gtensor_t tensors[CSPMD_GLOBAL_MAX_TENSORS];
    cspmd_garg_t gargs[GLOBAL_ARGS];
    char name[160];
    const char *ov = cspmd_call_op_overload(call);
    snprintf(name, sizeof name, "%s%s%s", cspmd_call_op_name(call), ov[0] ? "." : "", ov);
    int nt = 0;
    for (int i = 0; i < args->ntensors; i++) {
        const cspmd_tensor_ref_t *r = &args->tensors[i];
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
        g->scalar = r->wrapped_number;
        for (int d = 0; d < nd; d++)
            g->sizes[d] = cspmd_tensor_size(r->tensor, d);
    }
    int na = args->nargs < GLOBAL_ARGS ? args->nargs : GLOBAL_ARGS;
    for (int a = 0; a < na; a++)
        if ((gargs[a].n = cspmd_call_arg_ints(call, a, gargs[a].v, CSPMD_MAX_DIMS)) >
            CSPMD_MAX_DIMS)
            gargs[a].n = CSPMD_GARG_OTHER;
    cspmd_gcall_t g = {name, nt, tensors, na, gargs, nresults};
    return cspmd_global_infer(shard_rule_for(call), &g, local_out, outs);
}

cspmd_status_t cspmdk_global_no_rule(const cspmd_call_t *call, const cspmd_args_t *args)
{
    char name[160];
    const char *ov = cspmd_call_op_overload(call);
    snprintf(name, sizeof name, "%s%s%s", cspmd_call_op_name(call), ov[0] ? "." : "", ov);
    for (int i = 0; i < args->ntensors; i++) {
        const cspmd_tensor_ref_t *r = &args->tensors[i];
        cspmd_gtensor_t g = {r->type, r->arg, 0, r->wrapped_number, {0}};
        cspmd_gcall_t one = {name, 1, &g, 0, NULL, 1};
        cspmd_type_t outs[CSPMD_MAX_RESULTS];
        cspmd_status_t st = cspmd_global_infer(-1, &one, cspmd_type_local(r->type), outs);
        if (st != CSPMD_OK)
            return cspmdk_with_context(st, call, args);
    }
    return CSPMD_OK;
}
