/* The two mesh axes every core suite uses: tp = 4:1 (inner) and dp = 2:4
 * (outer) of a 2 x 4 mesh, interned and named. */
#ifndef CSPMD_TEST_AXIS_HELPERS_H
#define CSPMD_TEST_AXIS_HELPERS_H

#include "cspmd.h"
#include "suites.h"

static cspmd_axis_t DP, TP;

static inline cspmd_axis_t h_axis(int64_t size, int64_t stride)
{
    cspmd_axis_t a = 0;
    ck_assert_int_eq(cspmd_axis_intern(&size, &stride, 1, &a), CSPMD_OK);
    return a;
}

/* Fixture: names reset, tp then dp interned, only tp named ("tp"). */
static inline void h_axes_tp_named(void)
{
    cspmd_axis_names_reset();
    TP = h_axis(4, 1);
    DP = h_axis(2, 4);
    ck_assert_int_eq(cspmd_axis_name_add(TP, "tp"), CSPMD_OK);
}

/* Fixture: as h_axes_tp_named, and dp named "dp" too. */
static inline void h_axes_named(void)
{
    h_axes_tp_named();
    ck_assert_int_eq(cspmd_axis_name_add(DP, "dp"), CSPMD_OK);
}

/* Fixture teardown: the axis names reset. */
static inline void h_axes_reset(void)
{
    cspmd_axis_names_reset();
}

#endif
