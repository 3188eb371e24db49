/* Collectives: (src, dst) validity, expert gating, backward pairs
 * and the checker rule. */
#include <stdint.h>
#include <string.h>

#include "cspmd.h"
#include "ctype_helpers.h"
#include "infer_helpers.h"
#include "suites.h"

#define OK_(op, s, d, ex) ck_assert_msg(cspmd_coll_validate(op, s, d, ex) == CSPMD_OK, "%s", cspmd_last_error())
#define BAD(op, s, d, ex, msg)                                         \
    do {                                                              \
        ck_assert_int_eq(cspmd_coll_validate(op, s, d, ex), CSPMD_ERR_VALUE); \
        ck_assert_str_eq(cspmd_last_error(), msg);                    \
    } while (0)

#define LR_ "R"
#define LI_ "I"
#define LV_ "V"
#define LP_ "P"

START_TEST(test_all_reduce_validate)
{
    cspmd_coll_t op = CSPMD_COLL_ALL_REDUCE;
    OK_(op, C(LP), C(LR), 0);
    OK_(op, C(LP), C(LI), 0);
    OK_(op, C(LV), C(LR), 0); /* implicit reinterpret(V, P) */
    OK_(op, C(LV), C(LI), 0);
    BAD(op, C(LR), C(LR), 0,
        "all_reduce src must be P, got " LR_ ". all_reduce on replicated/invariant data is "
        "usually a bug. If you really want to scale by mesh size, use reinterpret(src=" LR_
        ", dst=P) first.");
    BAD(op, C(LI), C(LR), 1,
        "all_reduce src must be P, got " LI_ ". all_reduce on replicated/invariant data is "
        "usually a bug. If you really want to scale by mesh size, use reinterpret(src=" LI_
        ", dst=P) first.");
    BAD(op, S(0), C(LR), 0, "all_reduce src must be P, got S(0)");
    BAD(op, C(LP), C(LV), 0, "all_reduce dst must be R or I, got " LV_);
    BAD(op, C(LP), C(LP), 0, "all_reduce dst must be R or I, got " LP_);
    BAD(op, C(LP), S(1), 0, "all_reduce dst must be R or I, got S(1)");
}
END_TEST

START_TEST(test_all_gather_validate)
{
    cspmd_coll_t op = CSPMD_COLL_ALL_GATHER;
    OK_(op, C(LV), C(LR), 0);
    OK_(op, C(LV), C(LI), 0);
    OK_(op, S(0), C(LR), 0);
    OK_(op, S(2), C(LI), 0);
    BAD(op, C(LR), C(LR), 0, "all_gather src must be V or S(i), got " LR_);
    BAD(op, C(LP), C(LR), 0, "all_gather src must be V or S(i), got " LP_);
    BAD(op, C(LV), C(LV), 0, "all_gather dst must be R or I, got " LV_);
    BAD(op, S(0), C(LP), 0, "all_gather dst must be R or I, got " LP_);
}
END_TEST

START_TEST(test_reduce_scatter_validate)
{
    cspmd_coll_t op = CSPMD_COLL_REDUCE_SCATTER;
    OK_(op, C(LP), C(LV), 0);
    OK_(op, C(LP), S(1), 0);
    OK_(op, C(LV), C(LV), 0);
    BAD(op, C(LR), C(LV), 0,
        "reduce_scatter src must be P, got " LR_ ". reduce_scatter on replicated/invariant data "
        "is usually a bug. If you really want to scale by mesh size, use reinterpret(src=" LR_
        ", dst=P) first.");
    BAD(op, S(0), C(LV), 0, "reduce_scatter src must be P, got S(0)");
    BAD(op, C(LP), C(LR), 0, "reduce_scatter dst must be V or S(i), got " LR_);
}
END_TEST

START_TEST(test_all_to_all_validate)
{
    cspmd_coll_t op = CSPMD_COLL_ALL_TO_ALL;
    OK_(op, C(LV), C(LV), 0);
    OK_(op, S(0), S(1), 0);
    OK_(op, S(1), C(LV), 0);
    OK_(op, C(LV), S(1), 0);
    BAD(op, C(LR), C(LV), 0, "all_to_all src must be V or S(i), got " LR_);
    BAD(op, C(LV), C(LP), 0, "all_to_all dst must be V or S(i), got " LP_);
}
END_TEST

