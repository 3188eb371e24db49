/* Writes through views (csrc/core/view_rules.c): the base's joined type
 * after a write, and the type a view reads as once its base changed. */
#include <string.h>

#include "cspmd.h"
#include "suites.h"
#include "tp_dp_axes.h"

static cspmd_type_t two(cspmd_ltype_t dp, cspmd_ltype_t tp)
{
    cspmd_axis_t a[2] = {DP, TP};
    cspmd_ltype_t l[2] = {dp, tp};
    cspmd_type_t t = 0;
    ck_assert_msg(cspmd_type_make(a, l, 2, NULL, &t) == CSPMD_OK, "%s", cspmd_last_error());
    return t;
}

START_TEST(test_write_joins_per_axis)
{
    cspmd_type_t rr = two(CSPMD_LT_R, CSPMD_LT_R), rv = two(CSPMD_LT_R, CSPMD_LT_V);
    cspmd_type_t iv = two(CSPMD_LT_I, CSPMD_LT_V), ii = two(CSPMD_LT_I, CSPMD_LT_I);
    cspmd_type_t out = 0;
    ck_assert_int_eq(cspmd_type_join_view_write("copy_", rr, rv, 0, &out), CSPMD_OK);
    ck_assert_uint_eq(out, rv); /* V into part of R: V */
    ck_assert_int_eq(cspmd_type_join_view_write("copy_", rv, rr, 0, &out), CSPMD_OK);
    ck_assert_uint_eq(out, rv); /* R into part of V: stays V */
    ck_assert_int_eq(cspmd_type_join_view_write("copy_", ii, iv, 0, &out), CSPMD_OK);
    ck_assert_uint_eq(out, iv);
    ck_assert_int_eq(cspmd_type_join_view_write("copy_", rr, rr, 1, &out), CSPMD_OK);
    ck_assert_uint_eq(out, rr); /* no change: allowed with grad */
    ck_assert_int_eq(cspmd_type_join_view_write("copy_", rr, CSPMD_TYPE_UNTYPED, 0, &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, rr);
}
END_TEST

START_TEST(test_write_refusals_name_op_axis_and_types)
{
    cspmd_type_t rr = two(CSPMD_LT_R, CSPMD_LT_R), rp = two(CSPMD_LT_R, CSPMD_LT_P);
    cspmd_type_t ri = two(CSPMD_LT_R, CSPMD_LT_I), rv = two(CSPMD_LT_R, CSPMD_LT_V);
    cspmd_type_t out = 12345;
    ck_assert_int_eq(cspmd_type_join_view_write("aten::copy_", rr, rp, 0, &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "aten::copy_: writing"));
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "no single type"));
    ck_assert_int_eq(out, 12345); /* unchanged on error */
    ck_assert_int_eq(cspmd_type_join_view_write("aten::copy_", rr, ri, 0, &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_type_join_view_write("aten::copy_", rr, rv, 1, &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "requires grad"));
    ck_assert_int_eq(cspmd_type_join_view_write("x", 999999, rr, 0, &out), CSPMD_ERR_MISUSE);
    /* P into a tensor with no type on the axis: the pending sum would be
     * lost (a buffer made without a mesh is {}) */
    cspmd_type_t p_only = 0;
    cspmd_axis_t tp[1] = {TP};
    cspmd_ltype_t lp[1] = {CSPMD_LT_P};
    ck_assert_int_eq(cspmd_type_make(tp, lp, 1, NULL, &p_only), CSPMD_OK);
    out = 12345;
    ck_assert_int_eq(cspmd_type_join_view_write("aten::copy_", CSPMD_TYPE_EMPTY, p_only, 0, &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "no type on axis tp"));
    ck_assert_int_eq(out, 12345);
    ck_assert_uint_eq(cspmd_type_view_read(CSPMD_TYPE_EMPTY, p_only), CSPMD_TYPE_EMPTY);
    /* ... and into a tensor never annotated, with nothing changed */
    out = 12345;
    ck_assert_int_eq(
        cspmd_type_join_view_write("aten::copy_", CSPMD_TYPE_UNTYPED, p_only, 0, &out),
        CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "no type on axis tp"));
    ck_assert_int_eq(out, 12345);
    ck_assert_int_eq(cspmd_type_join_view_write("aten::copy_", CSPMD_TYPE_UNTYPED, rp, 0, &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(out, 12345);
}
END_TEST

/* Data written into a tensor with no type on an axis: V makes it V there
 * (the old elements are unknown, V is the one sound type for the mix); R
 * and I leave it untyped there. */
START_TEST(test_write_into_no_type)
{
    cspmd_axis_t tp[1] = {TP}, dp[1] = {DP};
    cspmd_ltype_t lv[1] = {CSPMD_LT_V}, lr[1] = {CSPMD_LT_R};
    cspmd_type_t v_only = 0, dp_r = 0, out = 0;
    ck_assert_int_eq(cspmd_type_make(tp, lv, 1, NULL, &v_only), CSPMD_OK);
    ck_assert_int_eq(cspmd_type_make(dp, lr, 1, NULL, &dp_r), CSPMD_OK);
    cspmd_type_t rv = two(CSPMD_LT_R, CSPMD_LT_V), rr = two(CSPMD_LT_R, CSPMD_LT_R);
    cspmd_type_t iv = two(CSPMD_LT_I, CSPMD_LT_V), vv = two(CSPMD_LT_V, CSPMD_LT_V);

    /* never annotated: V on the V axes only, nothing claimed elsewhere */
    ck_assert_int_eq(cspmd_type_join_view_write("copy_", CSPMD_TYPE_UNTYPED, rv, 0, &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, v_only);
    ck_assert_int_eq(cspmd_type_join_view_write("copy_", CSPMD_TYPE_UNTYPED, vv, 0, &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, vv);
    ck_assert_int_eq(cspmd_type_join_view_write("copy_", CSPMD_TYPE_UNTYPED, rr, 0, &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, CSPMD_TYPE_UNTYPED);
    /* requires grad: an axis with no type may gain one (as in-place ops) */
    ck_assert_int_eq(cspmd_type_join_view_write("copy_", CSPMD_TYPE_UNTYPED, iv, 1, &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, v_only);
    /* {} (made without a mesh) and a type on other axes only */
    ck_assert_int_eq(cspmd_type_join_view_write("copy_", CSPMD_TYPE_EMPTY, v_only, 0, &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, v_only);
    ck_assert_int_eq(cspmd_type_join_view_write("copy_", dp_r, v_only, 0, &out), CSPMD_OK);
    ck_assert_uint_eq(out, rv);
    ck_assert_int_eq(cspmd_type_join_view_write("copy_", dp_r, vv, 0, &out), CSPMD_OK);
    ck_assert_uint_eq(out, vv);
    out = 12345; /* the typed axis still refuses R next to I, changing nothing */
    ck_assert_int_eq(cspmd_type_join_view_write("copy_", dp_r, iv, 0, &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(out, 12345);
}
END_TEST

START_TEST(test_view_read_is_quiet)
{
    cspmd_type_t rr = two(CSPMD_LT_R, CSPMD_LT_R), rv = two(CSPMD_LT_R, CSPMD_LT_V);
    cspmd_type_t rp = two(CSPMD_LT_R, CSPMD_LT_P);
    ck_assert_uint_eq(cspmd_type_view_read(rr, rv), rv); /* base became V */
    ck_assert_uint_eq(cspmd_type_view_read(rv, rr), rv);
    ck_assert_uint_eq(cspmd_type_view_read(rr, rr), rr);
    /* a view taken while the base had no type reads V where it became V */
    cspmd_type_t v_only = 0;
    cspmd_axis_t tp[1] = {TP};
    cspmd_ltype_t lv[1] = {CSPMD_LT_V};
    ck_assert_int_eq(cspmd_type_make(tp, lv, 1, NULL, &v_only), CSPMD_OK);
    ck_assert_uint_eq(cspmd_type_view_read(CSPMD_TYPE_UNTYPED, v_only), v_only);
    ck_assert_uint_eq(cspmd_type_view_read(CSPMD_TYPE_UNTYPED, rv), v_only);
    ck_assert_uint_eq(cspmd_type_view_read(CSPMD_TYPE_UNTYPED, rr), CSPMD_TYPE_UNTYPED);
    ck_assert_uint_eq(cspmd_type_view_read(rr, CSPMD_TYPE_UNTYPED), rr);
    ck_assert_uint_eq(cspmd_type_view_read(rr, 999999), rr); /* invalid base: own */
    (void)cspmd_error_set(CSPMD_ERR_VALUE, "sentinel");
    ck_assert_uint_eq(cspmd_type_view_read(rp, rr), rp); /* annotated apart: own */
    ck_assert_str_eq(cspmd_last_error(), "sentinel");    /* and no message written */
}
END_TEST

Suite *suite_view_rules(void)
{
    Suite *s = suite_create("view_rules");
    TCase *tc = tcase_create("view_rules");
    tcase_add_checked_fixture(tc, h_axes_named, NULL);
    tcase_add_test(tc, test_write_joins_per_axis);
    tcase_add_test(tc, test_write_refusals_name_op_axis_and_types);
    tcase_add_test(tc, test_write_into_no_type);
    tcase_add_test(tc, test_view_read_is_quiet);
    suite_add_tcase(s, tc);
    return s;
}
