/*
 * global_memo.h -- the per-thread memo of global inference (global_memo.c),
 * internal to the core.
 */
#ifndef CSPMD_GLOBAL_MEMO_H
#define CSPMD_GLOBAL_MEMO_H

#include "core.h"

/* Words of a key; a call whose key does not fit is not memoised. */
#define CSPMDI_GMEMO_WORDS 40

typedef struct cspmdi_gmemo_key {
    int n;
    uint32_t hash;
    uint64_t w[CSPMDI_GMEMO_WORDS];
} cspmdi_gmemo_key_t;

/* Build the key of a call to a C rule (everything global inference reads:
 * rule, policy word, relaxation, local result type, each tensor's type,
 * argument, dims and local sizes, each integer argument; a type id stands
 * for its whole interned spec, strided shards' split factors included).
 * Returns 0 when the call is not memoised (no C rule, too many results, too
 * long a key). */
CSPMDI_HIDDEN int cspmdi_gmemo_key(cspmdi_gmemo_key_t *k, cspmd_shard_rule_t rule,
                                   const cspmd_gcall_t *call, uint32_t policy, int relax,
                                   cspmd_type_t local_out);
/* 1 and the first nresults result types and the promoted-axes mask (bit j:
 * axis j of local_out went V -> P) when the key was seen; else 0. */
CSPMDI_HIDDEN int cspmdi_gmemo_get(const cspmdi_gmemo_key_t *k, int nresults, cspmd_type_t *outs,
                                   uint32_t *promo);
/* Remember a successful inference under key k. */
CSPMDI_HIDDEN void cspmdi_gmemo_put(const cspmdi_gmemo_key_t *k, int nresults,
                                    const cspmd_type_t *outs, uint32_t promo);

#endif /* CSPMD_GLOBAL_MEMO_H */