START_TEST(test_reinterpret_validate)
{
    cspmd_coll_t op = CSPMD_COLL_REINTERPRET;
    BAD(op, S(0), C(LV), 1,
        "reinterpret does not support S(i). Use V instead, or use convert for "
        "semantics-preserving conversions. Got src=S(0), dst=" LV_);
    for (int t = LR; t <= LP; t++)
        OK_(op, C((cspmd_ltype_t)t), C((cspmd_ltype_t)t), 0);
    /* gated */
    BAD(op, C(LR), C(LI), 0,
        "reinterpret(R, I) requires expert_mode=True. This is rarely what you want in the "
        "forward pass; it exists as a backward for convert(I, P). Prefer convert(R, I) which is "
        "the primary API for R<->I transitions.");
    BAD(op, C(LR), C(LP), 0,
        "reinterpret(R, P) requires expert_mode=True. This scales the semantic value by the "
        "mesh axis size, which is rarely intentional. If you want to preserve semantics, use "
        "convert(R, P) instead.");
    BAD(op, C(LI), C(LR), 0,
        "reinterpret(I, R) requires expert_mode=True. Use convert(I, R) instead, which is the "
        "primary API for I<->R transitions.");
    BAD(op, C(LR), C(LV), 0,
        "reinterpret(R, V) requires expert_mode=True. This makes N copies of the input, which "
        "is rarely what you want in the forward pass. If you want to shard a replicated value, "
        "use convert(R, V) or convert(R, S(i)) instead.");
    OK_(op, C(LR), C(LI), 1);
    OK_(op, C(LR), C(LP), 1);
    OK_(op, C(LI), C(LR), 1);
    OK_(op, C(LR), C(LV), 1);
    /* not gated */
    OK_(op, C(LV), C(LP), 0);
    OK_(op, C(LI), C(LV), 0);
    OK_(op, C(LI), C(LP), 0);
    /* unsupported */
    BAD(op, C(LP), C(LR), 1,
        "reinterpret(" LP_ ", " LR_ ") is not supported; it is semantically ill-defined. Call "
        "all_reduce(src=P, dst=R) first to materialize the sum, then do whatever conversion you "
        "need from R.");
    BAD(op, C(LV), C(LR), 1,
        "reinterpret(" LV_ ", " LR_ ") is not supported. We cannot unsafely assert that varying "
        "values on all ranks are actually the same. Ensure your source is already " LR_
        " instead.");
    BAD(op, C(LV), C(LI), 1,
        "reinterpret(" LV_ ", " LI_ ") is not supported. We cannot unsafely assert that varying "
        "values on all ranks are actually the same. Ensure your source is already " LI_
        " instead.");
}
END_TEST

START_TEST(test_convert_validate)
{
    cspmd_coll_t op = CSPMD_COLL_CONVERT;
    BAD(op, C(LR), C(LI), 0,
        "convert(R, I) requires expert_mode=True. This treats a replicate tensor as invariant, "
        "which is rarely what you want in the forward pass. It exists as a backward for "
        "convert(I, P).");
    BAD(op, C(LI), C(LP), 0,
        "convert(I, P) requires expert_mode=True. This zeros out all non-rank-0 tensors, which "
        "is rarely what you want. It exists as a backward for convert(R, I).");
    BAD(op, C(LV), C(LP), 0,
        "convert(" LV_ ", P) requires expert_mode=True. This pads with zeros to create a partial "
        "tensor, which is rarely what you want in the forward pass. It exists as a backward for "
        "convert(R, " LV_ ").");
    BAD(op, S(0), C(LP), 0,
        "convert(S(0), P) requires expert_mode=True. This pads with zeros to create a partial "
        "tensor, which is rarely what you want in the forward pass. It exists as a backward for "
        "convert(R, S(0)).");
    OK_(op, C(LR), C(LI), 1);
    OK_(op, C(LI), C(LP), 1);
    OK_(op, C(LV), C(LP), 1);
    OK_(op, S(1), C(LP), 1);
    OK_(op, C(LI), C(LR), 0);
    OK_(op, C(LR), C(LV), 0);
    OK_(op, C(LR), S(1), 0);
    OK_(op, C(LI), C(LV), 0);
    OK_(op, C(LI), S(0), 0);
    OK_(op, C(LR), C(LP), 0);
    /* same base: no-op, except a shard dim change */
    OK_(op, C(LV), S(0), 0);
    OK_(op, S(0), C(LV), 0);
    OK_(op, C(LR), C(LR), 0);
    OK_(op, C(LP), C(LP), 0);
    OK_(op, S(1), S(1), 0);
    BAD(op, S(0), S(1), 1,
        "convert(S(0), S(1)) cannot change the shard dimension without communication. Use "
        "all_to_all() instead.");
    BAD(op, C(LP), C(LR), 1,
        "convert(" LP_ ", " LR_ ") is not supported. Use all_reduce(src=P, dst=" LR_
        ") to perform the reduction and get the full sum.");
    BAD(op, C(LP), C(LI), 1,
        "convert(" LP_ ", " LI_ ") is not supported. Use all_reduce(src=P, dst=" LI_
        ") to perform the reduction and get the full sum.");
    BAD(op, C(LP), S(0), 1,
        "convert(" LP_ ", S(0)) is not supported. Use reduce_scatter(src=P, dst=S(0)) to perform "
        "the reduction and get shards of the sum.");
    BAD(op, C(LV), C(LR), 1, "convert(" LV_ ", " LR_ ") is not supported.");
    BAD(op, S(0), C(LI), 1, "convert(S(0), " LI_ ") is not supported.");
}
END_TEST

