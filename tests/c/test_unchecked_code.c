/* register_no_typecheck's registry and gradient type
 * (csrc/core/unchecked_code.c). */
#include "cspmd.h"
#include "infer_helpers.h"
#include "suites.h"

static void setup(void)
{
    h_setup();
    cspmd_unchecked_code_clear();
}

static void teardown(void)
{
    cspmd_unchecked_code_clear();
    h_teardown();
}

START_TEST(test_nothing_registered_is_not_armed)
{
    static int a;
    ck_assert_int_eq(cspmd_unchecked_code_armed(), 0);
    ck_assert_int_eq(cspmd_unchecked_code_has(&a), 0);
    ck_assert_int_eq(cspmd_unchecked_code_count(), 0);
}
END_TEST

START_TEST(test_add_is_idempotent_and_arms)
{
    static int a, b;
    ck_assert_int_eq(cspmd_unchecked_code_add(&a), CSPMD_OK);
    ck_assert_int_eq(cspmd_unchecked_code_add(&a), CSPMD_OK);
    ck_assert_int_eq(cspmd_unchecked_code_armed(), 1);
    ck_assert_int_eq(cspmd_unchecked_code_count(), 1);
    ck_assert_int_eq(cspmd_unchecked_code_has(&a), 1);
    ck_assert_int_eq(cspmd_unchecked_code_has(&b), 0);
    ck_assert_int_eq(cspmd_unchecked_code_add(NULL), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_unchecked_code_count(), 1);
}
END_TEST

/* No fixed capacity: many more keys than the first array holds. */
START_TEST(test_the_set_grows)
{
    static char keys[1000];
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(cspmd_unchecked_code_add(&keys[i]), CSPMD_OK);
    ck_assert_int_eq(cspmd_unchecked_code_count(), 1000);
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(cspmd_unchecked_code_has(&keys[i]), 1);
    cspmd_unchecked_code_clear();
    ck_assert_int_eq(cspmd_unchecked_code_armed(), 0);
    ck_assert_int_eq(cspmd_unchecked_code_has(&keys[7]), 0);
    ck_assert_int_eq(cspmd_unchecked_code_add(&keys[7]), CSPMD_OK);
    ck_assert_int_eq(cspmd_unchecked_code_count(), 1);
}
END_TEST

START_TEST(test_gradient_type_is_the_dual)
{
    ck_assert_uint_eq(cspmd_unchecked_grad_type(tt(LR)), tt(LP));
    ck_assert_uint_eq(cspmd_unchecked_grad_type(tt(LP)), tt(LR));
    ck_assert_uint_eq(cspmd_unchecked_grad_type(tt(LV)), tt(LV));
    ck_assert_uint_eq(cspmd_unchecked_grad_type(tt(LI)), tt(LI));
    ck_assert_uint_eq(cspmd_unchecked_grad_type(CSPMD_TYPE_UNTYPED), CSPMD_TYPE_UNTYPED);
}
END_TEST

Suite *suite_unchecked_code(void)
{
    Suite *s = suite_create("unchecked_code");
    TCase *tc = tcase_create("registry");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_nothing_registered_is_not_armed);
    tcase_add_test(tc, test_add_is_idempotent_and_arms);
    tcase_add_test(tc, test_the_set_grows);
    tcase_add_test(tc, test_gradient_type_is_the_dual);
    suite_add_tcase(s, tc);
    return s;
}
