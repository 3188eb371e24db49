/* Cross-mesh compatibility: reinterpret_mesh, the automatic
 * reinterpretation onto the current mesh, the cross-mesh advice. */
#include <stdlib.h>
#include <string.h>

#include "axis_helpers.h"
#include "core.h"
#include "cspmd.h"
#include "suites.h"

/* A 16-rank mesh: dp 2:8, cp 2:4, tp 4:1, dp_cp 4:4; the "expert" view
 * edp 4:4, ep 2:2, etp 2:1. */
static cspmd_axis_t DP, CP, TP, DPCP, EDP, EP, ETP, TP2;

static void setup(void)
{
    cspmd_axis_names_reset();
    cspmd_axis_print_debug_set(0);
    while (cspmd_mesh_pop() == CSPMD_OK)
        ;
    DP = h_axis(2, 8);
    CP = h_axis(2, 4);
    TP = h_axis(4, 1);
    DPCP = h_axis(4, 4);
    EDP = DPCP; /* the same layout: one axis, two names */
    EP = h_axis(2, 2);
    ETP = h_axis(2, 1);
    TP2 = h_axis(4, 2);
    ck_assert_int_eq(cspmd_axis_name_add(DP, "dp"), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_name_add(CP, "cp"), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_name_add(TP, "tp"), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_name_add(DPCP, "dp_cp"), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_name_add(EP, "ep"), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_name_add(ETP, "etp"), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_name_add(TP2, "tp2"), CSPMD_OK);
}

static void teardown(void)
{
    while (cspmd_mesh_pop() == CSPMD_OK)
        ;
    cspmd_axis_print_debug_set(0);
}

static cspmd_type_t mk(int n, const cspmd_axis_t *a, const cspmd_ltype_t *l,
                       const cspmd_spec_t *s)
{
    cspmd_type_t t = 999999;
    ck_assert_msg(cspmd_type_make(a, l, n, s, &t) == CSPMD_OK, "%s", cspmd_last_error());
    return t;
}

#define AX(...) ((cspmd_axis_t[]){__VA_ARGS__})
#define LT(...) ((cspmd_ltype_t[]){__VA_ARGS__})
#define R CSPMD_LT_R
#define V CSPMD_LT_V
#define P CSPMD_LT_P

static const char *fmt(cspmd_type_t t)
{
    static char buf[512];
    cspmd_type_format(t, buf, sizeof buf);
    return buf;
}

/* Full mode: src -> dst, expecting OK and the formatted result. */
static void full_ok(cspmd_type_t src, cspmd_type_t dst, const char *want)
{
    cspmd_type_t out = 0;
    ck_assert_msg(cspmd_type_reinterpret_mesh(src, dst, NULL, 0, &out) == CSPMD_OK, "%s",
                  cspmd_last_error());
    ck_assert_str_eq(fmt(out), want);
}

static void full_err(cspmd_type_t src, cspmd_type_t dst, const char *msg)
{
    cspmd_type_t out = 777;
    ck_assert_int_eq(cspmd_type_reinterpret_mesh(src, dst, NULL, 0, &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), msg);
    ck_assert_uint_eq(out, 777); /* untouched on error */
}

static void axes_err(cspmd_type_t src, const cspmd_axis_t *d, int n, const char *msg)
{
    cspmd_type_t out = 777;
    ck_assert_int_eq(cspmd_type_reinterpret_mesh(src, CSPMD_TYPE_UNTYPED, d, n, &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), msg);
}

START_TEST(test_flatten_ok)
{
    full_ok(mk(2, AX(DP, CP), LT(V, V), NULL), mk(1, AX(DPCP), LT(V), NULL), "{dp_cp: V}");
    /* and back: unflatten */
    full_ok(mk(1, AX(DPCP), LT(R), NULL), mk(2, AX(DP, CP), LT(R, R), NULL), "{cp: R, dp: R}");
    /* axes only: types derived */
    cspmd_type_t out = 0;
    ck_assert_int_eq(cspmd_type_reinterpret_mesh(mk(3, AX(DP, CP, TP), LT(P, P, R), NULL),
                                                 CSPMD_TYPE_UNTYPED, AX(DPCP, TP), 2, &out),
                     CSPMD_OK);
    ck_assert_str_eq(fmt(out), "{dp_cp: P, tp: R}");
}
END_TEST

