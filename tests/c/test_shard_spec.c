/* The partition spec of S(d) annotations (cspmd_spec_from_shards). */
#include "cspmd.h"
#include "suites.h"

static cspmd_axis_t TP, DP;

static void setup(void)
{
    cspmd_axis_names_reset();
    int64_t s4 = 4, s2 = 2, st1 = 1, st4 = 4;
    ck_assert_int_eq(cspmd_axis_intern(&s4, &st1, 1, &TP), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_intern(&s2, &st4, 1, &DP), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_name_add(TP, "tp"), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_name_add(DP, "dp"), CSPMD_OK);
}

static void teardown(void)
{
    cspmd_axis_names_reset();
}

START_TEST(test_one_axis_per_dim)
{
    cspmd_axis_t axes[3] = {TP, CSPMD_AXIS_TRIVIAL, DP};
    int32_t dims[3] = {-1, 0, 0}; /* S(-1) is the last dim; the trivial axis is skipped */
    cspmd_spec_t spec;
    ck_assert_int_eq(cspmd_spec_from_shards(axes, dims, 3, 3, &spec), CSPMD_OK);
    ck_assert_int_eq(spec.ndim, 3);
    ck_assert_int_eq(spec.nentry[0], 1);
    ck_assert_uint_eq(spec.entry[0][0], DP);
    ck_assert_int_eq(spec.nentry[1], 0);
    ck_assert_int_eq(spec.nentry[2], 1);
    ck_assert_uint_eq(spec.entry[2][0], TP);
    ck_assert_int_eq(cspmd_spec_from_shards(NULL, NULL, 0, 0, &spec), CSPMD_OK);
    ck_assert_int_eq(spec.ndim, 0);
}
END_TEST

START_TEST(test_errors)
{
    cspmd_axis_t axes[2] = {TP, DP};
    int32_t dims[2] = {0, -2}; /* both dim 0 */
    cspmd_spec_t spec = {0};
    spec.ndim = 7;
    ck_assert_int_eq(cspmd_spec_from_shards(axes, dims, 2, 2, &spec), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "Tensor dim 0 is sharded on multiple axes (tp, dp). "
                                         "Use an explicit PartitionSpec to specify the axis "
                                         "ordering.");
    ck_assert_int_eq(spec.ndim, 7); /* untouched */
    dims[0] = 1;
    dims[1] = 2;
    ck_assert_int_eq(cspmd_spec_from_shards(axes, dims, 2, 2, &spec), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "S(2) is out of range for a tensor with 2 dims");
    dims[1] = -3;
    ck_assert_int_eq(cspmd_spec_from_shards(axes, dims, 2, 2, &spec), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "S(-3) is out of range for a tensor with 2 dims");
    ck_assert_int_eq(cspmd_spec_from_shards(axes, dims, 2, CSPMD_MAX_DIMS + 1, &spec),
                     CSPMD_ERR_VALUE);
    ck_assert_int_eq(cspmd_spec_from_shards(axes, dims, 2, 2, NULL), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_spec_from_shards(NULL, dims, 1, 2, &spec), CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_reports_the_first_dim_sharded_twice)
{
    /* As the reference: dims in the order the axes first name them (dim 1
     * here, though dim 0's conflict is met first), with every axis on it. */
    cspmd_axis_t X, Y;
    int64_t s2 = 2, st8 = 8, st16 = 16;
    ck_assert_int_eq(cspmd_axis_intern(&s2, &st8, 1, &X), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_intern(&s2, &st16, 1, &Y), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_name_add(X, "x"), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_name_add(Y, "y"), CSPMD_OK);
    cspmd_axis_t axes[5] = {TP, DP, X, Y, CSPMD_AXIS_TRIVIAL};
    int32_t dims[5] = {1, 0, 0, -1, 1};
    cspmd_spec_t spec = {0};
    ck_assert_int_eq(cspmd_spec_from_shards(axes, dims, 5, 2, &spec), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "Tensor dim 1 is sharded on multiple axes (tp, y). "
                                         "Use an explicit PartitionSpec to specify the axis "
                                         "ordering.");
    ck_assert_int_eq(spec.ndim, 0);
}
END_TEST

Suite *suite_shard_spec(void)
{
    Suite *s = suite_create("shard_spec");
    TCase *tc = tcase_create("shard_spec");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_one_axis_per_dim);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_reports_the_first_dim_sharded_twice);
    suite_add_tcase(s, tc);
    return s;
}
