#include "suites.h"
#include "cspmd.h"

Suite *suite_type(void)
{
    Suite *s = suite_create("type");
    return s;
}
