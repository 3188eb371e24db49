/* Types that move with values (csrc/core/type_carry.c): the carry rule and
 * the saved text form. */
#include <string.h>

#include "cspmd.h"
#include "suites.h"
#include "tp_dp_axes.h"

static cspmd_type_t two(cspmd_ltype_t dp, cspmd_ltype_t tp, const cspmd_spec_t *spec)
{
    cspmd_axis_t a[2] = {DP, TP};
    cspmd_ltype_t l[2] = {dp, tp};
    cspmd_type_t t = 0;
    ck_assert_msg(cspmd_type_make(a, l, 2, spec, &t) == CSPMD_OK, "%s", cspmd_last_error());
    return t;
}

/* PartitionSpec(tp, None) over two dims. */
static cspmd_spec_t spec_tp_none(void)
{
    cspmd_spec_t s;
    memset(&s, 0, sizeof s);
    s.ndim = 2;
    s.nentry[0] = 1;
    s.entry[0][0] = TP;
    return s;
}

START_TEST(test_carry)
{
    cspmd_type_t out = 0, rv = two(CSPMD_LT_R, CSPMD_LT_V, NULL);
    /* An untyped replacement takes the type; an untyped source leaves it. */
    ck_assert_int_eq(cspmd_type_carry(rv, CSPMD_TYPE_UNTYPED, 2, "w", &out), CSPMD_OK);
    ck_assert_uint_eq(out, rv);
    ck_assert_int_eq(cspmd_type_carry(CSPMD_TYPE_UNTYPED, rv, 2, "w", &out), CSPMD_OK);
    ck_assert_uint_eq(out, rv);
    ck_assert_int_eq(cspmd_type_carry(CSPMD_TYPE_UNTYPED, CSPMD_TYPE_UNTYPED, 2, "w", &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, CSPMD_TYPE_UNTYPED);
    ck_assert_int_eq(cspmd_type_carry(rv, rv, 2, "w", &out), CSPMD_OK);
    ck_assert_uint_eq(out, rv);
    /* The spec carries only to a tensor of the same rank. */
    cspmd_spec_t s = spec_tp_none();
    cspmd_type_t with_spec = two(CSPMD_LT_R, CSPMD_LT_V, &s);
    ck_assert_int_eq(cspmd_type_carry(with_spec, CSPMD_TYPE_UNTYPED, 2, "w", &out), CSPMD_OK);
    ck_assert_uint_eq(out, with_spec);
    ck_assert_int_eq(cspmd_type_carry(with_spec, CSPMD_TYPE_UNTYPED, 3, "w", &out), CSPMD_OK);
    ck_assert_uint_eq(out, rv);
    /* Two different types: an error naming the tensor and both types. */
    out = 7;
    ck_assert_int_eq(cspmd_type_carry(rv, two(CSPMD_LT_R, CSPMD_LT_R, NULL), 2,
                                      "load_state_dict: parameter 'fc.weight'", &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_uint_eq(out, 7);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(),
                                 "load_state_dict: parameter 'fc.weight': the tensor is typed "
                                 "{dp: R, tp: V} but the tensor replacing it is typed "
                                 "{dp: R, tp: R}"));
    ck_assert_int_eq(cspmd_type_carry(999999, rv, 2, "w", &out), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_type_carry(rv, rv, 2, "w", NULL), CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_encode_decode_round_trip)
{
    char buf[256];
    cspmd_spec_t s = spec_tp_none();
    cspmd_type_t types[3] = {two(CSPMD_LT_R, CSPMD_LT_V, NULL), two(CSPMD_LT_P, CSPMD_LT_V, &s),
                             CSPMD_TYPE_EMPTY};
    for (int i = 0; i < 3; i++) {
        size_t n = cspmd_type_encode(types[i], buf, sizeof buf);
        ck_assert_uint_eq(n, strlen(buf));
        cspmd_type_t back = 0;
        ck_assert_msg(cspmd_type_decode(buf, &back) == CSPMD_OK, "%s", cspmd_last_error());
        ck_assert_uint_eq(back, types[i]);
    }
    /* Layouts, not names: the text of {dp: P, tp: V} with spec (tp, None). */
    cspmd_type_encode(types[1], buf, sizeof buf);
    ck_assert_str_eq(buf, "cspmd1:2:4=P|4:1=V#4:1/-");
    /* Untyped: no text.  Truncation is snprintf-like. */
    ck_assert_uint_eq(cspmd_type_encode(CSPMD_TYPE_UNTYPED, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "");
    char small[8];
    ck_assert_uint_eq(cspmd_type_encode(types[1], small, sizeof small), 24);
    ck_assert_str_eq(small, "cspmd1:");
    ck_assert_uint_eq(cspmd_type_encode(types[1], NULL, 0), 24);
}
END_TEST

START_TEST(test_decode_errors)
{
    cspmd_type_t t = 5;
    const char *bad[] = {"", "cspmd2:4:1=R", "cspmd1:4=R", "cspmd1:4:1=X", "cspmd1:4:1R",
                         "cspmd1:4:1=R|", "cspmd1:4:1=R#", "cspmd1:4:1=V#4:1/", "cspmd1:a:1=R"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(cspmd_type_decode(bad[i], &t) == CSPMD_ERR_VALUE, "%s", bad[i]);
        ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "cannot read the saved SPMD type"));
    }
    ck_assert_uint_eq(t, 5);
    /* Overlapping axes are not a type. */
    ck_assert_int_eq(cspmd_type_decode("cspmd1:4:1=R|2:1=V", &t), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_type_decode(NULL, &t), CSPMD_ERR_MISUSE);
}
END_TEST

Suite *suite_type_carry(void)
{
    Suite *s = suite_create("type_carry");
    TCase *tc = tcase_create("type_carry");
    tcase_add_checked_fixture(tc, h_axes_named, NULL);
    tcase_add_test(tc, test_carry);
    tcase_add_test(tc, test_encode_decode_round_trip);
    tcase_add_test(tc, test_decode_errors);
    suite_add_tcase(s, tc);
    return s;
}
