/* Status codes, errors, local types and type values,
 * refinement and mutation. */
#include <pthread.h>
#include <string.h>

#include "axis_helpers.h"
#include "core.h"
#include "cspmd.h"
#include "suites.h"

static cspmd_axis_t TP, DP, SP, EP; /* 4:1, 2:4, 2:8 (named), 2:16 unnamed */

static void setup(void)
{
    cspmd_axis_names_reset();
    TP = h_axis(4, 1);
    DP = h_axis(2, 4);
    SP = h_axis(2, 8);
    EP = h_axis(2, 16);
    ck_assert_int_eq(cspmd_axis_name_add(TP, "tp"), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_name_add(DP, "dp"), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_name_add(SP, "sp"), CSPMD_OK);
}

static cspmd_type_t mk(int n, const cspmd_axis_t *a, const cspmd_ltype_t *l)
{
    cspmd_type_t t = 999999;
    ck_assert_msg(cspmd_type_make(a, l, n, NULL, &t) == CSPMD_OK, "%s", cspmd_last_error());
    return t;
}

#define T1(a, l) mk(1, (cspmd_axis_t[]){a}, (cspmd_ltype_t[]){l})
#define T2(a, l, b, m) mk(2, (cspmd_axis_t[]){a, b}, (cspmd_ltype_t[]){l, m})

/* A spec from up to 4 dims of up to 3 axes each; 0-terminated entries,
 * NONE for a None dim. */
static cspmd_spec_t spec_of(int ndim, const cspmd_axis_t e[][3], const int *k)
{
    cspmd_spec_t s;
    memset(&s, 0, sizeof s);
    s.ndim = (int8_t)ndim;
    for (int d = 0; d < ndim; d++) {
        s.nentry[d] = (uint8_t)k[d];
        for (int i = 0; i < k[d]; i++)
            s.entry[d][i] = e[d][i];
    }
    return s;
}

static cspmd_type_t mks(int n, const cspmd_axis_t *a, const cspmd_ltype_t *l, cspmd_spec_t s)
{
    cspmd_type_t t = 999999;
    ck_assert_msg(cspmd_type_make(a, l, n, &s, &t) == CSPMD_OK, "%s", cspmd_last_error());
    return t;
}

static const char *fmt(cspmd_type_t t)
{
    static char buf[512];
    cspmd_type_format(t, buf, sizeof buf);
    return buf;
}

#define R CSPMD_LT_R
#define I CSPMD_LT_I
#define V CSPMD_LT_V
#define P CSPMD_LT_P

/* ---- errors and local types ------------------------------------------------ */

START_TEST(test_status_names)
{
    ck_assert_str_eq(cspmd_status_name(CSPMD_OK), "CSPMD_OK");
    ck_assert_str_eq(cspmd_status_name(CSPMD_ERR_SPMD_TYPE), "CSPMD_ERR_SPMD_TYPE");
    ck_assert_str_eq(cspmd_status_name(CSPMD_ERR_VALUE), "CSPMD_ERR_VALUE");
    ck_assert_str_eq(cspmd_status_name(CSPMD_ERR_TYPE), "CSPMD_ERR_TYPE");
    ck_assert_str_eq(cspmd_status_name(CSPMD_ERR_MISUSE), "CSPMD_ERR_MISUSE");
    ck_assert_str_eq(cspmd_status_name(CSPMD_ERR_NOMEM), "CSPMD_ERR_NOMEM");
    ck_assert_str_eq(cspmd_status_name(CSPMD_ERR_RUNTIME), "CSPMD_ERR_RUNTIME");
    ck_assert_str_eq(cspmd_status_name((cspmd_status_t)-99), "CSPMD_ERR_UNKNOWN");
    ck_assert_str_eq(cspmd_status_name((cspmd_status_t)3), "CSPMD_ERR_UNKNOWN");
}
END_TEST

START_TEST(test_error_set)
{
    ck_assert_int_eq(cspmd_error_set(CSPMD_ERR_VALUE, "bad %d %s", 3, "x"), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(), "bad 3 x");
    /* an argument may be the current message */
    cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "%s\n\n%s", cspmd_last_error(), "context");
    ck_assert_str_eq(cspmd_last_error(), "bad 3 x\n\ncontext");
    /* long messages are truncated, never overflow */
    static char big[6000];
    memset(big, 'a', sizeof big - 1);
    ck_assert_int_eq(cspmd_error_set(CSPMD_ERR_RUNTIME, "%s", big), CSPMD_ERR_RUNTIME);
    ck_assert_uint_eq(strlen(cspmd_last_error()), 4095);
    ck_assert_int_eq(cspmd_error_set(CSPMD_OK, NULL), CSPMD_OK);
    ck_assert_str_eq(cspmd_last_error(), "");
}
END_TEST

static void *read_error(void *arg)
{
    const char **out = arg;
    out[0] = cspmd_last_error()[0] == '\0' ? "empty" : "set";
    cspmd_error_set(CSPMD_ERR_VALUE, "other thread");
    return NULL;
}

START_TEST(test_error_per_thread)
{
    cspmd_error_set(CSPMD_ERR_VALUE, "main thread");
    const char *seen[1];
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, read_error, seen), 0);
    pthread_join(th, NULL);
    ck_assert_str_eq(seen[0], "empty");
    ck_assert_str_eq(cspmd_last_error(), "main thread");
}
END_TEST

