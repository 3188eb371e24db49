/* Annotations as written (annotation.c): name keys, merge_types' conflict
 * check, and a local type given with a partition spec. */
#include <string.h>

#include "cspmd.h"
#include "suites.h"
#include "tp_dp_axes.h"

START_TEST(test_name_keys)
{
    cspmd_axis_key_t a, b, c;
    ck_assert_int_eq(cspmd_axis_key_of_name("tp", &a), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_key_of_name("dp", &b), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_key_of_name("tp", &c), CSPMD_OK);
    ck_assert(a < 0 && b < 0 && a != b && a == c);
    /* resetting the axis names keeps the keys */
    cspmd_axis_names_reset();
    ck_assert_int_eq(cspmd_axis_key_of_name("tp", &c), CSPMD_OK);
    ck_assert_int_eq(a, c);
    ck_assert_int_eq(cspmd_axis_key_of_name("", &c), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd: an axis name must not be empty");
    ck_assert_int_eq(cspmd_axis_key_of_name(NULL, &c), CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_merge_conflicts)
{
    cspmd_axis_key_t tp_name, dp_name;
    ck_assert_int_eq(cspmd_axis_key_of_name("tp", &tp_name), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_key_of_name("dp", &dp_name), CSPMD_OK);
    /* {"tp": R}, {"dp": V, "tp": R}, {TP: P}: keys written differently never conflict */
    cspmd_axis_key_t keys[4] = {tp_name, dp_name, tp_name, TP};
    cspmd_ltype_t lts[4] = {CSPMD_LT_R, CSPMD_LT_V, CSPMD_LT_R, CSPMD_LT_P};
    int32_t dims[4] = {-1, -1, -1, -1};
    ck_assert_int_eq(cspmd_annotation_merge_check(keys, lts, dims, 4), CSPMD_OK);
    ck_assert_int_eq(cspmd_annotation_merge_check(NULL, NULL, NULL, 0), CSPMD_OK);
    /* {"tp": R}, {"tp": V} */
    lts[2] = CSPMD_LT_V;
    ck_assert_int_eq(cspmd_annotation_merge_check(keys, lts, dims, 4), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "Conflicting types on axis 'tp': R and V");
    /* S(0) and S(1) on a MeshAxis key, shown by its display name */
    cspmd_axis_key_t k2[2] = {TP, TP};
    cspmd_ltype_t v2[2] = {CSPMD_LT_V, CSPMD_LT_V};
    int32_t d2[2] = {0, 1};
    ck_assert_int_eq(cspmd_annotation_merge_check(k2, v2, d2, 2), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "Conflicting types on axis tp: S(0) and S(1)");
    d2[1] = -1; /* S(0) and V differ too */
    ck_assert_int_eq(cspmd_annotation_merge_check(k2, v2, d2, 2), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "Conflicting types on axis tp: S(0) and V");
    d2[0] = -1;
    ck_assert_int_eq(cspmd_annotation_merge_check(k2, v2, d2, 2), CSPMD_OK);
    v2[0] = CSPMD_LT_NONE;
    ck_assert_int_eq(cspmd_annotation_merge_check(k2, v2, d2, 2), CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_spec_axes_must_be_varying)
{
    cspmd_axis_key_t tp_name;
    ck_assert_int_eq(cspmd_axis_key_of_name("tp", &tp_name), CSPMD_OK);
    cspmd_axis_key_t keys[2] = {TP, DP}, resolved[2] = {TP, DP};
    cspmd_ltype_t lts[2] = {CSPMD_LT_V, CSPMD_LT_R};
    int32_t dims[2] = {-1, -1};
    /* spec ("tp",) with "tp" resolving to TP: V there */
    cspmd_axis_key_t spec[1] = {tp_name}, spec_resolved[1] = {TP};
    ck_assert_int_eq(cspmd_annotation_check_spec(1, keys, resolved, lts, dims, 2, spec,
                                                 spec_resolved, 1),
                     CSPMD_OK);
    /* spec (DP,): R there; the axis as written in the message */
    spec[0] = DP;
    spec_resolved[0] = DP;
    ck_assert_int_eq(cspmd_annotation_check_spec(1, keys, resolved, lts, dims, 2, spec,
                                                 spec_resolved, 1),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "SpmdType: axis MeshAxis(2:4) appears in the "
                                         "partition_spec but its local type is R, not V");
    /* a name that resolves to nothing here matches only itself */
    spec[0] = tp_name;
    spec_resolved[0] = -1;
    lts[0] = CSPMD_LT_I;
    ck_assert_int_eq(cspmd_annotation_check_spec(1, keys, resolved, lts, dims, 2, spec,
                                                 spec_resolved, 1),
                     CSPMD_OK);
    keys[0] = tp_name;
    ck_assert_int_eq(cspmd_annotation_check_spec(1, keys, resolved, lts, dims, 2, spec,
                                                 spec_resolved, 1),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "SpmdType: axis 'tp' appears in the partition_spec "
                                         "but its local type is I, not V");
    /* S(d) with an explicit spec, even an empty one; without a spec nothing is checked */
    lts[0] = CSPMD_LT_V;
    dims[0] = 0;
    ck_assert_int_eq(cspmd_annotation_check_spec(1, keys, resolved, lts, dims, 2, NULL, NULL, 0),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "SpmdType: S(i) entries in local_type cannot be "
                                         "combined with an explicit partition_spec");
    ck_assert_int_eq(cspmd_annotation_check_spec(0, keys, resolved, lts, dims, 2, spec,
                                                 spec_resolved, 1),
                     CSPMD_OK);
}
END_TEST

START_TEST(test_specs_agree)
{
    cspmd_axis_key_t tp;
    ck_assert_int_eq(cspmd_axis_key_of_name("tp", &tp), CSPMD_OK);
    cspmd_axis_key_t T = CSPMD_AXIS_TRIVIAL;
    /* PartitionSpec('tp', None) and PartitionSpec((TP, trivial), None):
     * written apart, the same axes once resolved. */
    cspmd_axis_key_t w[] = {2, 1, tp, 0, 2, 2, TP, T, 0};
    cspmd_axis_key_t r[] = {2, 1, TP, 0, 2, 2, TP, T, 0};
    ck_assert_int_eq(cspmd_annotation_specs_check(w, r, 9, "A and B"), CSPMD_OK);
    /* Written alike: no resolution needed. */
    cspmd_axis_key_t w2[] = {1, 1, tp, 1, 1, tp};
    cspmd_axis_key_t r2[] = {1, 1, -1, 1, 1, -1};
    ck_assert_int_eq(cspmd_annotation_specs_check(w2, r2, 6, "A and B"), CSPMD_OK);
    ck_assert_int_eq(cspmd_annotation_specs_check(w2, r2, 0, ""), CSPMD_OK);
    /* Different axes, different ranks, an unresolved name. */
    cspmd_axis_key_t w3[] = {1, 1, TP, 1, 1, DP};
    ck_assert_int_eq(cspmd_annotation_specs_check(w3, w3, 6, "PartitionSpec(tp) and X"),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "Conflicting PartitionSpecs: PartitionSpec(tp) and X");
    cspmd_axis_key_t w4[] = {1, 1, TP, 2, 1, TP, 0};
    ck_assert_int_eq(cspmd_annotation_specs_check(w4, w4, 7, "A and B"), CSPMD_ERR_SPMD_TYPE);
    cspmd_axis_key_t w5[] = {1, 1, TP, 1, 1, tp};
    cspmd_axis_key_t r5[] = {1, 1, TP, 1, 1, -1};
    ck_assert_int_eq(cspmd_annotation_specs_check(w5, r5, 6, "A and B"), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "cannot be compared"));
    /* Bad encodings. */
    cspmd_axis_key_t bad[] = {1, 5, TP};
    ck_assert_int_eq(cspmd_annotation_specs_check(bad, bad, 3, ""), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_annotation_specs_check(w, r, 8, ""), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_annotation_specs_check(w, r, 9, NULL), CSPMD_ERR_MISUSE);
}
END_TEST

Suite *suite_annotation(void)
{
    Suite *s = suite_create("annotation");
    TCase *tc = tcase_create("annotation");
    tcase_add_checked_fixture(tc, h_axes_tp_named, h_axes_reset); /* dp unnamed */
    tcase_add_test(tc, test_name_keys);
    tcase_add_test(tc, test_merge_conflicts);
    tcase_add_test(tc, test_spec_axes_must_be_varying);
    tcase_add_test(tc, test_specs_agree);
    suite_add_tcase(s, tc);
    return s;
}
