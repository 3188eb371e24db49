#include "suites.h"
#include "cspmd.h"

Suite *suite_mesh(void)
{
    Suite *s = suite_create("mesh");
    return s;
}
