/* One Check suite per core module; the runner runs them all. */
#ifndef CSPMD_TEST_SUITES_H
#define CSPMD_TEST_SUITES_H
#include <check.h>
Suite *suite_axis(void);
Suite *suite_type(void);
Suite *suite_mesh(void);
Suite *suite_infer(void);
Suite *suite_rules(void);
Suite *suite_coll(void);
Suite *suite_coll_plan(void);
Suite *suite_grad(void);
Suite *suite_raw(void);
Suite *suite_compat(void);
Suite *suite_type_carry(void);
Suite *suite_view_rules(void);
Suite *suite_shard_spec(void);
Suite *suite_annotation(void);
Suite *suite_placement(void);
Suite *suite_global(void);
Suite *suite_redistribute_plan(void);
Suite *suite_error_context(void);
Suite *suite_hook_rules(void);
Suite *suite_unchecked_code(void);
#endif
