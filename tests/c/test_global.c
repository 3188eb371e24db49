/* Global SPMD types in the core: the mode and local axes (mesh.c), the
 * operand check and global inference (global_infer.c, shard_rules.c), and
 * a collective's spec (global_coll.c). */
#include <stdio.h>
#include <string.h>

#include "infer_helpers.h"

/* dp, tp local types plus "tp shards dim d" (d < 0: no spec) on ndim dims. */
static cspmd_type_t gty(cspmd_ltype_t dp, cspmd_ltype_t tp, int ndim, int tp_dim, int dp_dim)
{
    cspmd_spec_t spec;
    memset(&spec, 0, sizeof spec);
    spec.ndim = (int8_t)ndim;
    if (dp_dim >= 0)
        spec.entry[dp_dim][spec.nentry[dp_dim]++] = DP;
    if (tp_dim >= 0)
        spec.entry[tp_dim][spec.nentry[tp_dim]++] = TP;
    return ty_spec(dp, tp, tp_dim >= 0 || dp_dim >= 0 ? &spec : NULL);
}

static cspmd_gtensor_t gt(cspmd_type_t t, int64_t a, int64_t b)
{
    cspmd_gtensor_t g;
    memset(&g, 0, sizeof g);
    g.type = t;
    g.ndim = 2;
    g.sizes[0] = a;
    g.sizes[1] = b;
    return g;
}

static int tp_dim_of(cspmd_type_t t)
{
    cspmd_spec_t s;
    ck_assert_int_eq(cspmd_type_spec(t, &s), CSPMD_OK);
    for (int d = 0; d < s.ndim; d++)
        for (int i = 0; i < s.nentry[d]; i++)
            if (s.entry[d][i] == TP)
                return d;
    return -1;
}

START_TEST(test_mode_and_local_axes)
{
    int global = -1;
    ck_assert_int_eq(cspmd_checker_local(), 0);
    ck_assert_int_eq(cspmd_axis_is_global(TP, &global), CSPMD_OK);
    ck_assert_int_eq(global, 1);
    ck_assert_int_eq(cspmd_mesh_set_local_axes(&DP, 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_is_global(DP, &global), CSPMD_OK);
    ck_assert_int_eq(global, 0);
    cspmd_axis_t other = h_axis(2, 1), got[CSPMD_MAX_AXES];
    ck_assert_int_eq(cspmd_mesh_local_axes(got), 1);
    ck_assert_uint_eq(got[0], DP);
    ck_assert_int_eq(cspmd_axis_is_global(other, &global), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "is not in the current mesh, so its "
                                                     "local/global typechecking policy"));
    ck_assert_int_eq(cspmd_mesh_set_local_axes(&other, 1), CSPMD_ERR_MISUSE);
    cspmd_checker_set_local(1);
    ck_assert_int_eq(cspmd_axis_is_global(TP, &global), CSPMD_OK);
    ck_assert_int_eq(global, 0); /* local mode: nothing is global */
}
END_TEST

