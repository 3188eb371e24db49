/* Helpers shared by the core suites (test_infer.c, test_global.c, ...): two named
 * axes dp = 2:4 (outer) and tp = 4:1 (inner), type and operand builders. */
#ifndef CSPMD_TEST_INFER_HELPERS_H
#define CSPMD_TEST_INFER_HELPERS_H

#include <string.h>

#include "cspmd.h"
#include "rule_schemas.h"
#include "suites.h"
#include "tp_dp_axes.h"

#define NONE CSPMD_LT_NONE
#define LR CSPMD_LT_R
#define LI CSPMD_LT_I
#define LV CSPMD_LT_V
#define LP CSPMD_LT_P

static inline void h_setup(void)
{
    while (cspmd_mesh_pop() == CSPMD_OK) {
    }
    cspmd_axis_names_reset();
    DP = h_axis(2, 4);
    TP = h_axis(4, 1);
    ck_assert_int_eq(cspmd_axis_name_add(DP, "dp"), CSPMD_OK);
    ck_assert_int_eq(cspmd_axis_name_add(TP, "tp"), CSPMD_OK);
    cspmd_checker_set(1, 1);
    h_bind_rules();
}

static inline void h_teardown(void)
{
    while (cspmd_mesh_pop() == CSPMD_OK) {
    }
    cspmd_checker_set(0, 1);
}

/* Global mode on a dp x tp mesh, for the suites that test global types. */
static inline void h_global_setup(void)
{
    h_setup();
    cspmd_axis_t mesh[2] = {DP, TP};
    ck_assert_int_eq(cspmd_mesh_push(mesh, 2), CSPMD_OK);
    cspmd_checker_set_local(0);
}

static inline void h_global_teardown(void)
{
    cspmd_checker_set_local(1);
    h_teardown();
}

/* A type with the given local types on dp and tp (NONE = absent) and the
 * partition spec *spec (NULL: none). */
static inline cspmd_type_t ty_spec(cspmd_ltype_t dp, cspmd_ltype_t tp, const cspmd_spec_t *spec)
{
    cspmd_axis_t ax[2];
    cspmd_ltype_t lt[2];
    int n = 0;
    if (dp != NONE) {
        ax[n] = DP;
        lt[n++] = dp;
    }
    if (tp != NONE) {
        ax[n] = TP;
        lt[n++] = tp;
    }
    if (n == 0 && spec == NULL)
        return CSPMD_TYPE_EMPTY;
    cspmd_type_t t = 0;
    ck_assert_msg(cspmd_type_make(ax, lt, n, spec, &t) == CSPMD_OK, "%s", cspmd_last_error());
    return t;
}

/* A type with the given local types on dp and tp (NONE = absent). */
static inline cspmd_type_t ty(cspmd_ltype_t dp, cspmd_ltype_t tp)
{
    return ty_spec(dp, tp, NULL);
}

/* A type on tp only. */
static inline cspmd_type_t tt(cspmd_ltype_t tp)
{
    return ty(NONE, tp);
}

static inline cspmd_operand_t TEN(cspmd_type_t t, int arg)
{
    cspmd_operand_t o = {t, (uint16_t)arg, CSPMD_OPERAND_TENSOR, 0};
    return o;
}

/* A tensor operand the op truncates (a cast to an integer or bool dtype). */
static inline cspmd_operand_t TRUNC(cspmd_type_t t, int arg)
{
    cspmd_operand_t o = {t, (uint16_t)arg, CSPMD_OPERAND_TENSOR, CSPMD_OPERAND_TRUNCATED};
    return o;
}

static inline cspmd_operand_t SCA(int arg)
{
    cspmd_operand_t o = {0, (uint16_t)arg, CSPMD_OPERAND_SCALAR, 0};
    return o;
}

/* A Scalar argument equal to zero. */
static inline cspmd_operand_t ZERO(int arg)
{
    cspmd_operand_t o = {0, (uint16_t)arg, CSPMD_OPERAND_SCALAR, CSPMD_OPERAND_ZERO};
    return o;
}

static inline cspmd_operand_t TYP(cspmd_type_t t, int arg)
{
    cspmd_operand_t o = {t, (uint16_t)arg, CSPMD_OPERAND_TYPED, 0};
    return o;
}

static inline void mesh_both(void)
{
    cspmd_axis_t m[2] = {TP, DP};
    ck_assert_int_eq(cspmd_mesh_push(m, 2), CSPMD_OK);
}

static inline void mesh_tp(void)
{
    ck_assert_int_eq(cspmd_mesh_push(&TP, 1), CSPMD_OK);
}

/* Run cspmd_infer for op(name, overload) and expect OK with type want. */
#define INFER_OK(name, ovl, want, ...)                                                  \
    do {                                                                                 \
        cspmd_operand_t ops_[] = {__VA_ARGS__};                                          \
        cspmd_type_t out_ = 12345;                                                       \
        cspmd_status_t st_ = cspmd_infer(cspmd_rule_find(name, ovl), ops_,              \
                                         (int)(sizeof ops_ / sizeof ops_[0]), &out_);    \
        ck_assert_msg(st_ == CSPMD_OK, "%s.%s: %s", name, ovl, cspmd_last_error());     \
        ck_assert_uint_eq(out_, (want));                                                 \
    } while (0)

/* Expect SPMD_TYPE (or another status) and a message containing sub. */
#define INFER_ERR(name, ovl, status, sub, ...)                                          \
    do {                                                                                 \
        cspmd_operand_t ops_[] = {__VA_ARGS__};                                          \
        cspmd_type_t out_ = 12345;                                                       \
        cspmd_status_t st_ = cspmd_infer(cspmd_rule_find(name, ovl), ops_,              \
                                         (int)(sizeof ops_ / sizeof ops_[0]), &out_);    \
        ck_assert_int_eq(st_, (status));                                                 \
        ck_assert_msg(strstr(cspmd_last_error(), (sub)) != NULL, "message: %s",          \
                      cspmd_last_error());                                               \
        ck_assert_uint_eq(out_, 12345);                                                  \
    } while (0)

#endif
