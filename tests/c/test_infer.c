#include "suites.h"
#include "cspmd.h"

Suite *suite_infer(void)
{
    Suite *s = suite_create("infer");
    return s;
}