START_TEST(test_mixed_src_rejected)
{
    cspmd_type_t src = mk(2, AX(DP, CP), LT(V, R), NULL);
    full_err(src, mk(1, AX(DPCP), LT(V), NULL),
             "Axes {dp, cp} would need to be flattened, but dp has type V while cp has type R.");
    axes_err(src, AX(DPCP), 1,
             "Axes {dp, cp} would need to be flattened, but dp has type V while cp has type R. "
             "Check that the operand has the local SPMD types you expect and that the current "
             "mesh is correct for this region of code.");
    cspmd_axis_t all = h_axis(16, 1);
    ck_assert_int_eq(cspmd_axis_name_add(all, "world"), CSPMD_OK);
    full_err(mk(3, AX(DP, CP, TP), LT(V, V, R), NULL), mk(1, AX(all), LT(V), NULL),
             "Axes {dp, cp, tp} would need to be flattened, but dp, cp have type V while tp has "
             "type R.");
}
END_TEST

START_TEST(test_parallel_folding)
{
    /* (2:8, 2:4, 4:1) -> (4:4, 2:2, 2:1) */
    ck_assert_int_eq(cspmd_axis_name_add(EDP, "edp"), CSPMD_OK);
    full_ok(mk(3, AX(DP, CP, TP), LT(V, V, V), NULL), mk(3, AX(EDP, EP, ETP), LT(V, V, V), NULL),
            "{dp_cp: V, ep: V, etp: V}");
    cspmd_type_t out = 0;
    ck_assert_int_eq(cspmd_type_reinterpret_mesh(mk(3, AX(DP, CP, TP), LT(V, V, R), NULL),
                                                 CSPMD_TYPE_UNTYPED, AX(ETP, EDP, EP), 3, &out),
                     CSPMD_OK);
    ck_assert_str_eq(fmt(out), "{dp_cp: V, ep: R, etp: R}");
}
END_TEST

START_TEST(test_different_regions)
{
    full_err(mk(1, AX(TP), LT(V), NULL), mk(1, AX(TP2), LT(V), NULL),
             "Source group {tp} and destination group {tp2} flatten to different rank regions. "
             "Set MESH_AXIS_DEBUG=1 to see underlying size/stride layouts.");
    /* the debug print option shows layouts */
    cspmd_axis_print_debug_set(1);
    ck_assert_int_eq(cspmd_axis_print_debug(), 1);
    full_err(mk(1, AX(TP), LT(V), NULL), mk(1, AX(TP2), LT(V), NULL),
             "Source group {tp{4:1}} and destination group {tp2{4:2}} flatten to different rank "
             "regions. Set MESH_AXIS_DEBUG=1 to see underlying size/stride layouts.");
}
END_TEST

START_TEST(test_unrelated)
{
    full_err(mk(1, AX(TP), LT(V), NULL), mk(1, AX(ETP), LT(V), NULL),
             "The source and destination meshes do not appear to be related. Set "
             "MESH_AXIS_DEBUG=1 to see underlying size/stride layouts.");
    /* dst left over after every src group closed */
    full_err(mk(1, AX(DPCP), LT(V), NULL), mk(3, AX(DP, CP, TP), LT(V, V, V), NULL),
             "The source and destination meshes do not appear to be related. Set "
             "MESH_AXIS_DEBUG=1 to see underlying size/stride layouts.");
}
END_TEST

