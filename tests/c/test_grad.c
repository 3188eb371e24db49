/* Backward rules (csrc/core/gradient_rules.c) and the collectives' routing, dims and
 * dtype rules (csrc/core/collective_rules.c). */
#include <string.h>

#include "cspmd.h"
#include "ctype_helpers.h"
#include "infer_helpers.h"
#include "suites.h"

START_TEST(test_loss_check)
{
    ck_assert_int_eq(cspmd_loss_check(ty(LP, LI)), CSPMD_OK);
    ck_assert_int_eq(cspmd_loss_check(CSPMD_TYPE_EMPTY), CSPMD_OK);
    ck_assert_int_eq(cspmd_loss_check(ty(LP, LR)), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(),
                                 "backward() on a Replicate loss on axis tp would produce "
                                 "incorrect gradients."));
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "The loss is Replicate on axis tp -- this "
                                                     "usually means an upstream all_reduce"));
    ck_assert_int_eq(cspmd_loss_check(ty(LV, LI)), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "reinterpret(loss, dp, src=V, dst=P)"));
    ck_assert_int_eq(cspmd_loss_check(CSPMD_TYPE_UNTYPED), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "no SPMD type annotation"));
    cspmd_checker_set(1, 0);
    ck_assert_int_eq(cspmd_loss_check(CSPMD_TYPE_UNTYPED), CSPMD_OK);
}
END_TEST