START_TEST(test_ltypes)
{
    ck_assert_int_eq(cspmd_ltype_dual(R), P);
    ck_assert_int_eq(cspmd_ltype_dual(P), R);
    ck_assert_int_eq(cspmd_ltype_dual(I), I);
    ck_assert_int_eq(cspmd_ltype_dual(V), V);
    ck_assert_int_eq(cspmd_ltype_dual(CSPMD_LT_NONE), CSPMD_LT_NONE);
    ck_assert_int_eq(cspmd_ltype_dual((cspmd_ltype_t)9), CSPMD_LT_NONE);
    ck_assert_str_eq(cspmd_ltype_letter(R), "R");
    ck_assert_str_eq(cspmd_ltype_letter(I), "I");
    ck_assert_str_eq(cspmd_ltype_letter(V), "V");
    ck_assert_str_eq(cspmd_ltype_letter(P), "P");
    ck_assert_str_eq(cspmd_ltype_letter(CSPMD_LT_NONE), "?");
}
END_TEST

/* ---- make and queries ----------------------------------------------------- */

START_TEST(test_make_basic)
{
    cspmd_type_t t = T2(TP, R, DP, V);
    ck_assert_uint_eq(t, T2(DP, V, TP, R)); /* order irrelevant */
    ck_assert_uint_ne(t, T2(TP, R, DP, P));
    ck_assert_uint_gt(t, CSPMD_TYPE_EMPTY);
    ck_assert_int_eq(cspmd_type_naxes(t), 2);
    ck_assert_int_eq(cspmd_type_get(t, TP), R);
    ck_assert_int_eq(cspmd_type_get(t, DP), V);
    ck_assert_int_eq(cspmd_type_get(t, SP), CSPMD_LT_NONE);
    ck_assert_int_eq(cspmd_type_get(999999, TP), CSPMD_LT_NONE);
    cspmd_axis_t a;
    cspmd_ltype_t l;
    ck_assert_int_eq(cspmd_type_entry(t, 0, &a, &l), CSPMD_OK); /* display order */
    ck_assert_uint_eq(a, DP);
    ck_assert_int_eq(l, V);
    ck_assert_int_eq(cspmd_type_entry(t, 1, &a, &l), CSPMD_OK);
    ck_assert_uint_eq(a, TP);
    ck_assert_int_eq(l, R);
    ck_assert_str_eq(fmt(t), "{dp: V, tp: R}");
    /* storage order is by id */
    cspmd_axis_t sa[CSPMD_MAX_AXES];
    cspmd_ltype_t sl[CSPMD_MAX_AXES];
    ck_assert_int_eq(cspmdi_type_axes(t, sa, sl), 2);
    ck_assert_uint_lt(sa[0], sa[1]);
    ck_assert_int_eq(cspmdi_type_axes(CSPMD_TYPE_UNTYPED, NULL, NULL), 0);
    ck_assert_int_eq(cspmdi_type_axes(999999, NULL, NULL), -1);
    ck_assert_int_eq(cspmdi_type_valid(t), 1);
    ck_assert_int_eq(cspmdi_type_valid(999999), 0);
}
END_TEST

START_TEST(test_make_empty_trivial)
{
    cspmd_type_t t;
    ck_assert_int_eq(cspmd_type_make(NULL, NULL, 0, NULL, &t), CSPMD_OK);
    ck_assert_uint_eq(t, CSPMD_TYPE_EMPTY);
    ck_assert_uint_eq(T1(CSPMD_AXIS_TRIVIAL, P), CSPMD_TYPE_EMPTY);
    ck_assert_uint_eq(T2(CSPMD_AXIS_TRIVIAL, P, TP, R), T1(TP, R));
    ck_assert_int_eq(cspmd_type_naxes(CSPMD_TYPE_UNTYPED), 0);
    ck_assert_int_eq(cspmd_type_naxes(CSPMD_TYPE_EMPTY), 0);
    ck_assert_int_eq(cspmd_type_naxes(999999), -1);
    ck_assert_str_eq(fmt(CSPMD_TYPE_EMPTY), "{}");
    ck_assert_str_eq(fmt(CSPMD_TYPE_UNTYPED), "{}");
    ck_assert_str_eq(fmt(999999), "<unknown type>");
    ck_assert_str_eq(fmt(T1(EP, I)), "{MeshAxis(2:16): I}");
}
END_TEST

