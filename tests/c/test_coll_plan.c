/* Collective plans: no-op detection, torch.chunk sizing and the backward
 * call a forward call makes. */
#include "cspmd.h"
#include "ctype_helpers.h"
#include "suites.h"

START_TEST(test_noop)
{
    cspmd_coll_t conv = CSPMD_COLL_CONVERT, redist = CSPMD_COLL_REDISTRIBUTE;
    ck_assert_int_eq(cspmd_coll_noop(conv, C(CSPMD_LT_R), C(CSPMD_LT_R)), 1);
    ck_assert_int_eq(cspmd_coll_noop(conv, C(CSPMD_LT_R), C(CSPMD_LT_I)), 0);
    ck_assert_int_eq(cspmd_coll_noop(conv, C(CSPMD_LT_V), S(1)), 1); /* V and S(1) share V */
    ck_assert_int_eq(cspmd_coll_noop(redist, S(0), S(0)), 1);
    ck_assert_int_eq(cspmd_coll_noop(redist, S(0), S(1)), 0); /* an all_to_all */
    ck_assert_int_eq(cspmd_coll_noop(CSPMD_COLL_REINTERPRET, C(CSPMD_LT_P), C(CSPMD_LT_P)), 1);
    ck_assert_int_eq(cspmd_coll_noop(CSPMD_COLL_REINTERPRET, C(CSPMD_LT_V), C(CSPMD_LT_P)), 0);
    /* reinterpret refuses S(i): never a no-op, even between equal shards */
    ck_assert_int_eq(cspmd_coll_noop(CSPMD_COLL_REINTERPRET, S(0), S(0)), 0);
    ck_assert_int_eq(cspmd_coll_noop(CSPMD_COLL_REINTERPRET, C(CSPMD_LT_V), S(1)), 0);
    ck_assert_int_eq(cspmd_coll_noop(CSPMD_COLL_REINTERPRET, S(1), C(CSPMD_LT_V)), 0);
    /* A collective communicates even between equal types. */
    ck_assert_int_eq(cspmd_coll_noop(CSPMD_COLL_ALL_TO_ALL, S(0), S(0)), 0);
    ck_assert_int_eq(cspmd_coll_noop(CSPMD_COLL_ALL_REDUCE, C(CSPMD_LT_P), C(CSPMD_LT_P)), 0);
    /* broadcast leaves R and I alone, and nothing else */
    cspmd_coll_t bc = CSPMD_COLL_BROADCAST;
    ck_assert_int_eq(cspmd_coll_noop(bc, C(CSPMD_LT_R), C(CSPMD_LT_R)), 1);
    ck_assert_int_eq(cspmd_coll_noop(bc, C(CSPMD_LT_I), C(CSPMD_LT_I)), 1);
    ck_assert_int_eq(cspmd_coll_noop(bc, C(CSPMD_LT_V), C(CSPMD_LT_V)), 0);
    ck_assert_int_eq(cspmd_coll_noop(bc, C(CSPMD_LT_P), C(CSPMD_LT_P)), 0);
    ck_assert_int_eq(cspmd_coll_noop(bc, C(CSPMD_LT_R), C(CSPMD_LT_I)), 0);
    /* every row: I -> I is a no-op exactly when its NOOP column admits one */
#define ROW_NOOP(name, text, noop)                                                            \
    ck_assert_int_eq(cspmd_coll_noop(CSPMD_COLL_##name, C(CSPMD_LT_I), C(CSPMD_LT_I)),          \
                     CSPMD_NOOP_##noop != CSPMD_NOOP_NEVER);
    CSPMD_COLL_LIST(ROW_NOOP)
#undef ROW_NOOP
    ck_assert_int_eq(cspmd_coll_noop((cspmd_coll_t)CSPMD_COLL_COUNT, C(CSPMD_LT_I), C(CSPMD_LT_I)),
                     0);
}
END_TEST

START_TEST(test_split)
{
    cspmd_ctype_t mid = C(CSPMD_LT_NONE);
    ck_assert_int_eq(cspmd_coll_split(CSPMD_COLL_REINTERPRET, C(CSPMD_LT_I), C(CSPMD_LT_V), &mid),
                     1);
    ck_assert_int_eq(mid.ltype, CSPMD_LT_R);
    ck_assert_int_eq(mid.shard_dim, -1);
    mid = C(CSPMD_LT_NONE);
    ck_assert_int_eq(cspmd_coll_split(CSPMD_COLL_REINTERPRET, C(CSPMD_LT_I), C(CSPMD_LT_P), &mid),
                     1);
    ck_assert_int_eq(mid.ltype, CSPMD_LT_R);
    /* one node: every other pair, every other op, shards, NULL */
    mid = C(CSPMD_LT_NONE);
    ck_assert_int_eq(cspmd_coll_split(CSPMD_COLL_REINTERPRET, C(CSPMD_LT_I), C(CSPMD_LT_R), &mid),
                     0);
    ck_assert_int_eq(cspmd_coll_split(CSPMD_COLL_REINTERPRET, C(CSPMD_LT_R), C(CSPMD_LT_V), &mid),
                     0);
    ck_assert_int_eq(cspmd_coll_split(CSPMD_COLL_CONVERT, C(CSPMD_LT_I), C(CSPMD_LT_V), &mid), 0);
    ck_assert_int_eq(cspmd_coll_split(CSPMD_COLL_REINTERPRET, C(CSPMD_LT_I), S(0), &mid), 0);
    ck_assert_int_eq(mid.ltype, CSPMD_LT_NONE); /* untouched */
    ck_assert_int_eq(cspmd_coll_split(CSPMD_COLL_REINTERPRET, C(CSPMD_LT_I), C(CSPMD_LT_V), NULL),
                     0);

    ck_assert_int_eq(cspmd_coll_split_backward_dtype(1, 0, 0), CSPMD_DTYPE_FROM_BACKWARD);
    ck_assert_int_eq(cspmd_coll_split_backward_dtype(1, 1, 1), CSPMD_DTYPE_FROM_BACKWARD);
    ck_assert_int_eq(cspmd_coll_split_backward_dtype(0, 1, 1), CSPMD_DTYPE_FROM_OP);
    ck_assert_int_eq(cspmd_coll_split_backward_dtype(0, 1, 0), CSPMD_DTYPE_FROM_INPUT);
    ck_assert_int_eq(cspmd_coll_split_backward_dtype(0, 0, 1), CSPMD_DTYPE_FROM_NONE);
    ck_assert_int_eq(cspmd_coll_split_backward_dtype(0, 0, 0), CSPMD_DTYPE_FROM_NONE);
}
END_TEST

START_TEST(test_chunk)
{
    /* torch.chunk(10, 4): 3, 3, 3, 1. */
    int64_t want[4][2] = {{0, 3}, {3, 3}, {6, 3}, {9, 1}};
    for (int s = 0; s < 4; s++) {
        int64_t off = -1, len = -1;
        ck_assert_int_eq(cspmd_coll_chunk(10, 4, s, &off, &len), CSPMD_OK);
        ck_assert_int_eq(off, want[s][0]);
        ck_assert_int_eq(len, want[s][1]);
    }
    /* torch.chunk(4, 3): 2, 2, then an empty piece clipped to the end. */
    int64_t off, len;
    ck_assert_int_eq(cspmd_coll_chunk(4, 3, 2, &off, &len), CSPMD_OK);
    ck_assert_int_eq(off, 4);
    ck_assert_int_eq(len, 0);
    ck_assert_int_eq(cspmd_coll_chunk(0, 2, 1, &off, &len), CSPMD_OK);
    ck_assert_int_eq(off, 0);
    ck_assert_int_eq(len, 0);
    /* No overflow near the top of int64. */
    ck_assert_int_eq(cspmd_coll_chunk(INT64_MAX, 2, 1, &off, &len), CSPMD_OK);
    ck_assert_int_eq(off, INT64_MAX / 2 + 1);
    ck_assert_int_eq(len, INT64_MAX / 2);
    ck_assert_int_eq(cspmd_coll_chunk(10, 4, 4, &off, &len), CSPMD_ERR_VALUE);
    ck_assert_int_eq(cspmd_coll_chunk(10, 0, 0, &off, &len), CSPMD_ERR_VALUE);
    ck_assert_int_eq(cspmd_coll_chunk(-1, 2, 0, &off, &len), CSPMD_ERR_VALUE);
    ck_assert_int_eq(cspmd_coll_chunk(10, 2, 0, NULL, &len), CSPMD_ERR_MISUSE);
}
END_TEST

static cspmd_coll_step_t step(cspmd_coll_t op, cspmd_ctype_t src, cspmd_ctype_t dst, int64_t a,
                              int64_t b)
{
    cspmd_coll_step_t s = {op, src, dst, a, b};
    return s;
}

START_TEST(test_backward_step_all_to_all)
{
    cspmd_coll_step_t fwd = step(CSPMD_COLL_ALL_TO_ALL, S(0), S(1), 0, 1), bwd;
    cspmd_coll_sizes_t sizes;
    ck_assert_int_eq(cspmd_coll_backward_step(&fwd, 0, &bwd, &sizes), CSPMD_OK);
    ck_assert_int_eq(bwd.op, CSPMD_COLL_ALL_TO_ALL);
    ck_assert_int_eq(bwd.src.shard_dim, 0); /* S(fwd split) -> S(fwd concat) */
    ck_assert_int_eq(bwd.dst.shard_dim, 1);
    ck_assert_int_eq(bwd.dim_a, 1);
    ck_assert_int_eq(bwd.dim_b, 0);
    ck_assert_int_eq(sizes, CSPMD_COLL_SIZES_SWAPPED);
    /* V -> V stacks: the backward is V -> V too, dims swapped. */
    fwd = step(CSPMD_COLL_ALL_TO_ALL, C(CSPMD_LT_V), C(CSPMD_LT_V), 2, 0);
    ck_assert_int_eq(cspmd_coll_backward_step(&fwd, 1, &bwd, &sizes), CSPMD_OK);
    ck_assert_int_eq(bwd.src.shard_dim, -1);
    ck_assert_int_eq(bwd.dst.shard_dim, -1);
    ck_assert_int_eq(bwd.dim_a, 0);
    ck_assert_int_eq(bwd.dim_b, 2);
}
END_TEST

START_TEST(test_backward_step_shards_and_chunks)
{
    cspmd_coll_step_t fwd = step(CSPMD_COLL_ALL_GATHER, S(1), C(CSPMD_LT_R), 1, -1), bwd;
    cspmd_coll_sizes_t sizes;
    ck_assert_int_eq(cspmd_coll_backward_step(&fwd, 1, &bwd, &sizes), CSPMD_OK);
    ck_assert_int_eq(bwd.op, CSPMD_COLL_REDUCE_SCATTER);
    ck_assert_int_eq(bwd.dst.shard_dim, 1);
    ck_assert_int_eq(bwd.dim_a, -1); /* the shard dim decides */
    ck_assert_int_eq(sizes, CSPMD_COLL_SIZES_SAME);
    /* all_gather V -> R stacks along gather_dim: its backward keeps it. */
    fwd = step(CSPMD_COLL_ALL_GATHER, C(CSPMD_LT_V), C(CSPMD_LT_R), 2, -1);
    ck_assert_int_eq(cspmd_coll_backward_step(&fwd, 0, &bwd, &sizes), CSPMD_OK);
    ck_assert_int_eq(bwd.dim_a, 2);
    /* convert R -> S(0) chunks: its backward needs the pieces' sizes. */
    fwd = step(CSPMD_COLL_CONVERT, C(CSPMD_LT_R), S(0), 0, -1);
    ck_assert_int_eq(cspmd_coll_backward_step(&fwd, 0, &bwd, &sizes), CSPMD_OK);
    ck_assert_int_eq(bwd.op, CSPMD_COLL_CONVERT);
    ck_assert_int_eq(bwd.src.shard_dim, 0);
    ck_assert_int_eq(bwd.dst.ltype, CSPMD_LT_P);
    ck_assert_int_eq(sizes, CSPMD_COLL_SIZES_CHUNKS);
    /* ... unless it was given them. */
    ck_assert_int_eq(cspmd_coll_backward_step(&fwd, 1, &bwd, &sizes), CSPMD_OK);
    ck_assert_int_eq(sizes, CSPMD_COLL_SIZES_SAME);
    /* broadcast carries its root as dim_a, forward and back. */
    fwd = step(CSPMD_COLL_BROADCAST, C(CSPMD_LT_V), C(CSPMD_LT_R), 3, 0);
    ck_assert_int_eq(cspmd_coll_backward_step(&fwd, 0, &bwd, &sizes), CSPMD_OK);
    ck_assert_int_eq(bwd.op, CSPMD_COLL_BROADCAST);
    ck_assert_int_eq(bwd.src.ltype, CSPMD_LT_P);
    ck_assert_int_eq(bwd.dst.ltype, CSPMD_LT_V);
    ck_assert_int_eq(bwd.dim_a, 3);
    ck_assert_int_eq(sizes, CSPMD_COLL_SIZES_SAME);
    fwd = step(CSPMD_COLL_ALL_REDUCE, C(CSPMD_LT_R), C(CSPMD_LT_R), -1, -1);
    ck_assert_int_eq(cspmd_coll_backward_step(&fwd, 0, &bwd, &sizes), CSPMD_ERR_VALUE);
    ck_assert_int_eq(cspmd_coll_backward_step(NULL, 0, &bwd, &sizes), CSPMD_ERR_MISUSE);
}
END_TEST

Suite *suite_coll_plan(void)
{
    Suite *s = suite_create("coll_plan");
    TCase *tc = tcase_create("coll_plan");
    tcase_add_test(tc, test_noop);
    tcase_add_test(tc, test_split);
    tcase_add_test(tc, test_chunk);
    tcase_add_test(tc, test_backward_step_all_to_all);
    tcase_add_test(tc, test_backward_step_shards_and_chunks);
    suite_add_tcase(s, tc);
    return s;
}
