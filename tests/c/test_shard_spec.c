/* The partition spec of S(d) annotations (cspmd_spec_from_shards). */
#include "cspmd.h"
#include "suites.h"
#include "tp_dp_axes.h"

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

/* shard_types_to_partition_spec's rule: order places entries first. */
START_TEST(test_layout_by_order)
{
    cspmd_axis_key_t name;
    ck_assert_int_eq(cspmd_axis_key_of_name("cp", &name), CSPMD_OK);
    cspmd_axis_key_t keys[4] = {TP, DP, CSPMD_AXIS_TRIVIAL, name};
    int32_t dims[4] = {0, 0, 1, -1}, sd[4] = {9, 9, 9, 9}, sp[4] = {9, 9, 9, 9};
    int32_t order[5] = {1, -1, 0, 3, 2}; /* dp then tp on dim 0; -1 names no entry */
    ck_assert_int_eq(cspmd_shards_layout(keys, dims, sd, sp, 4, order, 5, 2, 1), CSPMD_OK);
    ck_assert_int_eq(sd[0], 0); ck_assert_int_eq(sp[0], 1);
    ck_assert_int_eq(sd[1], 0); ck_assert_int_eq(sp[1], 0);
    ck_assert_int_eq(sd[2], 1); ck_assert_int_eq(sp[2], 1); /* a trivial axis is kept */
    ck_assert_int_eq(sd[3], 1); ck_assert_int_eq(sp[3], 0); /* in order */
    /* A repeated index counts once. */
    int32_t twice[3] = {0, 0, 1};
    ck_assert_int_eq(cspmd_shards_layout(keys, dims, sd, sp, 2, twice, 3, 2, 1), CSPMD_OK);
    ck_assert_int_eq(sp[0], 0);
    ck_assert_int_eq(sp[1], 1);
}
END_TEST

START_TEST(test_layout_errors)
{
    cspmd_axis_key_t name;
    ck_assert_int_eq(cspmd_axis_key_of_name("cp", &name), CSPMD_OK);
    cspmd_axis_key_t keys[3] = {TP, name, DP};
    int32_t dims[3] = {0, 0, 0}, sd[3] = {9, 9, 9}, sp[3] = {9, 9, 9};
    int32_t order[1] = {2};
    /* The first entry order leaves unplaced on a taken dim, with the axes
     * placed so far. */
    ck_assert_int_eq(cspmd_shards_layout(keys, dims, sd, sp, 3, order, 1, 2, 1),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "Tensor dim 0 is sharded on multiple axes (dp, tp) but "
                                         "axis_order does not resolve their ordering. Pass all "
                                         "conflicting axes in axis_order.");
    ck_assert_int_eq(sd[0], 9); /* nothing written */
    ck_assert_int_eq(cspmd_shards_layout(keys, dims, sd, sp, 3, NULL, 0, 2, 1),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "Tensor dim 0 is sharded on multiple axes (tp, 'cp') "
                                         "but axis_order does not resolve their ordering. Pass "
                                         "all conflicting axes in axis_order.");
    /* In placement order, a dim out of range is met first. */
    dims[1] = 2;
    ck_assert_int_eq(cspmd_shards_layout(keys, dims, sd, sp, 3, NULL, 0, 2, 1),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "S(2) is out of bounds for tensor with ndim=2");
    /* The annotation rule names every axis on the dim. */
    dims[1] = 1;
    ck_assert_int_eq(cspmd_shards_layout(keys, dims, sd, sp, 3, NULL, 0, 2, 0),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "Tensor dim 0 is sharded on multiple axes (tp, dp). Use "
                                         "an explicit PartitionSpec to specify the axis "
                                         "ordering.");
    int32_t bad[1] = {3};
    ck_assert_int_eq(cspmd_shards_layout(keys, dims, sd, sp, 3, bad, 1, 2, 1), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_shards_layout(keys, dims, sd, sp, 3, NULL, 0, -1, 1), CSPMD_ERR_VALUE);
    ck_assert_int_eq(cspmd_shards_layout(keys, dims, sd, sp, -1, NULL, 0, 2, 1), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(sd[0], 9);
}
END_TEST

Suite *suite_shard_spec(void)
{
    Suite *s = suite_create("shard_spec");
    TCase *tc = tcase_create("shard_spec");
    tcase_add_checked_fixture(tc, h_axes_named, h_axes_reset);
    tcase_add_test(tc, test_one_axis_per_dim);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_reports_the_first_dim_sharded_twice);
    tcase_add_test(tc, test_layout_by_order);
    tcase_add_test(tc, test_layout_errors);
    suite_add_tcase(s, tc);
    return s;
}
