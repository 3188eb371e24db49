/* A collective's src / dst (cspmd_ctype_t) in the suites that test
 * collectives: C(lt) a plain local type, S(d) a shard on dim d (V). */
#ifndef CSPMD_TEST_CTYPE_HELPERS_H
#define CSPMD_TEST_CTYPE_HELPERS_H

#include "cspmd.h"

static inline cspmd_ctype_t C(cspmd_ltype_t lt)
{
    cspmd_ctype_t t = {lt, -1};
    return t;
}

static inline cspmd_ctype_t S(int d)
{
    cspmd_ctype_t t = {CSPMD_LT_V, d};
    return t;
}

#endif
