#include "suites.h"
#include "cspmd.h"

Suite *suite_axis(void)
{
    Suite *s = suite_create("axis");
    return s;
}
