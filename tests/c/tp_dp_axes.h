/* The two mesh axes most core suites use: tp = 4:1 (inner) and dp = 2:4
 * (outer) of a 2 x 4 mesh, interned and named. */
#ifndef CSPMD_TEST_TP_DP_AXES_H
#define CSPMD_TEST_TP_DP_AXES_H

#include "axis_helpers.h"
#include "cspmd.h"
#include "suites.h"

static cspmd_axis_t DP, TP;

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