START_TEST(test_redistribute_and_i2r_validate)
{
    cspmd_ctype_t all[] = {C(LR), C(LI), C(LV), C(LP), S(0), S(1)};
    for (size_t i = 0; i < 6; i++)
        for (size_t j = 0; j < 6; j++)
            OK_(CSPMD_COLL_REDISTRIBUTE, all[i], all[j], 0);
    OK_(CSPMD_COLL_INVARIANT_TO_REPLICATE, C(LI), C(LR), 0);
    ck_assert_int_eq(cspmd_coll_validate(CSPMD_COLL_INVARIANT_TO_REPLICATE, C(LR), C(LI), 0),
                     CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_broadcast_validate)
{
    cspmd_coll_t op = CSPMD_COLL_BROADCAST;
    OK_(op, C(LV), C(LR), 0);
    OK_(op, C(LV), C(LI), 0);
    OK_(op, C(LR), C(LR), 0); /* no-ops: the value is everywhere already */
    OK_(op, C(LI), C(LI), 0);
    OK_(op, C(LP), C(LV), 1); /* the backward pairs, expert only */
    OK_(op, C(LI), C(LV), 1);
    BAD(op, C(LP), C(LV), 0,
        "broadcast src must be V, got P. A partial value is summed with all_reduce(src=P, "
        "dst=R), not broadcast.");
    BAD(op, C(LP), C(LR), 1,
        "broadcast src must be V, got P. A partial value is summed with all_reduce(src=P, "
        "dst=R), not broadcast.");
    BAD(op, C(LI), C(LV), 0, "broadcast dst must be R or I, got V");
    BAD(op, C(LV), C(LV), 1, "broadcast dst must be R or I, got V");
    BAD(op, C(LV), C(LP), 0, "broadcast dst must be R or I, got P");
    BAD(op, C(LV), S(0), 0, "broadcast dst must be R or I, got S(0)");
    BAD(op, C(LR), C(LV), 0, "broadcast dst must be R or I, got V");
    BAD(op, S(1), C(LR), 0,
        "broadcast src must be V, got S(1): a broadcast copies root's shard, not the whole "
        "tensor. Use all_gather(src=S(1), dst=R) to gather the shards.");
    BAD(op, C(LR), C(LI), 1,
        "broadcast(R, I) is not supported: an R value is the same on every rank already, and "
        "broadcast keeps R and I as they are. Use convert(src=R, dst=I) to change between R "
        "and I.");
    BAD(op, C(LI), C(LR), 0,
        "broadcast(I, R) is not supported: an I value is the same on every rank already, and "
        "broadcast keeps R and I as they are. Use convert(src=I, dst=R) to change between R "
        "and I.");
    /* the root, an index within the axis group */
    ck_assert_int_eq(cspmd_coll_root_check(0, 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_coll_root_check(3, 4), CSPMD_OK);
    ck_assert_int_eq(cspmd_coll_root_check(4, 4), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(),
                     "broadcast: root=4 is out of range for an axis group of 4 ranks (expected "
                     "0..3: root is a rank's index within the group)");
    ck_assert_int_eq(cspmd_coll_root_check(-1, 2), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(),
                     "broadcast: root=-1 is out of range for an axis group of 2 ranks (expected "
                     "0..1: root is a rank's index within the group)");
    ck_assert_int_eq(cspmd_coll_root_check(0, 0), CSPMD_ERR_MISUSE);
    /* the root rides in dim_a, untouched; no dim_b */
    int64_t a = 2, b = -1;
    ck_assert_int_eq(cspmd_coll_dims(op, C(LV), C(LR), 0, &a, &b), CSPMD_OK);
    ck_assert_int_eq(a, 2);
    ck_assert_int_eq(b, 0);
    a = -1;
    ck_assert_int_eq(cspmd_coll_dims(op, C(LV), C(LR), 0, &a, &b), CSPMD_OK);
    ck_assert_int_eq(a, -1); /* never defaulted: cspmd_coll_root_check refuses it */
    /* the reduced-precision rule: only V -> R's backward reduces */
    cspmd_dtype_info_t d = {15, 16, -1, 0, -1, 0, 1, 0}; /* bf16 input that needs a gradient */
    int odt, outdt;
    ck_assert_int_eq(cspmd_coll_dtypes(op, C(LV), C(LR), &d, &odt, &outdt), CSPMD_ERR_VALUE);
    ck_assert_int_eq(cspmd_coll_dtypes(op, C(LV), C(LI), &d, &odt, &outdt), CSPMD_OK);
    ck_assert_int_eq(odt, 15);
}
END_TEST

START_TEST(test_validate_misuse)
{
    cspmd_ctype_t bad1 = {CSPMD_LT_NONE, -1}, bad2 = {CSPMD_LT_R, 0}, bad3 = {CSPMD_LT_V, -2};
    ck_assert_int_eq(cspmd_coll_validate(CSPMD_COLL_CONVERT, bad1, C(LR), 0), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_coll_validate(CSPMD_COLL_CONVERT, bad2, C(LR), 0), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_coll_validate(CSPMD_COLL_CONVERT, C(LR), bad3, 0), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_coll_validate((cspmd_coll_t)CSPMD_COLL_COUNT, C(LR), C(LR), 0), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_coll_validate((cspmd_coll_t)-1, C(LR), C(LR), 0), CSPMD_ERR_MISUSE);
    cspmd_coll_t bop;
    cspmd_ctype_t bs, bd;
    ck_assert_int_eq(cspmd_coll_backward(CSPMD_COLL_ALL_REDUCE, C(LP), C(LR), NULL, &bs, &bd),
                     CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_coll_backward(CSPMD_COLL_ALL_REDUCE, C(LR), C(LR), &bop, &bs, &bd),
                     CSPMD_ERR_VALUE);
}
END_TEST

/* ---- backward pairs -------------------------------------------- */

static void bwd(cspmd_coll_t op, cspmd_ctype_t s, cspmd_ctype_t d, cspmd_coll_t wop,
                cspmd_ctype_t ws, cspmd_ctype_t wd)
{
    cspmd_coll_t bop = (cspmd_coll_t)CSPMD_COLL_COUNT;
    cspmd_ctype_t bs = {CSPMD_LT_NONE, -9}, bd = {CSPMD_LT_NONE, -9};
    ck_assert_msg(cspmd_coll_backward(op, s, d, &bop, &bs, &bd) == CSPMD_OK, "%s",
                  cspmd_last_error());
    ck_assert_msg(bop == wop && bs.ltype == ws.ltype && bs.shard_dim == ws.shard_dim &&
                      bd.ltype == wd.ltype && bd.shard_dim == wd.shard_dim,
                  "op %d (%d,%d)->(%d,%d): got op %d (%d,%d)->(%d,%d)", (int)op, s.ltype,
                  s.shard_dim, d.ltype, d.shard_dim, (int)bop, bs.ltype, bs.shard_dim, bd.ltype,
                  bd.shard_dim);
}

START_TEST(test_backward_pairs)
{
    const cspmd_coll_t RE = CSPMD_COLL_REINTERPRET, CO = CSPMD_COLL_CONVERT,
                       AR = CSPMD_COLL_ALL_REDUCE, AG = CSPMD_COLL_ALL_GATHER,
                       RS = CSPMD_COLL_REDUCE_SCATTER, AA = CSPMD_COLL_ALL_TO_ALL;
    /* the backward table, row by row */
    bwd(RE, C(LR), C(LV), RE, C(LV), C(LP));
    bwd(RE, C(LV), C(LP), RE, C(LR), C(LV));
    bwd(RE, C(LR), C(LP), RE, C(LR), C(LP));
    bwd(RE, C(LR), C(LI), CO, C(LI), C(LP));
    bwd(RE, C(LI), C(LR), AR, C(LP), C(LI));
    bwd(RE, C(LI), C(LV), RE, C(LV), C(LP)); /* composition: first reverse step */
    bwd(RE, C(LI), C(LP), RE, C(LR), C(LP));
    bwd(CO, C(LI), C(LR), AR, C(LP), C(LI));
    bwd(CO, C(LR), C(LI), CO, C(LI), C(LP));
    bwd(CO, C(LR), C(LV), CO, C(LV), C(LP));
    bwd(CO, C(LR), S(2), CO, S(2), C(LP));
    bwd(CO, C(LI), C(LV), AG, C(LV), C(LI));
    bwd(CO, C(LI), S(1), AG, S(1), C(LI));
    bwd(CO, C(LR), C(LP), CO, C(LR), C(LP));
    bwd(CO, C(LI), C(LP), CO, C(LR), C(LI));
    bwd(CO, C(LV), C(LP), CO, C(LR), C(LV));
    bwd(CO, S(1), C(LP), CO, C(LR), S(1));
    bwd(AR, C(LP), C(LR), AR, C(LP), C(LR));
    bwd(AR, C(LV), C(LR), AR, C(LP), C(LR));
    bwd(AR, C(LP), C(LI), CO, C(LI), C(LR));
    bwd(AG, C(LV), C(LR), RS, C(LP), C(LV));
    bwd(AG, S(1), C(LR), RS, C(LP), S(1));
    bwd(AG, C(LV), C(LI), CO, C(LI), C(LV));
    bwd(AG, S(0), C(LI), CO, C(LI), S(0));
    bwd(RS, C(LP), C(LV), AG, C(LV), C(LR));
    bwd(RS, C(LP), S(2), AG, S(2), C(LR));
    bwd(AA, C(LV), C(LV), AA, C(LV), C(LV));
    bwd(AA, S(0), S(1), AA, S(1), S(0)); /* split/concat swapped */
    bwd(AA, S(2), C(LV), AA, S(2), S(0));
    bwd(AA, C(LV), S(1), AA, S(0), S(1));
    bwd(CSPMD_COLL_INVARIANT_TO_REPLICATE, C(LI), C(LR), AR, C(LP), C(LI));
    /* broadcast: the gradient comes back to root, and that pair's is a
     * broadcast again; R -> R and I -> I pass it through */
    const cspmd_coll_t BC = CSPMD_COLL_BROADCAST;
    bwd(BC, C(LV), C(LR), BC, C(LP), C(LV));
    bwd(BC, C(LV), C(LI), BC, C(LI), C(LV));
    bwd(BC, C(LP), C(LV), BC, C(LV), C(LR));
    bwd(BC, C(LI), C(LV), BC, C(LV), C(LI));
    bwd(BC, C(LR), C(LR), RE, C(LP), C(LP));
    bwd(BC, C(LI), C(LI), RE, C(LI), C(LI));
    /* redistribute: the backward of the routed-to op */
    bwd(CSPMD_COLL_REDISTRIBUTE, S(0), S(1), AA, S(1), S(0));
    bwd(CSPMD_COLL_REDISTRIBUTE, S(0), C(LR), RS, C(LP), S(0));
    bwd(CSPMD_COLL_REDISTRIBUTE, C(LP), C(LI), CO, C(LI), C(LR));
    bwd(CSPMD_COLL_REDISTRIBUTE, C(LP), S(1), AG, S(1), C(LR));
    bwd(CSPMD_COLL_REDISTRIBUTE, C(LR), C(LI), CO, C(LI), C(LP));
    bwd(CSPMD_COLL_REDISTRIBUTE, S(1), C(LP), CO, C(LR), S(1));
    bwd(CSPMD_COLL_REDISTRIBUTE, C(LR), C(LR), CSPMD_COLL_REDISTRIBUTE, C(LR), C(LR));
    /* no-op converts pass the gradient through */
    bwd(CO, C(LV), S(0), CO, S(0), C(LV));
    /* backwards are computed with expert mode (gated forwards still have one) */
    bwd(CO, C(LR), C(LI), CO, C(LI), C(LP));
}
END_TEST

/* ---- the checker rule ------------------------------------------ */

START_TEST(test_coll_infer_basic)
{
    cspmd_type_t out = 0;
    ck_assert_int_eq(cspmd_coll_infer("all_reduce", TP, LP, LR, ty(LV, LP), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LV, LR));
    /* V accepted for P */
    ck_assert_int_eq(cspmd_coll_infer("all_reduce", TP, LP, LI, ty(LR, LV), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LR, LI));
    ck_assert_int_eq(cspmd_coll_infer("all_gather", TP, LV, LR, tt(LV), &out), CSPMD_OK);
    ck_assert_uint_eq(out, tt(LR));
    ck_assert_int_eq(cspmd_coll_infer("all_reduce", TP, LP, LR, tt(LR), &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "all_reduce: expected input type " LP_
                                         " on axis tp, got " LR_);
    ck_assert_int_eq(cspmd_coll_infer("all_gather", TP, LV, LR, tt(LP), &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "all_gather: expected input type " LV_
                                         " on axis tp, got " LP_);
}
END_TEST

START_TEST(test_coll_infer_unresolved)
{
    cspmd_type_t out = 0;
    ck_assert_int_eq(cspmd_coll_infer("all_reduce", TP, LP, LR, ty(LR, NONE), &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "all_reduce: tensor has no type for axis tp. Use assert_type() to annotate "
                     "the tensor on this axis before calling collectives.");
    ck_assert_int_eq(cspmd_coll_infer("all_reduce", TP, LP, LR, CSPMD_TYPE_UNTYPED, &out),
                     CSPMD_ERR_SPMD_TYPE);
    /* never annotated: the same hint as an op's missing-axis error */
    ck_assert_str_eq(cspmd_last_error(),
                     "all_reduce: tensor has no type for axis tp. Use assert_type() to annotate "
                     "the tensor on this axis before calling collectives. It has no type at "
                     "all: annotate it with assert_type().");
    /* permissive: the type passes through, the axis is not added */
    cspmd_checker_set(1, 0);
    ck_assert_int_eq(cspmd_coll_infer("all_reduce", TP, LP, LR, ty(LR, NONE), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LR, NONE));
    ck_assert_int_eq(cspmd_coll_infer("all_reduce", TP, LP, LR, CSPMD_TYPE_UNTYPED, &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, CSPMD_TYPE_UNTYPED);
    /* trivial axis: skipped even in strict mode */
    cspmd_checker_set(1, 1);
    ck_assert_int_eq(cspmd_coll_infer("all_reduce", CSPMD_AXIS_TRIVIAL, LP, LR, tt(LR), &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, tt(LR));
}
END_TEST

START_TEST(test_coll_infer_flattened)
{
    /* dp = 2:4, tp = 4:1; dp_tp = 8:1 is their flattening */
    cspmd_axis_t dptp = h_axis(8, 1);
    cspmd_axis_t half = h_axis(2, 1); /* a sub-axis of tp */
    cspmd_type_t out = 0;
    ck_assert_int_eq(cspmd_coll_infer("all_reduce", dptp, LP, LR, ty(LP, LP), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LR, LR));
    ck_assert_int_eq(cspmd_coll_infer("all_reduce", dptp, LP, LR, ty(LP, LV), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LR, LR));
    /* checked in the input's key order (display names: dp before tp) */
    ck_assert_int_eq(cspmd_coll_infer("all_reduce", dptp, LP, LR, ty(LR, LR), &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "all_reduce: expected input type " LP_
                                         " on axis dp, got " LR_);
    /* only part of the flattened axis is typed: unresolved */
    ck_assert_int_eq(cspmd_coll_infer("all_reduce", dptp, LP, LR, ty(LP, NONE), &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_msg(strstr(cspmd_last_error(), "tensor has no type for axis") != NULL, "%s",
                  cspmd_last_error());
    cspmd_checker_set(1, 0);
    ck_assert_int_eq(cspmd_coll_infer("all_reduce", dptp, LP, LR, ty(LP, NONE), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LP, NONE));
    /* a sub-axis of a typed axis does not resolve */
    ck_assert_int_eq(cspmd_coll_infer("all_reduce", half, LP, LR, ty(LP, LP), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LP, LP));
}
END_TEST

START_TEST(test_coll_infer_other_mesh)
{
    /* typed on the 8 ranks as one axis: retagged onto the current mesh
     * (dp, tp) first, then reduced over tp */
    cspmd_axis_t world = h_axis(8, 1);
    cspmd_ltype_t lp = LP;
    cspmd_type_t in = 0, out = 0;
    ck_assert_int_eq(cspmd_type_make(&world, &lp, 1, NULL, &in), CSPMD_OK);
    mesh_both();
    ck_assert_int_eq(cspmd_coll_infer("all_reduce", TP, LP, LR, in, &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LP, LR));
    ck_assert_int_eq(cspmd_coll_infer("all_gather", DP, LV, LR, in, &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "all_gather: expected input type " LV_
                                         " on axis dp, got " LP_);
    /* without a current mesh there is nothing to retag onto */
    ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_OK);
    ck_assert_int_eq(cspmd_coll_infer("all_reduce", TP, LP, LR, in, &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_msg(strstr(cspmd_last_error(), "tensor has no type for axis tp") != NULL, "%s",
                  cspmd_last_error());
}
END_TEST

START_TEST(test_coll_infer_misuse)
{
    cspmd_type_t out = 0;
    ck_assert_int_eq(cspmd_coll_infer(NULL, TP, LP, LR, tt(LP), &out), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_coll_infer("f", TP, LP, LR, tt(LP), NULL), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_coll_infer("f", TP, NONE, LR, tt(LP), &out), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_coll_infer("f", TP, LP, (cspmd_ltype_t)7, tt(LP), &out),
                     CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_coll_infer("f", 888888, LP, LR, tt(LP), &out), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_coll_infer("f", TP, LP, LR, 888888, &out), CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_coll_src_as)
{
    cspmd_ltype_t as = CSPMD_LT_NONE;
    /* The reductions read src=V as P; nothing else is renamed. */
    ck_assert_int_eq(cspmd_coll_src_as(CSPMD_COLL_ALL_REDUCE, CSPMD_LT_V, &as), CSPMD_OK);
    ck_assert_int_eq(as, CSPMD_LT_P);
    ck_assert_int_eq(cspmd_coll_src_as(CSPMD_COLL_REDUCE_SCATTER, CSPMD_LT_V, &as), CSPMD_OK);
    ck_assert_int_eq(as, CSPMD_LT_P);
    ck_assert_int_eq(cspmd_coll_src_as(CSPMD_COLL_ALL_REDUCE, CSPMD_LT_R, &as), CSPMD_OK);
    ck_assert_int_eq(as, CSPMD_LT_R); /* refused later, by cspmd_coll_validate */
    ck_assert_int_eq(cspmd_coll_src_as(CSPMD_COLL_ALL_GATHER, CSPMD_LT_V, &as), CSPMD_OK);
    ck_assert_int_eq(as, CSPMD_LT_V);
    ck_assert_int_eq(cspmd_coll_src_as(CSPMD_COLL_REINTERPRET, CSPMD_LT_V, &as), CSPMD_OK);
    ck_assert_int_eq(as, CSPMD_LT_V);
    ck_assert_int_eq(cspmd_coll_src_as(CSPMD_COLL_BROADCAST, CSPMD_LT_V, &as), CSPMD_OK);
    ck_assert_int_eq(as, CSPMD_LT_V);
    ck_assert_int_eq(cspmd_coll_src_as((cspmd_coll_t)CSPMD_COLL_COUNT, CSPMD_LT_V, &as), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_coll_src_as(CSPMD_COLL_ALL_REDUCE, CSPMD_LT_NONE, &as),
                     CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_coll_src_as(CSPMD_COLL_ALL_REDUCE, CSPMD_LT_V, NULL), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(as, CSPMD_LT_V); /* untouched on error */
}
END_TEST

/* cspmd_coll_check_shard_range with src and dst as written: W(lt) a plain
 * type, WS(d) the shard S(d). */
#define W(lt) (lt), 0, 0
#define WS(d) LV, 1, (d)
#define RANGE_OK(op, s, d, n) \
    ck_assert_msg(cspmd_coll_check_shard_range(op, s, d, n, 0) == CSPMD_OK, "%s", cspmd_last_error())
#define RANGE_BAD(op, s, d, n, status, msg)                                \
    do {                                                                  \
        ck_assert_int_eq(cspmd_coll_check_shard_range(op, s, d, n, 0), status); \
        ck_assert_str_eq(cspmd_last_error(), msg);                        \
    } while (0)

START_TEST(test_shard_range_in_range)
{
    /* Every shard within -ndim..ndim-1: nothing to report, whatever the pair. */
    RANGE_OK(CSPMD_COLL_CONVERT, WS(-2), WS(1), 2);
    RANGE_OK(CSPMD_COLL_ALL_REDUCE, WS(0), W(LR), 1); /* the pair is the collective's to check */
    RANGE_OK(CSPMD_COLL_ALL_TO_ALL, W(LV), W(LV), 0);
}
END_TEST

START_TEST(test_shard_range_order)
{
    const cspmd_status_t T = CSPMD_ERR_SPMD_TYPE, VAL = CSPMD_ERR_VALUE;
    /* all_reduce takes no shard: the pair's error, the shard as written. */
    RANGE_BAD(CSPMD_COLL_ALL_REDUCE, W(LP), WS(-7), 2, VAL,
              "all_reduce dst must be R or I, got S(-7)");
    RANGE_BAD(CSPMD_COLL_ALL_REDUCE, WS(5), W(LR), 2, VAL, "all_reduce src must be P, got S(5)");
    /* all_gather resolves src first, dst after the pair. */
    RANGE_BAD(CSPMD_COLL_ALL_GATHER, WS(2), W(LR), 2, T,
              "all_gather: src=S(2) is out of range for a tensor with 2 dims");
    RANGE_BAD(CSPMD_COLL_ALL_GATHER, WS(2), WS(9), 2, T,
              "all_gather: src=S(2) is out of range for a tensor with 2 dims");
    RANGE_BAD(CSPMD_COLL_ALL_GATHER, WS(0), WS(-9), 2, VAL,
              "all_gather dst must be R or I, got S(-9)");
    /* reduce_scatter resolves dst first, src after the pair. */
    RANGE_BAD(CSPMD_COLL_REDUCE_SCATTER, WS(9), WS(9), 2, T,
              "reduce_scatter: dst=S(9) is out of range for a tensor with 2 dims");
    RANGE_BAD(CSPMD_COLL_REDUCE_SCATTER, WS(9), W(LV), 2, VAL,
              "reduce_scatter src must be P, got S(9)");
    RANGE_BAD(CSPMD_COLL_REDUCE_SCATTER, W(LP), WS(-3), 2, T,
              "reduce_scatter: dst=S(-3) is out of range for a tensor with 2 dims");
    /* reinterpret refuses every shard before resolving any. */
    RANGE_BAD(CSPMD_COLL_REINTERPRET, WS(4), W(LP), 2, VAL,
              "reinterpret does not support S(i). Use V instead, or use convert for "
              "semantics-preserving conversions. Got src=S(4), dst=P");
    /* all_to_all, convert and redistribute resolve both first, src first. */
    RANGE_BAD(CSPMD_COLL_ALL_TO_ALL, WS(3), WS(-4), 3, T,
              "all_to_all: src=S(3) is out of range for a tensor with 3 dims");
    RANGE_BAD(CSPMD_COLL_ALL_TO_ALL, WS(0), WS(-4), 3, T,
              "all_to_all: dst=S(-4) is out of range for a tensor with 3 dims");
    RANGE_BAD(CSPMD_COLL_CONVERT, W(LP), WS(2), 2, T,
              "convert: dst=S(2) is out of range for a tensor with 2 dims");
    RANGE_BAD(CSPMD_COLL_REDISTRIBUTE, WS(0), WS(0), 0, T,
              "redistribute: src=S(0) is out of range for a tensor with 0 dims");
    /* broadcast (cspmd's own) resolves both first, src first, as these. */
    RANGE_BAD(CSPMD_COLL_BROADCAST, WS(5), WS(-9), 2, T,
              "broadcast: src=S(5) is out of range for a tensor with 2 dims");
    RANGE_BAD(CSPMD_COLL_BROADCAST, W(LV), WS(2), 2, T,
              "broadcast: dst=S(2) is out of range for a tensor with 2 dims");
    RANGE_OK(CSPMD_COLL_BROADCAST, WS(1), W(LR), 2); /* the pair is the collective's to check */
    /* The expert gate is the pair's: checked where the pair comes first. */
    RANGE_BAD(CSPMD_COLL_ALL_GATHER, WS(-1), WS(1), 1, VAL,
              "all_gather dst must be R or I, got S(1)");
}
END_TEST

START_TEST(test_shard_range_misuse)
{
    const cspmd_status_t M = CSPMD_ERR_MISUSE;
    ck_assert_int_eq(cspmd_coll_check_shard_range(CSPMD_COLL_CONVERT, LR, 1, 0, W(LV), 2, 0), M);
    ck_assert_int_eq(cspmd_coll_check_shard_range(CSPMD_COLL_CONVERT, W(CSPMD_LT_NONE), WS(0), 2,
                                                  0),
                     M);
    ck_assert_int_eq(cspmd_coll_check_shard_range(CSPMD_COLL_CONVERT, W(LR), WS(0), -1, 0), M);
    ck_assert_int_eq(cspmd_coll_check_shard_range(CSPMD_COLL_CONVERT, W(LR), WS(0),
                                                  (int64_t)INT32_MAX + 1, 0),
                     M);
    ck_assert_int_eq(cspmd_coll_check_shard_range((cspmd_coll_t)CSPMD_COLL_COUNT, W(LR), WS(0), 2,
                                                  0),
                     M);
}
END_TEST

Suite *suite_coll(void)
{
    Suite *s = suite_create("coll");
    TCase *tc = tcase_create("coll");
    tcase_add_checked_fixture(tc, h_setup, h_teardown);
    tcase_add_test(tc, test_all_reduce_validate);
    tcase_add_test(tc, test_all_gather_validate);
    tcase_add_test(tc, test_reduce_scatter_validate);
    tcase_add_test(tc, test_all_to_all_validate);
    tcase_add_test(tc, test_reinterpret_validate);
    tcase_add_test(tc, test_convert_validate);
    tcase_add_test(tc, test_redistribute_and_i2r_validate);
    tcase_add_test(tc, test_broadcast_validate);
    tcase_add_test(tc, test_validate_misuse);
    tcase_add_test(tc, test_backward_pairs);
    tcase_add_test(tc, test_coll_infer_basic);
    tcase_add_test(tc, test_coll_infer_unresolved);
    tcase_add_test(tc, test_coll_infer_flattened);
    tcase_add_test(tc, test_coll_infer_other_mesh);
    tcase_add_test(tc, test_coll_infer_misuse);
    tcase_add_test(tc, test_coll_src_as);
    tcase_add_test(tc, test_shard_range_in_range);
    tcase_add_test(tc, test_shard_range_order);
    tcase_add_test(tc, test_shard_range_misuse);
    suite_add_tcase(s, tc);
    return s;
}
