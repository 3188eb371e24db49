#include "suites.h"
#include "cspmd.h"

Suite *suite_coll(void)
{
    Suite *s = suite_create("coll");
    return s;
}