START_TEST(test_make_errors)
{
    cspmd_type_t t;
    ck_assert_int_eq(cspmd_type_make((cspmd_axis_t[]){TP, TP}, (cspmd_ltype_t[]){R, V}, 2, NULL,
                                     &t),
                     CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_type_make: duplicate axis tp");
    ck_assert_int_eq(cspmd_type_make((cspmd_axis_t[]){TP}, (cspmd_ltype_t[]){CSPMD_LT_NONE}, 1,
                                     NULL, &t),
                     CSPMD_ERR_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "Expected a local type (R, I, V or P) for axis tp, got 0");
    ck_assert_int_eq(cspmd_type_make((cspmd_axis_t[]){4000000000u}, (cspmd_ltype_t[]){R}, 1, NULL,
                                     &t),
                     CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_type_make: unknown axis id 4000000000");
    cspmd_axis_t t21 = h_axis(2, 1);
    ck_assert_int_eq(cspmd_type_make((cspmd_axis_t[]){TP, t21}, (cspmd_ltype_t[]){R, R}, 2, NULL,
                                     &t),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "Mesh axes tp and MeshAxis(2:1) are not orthogonal (their layouts are not "
                     "independent radix dimensions). All axes in a LocalSpmdType must be mutually "
                     "orthogonal.");
    ck_assert_int_eq(cspmd_type_make(NULL, NULL, 1, NULL, &t), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_type_make(NULL, NULL, -1, NULL, &t), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_type_make(NULL, NULL, 0, NULL, NULL), CSPMD_ERR_MISUSE);
    cspmd_axis_t nine[9];
    cspmd_ltype_t nl[9];
    for (int i = 0; i < 9; i++) {
        nine[i] = h_axis(2, (int64_t)1 << (i + 10));
        nl[i] = R;
    }
    ck_assert_int_eq(cspmd_type_make(nine, nl, 9, NULL, &t), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd: more than 8 axes in one type");
    ck_assert_int_eq(cspmd_type_make(nine, nl, 8, NULL, &t), CSPMD_OK);
    ck_assert_int_eq(cspmd_type_naxes(t), 8);
}
END_TEST

START_TEST(test_make_jointly_non_orthogonal)
{
    cspmd_type_t t;
    cspmd_axis_t a = h_axis(2, 5), b = h_axis(2, 6), c = h_axis(2, 7);
    ck_assert_int_eq(cspmd_type_make((cspmd_axis_t[]){a, b, c}, (cspmd_ltype_t[]){R, R, R}, 3,
                                     NULL, &t),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "Mesh axes [MeshAxis(2:5), MeshAxis(2:6), "
                                         "MeshAxis(2:7)] are not mutually orthogonal.");
}
END_TEST

START_TEST(test_spec)
{
    /* {dp: R, tp: V} PartitionSpec(tp, None) */
    cspmd_spec_t s = spec_of(2, (const cspmd_axis_t[][3]){{TP}, {0}}, (int[]){1, 0});
    cspmd_type_t t = mks(2, (cspmd_axis_t[]){TP, DP}, (cspmd_ltype_t[]){V, R}, s);
    ck_assert_str_eq(fmt(t), "{dp: R, tp: V} PartitionSpec(tp, None)");
    ck_assert_uint_ne(t, T2(TP, V, DP, R));
    ck_assert_int_eq(cspmdi_type_has_spec(t), 1);
    ck_assert_int_eq(cspmdi_type_has_spec(T2(TP, V, DP, R)), 0);
    cspmd_spec_t back;
    ck_assert_int_eq(cspmd_type_spec(t, &back), CSPMD_OK);
    ck_assert_int_eq(back.ndim, 2);
    ck_assert_int_eq(back.nentry[0], 1);
    ck_assert_uint_eq(back.entry[0][0], TP);
    ck_assert_int_eq(back.nentry[1], 0);
    ck_assert_int_eq(cspmd_type_spec(T1(TP, R), &back), CSPMD_OK);
    ck_assert_int_eq(back.ndim, -1);
    ck_assert_int_eq(cspmd_type_spec(999999, &back), CSPMD_ERR_MISUSE);
    /* spec axes absent from the pairs become V; tuple entries */
    s = spec_of(2, (const cspmd_axis_t[][3]){{DP, TP}, {0}}, (int[]){2, 0});
    t = mks(0, NULL, NULL, s);
    ck_assert_str_eq(fmt(t), "{dp: V, tp: V} PartitionSpec((dp, tp), None)");
    /* trivial axes leave the spec; a tuple of one prints as the axis */
    s = spec_of(1, (const cspmd_axis_t[][3]){{CSPMD_AXIS_TRIVIAL, TP}}, (int[]){2});
    ck_assert_str_eq(fmt(mks(0, NULL, NULL, s)), "{tp: V} PartitionSpec(tp)");
    /* an empty spec on a 0-d tensor */
    s = spec_of(0, NULL, NULL);
    t = mks(0, NULL, NULL, s);
    ck_assert_uint_ne(t, CSPMD_TYPE_EMPTY);
    ck_assert_str_eq(fmt(t), "{} PartitionSpec()");
}
END_TEST

START_TEST(test_spec_errors)
{
    cspmd_type_t t;
    cspmd_spec_t s = spec_of(2, (const cspmd_axis_t[][3]){{TP}, {0}}, (int[]){1, 0});
    ck_assert_int_eq(cspmd_type_make((cspmd_axis_t[]){TP}, (cspmd_ltype_t[]){R}, 1, &s, &t),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "Mesh axis tp appears in partition_spec (implying Varying/Shard) but is "
                     "specified as R in type.");
    s = spec_of(2, (const cspmd_axis_t[][3]){{TP}, {TP}}, (int[]){1, 1});
    ck_assert_int_eq(cspmd_type_make(NULL, NULL, 0, &s, &t), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "Mesh axes tp and tp are not orthogonal (their layouts are not independent "
                     "radix dimensions). All axes in a LocalSpmdType must be mutually orthogonal.");
    s.ndim = 17;
    ck_assert_int_eq(cspmd_type_make(NULL, NULL, 0, &s, &t), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd: partition spec ndim 17 (expected -1..16)");
    s = spec_of(1, (const cspmd_axis_t[][3]){{4000000000u}}, (int[]){1});
    ck_assert_int_eq(cspmd_type_make(NULL, NULL, 0, &s, &t), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd: unknown axis id 4000000000 in partition spec");
    s = spec_of(1, (const cspmd_axis_t[][3]){{TP}}, (int[]){1});
    s.nentry[0] = 9;
    ck_assert_int_eq(cspmd_type_make(NULL, NULL, 0, &s, &t), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd: partition spec dim 0 has 9 axes (max 8)");
}
END_TEST

START_TEST(test_format_truncation)
{
    cspmd_type_t t = T2(TP, R, DP, V);
    char small[6];
    size_t need = cspmd_type_format(t, small, sizeof small);
    ck_assert_uint_eq(need, strlen("{dp: V, tp: R}"));
    ck_assert_str_eq(small, "{dp: ");
    ck_assert_uint_eq(cspmd_type_format(t, NULL, 0), need);
}
END_TEST

START_TEST(test_display_order_follows_names)
{
    cspmd_type_t t = T2(TP, R, EP, V);
    ck_assert_str_eq(fmt(t), "{MeshAxis(2:16): V, tp: R}");
    ck_assert_int_eq(cspmd_axis_name_add(EP, "zz"), CSPMD_OK);
    ck_assert_str_eq(fmt(t), "{tp: R, zz: V}");
    cspmd_axis_t a;
    ck_assert_int_eq(cspmd_type_entry(t, 1, &a, NULL), CSPMD_OK);
    ck_assert_uint_eq(a, EP);
    ck_assert_int_eq(cspmd_type_entry(t, 2, &a, NULL), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_type_entry: index 2 out of range (2)");
    ck_assert_int_eq(cspmd_type_entry(t, -1, &a, NULL), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_type_entry(999999, 0, &a, NULL), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_type_entry: unknown type id 999999");
}
END_TEST

/* ---- derived types -------------------------------------------------------- */

START_TEST(test_dual_local)
{
    cspmd_type_t t = mk(4, (cspmd_axis_t[]){TP, DP, SP, EP}, (cspmd_ltype_t[]){R, P, I, V});
    cspmd_type_t d = cspmd_type_dual(t);
    ck_assert_uint_eq(d, mk(4, (cspmd_axis_t[]){TP, DP, SP, EP}, (cspmd_ltype_t[]){P, R, I, V}));
    ck_assert_uint_eq(cspmd_type_dual(d), t);
    ck_assert_uint_eq(cspmd_type_dual(t), d); /* cached */
    ck_assert_uint_eq(cspmd_type_local(t), t);
    cspmd_spec_t s = spec_of(1, (const cspmd_axis_t[][3]){{TP}}, (int[]){1});
    cspmd_type_t ts = mks(1, (cspmd_axis_t[]){DP}, (cspmd_ltype_t[]){R}, s);
    ck_assert_uint_eq(cspmd_type_local(ts), T2(TP, V, DP, R));
    ck_assert_uint_eq(cspmd_type_dual(ts), T2(TP, V, DP, P));
    ck_assert_uint_eq(cspmd_type_dual(CSPMD_TYPE_UNTYPED), CSPMD_TYPE_UNTYPED);
    ck_assert_uint_eq(cspmd_type_local(CSPMD_TYPE_UNTYPED), CSPMD_TYPE_UNTYPED);
    ck_assert_uint_eq(cspmd_type_dual(CSPMD_TYPE_EMPTY), CSPMD_TYPE_EMPTY);
    ck_assert_uint_eq(cspmd_type_local(CSPMD_TYPE_EMPTY), CSPMD_TYPE_EMPTY);
    ck_assert_uint_eq(cspmd_type_dual(999999), CSPMD_TYPE_UNTYPED);
    ck_assert_uint_eq(cspmd_type_local(999999), CSPMD_TYPE_UNTYPED);
}
END_TEST

START_TEST(test_with)
{
    cspmd_type_t t = T1(TP, R), o;
    ck_assert_int_eq(cspmd_type_with(t, TP, P, &o), CSPMD_OK);
    ck_assert_uint_eq(o, T1(TP, P));
    ck_assert_int_eq(cspmd_type_with(t, DP, V, &o), CSPMD_OK);
    ck_assert_uint_eq(o, T2(TP, R, DP, V));
    ck_assert_int_eq(cspmd_type_with(o, DP, CSPMD_LT_NONE, &o), CSPMD_OK);
    ck_assert_uint_eq(o, t);
    ck_assert_int_eq(cspmd_type_with(t, TP, CSPMD_LT_NONE, &o), CSPMD_OK);
    ck_assert_uint_eq(o, CSPMD_TYPE_EMPTY);
    ck_assert_int_eq(cspmd_type_with(t, CSPMD_AXIS_TRIVIAL, V, &o), CSPMD_OK);
    ck_assert_uint_eq(o, t);
    ck_assert_int_eq(cspmd_type_with(CSPMD_TYPE_UNTYPED, TP, I, &o), CSPMD_OK);
    ck_assert_uint_eq(o, T1(TP, I));
    /* leaving V drops the axis from the spec */
    cspmd_spec_t s = spec_of(2, (const cspmd_axis_t[][3]){{TP}, {DP}}, (int[]){1, 1});
    cspmd_type_t ts = mks(0, NULL, NULL, s);
    ck_assert_int_eq(cspmd_type_with(ts, TP, R, &o), CSPMD_OK);
    ck_assert_str_eq(fmt(o), "{dp: V, tp: R} PartitionSpec(None, dp)");
    /* errors */
    ck_assert_int_eq(cspmd_type_with(t, h_axis(2, 2), V, &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "Mesh axes tp and MeshAxis(2:2) are not orthogonal (their layouts are not "
                     "independent radix dimensions). All axes in a LocalSpmdType must be mutually "
                     "orthogonal.");
    ck_assert_int_eq(cspmd_type_with(t, TP, (cspmd_ltype_t)8, &o), CSPMD_ERR_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "Expected a local type (R, I, V or P) for axis tp, got 8");
    ck_assert_int_eq(cspmd_type_with(999999, TP, R, &o), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_type_with(t, 4000000000u, R, &o), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_type_with: unknown axis id 4000000000");
}
END_TEST

/* ---- refinement ---------------------------------------------------- */

static cspmd_status_t refine(cspmd_type_t a, cspmd_type_t b, cspmd_type_t *out)
{
    *out = 777777;
    return cspmd_type_refine(a, b, out);
}

/* 1-axis shard types: {axis: S(dim)} on an ndim-dim tensor */
static cspmd_type_t shard(cspmd_axis_t a, int dim, int ndim)
{
    cspmd_spec_t s;
    memset(&s, 0, sizeof s);
    s.ndim = (int8_t)ndim;
    s.nentry[dim] = 1;
    s.entry[dim][0] = a;
    return mks(0, NULL, NULL, s);
}

START_TEST(test_refine_local)
{
    cspmd_type_t o;
    ck_assert_int_eq(refine(CSPMD_TYPE_UNTYPED, T1(TP, R), &o), CSPMD_OK);
    ck_assert_uint_eq(o, T1(TP, R));
    ck_assert_int_eq(refine(T1(TP, R), T1(TP, R), &o), CSPMD_OK);
    ck_assert_uint_eq(o, T1(TP, R));
    ck_assert_int_eq(refine(T1(TP, R), CSPMD_TYPE_UNTYPED, &o), CSPMD_OK);
    ck_assert_uint_eq(o, T1(TP, R));
    ck_assert_int_eq(refine(CSPMD_TYPE_EMPTY, T1(TP, R), &o), CSPMD_OK);
    ck_assert_uint_eq(o, T1(TP, R));
    /* V then P: implicit transmute */
    ck_assert_int_eq(refine(T1(TP, V), T1(TP, P), &o), CSPMD_OK);
    ck_assert_uint_eq(o, T1(TP, P));
    /* axes only in the existing type are kept; new ones merged */
    ck_assert_int_eq(refine(T1(TP, R), T1(DP, V), &o), CSPMD_OK);
    ck_assert_uint_eq(o, T2(TP, R, DP, V));
    ck_assert_int_eq(refine(T2(TP, R, DP, V), T1(DP, V), &o), CSPMD_OK);
    ck_assert_uint_eq(o, T2(TP, R, DP, V));
}
END_TEST

START_TEST(test_refine_mismatch)
{
    cspmd_type_t o;
    ck_assert_int_eq(refine(T1(TP, V), T1(TP, R), &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "SPMD type mismatch on axis tp: tensor has "
                                         "V, expected "
                                         "R");
    ck_assert_uint_eq(o, 777777); /* untouched */
    ck_assert_int_eq(refine(T1(TP, R), T1(TP, V), &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "SPMD type mismatch on axis tp: tensor has "
                                         "R, expected "
                                         "V");
    ck_assert_int_eq(refine(T1(TP, P), T1(TP, V), &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "SPMD type mismatch on axis tp: tensor has "
                                         "P, expected "
                                         "V");
    ck_assert_int_eq(refine(T1(TP, I), T1(TP, R), &o), CSPMD_ERR_SPMD_TYPE);
    /* the union must stay orthogonal */
    ck_assert_int_eq(refine(T1(TP, R), T1(h_axis(2, 2), R), &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "Mesh axes tp and MeshAxis(2:2) are not orthogonal (their layouts are not "
                     "independent radix dimensions). All axes in a LocalSpmdType must be mutually "
                     "orthogonal.");
    ck_assert_int_eq(refine(999999, T1(TP, R), &o), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(strncmp(cspmd_last_error(), "cspmd_type_refine: unknown type id (999999, ",
                             44),
                     0);
}
END_TEST

/* A Function's declaration of its own output: R and I give way to it,
 * per axis; nothing else does. */
START_TEST(test_refine_declared)
{
    cspmd_type_t o = 777777;
    ck_assert_int_eq(cspmd_type_refine_declared(T1(TP, R), T1(TP, I), &o), CSPMD_OK);
    ck_assert_uint_eq(o, T1(TP, I));
    ck_assert_int_eq(cspmd_type_refine_declared(T1(TP, I), T1(TP, R), &o), CSPMD_OK);
    ck_assert_uint_eq(o, T1(TP, R));
    ck_assert_int_eq(cspmd_type_refine_declared(T2(TP, R, DP, V), T1(TP, I), &o), CSPMD_OK);
    ck_assert_uint_eq(o, T2(TP, I, DP, V));
    ck_assert_int_eq(cspmd_type_refine_declared(T1(TP, V), T1(TP, P), &o), CSPMD_OK);
    ck_assert_uint_eq(o, T1(TP, P));
    o = 777777;
    ck_assert_int_eq(cspmd_type_refine_declared(T1(TP, V), T1(TP, I), &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "SPMD type mismatch on axis tp: tensor has V, expected I");
    ck_assert_int_eq(cspmd_type_refine_declared(T1(TP, P), T1(TP, R), &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_type_refine_declared(T1(TP, R), T1(TP, V), &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_type_refine_declared(T2(TP, R, DP, P), T2(TP, I, DP, R), &o),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "SPMD type mismatch on axis dp: tensor has P, expected R");
    ck_assert_uint_eq(o, 777777); /* untouched */
}
END_TEST

START_TEST(test_refine_spec_examples)
{
    cspmd_type_t o;
    /* V then S(0) refines */
    ck_assert_int_eq(refine(T1(TP, V), shard(TP, 0, 2), &o), CSPMD_OK);
    ck_assert_uint_eq(o, shard(TP, 0, 2));
    /* S(0) then V keeps the spec */
    ck_assert_int_eq(refine(shard(TP, 0, 2), T1(TP, V), &o), CSPMD_OK);
    ck_assert_uint_eq(o, shard(TP, 0, 2));
    /* S(0) then S(1) */
    ck_assert_int_eq(refine(shard(TP, 0, 2), shard(TP, 1, 2), &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "PartitionSpec conflict: axis tp already shards dim 0, cannot also shard dim 1");
    /* {tp: S(0)} then {dp: S(1)} -> PartitionSpec(tp, dp) */
    ck_assert_int_eq(refine(shard(TP, 0, 2), shard(DP, 1, 2), &o), CSPMD_OK);
    ck_assert_str_eq(fmt(o), "{dp: V, tp: V} PartitionSpec(tp, dp)");
    /* {tp: S(0)} then {dp: S(0)} */
    ck_assert_int_eq(refine(shard(TP, 0, 2), shard(DP, 0, 2), &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "PartitionSpec conflict at dim 0: tensor has tp, new assert has dp");
    /* PartitionSpec(dp, None) then PartitionSpec(dp, tp) ok */
    cspmd_type_t dpn = mks(0, NULL, NULL,
                           spec_of(2, (const cspmd_axis_t[][3]){{DP}, {0}}, (int[]){1, 0}));
    cspmd_type_t dptp = mks(0, NULL, NULL,
                            spec_of(2, (const cspmd_axis_t[][3]){{DP}, {TP}}, (int[]){1, 1}));
    cspmd_type_t tup = mks(0, NULL, NULL,
                           spec_of(2, (const cspmd_axis_t[][3]){{DP, TP}, {0}}, (int[]){2, 0}));
    ck_assert_int_eq(refine(dpn, dptp, &o), CSPMD_OK);
    ck_assert_uint_eq(o, dptp);
    /* then PartitionSpec((dp, tp), None) is an error */
    ck_assert_int_eq(refine(o, tup, &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "PartitionSpec conflict at dim 0: tensor has dp, new assert has (dp, tp)");
    /* PartitionSpec((dp, tp), None) then {dp: S(0)} */
    ck_assert_int_eq(refine(tup, shard(DP, 0, 2), &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "PartitionSpec conflict at dim 0: tensor has (dp, tp), new assert has dp");
    /* R then V */
    ck_assert_int_eq(refine(T1(TP, R), shard(TP, 0, 1), &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "SPMD type mismatch on axis tp: tensor has "
                                         "R, expected "
                                         "V");
    /* same entry in a different order */
    cspmd_type_t tup2 = mks(0, NULL, NULL,
                            spec_of(2, (const cspmd_axis_t[][3]){{TP, DP}, {0}}, (int[]){2, 0}));
    ck_assert_int_eq(refine(tup, tup2, &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "PartitionSpec conflict at dim 0: tensor has (dp, tp), new assert has (tp, dp)");
    ck_assert_int_eq(refine(tup, tup, &o), CSPMD_OK);
    ck_assert_uint_eq(o, tup);
}
END_TEST

START_TEST(test_refine_v_to_p_leaves_spec)
{
    cspmd_type_t o;
    ck_assert_int_eq(refine(shard(TP, 0, 2), T1(TP, P), &o), CSPMD_OK);
    ck_assert_str_eq(fmt(o), "{tp: P} PartitionSpec(None, None)");
}
END_TEST

/* ---- mutation ---------------------------------------------------- */

static cspmd_status_t mutate(const char *op, cspmd_type_t old, cspmd_type_t inf, int grad,
                             cspmd_type_t *out)
{
    *out = 777777;
    return cspmd_type_check_mutation(op, old, inf, grad, out);
}

START_TEST(test_mutation)
{
    cspmd_type_t o;
    /* R.add_(V) -> V (no grad) */
    ck_assert_int_eq(mutate("add_", T1(TP, R), T1(TP, V), 0, &o), CSPMD_OK);
    ck_assert_uint_eq(o, T1(TP, V));
    ck_assert_int_eq(mutate("add_", T1(TP, I), T1(TP, V), 0, &o), CSPMD_OK);
    /* add(R, V, out=R) -> V */
    ck_assert_int_eq(mutate("add", T1(TP, R), T1(TP, V), 0, &o), CSPMD_OK);
    ck_assert_uint_eq(o, T1(TP, V));
    /* add(R, R, out=untyped) -> R */
    ck_assert_int_eq(mutate("add", CSPMD_TYPE_UNTYPED, T1(TP, R), 0, &o), CSPMD_OK);
    ck_assert_uint_eq(o, T1(TP, R));
    /* P.add_(P) -> P */
    ck_assert_int_eq(mutate("add_", T1(TP, P), T1(TP, P), 1, &o), CSPMD_OK);
    ck_assert_uint_eq(o, T1(TP, P));
    /* axes only in the old type are not compared */
    ck_assert_int_eq(mutate("add_", T2(TP, R, DP, V), T1(TP, R), 0, &o), CSPMD_OK);
    ck_assert_uint_eq(o, T1(TP, R));
}
END_TEST

START_TEST(test_mutation_errors)
{
    cspmd_type_t o;
    /* add(R, R, out=V) */
    ck_assert_int_eq(mutate("add", T1(TP, V), T1(TP, R), 0, &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "add: in-place/out operation would change SPMD type on axis tp from "
                     "V to R. In-place and out= "
                     "operations cannot change a tensor's SPMD type.");
    ck_assert_uint_eq(o, 777777);
    /* R -> V is refused when the tensor requires grad */
    ck_assert_int_eq(mutate("add_", T1(TP, R), T1(TP, V), 1, &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "add_: in-place/out operation would change SPMD type on axis tp from "
                     "R to V. In-place and out= "
                     "operations cannot change a tensor's SPMD type.");
    ck_assert_int_eq(mutate("mul_", T1(TP, R), T1(TP, P), 0, &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "mul_: in-place/out operation would change SPMD type on axis tp from "
                     "R to P. In-place and out= "
                     "operations cannot change a tensor's SPMD type.");
    ck_assert_int_eq(mutate("x", T1(TP, P), T1(TP, V), 0, &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(mutate("x", 999999, T1(TP, V), 0, &o), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(mutate("x", T1(TP, V), 999999, 0, &o), CSPMD_ERR_MISUSE);
}
END_TEST

/* A gradient accumulated in place by the autograd engine (backward
 * relaxation on): R <-> I keeps the buffer's letter, V takes a pending sum
 * as P; the rest is refused as without it, and so is a buffer that
 * requires grad. */
START_TEST(test_mutation_backward_accumulation)
{
    cspmd_type_t o;
    cspmd_infer_backward_relax(1);
    ck_assert_int_eq(mutate("add_", T2(DP, I, TP, V), T2(DP, R, TP, V), 0, &o), CSPMD_OK);
    ck_assert_uint_eq(o, T2(DP, I, TP, V));
    ck_assert_int_eq(mutate("add_", T2(DP, R, TP, V), T2(DP, I, TP, V), 0, &o), CSPMD_OK);
    ck_assert_uint_eq(o, T2(DP, R, TP, V));
    ck_assert_int_eq(mutate("add_", T2(DP, I, TP, V), T2(DP, I, TP, P), 0, &o), CSPMD_OK);
    ck_assert_uint_eq(o, T2(DP, I, TP, P));
    ck_assert_int_eq(mutate("add_", T2(DP, I, TP, V), T2(DP, R, TP, P), 0, &o), CSPMD_OK);
    ck_assert_uint_eq(o, T2(DP, I, TP, P));
    ck_assert_int_eq(mutate("add_", T1(TP, R), T1(TP, P), 0, &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(mutate("add_", T1(TP, P), T1(TP, V), 0, &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(mutate("add_", T1(TP, I), T1(TP, R), 1, &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(mutate("add_", T1(TP, V), T1(TP, P), 1, &o), CSPMD_ERR_SPMD_TYPE);
    cspmd_infer_backward_relax(0);
    ck_assert_int_eq(mutate("add_", T1(TP, I), T1(TP, R), 0, &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "add_: in-place/out operation would change SPMD type on axis tp from "
                     "I to R. In-place and out= "
                     "operations cannot change a tensor's SPMD type.");
    ck_assert_int_eq(mutate("add_", T1(TP, V), T1(TP, P), 0, &o), CSPMD_ERR_SPMD_TYPE);
}
END_TEST

static void *make_worker(void *arg)
{
    cspmd_type_t *out = arg;
    for (int i = 0; i < 64; i++) {
        cspmd_axis_t a[2] = {TP, 0};
        int64_t s = 2, d = 4096 + 4 * i;
        cspmd_axis_intern(&s, &d, 1, &a[1]);
        cspmd_ltype_t l[2] = {R, (cspmd_ltype_t)(1 + i % 4)};
        if (cspmd_type_make(a, l, 2, NULL, &out[i]) != CSPMD_OK)
            out[i] = 0;
        out[i] = cspmd_type_dual(cspmd_type_dual(out[i]));
    }
    return NULL;
}

START_TEST(test_threads_make)
{
    enum { T = 4 };
    static cspmd_type_t res[T][64];
    pthread_t th[T];
    for (int t = 0; t < T; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL, make_worker, res[t]), 0);
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);
    for (int i = 0; i < 64; i++) {
        ck_assert_uint_gt(res[0][i], CSPMD_TYPE_EMPTY);
        for (int t = 1; t < T; t++)
            ck_assert_uint_eq(res[t][i], res[0][i]);
    }
}
END_TEST

/* Fills the process-wide type table: keep last among tests that make new
 * types (under CK_FORK=no later tests share the process). */
START_TEST(test_type_table_full)
{
    cspmd_type_t keep = T1(TP, R);
    cspmd_axis_t a[8];
    for (int i = 0; i < 8; i++)
        a[i] = h_axis(2, (int64_t)1 << (i + 40));
    cspmd_status_t st = CSPMD_OK;
    for (uint32_t code = 0; code < (1u << 17) && st == CSPMD_OK; code++) {
        cspmd_ltype_t l[8];
        for (int i = 0; i < 8; i++)
            l[i] = (cspmd_ltype_t)(1 + ((code >> (2 * i)) & 3));
        int n = code < (1u << 16) ? 8 : 7; /* 4^8 types on 8 axes, then 7 */
        cspmd_type_t t;
        st = cspmd_type_make(a, l, n, NULL, &t);
    }
    ck_assert_int_eq(st, CSPMD_ERR_NOMEM);
    ck_assert_str_eq(cspmd_last_error(), "cspmd: the type table is full (65536 entries)");
    ck_assert_uint_eq(T1(TP, R), keep); /* known types still intern */
}
END_TEST

START_TEST(test_mutate)
{
    cspmd_type_t t = T2(DP, CSPMD_LT_R, TP, CSPMD_LT_V), o = 0;
    cspmd_axis_t ax[] = {TP};
    cspmd_ltype_t v[] = {CSPMD_LT_V}, p[] = {CSPMD_LT_P}, r[] = {CSPMD_LT_R};
    ck_assert_int_eq(cspmd_type_mutate(t, ax, v, p, 1, &o), CSPMD_OK);
    ck_assert_uint_eq(o, T2(DP, CSPMD_LT_R, TP, CSPMD_LT_P));
    /* The current type must be src; nothing changes on failure. */
    o = 7;
    ck_assert_int_eq(cspmd_type_mutate(t, ax, r, p, 1, &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "mutate_type: expected current type "
                                         "R on axis tp, got "
                                         "V");
    ck_assert_uint_eq(o, 7);
    /* All axes are checked before any is changed. */
    cspmd_axis_t two[] = {DP, TP};
    cspmd_ltype_t s2[] = {CSPMD_LT_R, CSPMD_LT_R}, d2[] = {CSPMD_LT_I, CSPMD_LT_I};
    ck_assert_int_eq(cspmd_type_mutate(t, two, s2, d2, 2, &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_uint_eq(o, 7);
    cspmd_axis_t sp[] = {SP};
    ck_assert_int_eq(cspmd_type_mutate(t, sp, r, p, 1, &o), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "mutate_type: axis sp not found in the tensor's type "
                                         "{dp: R, tp: V}");
    /* Size-1 axes are skipped; an untyped tensor becomes {}. */
    cspmd_axis_t triv[] = {CSPMD_AXIS_TRIVIAL};
    ck_assert_int_eq(cspmd_type_mutate(t, triv, r, p, 1, &o), CSPMD_OK);
    ck_assert_uint_eq(o, t);
    ck_assert_int_eq(cspmd_type_mutate(CSPMD_TYPE_UNTYPED, NULL, NULL, NULL, 0, &o), CSPMD_OK);
    ck_assert_uint_eq(o, CSPMD_TYPE_EMPTY);
    ck_assert_int_eq(cspmd_type_mutate(t, ax, v, p, -1, &o), CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_reinterpret_no_grad)
{
    cspmd_type_t t = T2(DP, CSPMD_LT_V, TP, CSPMD_LT_R), o = 0;
    ck_assert_int_eq(cspmd_type_reinterpret_no_grad(t, TP, CSPMD_LT_I, -1, 0, &o), CSPMD_OK);
    ck_assert_uint_eq(o, T2(DP, CSPMD_LT_V, TP, CSPMD_LT_I));
    ck_assert_int_eq(cspmd_type_reinterpret_no_grad(o, TP, CSPMD_LT_R, -1, 0, &o), CSPMD_OK);
    ck_assert_uint_eq(o, t);
    /* Refusals name what is wrong and leave *out untouched. */
    o = 7;
    ck_assert_int_eq(cspmd_type_reinterpret_no_grad(t, TP, CSPMD_LT_I, -1, 1, &o), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(), "reinterpret_no_grad requires tensor.requires_grad=False");
    ck_assert_int_eq(cspmd_type_reinterpret_no_grad(t, TP, CSPMD_LT_P, -1, 0, &o), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(), "reinterpret_no_grad requires dst=R or dst=I; got dst=P");
    ck_assert_int_eq(cspmd_type_reinterpret_no_grad(t, TP, CSPMD_LT_V, 1, 0, &o), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(),
                     "reinterpret_no_grad requires dst=R or dst=I; got dst=S(1)");
    ck_assert_int_eq(cspmd_type_reinterpret_no_grad(t, DP, CSPMD_LT_R, -1, 0, &o),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "reinterpret_no_grad requires the current type to be R "
                                         "or I; got V on axis dp");
    ck_assert_int_eq(cspmd_type_reinterpret_no_grad(t, SP, CSPMD_LT_I, -1, 0, &o),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "reinterpret_no_grad: axis sp not found in the tensor's "
                                         "SPMD type {dp: V, tp: R}");
    ck_assert_uint_eq(o, 7);
    /* A size-1 axis changes nothing, whatever the type. */
    ck_assert_int_eq(cspmd_type_reinterpret_no_grad(CSPMD_TYPE_UNTYPED, CSPMD_AXIS_TRIVIAL,
                                                    CSPMD_LT_I, -1, 0, &o), CSPMD_OK);
    ck_assert_uint_eq(o, CSPMD_TYPE_UNTYPED);
    ck_assert_int_eq(cspmd_type_reinterpret_no_grad(999999, TP, CSPMD_LT_I, -1, 0, &o),
                     CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_merge_scalars)
{
    cspmd_type_t o = 0;
    ck_assert_int_eq(cspmd_type_merge_scalars(T1(TP, CSPMD_LT_R), T1(TP, CSPMD_LT_V), &o),
                     CSPMD_OK);
    ck_assert_uint_eq(o, T1(TP, CSPMD_LT_V));
    ck_assert_int_eq(cspmd_type_merge_scalars(T1(TP, CSPMD_LT_P), T1(TP, CSPMD_LT_P), &o),
                     CSPMD_OK); /* no linearity rules for Scalar arithmetic */
    ck_assert_uint_eq(o, T1(TP, CSPMD_LT_P));
    ck_assert_int_eq(cspmd_type_merge_scalars(T1(TP, CSPMD_LT_I), T1(TP, CSPMD_LT_R), &o),
                     CSPMD_ERR_TYPE);
    ck_assert_int_eq(cspmd_type_merge_scalars(T1(TP, CSPMD_LT_R), T1(DP, CSPMD_LT_R), &o),
                     CSPMD_ERR_TYPE);
    ck_assert_int_eq(
        cspmd_type_merge_scalars(T1(TP, CSPMD_LT_R), T2(DP, CSPMD_LT_R, TP, CSPMD_LT_R), &o),
        CSPMD_ERR_TYPE);
}
END_TEST

Suite *suite_type(void)
{
    Suite *s = suite_create("type");
    TCase *te = tcase_create("errors");
    tcase_add_test(te, test_status_names);
    tcase_add_test(te, test_error_set);
    tcase_add_test(te, test_error_per_thread);
    tcase_add_test(te, test_ltypes);
    suite_add_tcase(s, te);
    TCase *tc = tcase_create("make");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_make_basic);
    tcase_add_test(tc, test_make_empty_trivial);
    tcase_add_test(tc, test_make_errors);
    tcase_add_test(tc, test_make_jointly_non_orthogonal);
    tcase_add_test(tc, test_spec);
    tcase_add_test(tc, test_spec_errors);
    tcase_add_test(tc, test_format_truncation);
    tcase_add_test(tc, test_display_order_follows_names);
    tcase_add_test(tc, test_dual_local);
    tcase_add_test(tc, test_with);
    tcase_add_test(tc, test_threads_make);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("refine");
    tcase_add_checked_fixture(tr, setup, NULL);
    tcase_add_test(tr, test_refine_local);
    tcase_add_test(tr, test_refine_mismatch);
    tcase_add_test(tr, test_refine_declared);
    tcase_add_test(tr, test_refine_spec_examples);
    tcase_add_test(tr, test_refine_v_to_p_leaves_spec);
    tcase_add_test(tr, test_mutation);
    tcase_add_test(tr, test_mutation_errors);
    tcase_add_test(tr, test_mutation_backward_accumulation);
    tcase_add_test(tr, test_mutate);
    tcase_add_test(tr, test_merge_scalars);
    tcase_add_test(tr, test_reinterpret_no_grad);
    suite_add_tcase(s, tr);
    TCase *tf = tcase_create("capacity");
    tcase_add_checked_fixture(tf, setup, NULL);
    tcase_add_test(tf, test_type_table_full);
    suite_add_tcase(s, tf);
    return s;
}
