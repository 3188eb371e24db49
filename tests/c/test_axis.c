/* Mesh axes: canonical layouts, ranks -> layout, order,
 * orthogonality, flattening, names and display. */
#include <pthread.h>
#include <string.h>

#include "axis_helpers.h"
#include "core.h"
#include "cspmd.h"
#include "suites.h"

static cspmd_axis_t axn(int n, const int64_t *sizes, const int64_t *strides)
{
    cspmd_axis_t a = 999999;
    ck_assert_int_eq(cspmd_axis_intern(sizes, strides, n, &a), CSPMD_OK);
    return a;
}

static cspmd_axis_t ranks(int n, const int64_t *r)
{
    cspmd_axis_t a = 999999;
    ck_assert_int_eq(cspmd_axis_from_ranks(r, n, &a), CSPMD_OK);
    return a;
}

static void named(cspmd_axis_t a, const char *name)
{
    ck_assert_int_eq(cspmd_axis_name_add(a, name), CSPMD_OK);
}

static void setup(void)
{
    cspmd_axis_names_reset();
}

#define DISP(a) cspmd_axis_display((a), 0)
#define DEBUG(a) cspmd_axis_display((a), 1)

START_TEST(test_canonical_spec_examples)
{
    ck_assert_uint_eq(axn(2, (int64_t[]){2, 2}, (int64_t[]){2, 1}), h_axis(4, 1));
    ck_assert_uint_eq(axn(2, (int64_t[]){2, 3}, (int64_t[]){3, 1}), h_axis(6, 1));
    cspmd_axis_t a = axn(2, (int64_t[]){3, 2}, (int64_t[]){4, 1});
    int64_t s[CSPMD_MAX_MODES], d[CSPMD_MAX_MODES];
    ck_assert_int_eq(cspmd_axis_layout(a, s, d), 2);
    ck_assert(s[0] == 3 && s[1] == 2 && d[0] == 4 && d[1] == 1);
    ck_assert_uint_ne(h_axis(4, 1), h_axis(4, 2));
    ck_assert_uint_eq(h_axis(4, 1), h_axis(4, 1));
}
END_TEST

START_TEST(test_canonical_merges_and_drops)
{
    ck_assert_uint_eq(axn(3, (int64_t[]){2, 2, 2}, (int64_t[]){4, 2, 1}), h_axis(8, 1));
    ck_assert_uint_eq(axn(3, (int64_t[]){4, 1, 2}, (int64_t[]){2, 7, 1}), h_axis(8, 1));
    ck_assert_uint_eq(axn(2, (int64_t[]){2, 2}, (int64_t[]){1, 2}),
                      axn(2, (int64_t[]){2, 2}, (int64_t[]){1, 2})); /* not merged */
    ck_assert_int_eq(cspmd_axis_layout(axn(2, (int64_t[]){2, 2}, (int64_t[]){1, 2}), NULL, NULL),
                     2);
    /* every size-1 layout is the trivial axis */
    ck_assert_uint_eq(h_axis(1, 5), CSPMD_AXIS_TRIVIAL);
    ck_assert_uint_eq(axn(2, (int64_t[]){1, 1}, (int64_t[]){1, 1}), CSPMD_AXIS_TRIVIAL);
    ck_assert_uint_eq(axn(0, NULL, NULL), CSPMD_AXIS_TRIVIAL);
}
END_TEST