START_TEST(test_operand_check)
{
    ck_assert_int_eq(cspmd_global_check_operand(gty(LR, LV, 2, 0, -1)), CSPMD_OK);
    ck_assert_int_eq(cspmd_global_check_operand(gty(LR, LV, 2, -1, -1)), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "Tensor has Varying type on axis tp but no PartitionSpec entry. Use "
                     "assert_type with S(i) or PartitionSpec to specify which dimension is "
                     "sharded. Otherwise, reinterpret the tensor from V to P.");
    ck_assert_int_eq(cspmd_global_check_operand(CSPMD_TYPE_UNTYPED), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_set_local_axes(&DP, 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_global_check_operand(gty(LV, LV, 2, 1, -1)), CSPMD_OK);
}
END_TEST

/* The per-thread memo of operands that passed keys on the policy: a
 * verdict reached in local mode or with dp local does not carry over. */
START_TEST(test_operand_check_memo_follows_the_policy)
{
    cspmd_type_t dp_v = gty(LV, LR, 2, -1, -1); /* V on dp, no spec */
    cspmd_checker_set_local(1);
    ck_assert_int_eq(cspmd_global_check_operand(dp_v), CSPMD_OK);
    cspmd_checker_set_local(0);
    ck_assert_int_eq(cspmd_global_check_operand(dp_v), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_mesh_set_local_axes(&DP, 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_global_check_operand(dp_v), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_set_local_axes(NULL, 0), CSPMD_OK);
    ck_assert_int_eq(cspmd_global_check_operand(dp_v), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "Varying type on axis dp"));
    /* and the same through global inference */
    cspmd_gtensor_t t = gt(dp_v, 4, 4);
    cspmd_gcall_t call = {"aten::neg", 1, &t, 0, NULL, 1};
    cspmd_type_t outs[CSPMD_MAX_RESULTS];
    cspmd_shard_rule_t neg = cspmd_shard_rule_find("aten::neg", "");
    ck_assert_int_eq(cspmd_global_infer(neg, &call, dp_v, outs), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_mesh_set_local_axes(&DP, 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_global_infer(neg, &call, dp_v, outs), CSPMD_OK);
    ck_assert_uint_eq(outs[0], dp_v);
}
END_TEST

static cspmd_status_t infer2(const char *op, const char *ov, cspmd_gtensor_t a,
                             cspmd_gtensor_t b, cspmd_type_t local, cspmd_type_t *out)
{
    cspmd_gtensor_t ts[2] = {a, b};
    cspmd_gcall_t call = {op, 2, ts, 0, NULL, 1};
    cspmd_type_t outs[CSPMD_MAX_RESULTS];
    cspmd_status_t st = cspmd_global_infer(cspmd_shard_rule_find(op, ov), &call, local, outs);
    *out = outs[0];
    return st;
}

START_TEST(test_mm_rows_columns_and_contraction)
{
    cspmd_type_t out = 0;
    /* S(0) @ R -> S(0) */
    ck_assert_int_eq(infer2("aten::mm", "", gt(gty(LR, LV, 2, 0, -1), 4, 8),
                            gt(gty(LR, LR, 2, -1, -1), 8, 6), ty(LR, LV), &out),
                     CSPMD_OK);
    ck_assert_int_eq(tp_dim_of(out), 0);
    /* S(1) @ S(0): the contraction is sharded -> P, no spec */
    ck_assert_int_eq(infer2("aten::mm", "", gt(gty(LR, LV, 2, 1, -1), 4, 8),
                            gt(gty(LR, LV, 2, 0, -1), 8, 6), ty(LR, LV), &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, ty(LR, LP));
    /* S(0) @ S(0): no strategy */
    ck_assert_int_eq(infer2("aten::mm", "", gt(gty(LR, LV, 2, 0, -1), 4, 8),
                            gt(gty(LR, LV, 2, 0, -1), 8, 6), ty(LR, LV), &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "No valid sharding strategy for aten::mm "
                                                     "on axis tp"));
}
END_TEST

START_TEST(test_pointwise_broadcast_and_no_rule)
{
    cspmd_type_t out = 0;
    cspmd_gtensor_t bias = gt(gty(LR, LR, 1, -1, -1), 8, 0);
    bias.ndim = 1;
    ck_assert_int_eq(infer2("aten::add", "Tensor", gt(gty(LR, LV, 2, 0, -1), 4, 8), bias,
                            ty(LR, LV), &out),
                     CSPMD_OK);
    ck_assert_int_eq(tp_dim_of(out), 0);
    /* the same local shape replicated: globally 16 vs 4 rows */
    ck_assert_int_eq(infer2("aten::add", "Tensor", gt(gty(LR, LV, 2, 0, -1), 4, 8),
                            gt(gty(LR, LR, 2, -1, -1), 4, 8), ty(LR, LV), &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(infer2("aten::flip", "", gt(gty(LR, LV, 2, 0, -1), 4, 8),
                            gt(gty(LR, LR, 2, -1, -1), 4, 8), ty(LR, LV), &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "global mode: no shard rule for aten::flip"));
    /* nothing sharded: any op takes its local type */
    ck_assert_int_eq(infer2("aten::flip", "", gt(gty(LR, LR, 2, -1, -1), 4, 8),
                            gt(gty(LR, LR, 2, -1, -1), 4, 8), ty(LR, LR), &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, ty(LR, LR));
}
END_TEST

/* An oracle that answers what the test set in oracle_answer, and counts
 * its calls. */
static struct {
    int8_t place;
    int rc;
    int calls;
    int8_t seen[2];
} oracle_answer;

static int test_oracle(void *ctx, const int8_t *in, int64_t size, int8_t *out, int8_t *ndim,
                       char *why, size_t whylen)
{
    (void)ctx;
    ck_assert_int_eq(size, 4);
    oracle_answer.calls++;
    oracle_answer.seen[0] = in[0];
    oracle_answer.seen[1] = in[1];
    if (oracle_answer.rc == CSPMD_SHARD_NO_STRATEGY) {
        snprintf(why, whylen, "the oracle says no");
        return CSPMD_SHARD_NO_STRATEGY;
    }
    out[0] = oracle_answer.place;
    ndim[0] = 2;
    return oracle_answer.rc;
}

START_TEST(test_oracle_supplies_placements_the_core_decides)
{
    cspmd_gtensor_t ts[2] = {gt(gty(LR, LV, 2, 1, -1), 4, 8), gt(gty(LR, LV, 2, 0, -1), 8, 6)};
    cspmd_gcall_t call = {"aten::my_mm", 2, ts, 0, NULL, 1};
    cspmd_type_t outs[CSPMD_MAX_RESULTS];
    /* a Partial result: V promoted to P, no spec */
    oracle_answer.place = CSPMD_PLACE_PARTIAL;
    oracle_answer.rc = CSPMD_OK;
    oracle_answer.calls = 0;
    ck_assert_int_eq(cspmd_global_infer_oracle(&call, test_oracle, NULL, ty(LR, LV), outs),
                     CSPMD_OK);
    ck_assert_uint_eq(outs[0], ty(LR, LP));
    ck_assert_int_eq(oracle_answer.calls, 1); /* one shard axis */
    ck_assert_int_eq(oracle_answer.seen[0], 1);
    ck_assert_int_eq(oracle_answer.seen[1], 0);
    /* a shard: the spec names tp on that dim */
    oracle_answer.place = 1;
    ck_assert_int_eq(cspmd_global_infer_oracle(&call, test_oracle, NULL, ty(LR, LV), outs),
                     CSPMD_OK);
    ck_assert_int_eq(tp_dim_of(outs[0]), 1);
    /* Replicate where the local type is V: the core rejects it */
    oracle_answer.place = CSPMD_PLACE_REPLICATE;
    ck_assert_int_eq(cspmd_global_infer_oracle(&call, test_oracle, NULL, ty(LR, LV), outs),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "the local and global types of this op "
                                                     "disagree"));
    /* a dim out of range is the oracle's bug */
    oracle_answer.place = 5;
    ck_assert_int_eq(cspmd_global_infer_oracle(&call, test_oracle, NULL, ty(LR, LV), outs),
                     CSPMD_ERR_MISUSE);
    /* no strategy: the oracle's reason in the message */
    oracle_answer.rc = CSPMD_SHARD_NO_STRATEGY;
    ck_assert_int_eq(cspmd_global_infer_oracle(&call, test_oracle, NULL, ty(LR, LV), outs),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "No valid sharding strategy for aten::my_mm on axis tp: "
                                         "the oracle says no");
    ck_assert_int_eq(cspmd_global_infer_oracle(&call, NULL, NULL, ty(LR, LV), outs),
                     CSPMD_ERR_MISUSE);
    /* nothing sharded: the oracle is not asked */
    cspmd_gtensor_t rs[2] = {gt(gty(LR, LR, 2, -1, -1), 4, 8), gt(gty(LR, LR, 2, -1, -1), 8, 6)};
    cspmd_gcall_t plain = {"aten::my_mm", 2, rs, 0, NULL, 1};
    oracle_answer.calls = 0;
    ck_assert_int_eq(cspmd_global_infer_oracle(&plain, test_oracle, NULL, ty(LR, LR), outs),
                     CSPMD_OK);
    ck_assert_int_eq(oracle_answer.calls, 0);
}
END_TEST

START_TEST(test_gradient_takes_the_leaf_spec)
{
    cspmd_type_t out = 0;
    /* w {dp: R, tp: S(1)}: its gradient {dp: P, tp: V} is sharded as w on tp */
    cspmd_type_t w = gty(LR, LV, 2, 1, -1);
    ck_assert_int_eq(cspmd_grad_spec(w, ty(LP, LV), "w", &out), CSPMD_OK);
    ck_assert_uint_eq(out, gty(LP, LV, 2, 1, -1));
    /* already carrying that spec: kept */
    ck_assert_int_eq(cspmd_grad_spec(w, gty(LP, LV, 2, 1, -1), "w", &out), CSPMD_OK);
    ck_assert_uint_eq(out, gty(LP, LV, 2, 1, -1));
    /* sharded on another dim: rejected, both specs named */
    ck_assert_int_eq(cspmd_grad_spec(w, gty(LP, LV, 2, 0, -1), "w", &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "Gradient PartitionSpec mismatch for w: the tensor is "
                                         "sharded as (None, tp), so its gradient must be too, but "
                                         "the gradient is sharded as (tp, None)");
    /* a replicated leaf: no spec due, none given */
    ck_assert_int_eq(cspmd_grad_spec(ty(LR, LR), ty(LP, LP), "b", &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LP, LP));
    ck_assert_int_eq(cspmd_grad_spec(ty(LR, LR), gty(LP, LV, 2, 0, -1), "b", &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_grad_spec(w, ty(LP, LV), "w", NULL), CSPMD_ERR_MISUSE);
}
END_TEST

/* Backward: a replicated gradient broadcast to a sharded input's local
 * sizes (sum's backward) is read as that input's shard, only while the
 * kernel's retry turns the relaxation on. */
START_TEST(test_backward_reads_replicated_gradient_as_shard)
{
    cspmd_type_t out = 0;
    /* x.t() {tp: S(1)} [8, 4] @ grad {tp: R} [4, 6]: the contraction is
     * sharded on one side only */
    cspmd_gtensor_t xt = gt(gty(LR, LV, 2, 1, -1), 8, 4), g = gt(ty(LR, LR), 4, 6);
    ck_assert_int_eq(infer2("aten::mm", "", xt, g, ty(LR, LV), &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_global_backward_relax(1), 0);
    /* the gradient read as sharded on its rows: a sharded contraction, P */
    ck_assert_int_eq(infer2("aten::mm", "", xt, g, ty(LR, LV), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LR, LP));
    /* mul of grad {tp: R} [4, 8] and x {tp: S(0)} [4, 8]: the grad takes S(0) */
    ck_assert_int_eq(infer2("aten::mul", "Tensor", gt(ty(LR, LR), 4, 8),
                            gt(gty(LR, LV, 2, 0, -1), 4, 8), ty(LR, LV), &out),
                     CSPMD_OK);
    ck_assert_int_eq(tp_dim_of(out), 0);
    /* a V operand sharded on another dim is not relaxed */
    ck_assert_int_eq(infer2("aten::mul", "Tensor", gt(gty(LR, LV, 2, 1, -1), 4, 4),
                            gt(gty(LR, LV, 2, 0, -1), 4, 4), ty(LR, LV), &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_global_backward_relax(0), 1);
}
END_TEST

/* The gradient reaching a sharded leaf: R on the leaf's shard axis is its
 * shard (V, then the leaf's spec); other axes and spec'd gradients kept. */
START_TEST(test_replicated_gradient_of_sharded_leaf)
{
    cspmd_type_t out = 0, w = gty(LR, LV, 2, 1, -1);
    ck_assert_int_eq(cspmd_grad_global_shard(w, ty(LP, LR), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LP, LV));
    ck_assert_int_eq(cspmd_grad_global_shard(w, ty(LP, LV), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LP, LV));
    ck_assert_int_eq(cspmd_grad_global_shard(w, gty(LP, LV, 2, 0, -1), &out), CSPMD_OK);
    ck_assert_uint_eq(out, gty(LP, LV, 2, 0, -1)); /* cspmd_grad_spec rejects it */
    ck_assert_int_eq(cspmd_grad_global_shard(ty(LR, LR), ty(LP, LR), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LP, LR));
    /* tp local: not read as a shard */
    ck_assert_int_eq(cspmd_mesh_set_local_axes(&TP, 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_grad_global_shard(w, ty(LP, LR), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LP, LR));
    ck_assert_int_eq(cspmd_mesh_set_local_axes(NULL, 0), CSPMD_OK);
    ck_assert_int_eq(cspmd_grad_global_shard(w, ty(LP, LR), NULL), CSPMD_ERR_MISUSE);
}
END_TEST

/* new_empty_strided(self, size, ...) (autograd's gradient buffers): of
 * self's own sizes it is placed as self; other sizes need a replicated self. */
START_TEST(test_new_sized_follows_self)
{
    cspmd_type_t out = 0;
    cspmd_gtensor_t self = gt(gty(LR, LV, 2, 1, -1), 4, 8);
    cspmd_garg_t args[2];
    memset(args, 0, sizeof args);
    args[1].n = 2;
    args[1].v[0] = 4;
    args[1].v[1] = 8;
    cspmd_gcall_t call = {"aten::new_empty_strided", 1, &self, 2, args, 1};
    cspmd_shard_rule_t rule = cspmd_shard_rule_find("aten::new_empty_strided", "");
    ck_assert_int_ge(rule, 0);
    cspmd_type_t outs[CSPMD_MAX_RESULTS];
    ck_assert_int_eq(cspmd_global_infer(rule, &call, ty(LR, LV), outs), CSPMD_OK);
    ck_assert_int_eq(tp_dim_of(outs[0]), 1);
    args[1].v[1] = 16;
    ck_assert_int_eq(cspmd_global_infer(rule, &call, ty(LR, LV), outs), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "a new tensor of other sizes than its S(1) self"));
    (void)out;
}
END_TEST

START_TEST(test_ordering_conflict_and_order_kept)
{
    cspmd_axis_t ax[2] = {DP, TP};
    cspmd_ltype_t lt[2] = {LV, LV};
    cspmd_spec_t s1, s2;
    memset(&s1, 0, sizeof s1);
    memset(&s2, 0, sizeof s2);
    s1.ndim = s2.ndim = 2;
    s1.nentry[0] = s2.nentry[0] = 2;
    s1.entry[0][0] = DP;
    s1.entry[0][1] = TP;
    s2.entry[0][0] = TP;
    s2.entry[0][1] = DP;
    cspmd_type_t a = 0, b = 0, out = 0;
    ck_assert_int_eq(cspmd_type_make(ax, lt, 2, &s1, &a), CSPMD_OK);
    ck_assert_int_eq(cspmd_type_make(ax, lt, 2, &s2, &b), CSPMD_OK);
    ck_assert_int_eq(infer2("aten::add", "Tensor", gt(a, 4, 8), gt(b, 4, 8), ty(LV, LV), &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "PartitionSpec device ordering conflict: dp before tp vs tp before dp");
    ck_assert_int_eq(infer2("aten::add", "Tensor", gt(a, 4, 8), gt(a, 4, 8), ty(LV, LV), &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, a); /* (dp, tp) kept in that order */
}
END_TEST

START_TEST(test_collective_spec)
{
    cspmd_ctype_t s0 = {LV, 0}, s1 = {LV, 1}, r = {LR, -1}, p = {LP, -1};
    cspmd_type_t out = 0;
    ck_assert_int_eq(cspmd_global_coll("all_gather", TP, s0, r, gty(LR, LV, 2, 0, -1),
                                       ty(LR, LR), 2, &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, ty(LR, LR));
    ck_assert_int_eq(cspmd_global_coll("all_gather", TP, s1, r, gty(LR, LV, 2, 0, -1),
                                       ty(LR, LR), 2, &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "all_gather: expected input shard S(1) on axis tp, got S(0)");
    ck_assert_int_eq(cspmd_global_coll("reduce_scatter", TP, p, s1, gty(LR, LP, 2, -1, -1),
                                       ty(LR, LV), 2, &out),
                     CSPMD_OK);
    ck_assert_int_eq(tp_dim_of(out), 1);
    /* (dp, tp) on dim 0: only tp, the innermost, may move */
    cspmd_type_t both = gty(LV, LV, 2, 0, 0);
    ck_assert_int_eq(cspmd_global_coll("all_gather", DP, s0, r, both, ty(LR, LV), 2, &out),
                     CSPMD_ERR_REDISTRIBUTE);
    ck_assert_int_eq(cspmd_global_coll("all_gather", TP, s0, r, both, ty(LV, LR), 2, &out),
                     CSPMD_OK);
    cspmd_checker_set_local(1); /* local mode: the local type as is */
    ck_assert_int_eq(cspmd_global_coll("all_gather", DP, s0, r, both, ty(LR, LV), 2, &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, ty(LR, LV));
}
END_TEST

START_TEST(test_out_partial_axes_checked_against_propagation)
{
    cspmd_type_t out = 0;
    const cspmd_gtensor_t a = gt(gty(LR, LV, 2, 1, -1), 4, 8), b = gt(gty(LR, LV, 2, 0, -1), 8, 6);
    /* declared and derived: accepted, and the region ends cleanly */
    ck_assert_int_eq(cspmd_partial_decl_push(&TP, 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_partial_decl_depth(), 1);
    ck_assert_int_eq(infer2("aten::mm", "", a, b, ty(LR, LV), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LR, LP));
    ck_assert_int_eq(cspmd_partial_decl_pop(), CSPMD_OK);
    ck_assert_int_eq(cspmd_partial_decl_depth(), 0);
    /* derived on an undeclared axis: the op is refused */
    ck_assert_int_eq(cspmd_partial_decl_push(&DP, 1), CSPMD_OK);
    ck_assert_int_eq(infer2("aten::mm", "", a, b, ty(LR, LV), &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "aten::mm makes its result Partial on axis tp, which out_partial_axes does "
                     "not declare (declared: dp): add tp to out_partial_axes, or reduce before "
                     "the region");
    /* ... and dp, declared, was never derived: the region's end says so */
    ck_assert_int_eq(cspmd_partial_decl_pop(), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "out_partial_axes declares axis dp, but no "
                                                     "op in the region made its result Partial"));
    ck_assert_int_eq(cspmd_partial_decl_depth(), 0);
    /* nested: the innermost region governs */
    cspmd_axis_t both[2] = {DP, TP};
    ck_assert_int_eq(cspmd_partial_decl_push(both, 2), CSPMD_OK);
    ck_assert_int_eq(cspmd_partial_decl_push(&TP, 1), CSPMD_OK);
    ck_assert_int_eq(infer2("aten::mm", "", a, b, ty(LR, LV), &out), CSPMD_OK);
    ck_assert_int_eq(cspmd_partial_decl_pop(), CSPMD_OK);
    ck_assert_int_eq(cspmd_partial_decl_pop(), CSPMD_ERR_SPMD_TYPE); /* tp counts, dp not */
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "declares axis dp,"));
    /* bad declarations change nothing */
    ck_assert_int_eq(cspmd_partial_decl_push(both, 0), CSPMD_ERR_VALUE);
    cspmd_axis_t twice[2] = {TP, TP};
    ck_assert_int_eq(cspmd_partial_decl_push(twice, 2), CSPMD_ERR_VALUE);
    ck_assert_int_eq(cspmd_mesh_set_local_axes(&DP, 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_partial_decl_push(&DP, 1), CSPMD_ERR_VALUE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "axis dp is a local axis"));
    cspmd_checker_set_local(1);
    ck_assert_int_eq(cspmd_partial_decl_push(&TP, 1), CSPMD_ERR_VALUE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "needs global mode"));
    ck_assert_int_eq(cspmd_partial_decl_depth(), 0);
    ck_assert_int_eq(cspmd_partial_decl_pop(), CSPMD_ERR_MISUSE);
}
END_TEST

/* Regions end by id, in any order: the outer one ending first leaves the
 * inner one open and governing. */
START_TEST(test_out_partial_axes_end_out_of_order)
{
    cspmd_type_t out = 0;
    const cspmd_gtensor_t a = gt(gty(LR, LV, 2, 1, -1), 4, 8), b = gt(gty(LR, LV, 2, 0, -1), 8, 6);
    int64_t outer = 0, inner = 0;
    ck_assert_int_eq(cspmd_partial_decl_open(&DP, 1, &outer), CSPMD_OK);
    ck_assert_int_eq(cspmd_partial_decl_open(&TP, 1, &inner), CSPMD_OK);
    ck_assert_int_ne(outer, inner);
    /* the outer (dp) region ends first: dp was never derived */
    ck_assert_int_eq(cspmd_partial_decl_end(outer), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "declares axis dp,"));
    ck_assert_int_eq(cspmd_partial_decl_depth(), 1);
    /* the tp region still governs: P on tp is declared */
    ck_assert_int_eq(infer2("aten::mm", "", a, b, ty(LR, LV), &out), CSPMD_OK);
    ck_assert_int_eq(cspmd_partial_decl_end(outer), CSPMD_ERR_MISUSE); /* ended already */
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "is not open on this thread"));
    ck_assert_int_eq(cspmd_partial_decl_end(inner), CSPMD_OK);
    ck_assert_int_eq(cspmd_partial_decl_depth(), 0);
    ck_assert_int_eq(cspmd_partial_decl_open(&TP, 1, NULL), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_partial_decl_depth(), 0);
}
END_TEST

/* view(self, size) of a 2-D tensor typed t into the sizes of size. */
static cspmd_status_t view_of(cspmd_type_t t, int64_t a, int64_t b, int n, const int64_t *size,
                              cspmd_type_t *out)
{
    cspmd_gtensor_t x = gt(t, a, b);
    cspmd_garg_t args[2];
    memset(args, 0, sizeof args);
    args[0].n = CSPMD_GARG_OTHER;
    args[1].n = n;
    for (int i = 0; i < n; i++)
        args[1].v[i] = size[i];
    cspmd_gcall_t call = {"aten::view", 1, &x, 2, args, 1};
    cspmd_type_t outs[CSPMD_MAX_RESULTS];
    cspmd_status_t st = cspmd_global_infer(cspmd_shard_rule_find("aten::view", ""), &call,
                                           ty(LR, LV), outs);
    *out = outs[0];
    return st;
}

START_TEST(test_view_split_keeps_the_shard_on_the_outer_piece)
{
    cspmd_type_t out = 0;
    /* (heads * head_dim) sharded -> (heads, head_dim): heads carries it */
    const int64_t heads[3] = {4, 3, 4};
    ck_assert_int_eq(view_of(gty(LR, LV, 2, 1, -1), 4, 12, 3, heads, &out), CSPMD_OK);
    ck_assert_int_eq(tp_dim_of(out), 1);
    /* split then merged with the next dim: the group's outermost target dim */
    const int64_t regroup[2] = {8, 6};
    ck_assert_int_eq(view_of(gty(LR, LV, 2, 0, -1), 4, 12, 2, regroup, &out), CSPMD_OK);
    ck_assert_int_eq(tp_dim_of(out), 0);
    /* leading size-1 target dims are skipped; -1 is inferred */
    const int64_t ones[4] = {1, 2, -1, 12};
    ck_assert_int_eq(view_of(gty(LR, LV, 2, 0, -1), 4, 12, 4, ones, &out), CSPMD_OK);
    ck_assert_int_eq(tp_dim_of(out), 1);
    /* a view that cuts a merged group off the sharded dim's block */
    const int64_t cut[2] = {6, 8};
    ck_assert_int_eq(view_of(gty(LR, LV, 2, 1, -1), 4, 12, 2, cut, &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "No valid sharding strategy for aten::view"));
}
END_TEST

/* The stride factor of tp's shard in t's spec (0: ordinary), its dim in *dim. */
static uint32_t tp_split_of(cspmd_type_t t, int *dim)
{
    cspmd_spec_t s;
    ck_assert_int_eq(cspmd_type_spec(t, &s), CSPMD_OK);
    for (int d = 0; d < s.ndim; d++)
        for (int i = 0; i < s.nentry[d]; i++)
            if (s.entry[d][i] == TP) {
                *dim = d;
                return s.split[d][i];
            }
    *dim = -1;
    return 0;
}

/* A 1-D tensor of 48 elements typed t. */
static cspmd_gtensor_t flat_48(cspmd_type_t t)
{
    cspmd_gtensor_t x;
    memset(&x, 0, sizeof x);
    x.type = t;
    x.ndim = 1;
    x.sizes[0] = 48;
    return x;
}

/* view(x, (4, 12)) of a 48-long x typed t: the result's type; tp's dim and
 * stride in *dim, *split. */
static cspmd_type_t view_48_back(cspmd_type_t t, int *dim, uint32_t *split)
{
    cspmd_gtensor_t x = flat_48(t);
    cspmd_garg_t args[2];
    memset(args, 0, sizeof args);
    args[0].n = CSPMD_GARG_OTHER;
    args[1].n = 2;
    args[1].v[0] = 4;
    args[1].v[1] = 12;
    cspmd_gcall_t call = {"aten::view", 1, &x, 2, args, 1};
    cspmd_type_t outs[CSPMD_MAX_RESULTS];
    ck_assert_int_eq(cspmd_global_infer(cspmd_shard_rule_find("aten::view", ""), &call,
                                        ty(LR, LV), outs),
                     CSPMD_OK);
    *split = tp_split_of(outs[0], dim);
    return outs[0];
}

START_TEST(test_view_merge_behind_makes_a_strided_shard)
{
    cspmd_type_t merged = 0, back = 0, sum = 0;
    int dim = -1;
    /* (4, 12) sharded on dim 1 merged into 48: strided by 4 on dim 0 */
    const int64_t flat[1] = {48};
    ck_assert_int_eq(view_of(gty(LR, LV, 2, 1, -1), 4, 12, 1, flat, &merged), CSPMD_OK);
    ck_assert_uint_eq(tp_split_of(merged, &dim), 4);
    ck_assert_int_eq(dim, 0);
    char buf[256];
    cspmd_type_format(merged, buf, sizeof buf);
    ck_assert_str_eq(buf, "{dp: R, tp: V} PartitionSpec(tp (strided by 4))");
    /* what knows only ordinary shards refuses it, naming it */
    cspmd_spec_t spec;
    ck_assert_int_eq(cspmd_type_spec_plain(merged, "get_partition_spec", &spec),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "get_partition_spec: the tensor"));
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "has a dim sharded in strides"));
    cspmd_type_t coll = 0;
    cspmd_ctype_t s0 = {CSPMD_LT_V, 0}, r = {CSPMD_LT_R, -1};
    ck_assert_int_eq(cspmd_global_coll("all_gather", TP, s0, r, merged, ty(LR, LR), 1, &coll),
                     CSPMD_ERR_SPMD_TYPE);
    /* split back at the chunk boundary: ordinary on dim 1 again */
    uint32_t split = 99;
    back = view_48_back(merged, &dim, &split);
    ck_assert_uint_eq(split, 0);
    ck_assert_int_eq(dim, 1);
    ck_assert_int_eq(back, gty(LR, LV, 2, 1, -1));
    /* a pointwise op keeps the stride when its operands share it ... */
    cspmd_gtensor_t two[2] = {flat_48(merged), flat_48(merged)};
    cspmd_type_t outs[CSPMD_MAX_RESULTS];
    cspmd_gcall_t add = {"aten::add", 2, two, 0, NULL, 1};
    ck_assert_int_eq(cspmd_global_infer(cspmd_shard_rule_find("aten::add", "Tensor"), &add,
                                        ty(LR, LV), outs),
                     CSPMD_OK);
    sum = outs[0];
    ck_assert_int_eq(sum, merged);
    /* ... and refuses an ordinary shard next to it */
    two[1].type = gty(LR, LV, 1, 0, -1);
    ck_assert_int_eq(cspmd_global_infer(cspmd_shard_rule_find("aten::add", "Tensor"), &add,
                                        ty(LR, LV), outs),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "sharded in different strides (4 and 1)"));
}
END_TEST

/* The global memo keys on operand type ids; a strided shard's factor is
 * part of the interned spec, so calls that differ only in it (same rule,
 * sizes, arguments) never share an entry. */
START_TEST(test_memo_tells_strides_apart)
{
    cspmd_type_t by4 = 0, by2 = 0;
    const int64_t flat[1] = {48};
    ck_assert_int_eq(view_of(gty(LR, LV, 2, 1, -1), 4, 12, 1, flat, &by4), CSPMD_OK);
    ck_assert_int_eq(view_of(gty(LR, LV, 2, 1, -1), 2, 24, 1, flat, &by2), CSPMD_OK);
    cspmd_type_t plain = gty(LR, LV, 1, 0, -1);
    int dim = -1;
    uint32_t split = 99;
    for (int round = 0; round < 2; round++) { /* the second round is answered by the memo */
        view_48_back(plain, &dim, &split);
        ck_assert_int_eq(dim, 0);
        ck_assert_uint_eq(split, 0);
        view_48_back(by4, &dim, &split);
        ck_assert_int_eq(dim, 1);
        ck_assert_uint_eq(split, 0);
        view_48_back(by2, &dim, &split);
        ck_assert_int_eq(dim, 0);
        ck_assert_uint_eq(split, 2);
    }
}
END_TEST

START_TEST(test_new_factories_are_replicated)
{
    cspmd_gtensor_t x = gt(gty(LR, LV, 2, 1, -1), 4, 12);
    cspmd_garg_t args[2];
    memset(args, 0, sizeof args);
    args[0].n = CSPMD_GARG_OTHER;
    args[1].n = 1;
    args[1].v[0] = 5;
    const char *ops[3] = {"aten::new_zeros", "aten::new_ones", "aten::new_full"};
    for (int i = 0; i < 3; i++) {
        cspmd_gcall_t call = {ops[i], 1, &x, 2, args, 1};
        cspmd_type_t outs[CSPMD_MAX_RESULTS];
        cspmd_shard_rule_t rule = cspmd_shard_rule_find(ops[i], "");
        ck_assert_str_eq(cspmd_shard_rule_name(rule), "new_factory");
        ck_assert_int_eq(cspmd_global_infer(rule, &call, ty(LR, LR), outs), CSPMD_OK);
        ck_assert_int_eq(outs[0], ty(LR, LR));
    }
}
END_TEST

/* index_add(self, dim, index, source): index_select's backward. */
START_TEST(test_index_add_keeps_a_shard_off_dim)
{
    cspmd_gtensor_t ops[3];
    ops[0] = gt(gty(LR, LV, 2, 1, -1), 4, 3); /* self: S(1) */
    memset(&ops[1], 0, sizeof ops[1]);
    ops[1].type = ty(LR, LR); /* index: R */
    ops[1].arg = 2;
    ops[1].ndim = 1;
    ops[1].sizes[0] = 2;
    ops[2] = gt(gty(LR, LV, 2, 1, -1), 2, 3); /* source: S(1) */
    ops[2].arg = 3;
    cspmd_garg_t args[5];
    memset(args, 0, sizeof args);
    args[0].n = args[2].n = args[3].n = args[4].n = CSPMD_GARG_OTHER;
    args[1].n = 1; /* dim 0 */
    cspmd_gcall_t call = {"aten::index_add_", 3, ops, 5, args, 1};
    cspmd_shard_rule_t rule = cspmd_shard_rule_find("aten::index_add_", "");
    cspmd_type_t outs[CSPMD_MAX_RESULTS];
    ck_assert_int_eq(cspmd_global_infer(rule, &call, ty(LR, LV), outs), CSPMD_OK);
    ck_assert_int_eq(tp_dim_of(outs[0]), 1);
    args[1].v[0] = 1; /* along the sharded dim */
    ck_assert_int_eq(cspmd_global_infer(rule, &call, ty(LR, LV), outs), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "it adds along the sharded dim 1"));
    args[1].v[0] = 0;
    ops[0].type = ty(LR, LR); /* self replicated, source sharded */
    ck_assert_int_eq(cspmd_global_infer(rule, &call, ty(LR, LV), outs), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "self is placed R and source S(1)"));
}
END_TEST

Suite *suite_global(void)
{
    Suite *s = suite_create("global");
    TCase *tc = tcase_create("global");
    tcase_add_checked_fixture(tc, h_global_setup, h_global_teardown);
    tcase_add_test(tc, test_mode_and_local_axes);
    tcase_add_test(tc, test_operand_check);
    tcase_add_test(tc, test_operand_check_memo_follows_the_policy);
    tcase_add_test(tc, test_mm_rows_columns_and_contraction);
    tcase_add_test(tc, test_pointwise_broadcast_and_no_rule);
    tcase_add_test(tc, test_oracle_supplies_placements_the_core_decides);
    tcase_add_test(tc, test_gradient_takes_the_leaf_spec);
    tcase_add_test(tc, test_ordering_conflict_and_order_kept);
    tcase_add_test(tc, test_backward_reads_replicated_gradient_as_shard);
    tcase_add_test(tc, test_replicated_gradient_of_sharded_leaf);
    tcase_add_test(tc, test_new_sized_follows_self);
    tcase_add_test(tc, test_collective_spec);
    tcase_add_test(tc, test_view_split_keeps_the_shard_on_the_outer_piece);
    tcase_add_test(tc, test_view_merge_behind_makes_a_strided_shard);
    tcase_add_test(tc, test_memo_tells_strides_apart);
    tcase_add_test(tc, test_new_factories_are_replicated);
    tcase_add_test(tc, test_index_add_keeps_a_shard_off_dim);
    tcase_add_test(tc, test_out_partial_axes_checked_against_propagation);
    tcase_add_test(tc, test_out_partial_axes_end_out_of_order);
    suite_add_tcase(s, tc);
    return s;
}
