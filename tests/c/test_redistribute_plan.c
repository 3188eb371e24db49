/* Spec-to-spec redistribution plans (redistribute_plan.c): the steps, their
 * order under the innermost-axis rule, and the refusals. */
#include <stdio.h>
#include <string.h>

#include "infer_helpers.h"

/* A 2-D type: dp, tp local types (NONE: absent); d0 / d1 list the axes
 * sharding dims 0 / 1 ("" none, "d", "t", "dt" dp then tp, "td"). */
static cspmd_type_t T(cspmd_ltype_t dp, cspmd_ltype_t tp, const char *d0, const char *d1)
{
    cspmd_spec_t s;
    memset(&s, 0, sizeof s);
    s.ndim = 2;
    const char *dims[2] = {d0, d1};
    int any = 0;
    for (int d = 0; d < 2; d++)
        for (const char *c = dims[d]; *c; c++) {
            s.entry[d][s.nentry[d]++] = *c == 'd' ? DP : TP;
            any = 1;
        }
    return ty_spec(dp, tp, any ? &s : NULL);
}

/* The plan as text: "all_gather(tp, S(0)->R); ..." */
static const char *plan_text(cspmd_type_t cur, cspmd_type_t dst, int64_t a, int64_t b,
                             cspmd_status_t *st)
{
    static char buf[512];
    cspmd_redist_step_t steps[3 * CSPMD_MAX_AXES];
    int64_t sizes[2] = {a, b};
    int n = -1;
    *st = cspmd_redistribute_plan(cur, cur, dst, sizes, 2, steps, 3 * CSPMD_MAX_AXES, &n);
    buf[0] = '\0';
    size_t len = 0;
    for (int i = 0; *st == CSPMD_OK && i < n; i++) {
        char s[16], d[16];
        const cspmd_ctype_t *c[2] = {&steps[i].src, &steps[i].dst};
        char *out[2] = {s, d};
        for (int k = 0; k < 2; k++)
            if (c[k]->shard_dim >= 0)
                snprintf(out[k], 16, "S(%d)", (int)c[k]->shard_dim);
            else
                snprintf(out[k], 16, "%s", cspmd_ltype_letter(c[k]->ltype));
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s(%s, %s->%s)", i ? "; " : "",
                                cspmd_coll_name(steps[i].op),
                                cspmd_axis_display(steps[i].axis, 0), s, d);
    }
    return buf;
}

#define PLAN_EQ(cur, dst, want)                                                            \
    do {                                                                                   \
        cspmd_status_t st_;                                                                \
        const char *got_ = plan_text(cur, dst, 8, 8, &st_);                                \
        ck_assert_msg(st_ == CSPMD_OK, "%s", cspmd_last_error());                          \
        ck_assert_str_eq(got_, want);                                                      \
    } while (0)

START_TEST(test_single_axis_routes)
{
    PLAN_EQ(T(LR, LV, "t", ""), T(LR, LR, "", ""), "all_gather(tp, S(0)->R)");
    PLAN_EQ(T(LR, LV, "t", ""), T(LR, LV, "", "t"), "all_to_all(tp, S(0)->S(1))");
    PLAN_EQ(T(LR, LP, "", ""), T(LR, LV, "", "t"), "reduce_scatter(tp, P->S(1))");
    PLAN_EQ(T(LR, LP, "", ""), T(LR, LR, "", ""), "all_reduce(tp, P->R)");
    PLAN_EQ(T(LR, LP, "", ""), T(LR, LI, "", ""), "all_reduce(tp, P->I)");
    PLAN_EQ(T(LR, LR, "", ""), T(LR, LV, "t", ""), "convert(tp, R->S(0))");
    PLAN_EQ(T(LR, LI, "", ""), T(LR, LV, "t", ""), "convert(tp, I->S(0))");
    PLAN_EQ(T(LR, LV, "t", ""), T(LR, LP, "", ""), "redistribute(tp, S(0)->P)");
    PLAN_EQ(T(LR, LV, "t", ""), T(LR, LI, "", ""), "all_gather(tp, S(0)->I)");
    PLAN_EQ(T(LR, LR, "", ""), T(LR, LP, "", ""), "redistribute(tp, R->P)");
    PLAN_EQ(T(LR, LR, "", ""), T(LR, LI, "", ""), "redistribute(tp, R->I)");
    PLAN_EQ(T(LR, LI, "", ""), T(LR, LP, "", ""), "redistribute(tp, I->P)");
    /* nothing to do */
    PLAN_EQ(T(LR, LV, "t", ""), T(LR, LV, "t", ""), "");
    PLAN_EQ(T(LR, LP, "", ""), T(LR, LP, "", ""), "");
}
END_TEST