START_TEST(test_intern_errors)
{
    cspmd_axis_t a;
    int64_t s[9] = {2, 2, 2, 2, 2, 2, 2, 2, 2}, d[9] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    ck_assert_int_eq(cspmd_axis_intern(s, d, 9, &a), CSPMD_ERR_VALUE); /* none merge */
    ck_assert_str_eq(cspmd_last_error(), "a mesh axis layout of 9 modes (after merging); cspmd "
                                         "supports layouts of at most 8 modes");
    int64_t dd[9] = {256, 128, 64, 32, 16, 8, 4, 2, 1}; /* all merge into 512:1 */
    ck_assert_int_eq(cspmd_axis_intern(s, dd, 9, &a), CSPMD_OK);
    ck_assert_uint_eq(a, h_axis(512, 1));
    int64_t many[65] = {0};
    ck_assert_int_eq(cspmd_axis_intern(many, many, 65, &a), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_axis_intern: 65 modes (expected 0..64)");
    ck_assert_int_eq(cspmd_axis_intern(s, d, -1, &a), CSPMD_ERR_MISUSE);
    int64_t z = 0, one = 1, neg = -1;
    ck_assert_int_eq(cspmd_axis_intern(&z, &one, 1, &a), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_axis_intern: mode 0 has size 0 (must be >= 1)");
    ck_assert_int_eq(cspmd_axis_intern(&one, &neg, 1, &a), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_axis_intern: mode 0 has stride -1 (must be >= 0)");
    ck_assert_int_eq(cspmd_axis_intern(s, d, 1, NULL), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_axis_intern: out is NULL");
    ck_assert_int_eq(cspmd_axis_intern(NULL, d, 1, &a), CSPMD_ERR_MISUSE);
    int64_t big[2] = {INT64_C(1) << 40, INT64_C(1) << 40}, bd[2] = {1, 1};
    ck_assert_int_eq(cspmd_axis_intern(big, bd, 2, &a), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_axis_intern: layout overflows int64");
}
END_TEST

START_TEST(test_queries)
{
    cspmd_axis_t a = axn(2, (int64_t[]){3, 2}, (int64_t[]){4, 1});
    ck_assert_int_eq(cspmd_axis_size(a), 6);
    ck_assert_int_eq(cspmd_axis_max_stride(a), 4);
    ck_assert_int_eq(cspmd_axis_size(CSPMD_AXIS_TRIVIAL), 1);
    ck_assert_int_eq(cspmd_axis_max_stride(CSPMD_AXIS_TRIVIAL), 0);
    ck_assert_int_eq(cspmd_axis_layout(CSPMD_AXIS_TRIVIAL, NULL, NULL), 0);
    ck_assert_int_eq(cspmd_axis_layout(4000000000u, NULL, NULL), -1);
    ck_assert_int_eq(cspmd_axis_size(4000000000u), 0);
    ck_assert_int_eq(cspmd_axis_max_stride(4000000000u), 0);
    ck_assert_int_eq(cspmdi_axis_valid(a), 1);
    ck_assert_int_eq(cspmdi_axis_valid(0), 1);
    ck_assert_int_eq(cspmdi_axis_valid(4000000000u), 0);
}
END_TEST

START_TEST(test_from_ranks)
{
    ck_assert_uint_eq(ranks(4, (int64_t[]){0, 1, 2, 3}), h_axis(4, 1));
    ck_assert_uint_eq(ranks(2, (int64_t[]){0, 4}), h_axis(2, 4));
    ck_assert_uint_eq(ranks(4, (int64_t[]){0, 1, 4, 5}),
                      axn(2, (int64_t[]){2, 2}, (int64_t[]){4, 1}));
    /* unsorted, shifted to start at 0 */
    ck_assert_uint_eq(ranks(4, (int64_t[]){9, 5, 8, 4}),
                      axn(2, (int64_t[]){2, 2}, (int64_t[]){4, 1}));
    ck_assert_uint_eq(ranks(6, (int64_t[]){0, 1, 2, 4, 5, 6}),
                      axn(2, (int64_t[]){2, 3}, (int64_t[]){4, 1}));
    ck_assert_uint_eq(ranks(1, (int64_t[]){7}), CSPMD_AXIS_TRIVIAL);
    ck_assert_uint_eq(ranks(8, (int64_t[]){0, 2, 4, 6, 8, 10, 12, 14}), h_axis(8, 2));
}
END_TEST

START_TEST(test_from_ranks_errors)
{
    cspmd_axis_t a;
    ck_assert_int_eq(cspmd_axis_from_ranks((int64_t[]){0}, 0, &a), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(), "ProcessGroup has no ranks");
    ck_assert_int_eq(cspmd_axis_from_ranks((int64_t[]){0, 1, 3}, 3, &a), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(),
                     "Ranks [0, 1, 3] do not form a strided layout, so they are not a mesh axis");
    /* the recursive algorithm proposes (2,3):(5,1), which generates other ranks */
    ck_assert_int_eq(cspmd_axis_from_ranks((int64_t[]){0, 1, 5, 6, 7, 8}, 6, &a),
                     CSPMD_ERR_VALUE);
    ck_assert_int_eq(cspmd_axis_from_ranks((int64_t[]){0, 2, 5}, 3, &a), CSPMD_ERR_VALUE);
    ck_assert_int_eq(cspmd_axis_from_ranks((int64_t[]){3, 3, 4}, 3, &a), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(),
                     "Ranks [3, 3, 4] do not form a strided layout, so they are not a mesh axis");
    ck_assert_int_eq(cspmd_axis_from_ranks(NULL, 2, &a), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_axis_from_ranks((int64_t[]){0, 1}, 2, NULL), CSPMD_ERR_MISUSE);
    int64_t many[20];
    for (int i = 0; i < 20; i++)
        many[i] = i * i;
    ck_assert_int_eq(cspmd_axis_from_ranks(many, 20, &a), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(),
                     "Ranks [0, 1, 4, 9, 16, 25, 36, 49, 64, 81, 100, 121, 144, 169, 196, 225, "
                     "...] do not form a strided layout, so they are not a mesh axis");
}
END_TEST

START_TEST(test_le)
{
    cspmd_axis_t a41 = h_axis(4, 1), a21 = h_axis(2, 1), a22 = h_axis(2, 2);
    ck_assert(cspmd_axis_le(a21, a41));
    ck_assert(cspmd_axis_le(a22, a41));
    ck_assert(cspmd_axis_le(a41, a41));
    ck_assert(!cspmd_axis_le(a41, a21));
    ck_assert(!cspmd_axis_le(a21, a22)); /* {0,1} vs {0,2}: neither */
    ck_assert(!cspmd_axis_le(a22, a21));
    ck_assert(cspmd_axis_le(CSPMD_AXIS_TRIVIAL, a41));
    ck_assert(!cspmd_axis_le(a21, CSPMD_AXIS_TRIVIAL));
    cspmd_axis_t b = axn(2, (int64_t[]){2, 2}, (int64_t[]){4, 1});
    ck_assert(cspmd_axis_le(h_axis(2, 4), b));
    ck_assert(cspmd_axis_le(a21, b));
    ck_assert(!cspmd_axis_le(a22, b));
    ck_assert(cspmd_axis_le(h_axis(2, 8), h_axis(16, 1)));
    ck_assert(cspmd_axis_le(b, h_axis(8, 1)));
    /* a layout with repeated ranks: (2,2):(1,1) = {0,1,1,2} */
    cspmd_axis_t rep = axn(2, (int64_t[]){2, 2}, (int64_t[]){1, 1});
    ck_assert(cspmd_axis_le(h_axis(3, 1), rep));
    ck_assert(cspmd_axis_le(a22, rep));
    ck_assert(!cspmd_axis_le(h_axis(2, 3), rep));
    ck_assert(cspmd_axis_le(rep, h_axis(3, 1)));
    ck_assert(!cspmd_axis_le(4000000000u, a41));
    ck_assert(!cspmd_axis_le(a41, 4000000000u));
}
END_TEST

/* Containment is decided for axes of up to 2^26 ranks; past that the
 * checked form says so (the plain form answers 0, never a wrong 1). */
START_TEST(test_le_checked_limit)
{
    int le = -1;
    ck_assert_int_eq(cspmd_axis_le_checked(h_axis(2, 8), h_axis(16, 1), &le), CSPMD_OK);
    ck_assert_int_eq(le, 1);
    ck_assert_int_eq(cspmd_axis_le_checked(h_axis(16, 1), h_axis(2, 8), &le), CSPMD_OK);
    ck_assert_int_eq(le, 0);
    cspmd_axis_t big = h_axis((int64_t)1 << 27, 1), bigger = h_axis((int64_t)1 << 28, 1);
    ck_assert_int_eq(cspmd_axis_le_checked(bigger, big, &le), CSPMD_OK); /* by size */
    ck_assert_int_eq(le, 0);
    le = -1;
    ck_assert_int_eq(cspmd_axis_le_checked(big, bigger, &le), CSPMD_ERR_VALUE);
    ck_assert_int_eq(le, -1); /* untouched */
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "cspmd tests at most 67108864 ranks"));
    ck_assert(!cspmd_axis_le(big, bigger));
}
END_TEST

START_TEST(test_orthogonal)
{
    cspmd_axis_t a[3] = {h_axis(4, 1), h_axis(2, 4)};
    ck_assert(cspmd_axes_orthogonal(a, 2));
    a[1] = a[0];
    ck_assert(!cspmd_axes_orthogonal(a, 2));
    cspmd_axis_t b[3] = {h_axis(2, 5), h_axis(2, 6), h_axis(2, 7)};
    ck_assert(cspmd_axes_orthogonal((cspmd_axis_t[]){b[0], b[1]}, 2));
    ck_assert(cspmd_axes_orthogonal((cspmd_axis_t[]){b[0], b[2]}, 2));
    ck_assert(cspmd_axes_orthogonal((cspmd_axis_t[]){b[1], b[2]}, 2));
    ck_assert(!cspmd_axes_orthogonal(b, 3));
    ck_assert(cspmd_axes_orthogonal((cspmd_axis_t[]){h_axis(4, 1), CSPMD_AXIS_TRIVIAL}, 2));
    ck_assert(cspmd_axes_orthogonal(NULL, 0));
    ck_assert(!cspmd_axes_orthogonal((cspmd_axis_t[]){h_axis(2, 0)}, 1));
    ck_assert(!cspmd_axes_orthogonal((cspmd_axis_t[]){h_axis(4, 1), h_axis(2, 2)}, 2));
    ck_assert(!cspmd_axes_orthogonal((cspmd_axis_t[]){h_axis(4, 1), 4000000000u}, 2));
    /* big strides: no rank enumeration, no overflow */
    ck_assert(cspmd_axes_orthogonal((cspmd_axis_t[]){h_axis(1024, 1), h_axis(1024, 1024),
                                                     h_axis(1024, 1048576)},
                                    3));
}
END_TEST

START_TEST(test_check_orthogonal_messages)
{
    cspmd_axis_t tp = h_axis(4, 1), dp = h_axis(2, 4), sp = h_axis(2, 2);
    named(tp, "tp");
    named(dp, "dp");
    named(sp, "sp");
    ck_assert_int_eq(cspmd_axes_check_orthogonal((cspmd_axis_t[]){tp, dp}, 2), CSPMD_OK);
    ck_assert_int_eq(cspmd_axes_check_orthogonal((cspmd_axis_t[]){dp, tp, sp}, 3),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "Mesh axes tp and sp are not orthogonal (their layouts are not independent "
                     "radix dimensions). All axes in a LocalSpmdType must be mutually orthogonal.");
    cspmd_axis_t a = h_axis(2, 5), b = h_axis(2, 6), c = h_axis(2, 7);
    ck_assert_int_eq(cspmd_axes_check_orthogonal((cspmd_axis_t[]){a, b, c}, 3),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "Mesh axes [MeshAxis(2:5), MeshAxis(2:6), "
                                         "MeshAxis(2:7)] are not mutually orthogonal.");
    ck_assert_int_eq(cspmd_axes_check_orthogonal((cspmd_axis_t[]){tp, 4000000000u}, 2),
                     CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_axes_check_orthogonal: unknown axis id 4000000000");
    ck_assert_int_eq(cspmd_axes_check_orthogonal(NULL, 2), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_axes_check_orthogonal(NULL, 0), CSPMD_OK);
}
END_TEST

START_TEST(test_flatten)
{
    cspmd_axis_t out;
    ck_assert_int_eq(cspmd_axes_flatten((cspmd_axis_t[]){h_axis(2, 8), h_axis(2, 4)}, 2, &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, h_axis(4, 4));
    cspmd_axis_t outer_first[3] = {h_axis(2, 8), h_axis(2, 4), h_axis(4, 1)};
    ck_assert_int_eq(cspmd_axes_flatten(outer_first, 3, &out), CSPMD_OK);
    ck_assert_uint_eq(out, h_axis(16, 1));
    cspmd_axis_t inner_first[3] = {h_axis(4, 1), h_axis(2, 8), h_axis(2, 4)};
    ck_assert_int_eq(cspmd_axes_flatten(inner_first, 3, &out), CSPMD_OK);
    ck_assert_uint_eq(out, h_axis(16, 1));
    ck_assert_int_eq(cspmd_axes_flatten((cspmd_axis_t[]){h_axis(4, 1), h_axis(2, 8)}, 2, &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, axn(2, (int64_t[]){2, 4}, (int64_t[]){8, 1}));
    ck_assert_int_eq(cspmd_axes_flatten((cspmd_axis_t[]){h_axis(4, 1)}, 1, &out), CSPMD_OK);
    ck_assert_uint_eq(out, h_axis(4, 1));
    ck_assert_int_eq(
        cspmd_axes_flatten((cspmd_axis_t[]){h_axis(4, 1), CSPMD_AXIS_TRIVIAL}, 2, &out), CSPMD_OK);
    ck_assert_uint_eq(out, h_axis(4, 1));
}
END_TEST

START_TEST(test_too_many_modes)
{
    /* 9 non-mergeable modes: strides 3^8 .. 1 */
    int64_t pw[9];
    pw[8] = 1;
    for (int k = 7; k >= 0; k--)
        pw[k] = pw[k + 1] * 3;
    int64_t rk[512];
    for (int r = 0; r < 512; r++) {
        rk[r] = 0;
        for (int k = 0; k < 9; k++)
            if (r & (1 << k))
                rk[r] += pw[8 - k];
    }
    cspmd_axis_t out;
    ck_assert_int_eq(cspmd_axis_from_ranks(rk, 512, &out), CSPMD_ERR_VALUE);
    int64_t two[5] = {2, 2, 2, 2, 2};
    cspmd_axis_t hi = axn(5, two, pw), lo = axn(4, two, pw + 5);
    ck_assert(cspmd_axes_orthogonal((cspmd_axis_t[]){hi, lo}, 2));
    ck_assert_int_eq(cspmd_axes_flatten((cspmd_axis_t[]){hi, lo}, 2, &out), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(), "flatten_axes: the flattened layout has more than 8 modes");
    cspmd_axis_t nine[9];
    for (int i = 0; i < 9; i++)
        nine[i] = h_axis(2, (int64_t)1 << i);
    ck_assert(!cspmd_axes_orthogonal(nine, 9));
    ck_assert(cspmd_axes_orthogonal(nine, 8));
}
END_TEST

START_TEST(test_flatten_errors)
{
    cspmd_axis_t out, tp = h_axis(4, 1);
    named(tp, "tp");
    ck_assert_int_eq(cspmd_axes_flatten(NULL, 0, &out), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(), "flatten_axes requires at least one axis");
    ck_assert_int_eq(cspmd_axes_flatten((cspmd_axis_t[]){tp, tp}, 2, &out), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(), "flatten_axes requires orthogonal axes, got (tp, tp)");
    ck_assert_int_eq(cspmd_axes_flatten((cspmd_axis_t[]){tp, h_axis(2, 2)}, 2, &out),
                     CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(),
                     "flatten_axes requires orthogonal axes, got (tp, MeshAxis(2:2))");
    ck_assert_int_eq(cspmd_axes_flatten((cspmd_axis_t[]){tp, 4000000000u}, 2, &out),
                     CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_axes_flatten((cspmd_axis_t[]){tp}, 1, NULL), CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_display_unnamed)
{
    ck_assert_str_eq(DISP(h_axis(4, 1)), "MeshAxis(4:1)");
    ck_assert_str_eq(DISP(axn(2, (int64_t[]){3, 2}, (int64_t[]){4, 1})),
                     "MeshAxis((3, 2):(4, 1))");
    ck_assert_str_eq(DISP(CSPMD_AXIS_TRIVIAL), "MeshAxis(trivial)");
    ck_assert_str_eq(DEBUG(h_axis(4, 1)), "MeshAxis(4:1)");
    ck_assert_str_eq(DEBUG(CSPMD_AXIS_TRIVIAL), "MeshAxis(trivial){1:1}");
    ck_assert_str_eq(DISP(4000000000u), "MeshAxis(<unknown id>)");
}
END_TEST

START_TEST(test_display_named)
{
    cspmd_axis_t a = h_axis(4, 1);
    named(a, "TP");
    ck_assert_str_eq(DISP(a), "TP");
    named(a, "SP");
    ck_assert_str_eq(DISP(a), "SP");
    ck_assert_str_eq(DEBUG(a), "SP/TP{4:1}");
    named(a, "SP"); /* same name twice: one name */
    ck_assert_str_eq(DEBUG(a), "SP/TP{4:1}");
    cspmd_axis_t cp = h_axis(2, 4);
    named(cp, "mesh_cp");
    ck_assert_str_eq(DEBUG(cp), "mesh_cp{2:4}");
    named(CSPMD_AXIS_TRIVIAL, "TP1");
    ck_assert_str_eq(DISP(CSPMD_AXIS_TRIVIAL), "TP1(trivial)");
    ck_assert_str_eq(DEBUG(CSPMD_AXIS_TRIVIAL), "TP1(trivial){1:1}");
}
END_TEST

START_TEST(test_display_default_pg)
{
    cspmd_axis_t w = h_axis(8, 1);
    named(w, "default_pg");
    ck_assert_str_eq(DISP(w), "default_pg");
    named(w, "zz_world");
    ck_assert_str_eq(DISP(w), "zz_world");
    ck_assert_str_eq(DEBUG(w), "default_pg/zz_world{8:1}");
}
END_TEST

START_TEST(test_name_collision)
{
    cspmd_axis_t a = h_axis(4, 1), b = h_axis(2, 1), c = h_axis(8, 1);
    named(a, "mesh_ddp");
    ck_assert_str_eq(DISP(a), "mesh_ddp");
    const char *old = DISP(a);
    named(b, "mesh_ddp");
    ck_assert_str_eq(DISP(a), "mesh_ddp[4:1]");
    ck_assert_str_eq(DISP(b), "mesh_ddp[2:1]");
    ck_assert_str_eq(old, "mesh_ddp"); /* old texts stay valid */
    named(c, "mesh_ddp");
    ck_assert_str_eq(DISP(c), "mesh_ddp[8:1]");
    named(a, "mesh_ddp"); /* future registrations get the suffix too */
    ck_assert_str_eq(DEBUG(a), "mesh_ddp[4:1]{4:1}");
    cspmd_axis_t m = axn(2, (int64_t[]){3, 2}, (int64_t[]){4, 1});
    named(m, "x");
    named(CSPMD_AXIS_TRIVIAL, "x");
    ck_assert_str_eq(DISP(m), "x[(3, 2):(4, 1)]");
    ck_assert_str_eq(DISP(CSPMD_AXIS_TRIVIAL), "x[1:1](trivial)");
    /* the rewritten name was already registered by hand: one entry */
    cspmd_axis_t e = h_axis(2, 64);
    named(e, "y[2:64]");
    named(e, "y");
    named(h_axis(2, 32), "y");
    ck_assert_str_eq(DEBUG(e), "y[2:64]{2:64}");
    ck_assert_str_eq(DISP(h_axis(2, 32)), "y[2:32]");
}
END_TEST

START_TEST(test_name_errors_and_reset)
{
    cspmd_axis_t a = h_axis(4, 1);
    ck_assert_int_eq(cspmd_axis_name_add(4000000000u, "x"), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_axis_name_add: unknown axis id 4000000000");
    ck_assert_int_eq(cspmd_axis_name_add(a, ""), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_axis_name_add: empty name");
    ck_assert_int_eq(cspmd_axis_name_add(a, NULL), CSPMD_ERR_MISUSE);
    named(a, "tp");
    ck_assert_str_eq(DISP(a), "tp");
    cspmd_axis_names_reset();
    ck_assert_str_eq(DISP(a), "MeshAxis(4:1)");
    named(a, "tp2");
    named(h_axis(2, 1), "tp2"); /* collisions are forgotten by reset too */
    cspmd_axis_names_reset();
    named(a, "tp2");
    ck_assert_str_eq(DISP(a), "tp2");
}
END_TEST

START_TEST(test_display_flattened)
{
    cspmd_axis_t dp = h_axis(2, 2), cp = h_axis(2, 1), f = h_axis(4, 1);
    named(cp, "cp"); /* registration order must not matter for the text */
    named(dp, "dp");
    ck_assert_str_eq(DISP(f), "{dp,cp}");
    ck_assert_str_eq(DEBUG(f), "{dp,cp}{4:1}");
    named(f, "dp_cp");
    ck_assert_str_eq(DISP(f), "dp_cp");
    cspmd_axis_names_reset();
    ck_assert_str_eq(DISP(f), "MeshAxis(4:1)");
    /* three components, outermost first; fewest components win */
    cspmd_axis_t a = h_axis(2, 4), b = h_axis(2, 2), c = h_axis(2, 1), all = h_axis(8, 1);
    named(a, "dp");
    named(b, "cp");
    named(c, "tp");
    ck_assert_str_eq(DISP(all), "{dp,cp,tp}");
    named(h_axis(4, 2), "dpcp");
    ck_assert_str_eq(DISP(all), "{dpcp,tp}");
    /* not a flattening of named axes */
    ck_assert_str_eq(DISP(h_axis(16, 1)), "MeshAxis(16:1)");
    ck_assert_str_eq(DISP(h_axis(2, 3)), "MeshAxis(2:3)");
    /* (2,2):(4,1) = {dp, tp} */
    ck_assert_str_eq(DISP(axn(2, (int64_t[]){2, 2}, (int64_t[]){4, 1})), "{dp,tp}");
}
END_TEST

START_TEST(test_sort_outer)
{
    cspmd_axis_t v[4] = {h_axis(4, 1), h_axis(2, 8), 4000000000u, h_axis(2, 4)};
    cspmd_axes_sort_outer(v, 4);
    ck_assert_uint_eq(v[0], h_axis(2, 8));
    ck_assert_uint_eq(v[1], h_axis(2, 4));
    ck_assert_uint_eq(v[2], h_axis(4, 1));
    ck_assert_uint_eq(v[3], 4000000000u);
    /* equal max strides: by display name, then id */
    cspmd_axis_t b = h_axis(2, 4), a = h_axis(4, 4), c = h_axis(3, 4);
    named(a, "zz");
    named(b, "aa");
    cspmd_axis_t w[3] = {a, c, b};
    cspmd_axes_sort_outer(w, 3);
    ck_assert_str_eq(cspmd_axis_display(w[0], 0), "MeshAxis(3:4)");
    ck_assert_uint_eq(w[1], b);
    ck_assert_uint_eq(w[2], a);
    cspmd_axes_sort_outer(NULL, 3); /* no crash */
}
END_TEST

static void *intern_worker(void *arg)
{
    cspmd_axis_t *out = arg;
    for (int i = 0; i < 200; i++) {
        int64_t s = 2, d = 1000 + i;
        if (cspmd_axis_intern(&s, &d, 1, &out[i]) != CSPMD_OK)
            out[i] = 0;
        (void)cspmd_axis_display(out[i], 0);
    }
    return NULL;
}

START_TEST(test_threads_intern)
{
    enum { T = 4 };
    static cspmd_axis_t res[T][200];
    pthread_t th[T];
    for (int t = 0; t < T; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL, intern_worker, res[t]), 0);
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);
    for (int i = 0; i < 200; i++) {
        ck_assert_uint_ne(res[0][i], 0);
        for (int t = 1; t < T; t++)
            ck_assert_uint_eq(res[t][i], res[0][i]);
        ck_assert_int_eq(cspmd_axis_max_stride(res[0][i]), 1000 + i);
    }
}
END_TEST

Suite *suite_axis(void)
{
    Suite *s = suite_create("axis");
    TCase *tc = tcase_create("layout");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_canonical_spec_examples);
    tcase_add_test(tc, test_canonical_merges_and_drops);
    tcase_add_test(tc, test_intern_errors);
    tcase_add_test(tc, test_queries);
    tcase_add_test(tc, test_from_ranks);
    tcase_add_test(tc, test_from_ranks_errors);
    tcase_add_test(tc, test_le);
    tcase_add_test(tc, test_le_checked_limit);
    tcase_add_test(tc, test_orthogonal);
    tcase_add_test(tc, test_check_orthogonal_messages);
    tcase_add_test(tc, test_flatten);
    tcase_add_test(tc, test_flatten_errors);
    tcase_add_test(tc, test_too_many_modes);
    tcase_add_test(tc, test_sort_outer);
    tcase_add_test(tc, test_threads_intern);
    suite_add_tcase(s, tc);
    TCase *tn = tcase_create("names");
    tcase_add_checked_fixture(tn, setup, NULL);
    tcase_add_test(tn, test_display_unnamed);
    tcase_add_test(tn, test_display_named);
    tcase_add_test(tn, test_display_default_pg);
    tcase_add_test(tn, test_name_collision);
    tcase_add_test(tn, test_name_errors_and_reset);
    tcase_add_test(tn, test_display_flattened);
    suite_add_tcase(s, tn);
    return s;
}
