/* One interned mesh axis, for the core suites. */
#ifndef CSPMD_TEST_AXIS_HELPERS_H
#define CSPMD_TEST_AXIS_HELPERS_H

#include "cspmd.h"
#include "suites.h"

/* The axis of the given size and stride (asserting it interns). */
static inline cspmd_axis_t h_axis(int64_t size, int64_t stride)
{
    cspmd_axis_t a = 0;
    ck_assert_int_eq(cspmd_axis_intern(&size, &stride, 1, &a), CSPMD_OK);
    return a;
}

#endif
