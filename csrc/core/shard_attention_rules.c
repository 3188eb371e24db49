/*
 * shard_attention_rules.c -- shard rules of scaled dot-product attention
 * as torch runs it on CPU (_scaled_dot_product_flash_attention_for_cpu and
 * its backward op), one mesh axis at a time as in shard_rules.c.
 *
 * query (B, H, L, E), key (B, H, S, E), value (B, H, S, Ev): attention is
 * independent per batch element and per head, so q, k and v sharded alike
 * on the batch dim or on the heads dim give the shards of the global
 * attention; the query's sequence dim may be sharded with key and value
 * replicated, unless the mask is causal (each shard would mask from its own
 * row 0).  The head dim and the key's sequence dim are normalized over:
 * never sharded.  A Partial operand is rejected (attention is not linear in
 * q or k).  An explicit attn_mask must be replicated and broadcast (size 1)
 * on a sharded dim.
 */
#define SHARD_RULE_FILE
#include "shard_rules.h"

/* The common placement of q, k and v (args first..first+2), or a failure. */
static int qkv_placement(shard_io_t *io, int first, int8_t *p)
{
    static const char *const names[3] = {"query", "key", "value"};
    int8_t pl[3];
    for (int i = 0; i < 3; i++) {
        int ti = tensor_of_arg(io, first + i);
        if (ti < 0 || tensor(io, ti)->ndim != 4)
            return fail(io, "expected 4-D query, key and value (batch, heads, sequence, "
                            "head dim)");
        pl[i] = io->in[ti];
        if (pl[i] == P_)
            return fail(io, "the %s is Partial (attention is not linear in it)", names[i]);
        if (pl[i] == 3)
            return fail(io, "the %s's head dim 3 is sharded", names[i]);
    }
    if (pl[0] == 2 && pl[1] == R_ && pl[2] == R_) {
        *p = 2;
        return CSPMD_OK;
    }
    if (pl[1] == 2 || pl[2] == 2)
        return fail(io, "the key / value sequence dim 2 is sharded (the softmax normalizes "
                        "over it)");
    if (pl[0] != pl[1] || pl[0] != pl[2]) {
        char a[16], b[16], c[16];
        return fail(io, "query, key and value are placed %s, %s, %s (batch or heads must be "
                        "sharded alike on all three)",
                    place_text(pl[0], a, sizeof a), place_text(pl[1], b, sizeof b),
                    place_text(pl[2], c, sizeof c));
    }
    *p = pl[0];
    return CSPMD_OK;
}

/* The mask (arg mask_arg) checked against the q/k/v placement p. */
static int mask_fits(shard_io_t *io, int mask_arg, int8_t p, int causal)
{
    if (p == 2 && causal)
        return fail(io, "the query's sequence dim 2 is sharded under a causal mask (each "
                        "shard would mask from its own first row)");
    int im = tensor_of_arg(io, mask_arg);
    if (im < 0)
        return CSPMD_OK;
    const cspmd_gtensor_t *m = tensor(io, im);
    if (io->in[im] != R_)
        return fail(io, "the attn_mask is not replicated");
    int d = p >= 0 ? p - (4 - m->ndim) : -1; /* the mask dim broadcast against p */
    if (d >= 0 && m->sizes[d] != 1)
        return fail(io, "the attn_mask is replicated with size %lld on the sharded dim %d",
                    (long long)m->sizes[d], p);
    return CSPMD_OK;
}

/* The placement p of an attention call, forward or backward: q, k, v
 * from arg qkv on, is_causal at arg causal_arg, attn_mask right after it. */
static int attention_placement(shard_io_t *io, int qkv, int causal_arg, int8_t *p)
{
    *p = R_;
    int st = qkv_placement(io, qkv, p);
    if (st == CSPMD_OK)
        st = mask_fits(io, causal_arg + 1, *p, int_arg(io, causal_arg, 0) != 0);
    return st;
}

/* _scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p,
 * is_causal, *, attn_mask, scale) -> (output (B, H, L, Ev), logsumexp
 * (B, H, L)). */
int cspmdi_shard_sdpa(shard_io_t *io)
{
    int8_t p;
    int st = attention_placement(io, 0, 4, &p);
    if (st != CSPMD_OK)
        return st;
    io->out[0] = p;
    io->ndim[0] = 4;
    io->out[1] = p;
    io->ndim[1] = 3;
    return CSPMD_OK;
}

/* ..._backward(grad_out, query, key, value, out, logsumexp, dropout_p,
 * is_causal, *, attn_mask, scale) -> (grad_query, grad_key, grad_value):
 * grad_out and out placed as the query, logsumexp alike; the gradients as
 * their inputs.  With only the query's sequence dim sharded, key and value
 * get a Partial gradient (each shard's queries contribute a part). */
int cspmdi_shard_sdpa_backward(shard_io_t *io)
{
    int8_t p;
    int st = attention_placement(io, 1, 7, &p);
    if (st != CSPMD_OK)
        return st;
    static const int alike[3] = {0, 4, 5}; /* grad_out, out, logsumexp */
    for (int i = 0; i < 3; i++) {
        int ti = tensor_of_arg(io, alike[i]);
        if (ti >= 0 && io->in[ti] != p) {
            char a[16], b[16];
            return fail(io, "argument %d is placed %s but the query %s", alike[i],
                        place_text(io->in[ti], a, sizeof a), place_text(p, b, sizeof b));
        }
    }
    io->out[0] = p;
    io->out[1] = io->out[2] = p == 2 ? P_ : p;
    io->ndim[0] = io->ndim[1] = io->ndim[2] = 4;
    return CSPMD_OK;
}
