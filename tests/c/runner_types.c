/* Runs the core's types suites. */
#include <stdlib.h>

#include "suites.h"

int main(void)
{
    SRunner *sr = srunner_create(suite_axis());
    /* before type: its table-full test leaves no room under CK_FORK=no */
    srunner_add_suite(sr, suite_compat());
    srunner_add_suite(sr, suite_type_carry());
    srunner_add_suite(sr, suite_view_rules());
    srunner_add_suite(sr, suite_shard_spec());
    srunner_add_suite(sr, suite_annotation());
    srunner_add_suite(sr, suite_placement());
    srunner_add_suite(sr, suite_type());
    srunner_add_suite(sr, suite_mesh());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
