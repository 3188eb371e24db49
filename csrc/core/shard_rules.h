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
    const uint32_t *split;           /* its shard's stride factor (0, 1:
                                      * ordinary; cspmd_spec_t); may be NULL */
    int64_t k;                       /* the axis' size                    */
    int8_t out[CSPMD_MAX_RESULTS];   /* placement of each result          */
    uint32_t out_split[CSPMD_MAX_RESULTS]; /* each sharded result's stride
                                      * factor (0: ordinary)              */
    int8_t ndim[CSPMD_MAX_RESULTS];  /* dims of each result               */
    char why[192];                   /* why no strategy exists            */
} shard_io_t;

/* What a rule returns besides CSPMD_OK and an error it has set itself. */
#define SHARD_NO_STRATEGY CSPMD_SHARD_NO_STRATEGY

/* Helpers the rule files share (shard_rules.c). */
#define R_ CSPMD_PLACE_REPLICATE
#define P_ CSPMD_PLACE_PARTIAL

/* Set io->why; returns SHARD_NO_STRATEGY. */
CSPMDI_HIDDEN int cspmdi_shard_fail(shard_io_t *io, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Call tensor i, or NULL past the last one. */
CSPMDI_HIDDEN const cspmd_gtensor_t *cspmdi_shard_tensor(const shard_io_t *io, int i);
/* Global size of dim d of call tensor i on this axis. */
CSPMDI_HIDDEN int64_t cspmdi_shard_gsize(const shard_io_t *io, int i, int d);
/* Integer argument a (its first value), or dflt when absent or None. */
CSPMDI_HIDDEN int64_t cspmdi_shard_int_arg(const shard_io_t *io, int a, int64_t dflt);
/* d wrapped into 0..ndim-1 (a 0-dim tensor counts as 1 dim). */
CSPMDI_HIDDEN int cspmdi_shard_wrap_dim(int64_t d, int ndim);
/* Every result placed `place` with `ndim` dims. */
CSPMDI_HIDDEN void cspmdi_shard_all_results(shard_io_t *io, int8_t place, int ndim);
/* "S(d)", "P" or "R". */
CSPMDI_HIDDEN const char *cspmdi_shard_place_text(int8_t p, char *buf, size_t len);
/* The call tensor that came from schema argument arg, or -1. */
CSPMDI_HIDDEN int cspmdi_shard_tensor_of_arg(const shard_io_t *io, int arg);

/* Short names inside the rule files (which define SHARD_RULE_FILE). */
#ifdef SHARD_RULE_FILE
#define fail cspmdi_shard_fail
#define tensor cspmdi_shard_tensor
#define gsize cspmdi_shard_gsize
#define int_arg cspmdi_shard_int_arg
#define wrap_dim cspmdi_shard_wrap_dim
#define all_results cspmdi_shard_all_results
#define place_text cspmdi_shard_place_text
#define tensor_of_arg cspmdi_shard_tensor_of_arg
#endif

/* Rules in other files (shard_pick_rules.c, shard_loss_rules.c,
 * shard_attention_rules.c). */
CSPMDI_HIDDEN int cspmdi_shard_select(shard_io_t *io);
CSPMDI_HIDDEN int cspmdi_shard_select_backward(shard_io_t *io);
CSPMDI_HIDDEN int cspmdi_shard_slice(shard_io_t *io);
CSPMDI_HIDDEN int cspmdi_shard_slice_backward(shard_io_t *io);
CSPMDI_HIDDEN int cspmdi_shard_constant_pad(shard_io_t *io);
CSPMDI_HIDDEN int cspmdi_shard_split(shard_io_t *io);
CSPMDI_HIDDEN int cspmdi_shard_unbind(shard_io_t *io);
CSPMDI_HIDDEN int cspmdi_shard_gather(shard_io_t *io);
CSPMDI_HIDDEN int cspmdi_shard_scatter_add(shard_io_t *io);
CSPMDI_HIDDEN int cspmdi_shard_index_select(shard_io_t *io);
CSPMDI_HIDDEN int cspmdi_shard_index_add(shard_io_t *io);
CSPMDI_HIDDEN int cspmdi_shard_embedding_backward(shard_io_t *io);
CSPMDI_HIDDEN int cspmdi_shard_nll_loss(shard_io_t *io);
CSPMDI_HIDDEN int cspmdi_shard_nll_loss_backward(shard_io_t *io);
CSPMDI_HIDDEN int cspmdi_shard_sdpa(shard_io_t *io);
CSPMDI_HIDDEN int cspmdi_shard_sdpa_backward(shard_io_t *io);

/* Run rule on one axis: CSPMD_OK, SHARD_NO_STRATEGY (io->why says why) or
 * an error status with its message set.  Strided shards: the view rules
 * read and set them; every other rule keeps its dims whole (or refuses),
 * so its sharded operands must share one stride factor, which its sharded
 * results take. */
CSPMDI_HIDDEN int cspmdi_shard_apply(cspmd_shard_rule_t rule, shard_io_t *io);

#endif /* CSPMD_SHARD_RULES_H */
