/* The per-thread checker state: current-mesh stack and flags. */
#include <pthread.h>
#include <string.h>

#include "axis_helpers.h"
#include "core.h"
#include "cspmd.h"
#include "suites.h"

static cspmd_axis_t TP, DP;

static void setup(void)
{
    cspmd_axis_names_reset();
    while (cspmd_mesh_pop() == CSPMD_OK)
        ;
    cspmd_checker_set(0, 1);
    TP = h_axis(4, 1);
    DP = h_axis(2, 4);
    ck_assert_int_eq(cspmd_axis_name_add(TP, "tp"), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_name_add(DP, "dp"), CSPMD_OK);
}

START_TEST(test_no_mesh)
{
    cspmd_axis_t a[CSPMD_MAX_AXES];
    ck_assert_int_eq(cspmd_mesh_current(a), -1);
    ck_assert_uint_eq(cspmdi_mesh_id(), 0);
    ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_mesh_pop: no current mesh to pop");
    ck_assert_int_eq(cspmdi_mesh_axes(0, a), -1);
    ck_assert_int_eq(cspmdi_mesh_axes(123456, a), -1);
}
END_TEST

START_TEST(test_push_pop)
{
    cspmd_axis_t a[CSPMD_MAX_AXES];
    ck_assert_int_eq(cspmd_mesh_push((cspmd_axis_t[]){TP, DP}, 2), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_current(a), 2);
    ck_assert_uint_eq(a[0], DP); /* outermost first */
    ck_assert_uint_eq(a[1], TP);
    uint32_t id = cspmdi_mesh_id();
    ck_assert_uint_ne(id, 0);
    ck_assert_int_eq(cspmdi_mesh_axes(id, a), 2);
    ck_assert_uint_eq(a[0], DP);
    /* nesting overrides; the same set gets the same id */
    ck_assert_int_eq(cspmd_mesh_push((cspmd_axis_t[]){TP}, 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_current(a), 1);
    ck_assert_uint_eq(a[0], TP);
    ck_assert_uint_ne(cspmdi_mesh_id(), id);
    ck_assert_int_eq(cspmd_mesh_push((cspmd_axis_t[]){DP, TP, TP}, 3), CSPMD_OK);
    ck_assert_uint_eq(cspmdi_mesh_id(), id);
    ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_OK);
    ck_assert_uint_eq(cspmdi_mesh_id(), id); /* exit restores */
    ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_current(a), -1);
}
END_TEST

