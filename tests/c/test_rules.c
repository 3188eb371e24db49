#include "suites.h"
#include "cspmd.h"

Suite *suite_rules(void)
{
    Suite *s = suite_create("rules");
    return s;
}
