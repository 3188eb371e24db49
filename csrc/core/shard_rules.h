/*
 * shard_rules.h -- the shard rule table's interface to global inference
 * (internal to the core).
 *
 * A rule sees one shard axis at a time, as DTensor's propagation on a 1-D
 * mesh would: each operand's placement on that axis (Shard(d), Replicate,
 * Partial), its local sizes and the op's integer arguments, and decides
 * each result's placement and dims -- or that no placement of the results
 * lets the local op compute the shards of the global op.
 */
#ifndef CSPMD_SHARD_RULES_H
#define CSPMD_SHARD_RULES_H

#include "core.h"

typedef struct shard_io {
    const cspmd_gcall_t *call;
    const int8_t *in;                /* placement of each call tensor     */
    int64_t k;                       /* the axis' size                    */
    int8_t out[CSPMD_MAX_RESULTS];   /* placement of each result          */
    int8_t ndim[CSPMD_MAX_RESULTS];  /* dims of each result               */
    char why[192];                   /* why no strategy exists            */
} shard_io_t;

/* What a rule returns besides CSPMD_OK and an error it has set itself. */
#define SHARD_NO_STRATEGY 1

/* Run rule on one axis: CSPMD_OK, SHARD_NO_STRATEGY (io->why says why) or
 * an error status with its message set. */
CSPMDI_HIDDEN int cspmdi_shard_apply(cspmd_shard_rule_t rule, shard_io_t *io);

#endif /* CSPMD_SHARD_RULES_H */