START_TEST(test_trivial_axes_dropped)
{
    cspmd_axis_t a[CSPMD_MAX_AXES];
    ck_assert_int_eq(cspmd_mesh_push((cspmd_axis_t[]){CSPMD_AXIS_TRIVIAL, TP}, 2), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_current(a), 1);
    ck_assert_uint_eq(a[0], TP);
    ck_assert_int_eq(cspmd_mesh_push((cspmd_axis_t[]){CSPMD_AXIS_TRIVIAL}, 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_current(a), 0); /* a mesh with no axes */
    uint32_t empty = cspmdi_mesh_id();
    ck_assert_uint_ne(empty, 0);
    ck_assert_int_eq(cspmd_mesh_push(NULL, 0), CSPMD_OK);
    ck_assert_uint_eq(cspmdi_mesh_id(), empty);
}
END_TEST

/* A mesh as one interned id (axes and local axes) and a thread's current
 * mesh set to exactly one id: what the front mirrors its open regions with. */
START_TEST(test_intern_apply)
{
    cspmd_axis_t a[CSPMD_MAX_AXES];
    uint32_t plain, local, again, tp_only;
    ck_assert_int_eq(cspmd_mesh_intern((cspmd_axis_t[]){TP, DP}, 2, NULL, 0, &plain), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_intern((cspmd_axis_t[]){TP, DP}, 2, &DP, 1, &local), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_intern((cspmd_axis_t[]){DP, TP, TP}, 3, (cspmd_axis_t[]){DP, DP},
                                       2, &again),
                     CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_intern(&TP, 1, NULL, 0, &tp_only), CSPMD_OK);
    ck_assert_uint_ne(plain, 0);
    ck_assert_uint_ne(plain, local);
    ck_assert_uint_eq(local, again);
    ck_assert_int_eq(cspmd_mesh_current(a), -1); /* interning changes no thread's state */
    /* apply replaces the whole stack, whatever was pushed */
    ck_assert_int_eq(cspmd_mesh_push(&TP, 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_push(&TP, 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_apply(local), CSPMD_OK);
    ck_assert_uint_eq(cspmd_mesh_current_id(), local);
    ck_assert_int_eq(cspmd_mesh_current(a), 2);
    ck_assert_int_eq(cspmd_mesh_local_axes(a), 1);
    ck_assert_uint_eq(a[0], DP);
    ck_assert_int_eq(cspmd_mesh_apply(tp_only), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_local_axes(a), 0);
    ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_ERR_MISUSE); /* one entry only */
    ck_assert_int_eq(cspmd_mesh_apply(plain), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_apply(0), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_current(a), -1);
    ck_assert_uint_eq(cspmd_mesh_current_id(), 0);
    /* set_local_axes replaces the top entry by the same mesh with local axes */
    ck_assert_int_eq(cspmd_mesh_push((cspmd_axis_t[]){TP, DP}, 2), CSPMD_OK);
    ck_assert_uint_eq(cspmd_mesh_current_id(), plain);
    ck_assert_int_eq(cspmd_mesh_set_local_axes(&DP, 1), CSPMD_OK);
    ck_assert_uint_eq(cspmd_mesh_current_id(), local);
    ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_OK);
    /* errors change nothing */
    ck_assert_int_eq(cspmd_mesh_apply(123456), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_mesh_apply: unknown mesh id 123456");
    ck_assert_uint_eq(cspmd_mesh_current_id(), 0);
    ck_assert_int_eq(cspmd_mesh_intern(&TP, 1, &DP, 1, &again), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_mesh_intern(&TP, 1, NULL, 1, &again), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_mesh_intern(&TP, 1, NULL, 0, NULL), CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_push_errors)
{
    cspmd_axis_t a[CSPMD_MAX_AXES];
    cspmd_axis_t bad = h_axis(2, 2);
    ck_assert_int_eq(cspmd_mesh_push((cspmd_axis_t[]){TP, bad}, 2), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "Mesh axes tp and MeshAxis(2:2) are not orthogonal (their layouts are not "
                     "independent radix dimensions). All axes in a LocalSpmdType must be mutually "
                     "orthogonal.");
    ck_assert_int_eq(cspmd_mesh_current(a), -1); /* nothing pushed */
    ck_assert_int_eq(cspmd_mesh_push((cspmd_axis_t[]){h_axis(2, 5), h_axis(2, 6), h_axis(2, 7)}, 3),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "Mesh axes [MeshAxis(2:5), MeshAxis(2:6), "
                                         "MeshAxis(2:7)] are not mutually orthogonal.");
    ck_assert_int_eq(cspmd_mesh_push((cspmd_axis_t[]){TP, 4000000000u}, 2), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_mesh_push: unknown axis id 4000000000");
    ck_assert_int_eq(cspmd_mesh_push(NULL, 1), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_mesh_push: bad axis list (n = 1)");
    ck_assert_int_eq(cspmd_mesh_push(a, -1), CSPMD_ERR_MISUSE);
    cspmd_axis_t nine[9];
    for (int i = 0; i < 9; i++)
        nine[i] = h_axis(2, (int64_t)1 << (i + 20));
    ck_assert_int_eq(cspmd_mesh_push(nine, 9), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd: at most 8 mesh axes are supported");
    ck_assert_int_eq(cspmd_mesh_current(a), -1);
}
END_TEST

START_TEST(test_depth_limit)
{
    for (int i = 0; i < 64; i++)
        ck_assert_int_eq(cspmd_mesh_push((cspmd_axis_t[]){TP}, 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_push((cspmd_axis_t[]){TP}, 1), CSPMD_ERR_NOMEM);
    ck_assert_str_eq(cspmd_last_error(), "cspmd_mesh_push: mesh stack is full (64 entries)");
    for (int i = 0; i < 64; i++)
        ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_checker_flags)
{
    ck_assert_int_eq(cspmd_checker_enabled(), 0);
    ck_assert_int_eq(cspmd_checker_strict(), 1);
    cspmd_checker_set(1, 0);
    ck_assert_int_eq(cspmd_checker_enabled(), 1);
    ck_assert_int_eq(cspmd_checker_strict(), 0);
    cspmd_checker_set(7, 9);
    ck_assert_int_eq(cspmd_checker_enabled(), 1);
    ck_assert_int_eq(cspmd_checker_strict(), 1);
}
END_TEST

static void *other_thread(void *arg)
{
    int *out = arg;
    cspmd_axis_t a[CSPMD_MAX_AXES];
    out[0] = cspmd_mesh_current(a);
    out[1] = cspmd_checker_enabled();
    out[2] = cspmd_checker_strict();
    out[3] = (int)cspmdi_mesh_id();
    return NULL;
}

static void *owner_thread(void *arg)
{
    cspmd_checker_set(0, 1); /* sets its own state: no longer reads the published one */
    return other_thread(arg);
}

START_TEST(test_per_thread)
{
    ck_assert_int_eq(cspmd_mesh_push((cspmd_axis_t[]){TP}, 1), CSPMD_OK);
    cspmd_checker_set(1, 0);
    int seen[4];
    pthread_t th;
    /* A thread with state of its own sees only that. */
    ck_assert_int_eq(pthread_create(&th, NULL, owner_thread, seen), 0);
    pthread_join(th, NULL);
    ck_assert_int_eq(seen[0], -1);
    ck_assert_int_eq(seen[1], 0);
    ck_assert_int_eq(seen[2], 1);
    ck_assert_int_eq(seen[3], 0);
    /* A thread that never set state (an autograd device thread) reads the
     * mesh and strictness this checking thread published; enabled stays
     * per thread. */
    ck_assert_int_eq(pthread_create(&th, NULL, other_thread, seen), 0);
    pthread_join(th, NULL);
    ck_assert_int_eq(seen[0], 1);
    ck_assert_int_eq(seen[1], 0);
    ck_assert_int_eq(seen[2], 0);
    ck_assert_int_eq(seen[3], (int)cspmdi_mesh_id());
    ck_assert_int_eq(cspmd_mesh_current(NULL), 1);
    ck_assert_int_eq(cspmd_checker_enabled(), 1);
}
END_TEST

/* Fills the process-wide mesh table: keep this the last test that interns
 * new meshes (under CK_FORK=no every later test shares the process). */
START_TEST(test_mesh_table_full)
{
    ck_assert_int_eq(cspmd_mesh_push((cspmd_axis_t[]){TP}, 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_OK);
    cspmd_status_t st = CSPMD_OK;
    for (int64_t i = 0; i < 5000 && st == CSPMD_OK; i++) {
        int64_t s = 3, d = 100000 + i;
        cspmd_axis_t a;
        ck_assert_int_eq(cspmd_axis_intern(&s, &d, 1, &a), CSPMD_OK);
        st = cspmd_mesh_push(&a, 1);
        if (st == CSPMD_OK)
            ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_OK);
    }
    ck_assert_int_eq(st, CSPMD_ERR_NOMEM);
    ck_assert_str_eq(cspmd_last_error(), "cspmd: the mesh table is full (4096 entries)");
    /* known meshes still work */
    ck_assert_int_eq(cspmd_mesh_push((cspmd_axis_t[]){TP}, 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_OK);
}
END_TEST

Suite *suite_mesh(void)
{
    Suite *s = suite_create("mesh");
    TCase *tc = tcase_create("stack");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_no_mesh);
    tcase_add_test(tc, test_push_pop);
    tcase_add_test(tc, test_trivial_axes_dropped);
    tcase_add_test(tc, test_push_errors);
    tcase_add_test(tc, test_intern_apply);
    tcase_add_test(tc, test_depth_limit);
    tcase_add_test(tc, test_checker_flags);
    tcase_add_test(tc, test_per_thread);
    tcase_add_test(tc, test_mesh_table_full);
    suite_add_tcase(s, tc);
    return s;
}