START_TEST(test_two_axes_and_the_innermost_rule)
{
    /* (dp, tp) on dim 0 -> nothing: tp (innermost) first */
    PLAN_EQ(T(LV, LV, "dt", ""), T(LR, LR, "", ""),
            "all_gather(tp, S(0)->R); all_gather(dp, S(0)->R)");
    /* (dp, tp) -> (tp, dp): both off, then on in the new order */
    PLAN_EQ(T(LV, LV, "dt", ""), T(LV, LV, "td", ""),
            "all_gather(tp, S(0)->R); all_gather(dp, S(0)->R); convert(tp, R->S(0)); "
            "convert(dp, R->S(0))");
    /* dp stays outermost, tp moves to dim 1 in one all_to_all */
    PLAN_EQ(T(LV, LV, "dt", ""), T(LV, LV, "d", "t"), "all_to_all(tp, S(0)->S(1))");
    /* dims swapped: one gather, one all_to_all, one slice */
    PLAN_EQ(T(LV, LV, "d", "t"), T(LV, LV, "t", "d"),
            "all_gather(dp, S(0)->R); all_to_all(tp, S(1)->S(0)); convert(dp, R->S(1))");
    /* a Partial and a shard joining one dim, outermost first */
    PLAN_EQ(T(LP, LV, "t", ""), T(LV, LV, "dt", ""),
            "all_gather(tp, S(0)->R); reduce_scatter(dp, P->S(0)); convert(tp, R->S(0))");
    /* appending innermost needs no move of the outer axis */
    PLAN_EQ(T(LV, LR, "d", ""), T(LV, LV, "dt", ""), "convert(tp, R->S(0))");
    /* axes dst leaves out: a shard becomes R, P and I stay */
    PLAN_EQ(T(LV, LP, "d", ""), T(NONE, NONE, "", ""), "all_gather(dp, S(0)->R)");
}
END_TEST

