/* DTensor placements <-> local types (placement.c). */
#include "cspmd.h"
#include "suites.h"

START_TEST(test_placement_ltype)
{
    cspmd_ltype_t lt = CSPMD_LT_NONE;
    ck_assert_int_eq(cspmd_placement_ltype(CSPMD_PLACEMENT_REPLICATE, CSPMD_PLACEMENT_NONE, &lt), CSPMD_OK);
    ck_assert_int_eq(lt, CSPMD_LT_I);
    ck_assert_int_eq(cspmd_placement_ltype(CSPMD_PLACEMENT_REPLICATE, CSPMD_PLACEMENT_REPLICATE, &lt),
                     CSPMD_OK);
    ck_assert_int_eq(lt, CSPMD_LT_I);
    ck_assert_int_eq(cspmd_placement_ltype(CSPMD_PLACEMENT_REPLICATE, CSPMD_PLACEMENT_PARTIAL, &lt),
                     CSPMD_OK);
    ck_assert_int_eq(lt, CSPMD_LT_R); /* its gradient is a partial sum */
    ck_assert_int_eq(cspmd_placement_ltype(CSPMD_PLACEMENT_SHARD, CSPMD_PLACEMENT_PARTIAL, &lt), CSPMD_OK);
    ck_assert_int_eq(lt, CSPMD_LT_V);
    ck_assert_int_eq(cspmd_placement_ltype(CSPMD_PLACEMENT_PARTIAL, CSPMD_PLACEMENT_NONE, &lt), CSPMD_OK);
    ck_assert_int_eq(lt, CSPMD_LT_P);
    ck_assert_int_eq(cspmd_placement_ltype(CSPMD_PLACEMENT_NONE, CSPMD_PLACEMENT_NONE, &lt),
                     CSPMD_ERR_MISUSE);
    ck_assert_int_eq(lt, CSPMD_LT_P); /* untouched */
    ck_assert_int_eq(cspmd_placement_ltype(CSPMD_PLACEMENT_SHARD, CSPMD_PLACEMENT_NONE, NULL),
                     CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_ltype_placement)
{
    cspmd_placement_t p = CSPMD_PLACEMENT_NONE;
    ck_assert_int_eq(cspmd_ltype_placement(CSPMD_LT_R, -1, &p), CSPMD_OK);
    ck_assert_int_eq(p, CSPMD_PLACEMENT_REPLICATE);
    ck_assert_int_eq(cspmd_ltype_placement(CSPMD_LT_I, -1, &p), CSPMD_OK);
    ck_assert_int_eq(p, CSPMD_PLACEMENT_REPLICATE);
    ck_assert_int_eq(cspmd_ltype_placement(CSPMD_LT_V, 1, &p), CSPMD_OK);
    ck_assert_int_eq(p, CSPMD_PLACEMENT_SHARD);
    ck_assert_int_eq(cspmd_ltype_placement(CSPMD_LT_P, -1, &p), CSPMD_OK);
    ck_assert_int_eq(p, CSPMD_PLACEMENT_PARTIAL);
    ck_assert_int_eq(cspmd_ltype_placement(CSPMD_LT_V, -1, &p), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(), "Cannot convert plain Varying to a DTensor placement. "
                                         "Use S(dim) to specify which tensor dimension is "
                                         "sharded.");
    ck_assert_int_eq(p, CSPMD_PLACEMENT_PARTIAL); /* untouched */
    ck_assert_int_eq(cspmd_ltype_placement(CSPMD_LT_NONE, -1, &p), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_ltype_placement(CSPMD_LT_R, -1, NULL), CSPMD_ERR_MISUSE);
}
END_TEST

Suite *suite_placement(void)
{
    Suite *s = suite_create("placement");
    TCase *tc = tcase_create("placement");
    tcase_add_test(tc, test_placement_ltype);
    tcase_add_test(tc, test_ltype_placement);
    suite_add_tcase(s, tc);
    return s;
}