START_TEST(test_grad_seed)
{
    cspmd_type_t seed = 0;
    /* Untyped gradient: the dual of the output, per axis. */
    ck_assert_int_eq(cspmd_grad_seed(ty(LR, LV), CSPMD_TYPE_UNTYPED, 0, "y", "g", &seed), CSPMD_OK);
    ck_assert_uint_eq(seed, ty(LP, LV));
    ck_assert_int_eq(cspmd_grad_seed(ty(LP, LI), CSPMD_TYPE_UNTYPED, 0, "y", "g", &seed), CSPMD_OK);
    ck_assert_uint_eq(seed, ty(LR, LI));
    /* Untyped output: the gradient as given. */
    ck_assert_int_eq(cspmd_grad_seed(CSPMD_TYPE_UNTYPED, ty(LV, LV), 0, "y", "g", &seed), CSPMD_OK);
    ck_assert_uint_eq(seed, ty(LV, LV));
    /* Typed gradient: the dual passes; V where P is due becomes P. */
    ck_assert_int_eq(cspmd_grad_seed(ty(LV, LI), ty(LV, LI), 0, "y", "g", &seed), CSPMD_OK);
    ck_assert_uint_eq(seed, ty(LV, LI));
    ck_assert_int_eq(cspmd_grad_seed(ty(LR, LR), ty(LV, LP), 0, "y", "g", &seed), CSPMD_OK);
    ck_assert_uint_eq(seed, ty(LP, LP));
    /* Anything else names both tensors and shows both types; seed untouched. */
    seed = 7;
    ck_assert_int_eq(cspmd_grad_seed(ty(LV, LR), ty(LV, LR), 0, "tensors[0]", "grad_tensors[0]",
                                     &seed),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_uint_eq(seed, 7);
    const char *m = cspmd_last_error();
    ck_assert_ptr_nonnull(strstr(m, "Explicit gradient type mismatch on axis tp: tensors[0] is "
                                    "R, so its gradient grad_tensors[0] must be P (or V), but "
                                    "it is R."));
    ck_assert_ptr_nonnull(strstr(m, "output type:   {dp: V, tp: R}"));
    ck_assert_ptr_nonnull(strstr(m, "gradient type: {dp: V, tp: R}"));
    ck_assert_int_eq(cspmd_grad_seed(ty(LV, LI), ty(LP, LI), 0, "y", "g", &seed),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "still a pending sum"));
    /* The user's data (torch.ones inside the region: R) seeds as untyped,
     * whatever type its making gave it; the same type computed is refused. */
    ck_assert_int_eq(cspmd_grad_seed(ty(LV, LR), ty(LR, LR), 1, "y", "g", &seed), CSPMD_OK);
    ck_assert_uint_eq(seed, ty(LV, LP));
    ck_assert_int_eq(cspmd_grad_seed(ty(LV, LR), ty(LR, LR), 0, "y", "g", &seed),
                     CSPMD_ERR_SPMD_TYPE);
    /* A missing axis: strict error, permissive filled with the dual. */
    ck_assert_int_eq(cspmd_grad_seed(ty(LV, LR), ty(LV, NONE), 0, "y", "g", &seed),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "but it is untyped."));
    /* Global mode completes it per axis, as it does an untyped one whole. */
    cspmd_checker_set_local(0);
    ck_assert_int_eq(cspmd_grad_seed(ty(LV, LR), ty(LV, NONE), 0, "y", "g", &seed), CSPMD_OK);
    ck_assert_uint_eq(seed, ty(LV, LP));
    cspmd_checker_set_local(1);
    seed = 0;
    cspmd_checker_set(1, 0);
    ck_assert_int_eq(cspmd_grad_seed(ty(LV, LR), ty(LV, NONE), 0, "y", "g", &seed), CSPMD_OK);
    ck_assert_uint_eq(seed, ty(LV, LP));
    ck_assert_int_eq(cspmd_grad_seed(ty(LV, LR), CSPMD_TYPE_UNTYPED, 0, "y", "g", NULL),
                     CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_grad_seed(999999, CSPMD_TYPE_UNTYPED, 0, "y", "g", &seed),
                     CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_grad_accum_check)
{
    /* Pending or per-rank pieces accumulate into an R tensor's .grad. */
    ck_assert_int_eq(cspmd_grad_accum_check(ty(LR, LV), ty(LP, LV), 0, "w"), CSPMD_OK);
    ck_assert_int_eq(cspmd_grad_accum_check(ty(LR, LI), ty(LV, LI), 0, "w"), CSPMD_OK);
    ck_assert_int_eq(cspmd_grad_accum_check(ty(LP, LI), ty(LR, LI), 0, "w"), CSPMD_OK);
    /* Untyped buffers and zeros pass. */
    ck_assert_int_eq(cspmd_grad_accum_check(ty(LR, LI), CSPMD_TYPE_UNTYPED, 0, "w"), CSPMD_OK);
    ck_assert_int_eq(cspmd_grad_accum_check(ty(LR, LI), ty(LR, LI), 1, "w"), CSPMD_OK);
    /* A reduced .grad where a pending one is due. */
    ck_assert_int_eq(cspmd_grad_accum_check(ty(LR, LI), ty(LR, LI), 0, "parameter f32[4]"),
                     CSPMD_ERR_SPMD_TYPE);
    const char *m = cspmd_last_error();
    ck_assert_ptr_nonnull(strstr(m, "Gradient accumulation type mismatch for parameter f32[4] "
                                    "on axis dp: the tensor is R, so its .grad must be P (or "
                                    "V), but the .grad this backward accumulates into is R."));
    ck_assert_ptr_nonnull(strstr(m, "already reduced"));
    /* A pending .grad where a reduced one is due. */
    ck_assert_int_eq(cspmd_grad_accum_check(ty(LP, LI), ty(LP, LI), 0, "w"), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "never reduced"));
    ck_assert_int_eq(cspmd_grad_accum_check(999999, ty(LP, LI), 0, "w"), CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_grad_duality)
{
    cspmd_type_t out = 0;
    /* Exact duals pass unchanged. */
    ck_assert_int_eq(cspmd_grad_check(ty(LR, LV), ty(LP, LV), "w", &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LP, LV));
    ck_assert_int_eq(cspmd_grad_check(ty(LI, LP), ty(LI, LR), "w", &out), CSPMD_OK);
    /* R and I stand for each other (both reduced); relabelled to the dual. */
    ck_assert_int_eq(cspmd_grad_check(ty(LI, LP), ty(LR, LI), "w", &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LI, LR));
    ck_assert_int_eq(cspmd_grad_accum_check(ty(LI, LP), ty(LR, LI), 0, "w"), CSPMD_OK);
    /* V where P is due is accepted and becomes P. */
    ck_assert_int_eq(cspmd_grad_check(ty(LR, LR), ty(LV, LP), "w", &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LP, LP));
    /* Already reduced where a pending sum is due. */
    ck_assert_int_eq(cspmd_grad_check(ty(LR, LR), ty(LP, LR), "w", &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "Gradient type mismatch for w on axis tp: "
                                                     "the tensor is R, so its gradient must be "
                                                     "P (or V), but the gradient is R."));
    ck_assert_int_eq(cspmd_grad_check(ty(LR, LR), ty(LP, LI), "w", &out), CSPMD_ERR_SPMD_TYPE);
    /* P where R, I or V is due. */
    ck_assert_int_eq(cspmd_grad_check(ty(LR, LP), ty(LP, LP), "w", &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "still a pending sum"));
    ck_assert_int_eq(cspmd_grad_check(ty(LR, LI), ty(LP, LP), "w", &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_grad_check(ty(LR, LV), ty(LP, LP), "w", &out), CSPMD_ERR_SPMD_TYPE);
    /* Mismatches on I and V. */
    ck_assert_int_eq(cspmd_grad_check(ty(LR, LI), ty(LP, LV), "w", &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_grad_check(ty(LR, LV), ty(LP, LR), "w", &out), CSPMD_ERR_SPMD_TYPE);
    /* A missing axis: error when strict, skipped when permissive. */
    ck_assert_int_eq(cspmd_grad_check(ty(LR, LV), ty(LP, NONE), "w", &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "but the gradient is untyped"));
    cspmd_checker_set(1, 0);
    ck_assert_int_eq(cspmd_grad_check(ty(LR, LV), ty(LP, NONE), "w", &out), CSPMD_OK);
    ck_assert_int_eq(cspmd_grad_check(ty(LR, LV), 99999u, "w", &out), CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_route)
{
    cspmd_coll_t op;
    ck_assert_int_eq(cspmd_coll_route(S(0), S(1), &op), CSPMD_OK);
    ck_assert_int_eq(op, CSPMD_COLL_ALL_TO_ALL);
    cspmd_coll_route(S(0), C(LV), &op);
    ck_assert_int_eq(op, CSPMD_COLL_REDISTRIBUTE); /* V <-> S(i): no-op */
    cspmd_coll_route(C(LR), C(LR), &op);
    ck_assert_int_eq(op, CSPMD_COLL_REDISTRIBUTE);
    cspmd_coll_route(S(1), C(LR), &op);
    ck_assert_int_eq(op, CSPMD_COLL_ALL_GATHER);
    cspmd_coll_route(C(LV), C(LI), &op);
    ck_assert_int_eq(op, CSPMD_COLL_ALL_GATHER);
    cspmd_coll_route(C(LP), C(LI), &op);
    ck_assert_int_eq(op, CSPMD_COLL_ALL_REDUCE);
    cspmd_coll_route(C(LP), S(0), &op);
    ck_assert_int_eq(op, CSPMD_COLL_REDUCE_SCATTER);
    const cspmd_ltype_t conv_src[] = {LR, LI, LR, LR, LI, LI, LV};
    const cspmd_ltype_t conv_dst[] = {LI, LR, LV, LP, LV, LP, LP};
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(cspmd_coll_route(C(conv_src[i]), C(conv_dst[i]), &op), CSPMD_OK);
        ck_assert_int_eq(op, CSPMD_COLL_CONVERT);
    }
    ck_assert_int_eq(cspmd_coll_route(C(LR), C(LR), NULL), CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_dims)
{
    int64_t a = -1, b = -1;
    /* all_gather: S(i) gives the dim; V defaults to 0; a conflict is VALUE. */
    ck_assert_int_eq(cspmd_coll_dims(CSPMD_COLL_ALL_GATHER, S(2), C(LR), 0, &a, &b), CSPMD_OK);
    ck_assert_int_eq(a, 2);
    a = -1;
    cspmd_coll_dims(CSPMD_COLL_ALL_GATHER, C(LV), C(LR), 0, &a, &b);
    ck_assert_int_eq(a, 0);
    a = 1;
    ck_assert_int_eq(cspmd_coll_dims(CSPMD_COLL_ALL_GATHER, S(0), C(LR), 0, &a, &b),
                     CSPMD_ERR_VALUE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "conflict"));
    a = -1;
    ck_assert_int_eq(cspmd_coll_dims(CSPMD_COLL_ALL_GATHER, C(LV), C(LR), 1, &a, &b),
                     CSPMD_ERR_VALUE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "split_sizes is only supported with "
                                                     "src=S(i)"));
    a = -1;
    ck_assert_int_eq(cspmd_coll_dims(CSPMD_COLL_REDUCE_SCATTER, C(LP), S(1), 1, &a, &b), CSPMD_OK);
    ck_assert_int_eq(a, 1);
    /* all_to_all: S(i)->S(j) splits on j, concats on i. */
    a = b = -1;
    cspmd_coll_dims(CSPMD_COLL_ALL_TO_ALL, S(0), S(1), 0, &a, &b);
    ck_assert_int_eq(a, 1);
    ck_assert_int_eq(b, 0);
    a = b = -1;
    cspmd_coll_dims(CSPMD_COLL_ALL_TO_ALL, S(1), C(LV), 0, &a, &b);
    ck_assert_int_eq(a, 1);
    ck_assert_int_eq(b, 0);
    a = b = -1;
    cspmd_coll_dims(CSPMD_COLL_ALL_TO_ALL, C(LV), S(2), 0, &a, &b);
    ck_assert_int_eq(a, 0);
    ck_assert_int_eq(b, 2);
    a = 1, b = -1; /* an explicit split_dim conflicting with S(i)->S(j) */
    ck_assert_int_eq(cspmd_coll_dims(CSPMD_COLL_ALL_TO_ALL, S(0), S(2), 0, &a, &b),
                     CSPMD_ERR_VALUE);
    a = b = -1;
    ck_assert_int_eq(cspmd_coll_dims(CSPMD_COLL_ALL_TO_ALL, S(1), S(0), 1, &a, &b),
                     CSPMD_ERR_VALUE);
    a = b = -1;
    ck_assert_int_eq(cspmd_coll_dims(CSPMD_COLL_ALL_TO_ALL, S(0), S(0), 1, &a, &b), CSPMD_OK);
    a = -1;
    cspmd_coll_dims(CSPMD_COLL_CONVERT, C(LR), S(3), 0, &a, &b);
    ck_assert_int_eq(a, 3);
}
END_TEST

/* dtype codes here: 6 = f32 (32 bits), 15 = bf16 (16), 7 = f64 (64). */
static cspmd_dtype_info_t info(int in, int op, int out, int needs_grad, int has_bw)
{
    const int bits[16] = {[6] = 32, [7] = 64, [15] = 16};
    cspmd_dtype_info_t d = {in, bits[in], op, op >= 0 ? bits[op] : 0, out,
                            out >= 0 ? bits[out] : 0, needs_grad, has_bw};
    return d;
}

START_TEST(test_dtypes)
{
    int op = 0, out = 0;
    cspmd_dtype_info_t d = info(6, -1, -1, 0, 0);
    ck_assert_int_eq(cspmd_coll_dtypes(CSPMD_COLL_ALL_REDUCE, C(LP), C(LR), &d, &op, &out),
                     CSPMD_OK);
    ck_assert_int_eq(op, 6);
    ck_assert_int_eq(out, 6);
    d = info(6, 15, -1, 0, 0); /* only op_dtype: out = op */
    cspmd_coll_dtypes(CSPMD_COLL_ALL_GATHER, S(0), C(LI), &d, &op, &out);
    ck_assert_int_eq(op, 15);
    ck_assert_int_eq(out, 15);
    d = info(6, -1, 15, 0, 0); /* only out_dtype, reducing: op = in */
    cspmd_coll_dtypes(CSPMD_COLL_ALL_REDUCE, C(LP), C(LI), &d, &op, &out);
    ck_assert_int_eq(op, 6);
    ck_assert_int_eq(out, 15);
    cspmd_coll_dtypes(CSPMD_COLL_CONVERT, C(LR), C(LV), &d, &op, &out);
    ck_assert_int_eq(op, 6);
    /* only out_dtype, non-reducing: the narrower of in and out */
    cspmd_coll_dtypes(CSPMD_COLL_ALL_GATHER, S(0), C(LI), &d, &op, &out);
    ck_assert_int_eq(op, 15);
    d = info(6, -1, 7, 0, 0);
    cspmd_coll_dtypes(CSPMD_COLL_ALL_GATHER, S(0), C(LI), &d, &op, &out);
    ck_assert_int_eq(op, 6);
    ck_assert_int_eq(out, 7);
    d = info(6, 15, 7, 0, 0); /* both: as given */
    cspmd_coll_dtypes(CSPMD_COLL_ALL_GATHER, S(0), C(LI), &d, &op, &out);
    ck_assert_int_eq(op, 15);
    ck_assert_int_eq(out, 7);
}
END_TEST

START_TEST(test_reduced_precision_rule)
{
    int op = 0, out = 0;
    /* bf16 input needing grad, backward all_reduce, no backward op_dtype. */
    cspmd_dtype_info_t d = info(15, -1, -1, 1, 0);
    ck_assert_int_eq(cspmd_coll_dtypes(CSPMD_COLL_ALL_REDUCE, C(LP), C(LR), &d, &op, &out),
                     CSPMD_ERR_VALUE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(),
                                 "When using reduced precision with an operation whose backward "
                                 "involves a reduction (all_reduce or reduce_scatter), you must "
                                 "explicitly specify backward_options={\"op_dtype\": ...}"));
    ck_assert_int_eq(cspmd_coll_dtypes(CSPMD_COLL_ALL_GATHER, S(0), C(LR), &d, &op, &out),
                     CSPMD_ERR_VALUE);
    ck_assert_int_eq(cspmd_coll_dtypes(CSPMD_COLL_CONVERT, C(LI), C(LR), &d, &op, &out),
                     CSPMD_ERR_VALUE);
    ck_assert_int_eq(
        cspmd_coll_dtypes(CSPMD_COLL_INVARIANT_TO_REPLICATE, C(LI), C(LR), &d, &op, &out),
        CSPMD_ERR_VALUE);
    /* Backward without a reduction, no grad, or an explicit backward op_dtype. */
    ck_assert_int_eq(cspmd_coll_dtypes(CSPMD_COLL_ALL_REDUCE, C(LP), C(LI), &d, &op, &out),
                     CSPMD_OK);
    d = info(15, -1, -1, 0, 0);
    ck_assert_int_eq(cspmd_coll_dtypes(CSPMD_COLL_ALL_REDUCE, C(LP), C(LR), &d, &op, &out),
                     CSPMD_OK);
    d = info(15, -1, -1, 1, 1);
    ck_assert_int_eq(cspmd_coll_dtypes(CSPMD_COLL_ALL_REDUCE, C(LP), C(LR), &d, &op, &out),
                     CSPMD_OK);
    /* f32 input with a narrower op_dtype triggers it; f64 never does. */
    d = info(6, 15, -1, 1, 0);
    ck_assert_int_eq(cspmd_coll_dtypes(CSPMD_COLL_ALL_REDUCE, C(LP), C(LR), &d, &op, &out),
                     CSPMD_ERR_VALUE);
    d = info(7, -1, -1, 1, 0);
    ck_assert_int_eq(cspmd_coll_dtypes(CSPMD_COLL_ALL_REDUCE, C(LP), C(LR), &d, &op, &out),
                     CSPMD_OK);
}
END_TEST

Suite *suite_grad(void)
{
    Suite *s = suite_create("grad");
    TCase *tc = tcase_create("grad");
    tcase_add_checked_fixture(tc, h_setup, h_teardown);
    tcase_add_test(tc, test_loss_check);
    tcase_add_test(tc, test_grad_duality);
    tcase_add_test(tc, test_grad_seed);
    tcase_add_test(tc, test_grad_accum_check);
    tcase_add_test(tc, test_route);
    tcase_add_test(tc, test_dims);
    tcase_add_test(tc, test_dtypes);
    tcase_add_test(tc, test_reduced_precision_rule);
    suite_add_tcase(s, tc);
    return s;
}