START_TEST(test_shared_and_incomplete)
{
    full_err(mk(2, AX(DP, TP), LT(V, V), NULL), mk(2, AX(DP, TP), LT(V, R), NULL),
             "Shared mesh axis tp changes local type from V to "
             "R under reinterpret_mesh.");
    full_err(mk(2, AX(DP, TP), LT(V, R), NULL), mk(1, AX(TP), LT(R), NULL),
             "Cross-mesh reinterpretation is incomplete: {dp: V} vs {tp: R}.");
    axes_err(mk(2, AX(DP, TP), LT(V, R), NULL), AX(TP), 1,
             "Operand has axes [dp] not in the current mesh [tp] and has no destination to "
             "fold into.");
    /* src inside dst: passes through (the extra dst axis is ignored) */
    cspmd_type_t src = mk(1, AX(TP), LT(R), NULL), out = 0;
    ck_assert_int_eq(cspmd_type_reinterpret_mesh(src, mk(2, AX(DP, TP), LT(V, R), NULL), NULL, 0,
                                                 &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, src);
    /* {} passes through */
    ck_assert_int_eq(cspmd_type_reinterpret_mesh(CSPMD_TYPE_EMPTY, CSPMD_TYPE_UNTYPED, AX(TP), 1,
                                                 &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, CSPMD_TYPE_EMPTY);
}
END_TEST

START_TEST(test_dst_groups)
{
    full_err(mk(1, AX(DPCP), LT(V), NULL), mk(2, AX(DP, CP), LT(V, R), NULL),
             "Axes {dp, cp} would need to be flattened, but they have mixed local types in the "
             "destination.");
    full_err(mk(1, AX(DPCP), LT(V), NULL), mk(2, AX(DP, CP), LT(R, R), NULL),
             "Source group {dp_cp} has type V but destination group {dp, cp} has type R.");
}
END_TEST

static cspmd_spec_t spec1(int ndim, const cspmd_axis_t *e0, int n0, const cspmd_axis_t *e1,
                          int n1)
{
    cspmd_spec_t s;
    memset(&s, 0, sizeof s);
    s.ndim = (int8_t)ndim;
    s.nentry[0] = (uint8_t)n0;
    memcpy(s.entry[0], e0, (size_t)n0 * sizeof *e0);
    if (ndim > 1) {
        s.nentry[1] = (uint8_t)n1;
        if (n1)
            memcpy(s.entry[1], e1, (size_t)n1 * sizeof *e1);
    }
    return s;
}

START_TEST(test_spec_remap)
{
    cspmd_type_t dst = mk(1, AX(DPCP), LT(V), NULL);
    cspmd_spec_t s = spec1(2, AX(DP, CP), 2, NULL, 0);
    full_ok(mk(2, AX(DP, CP), LT(V, V), &s), dst, "{dp_cp: V} PartitionSpec(dp_cp, None)");
    /* no group matches: with checking off (or local axes) the shards decay */
    s = spec1(2, AX(CP, DP), 2, NULL, 0);
    full_ok(mk(2, AX(DP, CP), LT(V, V), &s), dst, "{dp_cp: V} PartitionSpec(None, None)");
    s = spec1(2, AX(DP), 1, AX(CP), 1);
    full_ok(mk(2, AX(DP, CP), LT(V, V), &s), dst, "{dp_cp: V} PartitionSpec(None, None)");
    /* onto a global axis they cannot: the error */
    ck_assert_int_eq(cspmd_mesh_push(AX(DPCP), 1), CSPMD_OK);
    cspmd_checker_set(1, 1);
    cspmd_checker_set_local(0);
    s = spec1(2, AX(CP, DP), 2, NULL, 0);
    full_err(mk(2, AX(DP, CP), LT(V, V), &s), dst,
             "Cannot remap PartitionSpec: dim 0 is sharded on (cp, dp) which does not exactly "
             "match any remapped group.");
    s = spec1(2, AX(DP), 1, AX(CP), 1);
    full_err(mk(2, AX(DP, CP), LT(V, V), &s), dst,
             "Cannot remap PartitionSpec: dim 0 is sharded on dp which does not exactly match "
             "any remapped group.");
    cspmd_checker_set_local(1);
    cspmd_checker_set(0, 0);
    ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_OK);
    /* a shared axis is its own group: (tp, dp, cp) -> (tp, dp_cp) */
    s = spec1(1, AX(TP, DP, CP), 3, NULL, 0);
    full_ok(mk(3, AX(DP, CP, TP), LT(V, V, V), &s), mk(2, AX(DPCP, TP), LT(V, V), NULL),
            "{dp_cp: V, tp: V} PartitionSpec((tp, dp_cp))");
    /* unflattening expands an entry */
    s = spec1(1, AX(DPCP), 1, NULL, 0);
    full_ok(mk(1, AX(DPCP), LT(V), &s), mk(2, AX(DP, CP), LT(V, V), NULL),
            "{cp: V, dp: V} PartitionSpec((dp, cp))");
    /* src on the destination mesh: the spec passes unchanged */
    s = spec1(1, AX(TP), 1, NULL, 0);
    cspmd_type_t src = mk(1, AX(TP), LT(V), &s), out = 0;
    ck_assert_int_eq(cspmd_type_reinterpret_mesh(src, CSPMD_TYPE_UNTYPED, AX(TP, DPCP), 2, &out),
                     CSPMD_OK);
    ck_assert_uint_eq(out, src);
}
END_TEST

START_TEST(test_errors_misuse)
{
    cspmd_type_t out;
    ck_assert_int_eq(cspmd_type_reinterpret_mesh(CSPMD_TYPE_UNTYPED, CSPMD_TYPE_EMPTY, NULL, 0,
                                                 &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "reinterpret_mesh requires a tensor with an existing local SPMD type.");
    ck_assert_int_eq(cspmd_type_reinterpret_mesh(123456789, CSPMD_TYPE_EMPTY, NULL, 0, &out),
                     CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_type_reinterpret_mesh(CSPMD_TYPE_EMPTY, 123456789, NULL, 0, &out),
                     CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_type_reinterpret_mesh(CSPMD_TYPE_EMPTY, CSPMD_TYPE_EMPTY, NULL, 0, NULL),
                     CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_type_reinterpret_mesh(CSPMD_TYPE_EMPTY, CSPMD_TYPE_EMPTY, AX(TP), 1,
                                                 &out),
                     CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_type_reinterpret_mesh(CSPMD_TYPE_EMPTY, CSPMD_TYPE_UNTYPED, NULL, 2,
                                                 &out),
                     CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_type_reinterpret_mesh(CSPMD_TYPE_EMPTY, CSPMD_TYPE_UNTYPED,
                                                 AX(99999), 1, &out),
                     CSPMD_ERR_MISUSE);
    /* non-orthogonal destination axes */
    ck_assert_int_eq(cspmd_type_reinterpret_mesh(CSPMD_TYPE_EMPTY, CSPMD_TYPE_UNTYPED,
                                                 AX(TP, ETP), 2, &out),
                     CSPMD_ERR_SPMD_TYPE);
    /* trivial and repeated dst axes are dropped */
    cspmd_type_t src = mk(2, AX(DP, CP), LT(V, V), NULL);
    ck_assert_int_eq(cspmd_type_reinterpret_mesh(src, CSPMD_TYPE_UNTYPED,
                                                 AX(DPCP, CSPMD_AXIS_TRIVIAL, DPCP), 3, &out),
                     CSPMD_OK);
    ck_assert_str_eq(fmt(out), "{dp_cp: V}");
    ck_assert_int_eq(cspmd_type_to_mesh(src, 0, NULL), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_type_to_mesh(123456789, 0, &out), CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_to_mesh)
{
    cspmd_type_t src = mk(3, AX(DP, CP, TP), LT(V, V, R), NULL), out = 0;
    /* no mesh: nothing happens */
    ck_assert_int_eq(cspmd_type_to_mesh(src, 0, &out), CSPMD_OK);
    ck_assert_uint_eq(out, src);
    ck_assert_int_eq(cspmd_mesh_push(AX(DPCP, TP), 2), CSPMD_OK);
    ck_assert_int_eq(cspmd_type_to_mesh(src, 0, &out), CSPMD_OK);
    ck_assert_str_eq(fmt(out), "{dp_cp: V, tp: R}");
    /* a subset of the mesh passes unchanged (same id) */
    cspmd_type_t sub = mk(1, AX(TP), LT(R), NULL);
    ck_assert_int_eq(cspmd_type_to_mesh(sub, 0, &out), CSPMD_OK);
    ck_assert_uint_eq(out, sub);
    ck_assert_int_eq(cspmd_type_to_mesh(CSPMD_TYPE_UNTYPED, 0, &out), CSPMD_OK);
    ck_assert_uint_eq(out, CSPMD_TYPE_UNTYPED);
    ck_assert_int_eq(cspmd_type_to_mesh(CSPMD_TYPE_EMPTY, 0, &out), CSPMD_OK);
    ck_assert_uint_eq(out, CSPMD_TYPE_EMPTY);
    /* failures name the operand */
    cspmd_type_t bad = mk(3, AX(DP, CP, TP), LT(V, R, R), NULL);
    ck_assert_int_eq(cspmd_type_to_mesh(bad, 1, &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_uint_eq(out, bad);
    ck_assert_str_eq(cspmd_last_error(),
                     "args[1] cannot be auto-reinterpreted from {dp, cp, tp} to the current mesh "
                     "{dp_cp, tp}. Axes {dp, cp} would need to be flattened, but dp has type V "
                     "while cp has type R. Check that the operand has the local SPMD types you "
                     "expect and that the current mesh is correct for this region of code.");
    ck_assert_int_eq(cspmd_mesh_push(AX(TP), 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_type_to_mesh(mk(2, AX(DP, TP), LT(V, R), NULL), 2, &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "args[2] cannot be auto-reinterpreted from {dp, tp} to the current mesh "
                     "{tp}. Operand has axes [dp] not in the current mesh [tp] and has no "
                     "destination to fold into.");
    /* a flattened operand on the unflattened mesh must cover every mesh axis */
    ck_assert_int_eq(cspmd_mesh_push(AX(DP, CP, TP), 3), CSPMD_OK);
    ck_assert_int_eq(cspmd_type_to_mesh(mk(2, AX(DPCP, TP), LT(V, R), NULL), 0, &out), CSPMD_OK);
    ck_assert_str_eq(fmt(out), "{cp: V, dp: V, tp: R}");
    ck_assert_int_eq(cspmd_type_to_mesh(mk(1, AX(DPCP), LT(V), NULL), 0, &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "args[0] cannot be auto-reinterpreted from {dp_cp} to the current mesh "
                     "{dp, cp, tp}. The source and destination meshes do not appear to be "
                     "related. Set MESH_AXIS_DEBUG=1 to see underlying size/stride layouts.");
}
END_TEST

static const char *advice(cspmd_type_t a, cspmd_type_t b)
{
    static char buf[2048];
    cspmd_type_t ts[3] = {a, b, a};
    size_t n = cspmd_cross_mesh_advice(ts, 3, buf, sizeof buf);
    ck_assert_uint_eq(n, strlen(buf));
    return buf;
}

START_TEST(test_advice)
{
    cspmd_error_set(CSPMD_ERR_VALUE, "kept");
    ck_assert_str_eq(advice(mk(2, AX(DP, CP), LT(V, V), NULL), mk(1, AX(DPCP), LT(R), NULL)),
                     "The operand axes {dp_cp} and {dp, cp} are cross-mesh compatible. Use "
                     "reinterpret_mesh() to convert the operand with axes {dp_cp} to axes "
                     "{dp, cp} before this operation.");
    ck_assert_str_eq(cspmd_last_error(), "kept");
    ck_assert_str_eq(advice(mk(1, AX(DP), LT(V), NULL), mk(1, AX(DPCP), LT(V), NULL)),
                     "dp is a sub-axis of dp_cp (ranks {0, 8} vs {0, 4, 8, 12}), so the operand "
                     "with axes {dp} is missing axis cp.");
    /* no named complement */
    cspmd_axis_t big = h_axis(8, 2); /* {0,2,..,14} */
    ck_assert_int_eq(cspmd_axis_name_add(big, "big"), CSPMD_OK);
    ck_assert_str_eq(advice(mk(1, AX(big), LT(V), NULL), mk(1, AX(ETP), LT(V), NULL)), "");
    cspmd_axis_t x = h_axis(2, 6);
    ck_assert_int_eq(cspmd_axis_name_add(x, "x"), CSPMD_OK);
    ck_assert_str_eq(advice(mk(1, AX(x), LT(V), NULL), mk(1, AX(CP), LT(V), NULL)), "");
    /* partial overlap: tp2 {0,2,4,6} vs tp {0,1,2,3}; etp completes tp2 */
    ck_assert_str_eq(advice(mk(1, AX(TP2), LT(V), NULL), mk(1, AX(TP), LT(V), NULL)),
                     "The non-shared axes {tp2} and {tp} partially overlap. The operand with "
                     "axes {tp2} is missing etp; the operand with axes {tp} is missing cp, x.");
    /* a single axis set: nothing to say */
    char buf[8] = "zz";
    cspmd_type_t one = mk(1, AX(TP), LT(V), NULL);
    ck_assert_uint_eq(cspmd_cross_mesh_advice(&one, 1, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "");
    /* snprintf-style length */
    cspmd_type_t ts[2] = {mk(1, AX(DP), LT(V), NULL), mk(1, AX(DPCP), LT(V), NULL)};
    size_t need = cspmd_cross_mesh_advice(ts, 2, NULL, 0);
    ck_assert_uint_gt(need, 8);
    ck_assert_uint_eq(cspmd_cross_mesh_advice(ts, 2, buf, sizeof buf), need);
    ck_assert_uint_eq(strlen(buf), 7);
}
END_TEST

Suite *suite_compat(void)
{
    Suite *s = suite_create("compat");
    TCase *tc = tcase_create("reinterpret_mesh");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_flatten_ok);
    tcase_add_test(tc, test_mixed_src_rejected);
    tcase_add_test(tc, test_parallel_folding);
    tcase_add_test(tc, test_different_regions);
    tcase_add_test(tc, test_unrelated);
    tcase_add_test(tc, test_shared_and_incomplete);
    tcase_add_test(tc, test_dst_groups);
    tcase_add_test(tc, test_spec_remap);
    tcase_add_test(tc, test_errors_misuse);
    tcase_add_test(tc, test_to_mesh);
    tcase_add_test(tc, test_advice);
    suite_add_tcase(s, tc);
    return s;
}
