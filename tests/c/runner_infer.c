/* Runs the core's infer suites. */
#include <stdlib.h>

#include "suites.h"

int main(void)
{
    SRunner *sr = srunner_create(suite_infer());
    srunner_add_suite(sr, suite_rules());
    srunner_add_suite(sr, suite_coll());
    srunner_add_suite(sr, suite_coll_plan());
    srunner_add_suite(sr, suite_grad());
    srunner_add_suite(sr, suite_raw());
    srunner_add_suite(sr, suite_global());
    srunner_add_suite(sr, suite_redistribute_plan());
    srunner_add_suite(sr, suite_error_context());
    srunner_add_suite(sr, suite_hook_rules());
    srunner_add_suite(sr, suite_unchecked_code());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