START_TEST(test_refusals)
{
    cspmd_redist_step_t steps[8];
    int64_t sizes[2] = {8, 8}, odd[2] = {6, 8};
    int n = 0;
    cspmd_type_t cur = T(LR, LV, "t", "");
    /* src that does not describe the tensor */
    ck_assert_int_eq(cspmd_redistribute_plan(cur, T(LR, LV, "", "t"), T(LR, LR, "", ""), sizes,
                                             2, steps, 8, &n),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "src_partition_spec does not describe the "
                                                     "tensor: it is {dp: R, tp: V} "
                                                     "PartitionSpec(tp, None)"));
    /* an uneven split is refused before any step */
    ck_assert_int_eq(cspmd_redistribute_plan(T(LR, LR, "", ""), T(LR, LR, "", ""),
                                             T(LR, LV, "t", ""), odd, 2, steps, 8, &n),
                     CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(), "redistribute_spec: dim 0 of local size 6 cannot be "
                                         "sharded evenly over axis tp of size 4");
    /* dims disagree */
    ck_assert_int_eq(cspmd_redistribute_plan(cur, cur, T(LR, LR, "", ""), sizes, 1, steps, 8, &n),
                     CSPMD_ERR_VALUE);
    /* no type */
    ck_assert_int_eq(cspmd_redistribute_plan(CSPMD_TYPE_UNTYPED, CSPMD_TYPE_UNTYPED, cur, sizes,
                                             2, steps, 8, &n),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "has no SPMD type"));
    /* room for too few steps: the length comes back */
    ck_assert_int_eq(cspmd_redistribute_plan(T(LV, LV, "dt", ""), T(LV, LV, "dt", ""),
                                             T(LV, LV, "td", ""), sizes, 2, steps, 1, &n),
                     CSPMD_ERR_NOMEM);
    ck_assert_int_eq(n, 4);
    /* a local axis cannot change */
    ck_assert_int_eq(cspmd_mesh_set_local_axes(&DP, 1), CSPMD_OK);
    cspmd_type_t loc = T(LV, LV, "", "t");
    ck_assert_int_eq(cspmd_redistribute_plan(loc, loc, T(LR, LR, "", ""), sizes, 2, steps, 8, &n),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "axis dp is Varying with no PartitionSpec"));
    ck_assert_int_eq(cspmd_redistribute_plan(loc, loc, T(NONE, LR, "", ""), sizes, 2, steps, 8,
                                             &n),
                     CSPMD_OK);
    ck_assert_int_eq(n, 1);
}
END_TEST

/* The src a caller's src_partition_spec claims: the tensor's local types,
 * the spec's axes V, with that spec. */
START_TEST(test_src_of_a_spec)
{
    cspmd_type_t cur = T(LR, LR, "", "");
    int64_t spec_t0[] = {2, 1, TP, 0};
    cspmd_type_t src = 0;
    ck_assert_int_eq(cspmd_redistribute_src(cur, spec_t0, 4, &src), CSPMD_OK);
    ck_assert_uint_eq(src, T(LR, LV, "t", ""));
    ck_assert_int_eq(cspmd_redistribute_src(cur, NULL, 0, &src), CSPMD_OK); /* no spec */
    ck_assert_uint_eq(src, cur);
    int64_t spec_dt[] = {2, 2, DP, TP, 0};
    ck_assert_int_eq(cspmd_redistribute_src(T(LR, LV, "t", ""), spec_dt, 5, &src), CSPMD_OK);
    ck_assert_uint_eq(src, T(LV, LV, "dt", ""));
    /* An axis the tensor lacks is added as V (as cspmd_type_make adds it). */
    ck_assert_int_eq(cspmd_redistribute_src(T(NONE, LR, "", ""), spec_dt, 5, &src), CSPMD_OK);
    ck_assert_uint_eq(src, T(LV, LV, "dt", ""));
    cspmd_type_t before = src;
    ck_assert_int_eq(cspmd_redistribute_src(CSPMD_TYPE_UNTYPED, spec_t0, 4, &src),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "has no SPMD type"));
    int64_t bad[] = {2, 3, TP};
    ck_assert_int_eq(cspmd_redistribute_src(cur, bad, 3, &src), CSPMD_ERR_MISUSE);
    int64_t long_[] = {1, 0, 7};
    ck_assert_int_eq(cspmd_redistribute_src(cur, long_, 3, &src), CSPMD_ERR_MISUSE);
    int64_t deep[] = {CSPMD_MAX_DIMS + 1};
    ck_assert_int_eq(cspmd_redistribute_src(cur, deep, 1, &src), CSPMD_ERR_VALUE);
    ck_assert_uint_eq(src, before); /* untouched on error */
}
END_TEST

Suite *suite_redistribute_plan(void)
{
    Suite *s = suite_create("redistribute_plan");
    TCase *tc = tcase_create("plan");
    tcase_add_checked_fixture(tc, h_global_setup, h_global_teardown);
    tcase_add_test(tc, test_single_axis_routes);
    tcase_add_test(tc, test_two_axes_and_the_innermost_rule);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_src_of_a_spec);
    suite_add_tcase(s, tc);
    return s;
}
