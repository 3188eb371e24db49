/*
 * global_memo.c -- a per-thread memo of global inference: an op call whose
 * rule, operand types, local sizes, integer arguments, local result type,
 * global-axis policy and backward relaxation all equal an earlier call's
 * gets that call's result types without running the operand checks, the
 * axis ordering or the shard rules again.  Only successes are kept; type
 * ids are never reused, so an entry stays true.
 */
#include <string.h>

#include "global_memo.h"

#define GMEMO_SLOTS 256

typedef struct gmemo_slot {
    uint32_t hash;
    uint32_t promo;
    int32_t n; /* key words; 0: empty */
    cspmd_type_t out[CSPMD_MAX_RESULTS];
    uint64_t w[CSPMDI_GMEMO_WORDS];
} gmemo_slot_t;

static _Thread_local gmemo_slot_t tl_slots[GMEMO_SLOTS];

int cspmdi_gmemo_key(cspmdi_gmemo_key_t *k, cspmd_shard_rule_t rule, const cspmd_gcall_t *call,
                     uint32_t policy, int relax, cspmd_type_t local_out)
{
    if (rule < 0 || call->nresults > CSPMD_MAX_RESULTS)
        return 0;
    uint64_t *w = k->w;
    int n = 0;
    w[n++] = (uint64_t)(uint32_t)rule | (uint64_t)policy << 32;
    w[n++] = (uint64_t)local_out | (uint64_t)(relax != 0) << 32 |
             (uint64_t)(uint32_t)call->nresults << 40;
    w[n++] = (uint64_t)(uint32_t)call->ntensors | (uint64_t)(uint32_t)call->nargs << 32;
    for (int t = 0; t < call->ntensors; t++) {
        const cspmd_gtensor_t *g = &call->tensors[t];
        if (g->ndim < 0 || g->ndim > CSPMD_MAX_DIMS || n + 1 + g->ndim > CSPMDI_GMEMO_WORDS)
            return 0;
        w[n++] = (uint64_t)g->type | (uint64_t)g->arg << 32 | (uint64_t)(uint8_t)g->ndim << 48 |
                 (uint64_t)(g->scalar != 0) << 56;
        for (int d = 0; d < g->ndim; d++)
            w[n++] = (uint64_t)g->sizes[d];
    }
    for (int a = 0; a < call->nargs; a++) {
        const cspmd_garg_t *ga = &call->args[a];
        int nv = ga->n > 0 ? ga->n : 0;
        if (ga->n > CSPMD_MAX_DIMS || n + 1 + nv > CSPMDI_GMEMO_WORDS)
            return 0;
        w[n++] = (uint64_t)(uint32_t)ga->n;
        for (int i = 0; i < nv; i++)
            w[n++] = (uint64_t)ga->v[i];
    }
    uint64_t h = 0xcbf29ce484222325u;
    for (int i = 0; i < n; i++)
        h = (h ^ w[i]) * 0x100000001b3u;
    k->n = n;
    k->hash = (uint32_t)(h ^ h >> 32);
    return 1;
}

static gmemo_slot_t *slot_of(const cspmdi_gmemo_key_t *k)
{
    return &tl_slots[(k->hash ^ k->hash >> 16) % GMEMO_SLOTS];
}

int cspmdi_gmemo_get(const cspmdi_gmemo_key_t *k, int nresults, cspmd_type_t *outs,
                     uint32_t *promo)
{
    const gmemo_slot_t *s = slot_of(k);
    if (s->n != k->n || s->hash != k->hash ||
        memcmp(s->w, k->w, (size_t)k->n * sizeof *k->w) != 0)
        return 0;
    for (int r = 0; r < nresults; r++)
        outs[r] = s->out[r];
    *promo = s->promo;
    return 1;
}

void cspmdi_gmemo_put(const cspmdi_gmemo_key_t *k, int nresults, const cspmd_type_t *outs,
                      uint32_t promo)
{
    gmemo_slot_t *s = slot_of(k);
    s->n = k->n;
    s->hash = k->hash;
    s->promo = promo;
    for (int r = 0; r < nresults; r++)
        s->out[r] = outs[r];
    memcpy(s->w, k->w, (size_t)k->n * sizeof *k->w);
}
