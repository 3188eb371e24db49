/* Raw torch.distributed collectives (csrc/core/raw_dist_rules.c): the group
 * registry and the input/output rules. */
#include <stdio.h>
#include <string.h>

#include "cspmd.h"
#include "infer_helpers.h"
#include "suites.h"

static void setup(void)
{
    h_setup();
}

static void teardown(void)
{
    h_teardown();
}

START_TEST(test_group_registry)
{
    cspmd_axis_t a = 0;
    ck_assert_int_eq(cspmd_group_axis("nope", &a), 0);
    ck_assert_int_eq(cspmd_group_bind("7", TP, NULL), CSPMD_OK);
    ck_assert_int_eq(cspmd_group_axis("7", &a), 1);
    ck_assert_uint_eq(a, TP);
    ck_assert_int_eq(cspmd_group_bind("7", DP, ""), CSPMD_OK); /* rebinding replaces */
    cspmd_group_axis("7", &a);
    ck_assert_uint_eq(a, DP);
    ck_assert_int_eq(cspmd_group_bind("", TP, NULL), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_group_bind(NULL, TP, NULL), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_group_bind("8", 77777u, "x"), CSPMD_ERR_MISUSE);
}
END_TEST

/* No limit on the number of groups or the length of a name (the table
 * once held 1,024 names of at most 127 characters). */
START_TEST(test_group_registry_grows)
{
    char name[40];
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "grow-%d", i);
        ck_assert_int_eq(cspmd_group_bind(name, i % 2 ? TP : DP, NULL), CSPMD_OK);
    }
    cspmd_axis_t a = 0;
    ck_assert_int_eq(cspmd_group_axis("grow-4999", &a), 1);
    ck_assert_uint_eq(a, TP);
    ck_assert_int_eq(cspmd_group_axis("grow-0", &a), 1);
    ck_assert_uint_eq(a, DP);
    char long_name[600];
    memset(long_name, 'g', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    ck_assert_int_eq(cspmd_group_bind(long_name, TP, "long"), CSPMD_OK);
    ck_assert_int_eq(cspmd_group_axis(long_name, &a), 1);
    ck_assert_uint_eq(a, TP);
    long_name[300] = '\0'; /* a prefix is another name */
    ck_assert_int_eq(cspmd_group_axis(long_name, &a), 0);
}
END_TEST

/* A group's description names its axis when the group is used, not when it
 * is bound (the world axis keeps its "{dp,tp}" name until then). */
START_TEST(test_group_description_names_axis_on_use)
{
    cspmd_axis_t world = h_axis(8, 1);
    ck_assert_str_eq(cspmd_axis_display(world, 0), "{dp,tp}");
    ck_assert_int_eq(cspmd_group_bind("0", world, "default_pg"), CSPMD_OK);
    ck_assert_str_eq(cspmd_axis_display(world, 0), "{dp,tp}");
    cspmd_axis_t a = 0;
    ck_assert_int_eq(cspmd_group_axis("0", &a), 1);
    ck_assert_uint_eq(a, world);
    ck_assert_str_eq(cspmd_axis_display(world, 0), "default_pg");
    ck_assert_int_eq(cspmd_group_axis("0", &a), 1); /* again: still one name */
    ck_assert_str_eq(cspmd_axis_display(world, 0), "default_pg");
    /* rebinding without a description names nothing more */
    ck_assert_int_eq(cspmd_group_bind("0", world, NULL), CSPMD_OK);
    ck_assert_int_eq(cspmd_group_axis("0", &a), 1);
}
END_TEST

START_TEST(test_rule_table)
{
    ck_assert_ptr_null(cspmd_raw_rule_find("aten::add"));
    const cspmd_raw_rule_t *r = cspmd_raw_rule_find("c10d::allreduce_");
    ck_assert_ptr_nonnull(r);
    ck_assert_str_eq(r->fn, "all_reduce");
    ck_assert_int_eq(r->effect, CSPMD_RAW_SET_INPUT);
    ck_assert_int_eq(cspmd_raw_rule_find("c10d::barrier")->effect, CSPMD_RAW_PASS);
    ck_assert_int_eq(cspmd_raw_rule_find("c10d::broadcast_")->effect, CSPMD_RAW_UNSUPPORTED);
    for (int i = 0; i < cspmd_raw_rule_count(); i++)
        ck_assert_ptr_eq(cspmd_raw_rule_find(cspmd_raw_rule(i)->name), cspmd_raw_rule(i));
    ck_assert_ptr_null(cspmd_raw_rule(-1));
    ck_assert_ptr_null(cspmd_raw_rule(cspmd_raw_rule_count()));
}
END_TEST

START_TEST(test_all_reduce_input)
{
    const cspmd_raw_rule_t *r = cspmd_raw_rule_find("c10d::allreduce_");
    cspmd_type_t out = 0;
    ck_assert_int_eq(cspmd_raw_check_input(r, "sum", TP, ty(LR, LP), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LR, LR)); /* P -> R on the group's axis only */
    /* V: each rank's value taken as a summand, as all_reduce(src=P) does. */
    ck_assert_int_eq(cspmd_raw_check_input(r, "sum", TP, ty(LR, LV), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LR, LR));
    ck_assert_int_eq(cspmd_raw_check_input(r, "sum", TP, ty(LR, LR), &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "all_reduce: expected input type "
                                         "P on axis tp, got "
                                         "R");
    ck_assert_int_eq(cspmd_raw_check_input(r, "sum", TP, ty(LR, NONE), &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "all_reduce: tensor has no type for axis tp"));
    ck_assert_ptr_null(strstr(cspmd_last_error(), "no type at all")); /* typed, on other axes */
    ck_assert_int_eq(cspmd_raw_check_input(r, "sum", TP, CSPMD_TYPE_UNTYPED, &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(),
                                 ". It has no type at all: annotate it with assert_type()."));
    cspmd_checker_set(1, 0); /* permissive: the P -> R write still happens on typed inputs */
    ck_assert_int_eq(cspmd_raw_check_input(r, "sum", TP, ty(LR, NONE), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LR, LR));
    ck_assert_int_eq(cspmd_raw_check_input(r, "sum", TP, CSPMD_TYPE_UNTYPED, &out), CSPMD_OK);
    ck_assert_uint_eq(out, CSPMD_TYPE_UNTYPED);
    /* ... unless the input's type has an axis overlapping the group's: R on
     * the world axis next to P on dp would break orthogonality. */
    cspmd_axis_t world = h_axis(8, 1);
    ck_assert_int_eq(cspmd_raw_check_input(r, "sum", world, ty(LP, NONE), &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_uint_eq(out, ty(LP, NONE)); /* unchanged */
    ck_assert_str_eq(cspmd_last_error(),
                     "all_reduce: the tensor has no type for axis {dp,tp} (permissive mode), so "
                     "the collective would make it R there; but its type {dp: P} has an axis "
                     "that overlaps {dp,tp}, and the axes of a type must be mutually orthogonal. "
                     "Annotate it on {dp,tp}, or on axes orthogonal to it, before the "
                     "collective.");
}
END_TEST

START_TEST(test_outputs_and_unsupported)
{
    const cspmd_raw_rule_t *g = cspmd_raw_rule_find("c10d::_allgather_base_");
    cspmd_type_t out = 0;
    ck_assert_int_eq(cspmd_raw_check_input(g, NULL, TP, ty(LR, LV), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LR, LV)); /* checks only: nothing is set */
    ck_assert_int_eq(cspmd_raw_check_output(g, TP, ty(LR, LR), -1), CSPMD_OK);
    ck_assert_int_eq(cspmd_raw_check_output(g, TP, ty(LR, LI), -1), CSPMD_OK);
    ck_assert_int_eq(cspmd_raw_check_output(g, TP, ty(LR, LV), -1), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "all_gather_into_tensor: expected output tensor type "
                     "R/I on axis tp, got "
                     "V");
    const cspmd_raw_rule_t *l = cspmd_raw_rule_find("c10d::allgather_");
    ck_assert_int_eq(cspmd_raw_check_output(l, TP, ty(LR, LP), 2), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "expected output tensor_list[2] type"));
    ck_assert_int_eq(cspmd_raw_check_output(l, TP, ty(LR, NONE), 0), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "output tensor_list[0] has no type"));
    const cspmd_raw_rule_t *rs = cspmd_raw_rule_find("c10d::_reduce_scatter_base_");
    ck_assert_int_eq(cspmd_raw_check_output(rs, TP, ty(LR, LV), -1), CSPMD_OK);
    ck_assert_int_eq(cspmd_raw_check_output(rs, TP, ty(LR, LR), -1), CSPMD_ERR_SPMD_TYPE);
    const cspmd_raw_rule_t *b = cspmd_raw_rule_find("c10d::broadcast_");
    ck_assert_int_eq(cspmd_raw_check_input(b, NULL, TP, ty(LR, LR), &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "cspmd: type checking for raw torch.distributed."
                                         "broadcast is not yet implemented; use the cspmd "
                                         "wrapper instead");
    /* Functional: the result gets the input's type with the axis at dst. */
    const cspmd_raw_rule_t *f = cspmd_raw_rule_find("_c10d_functional::reduce_scatter_tensor");
    ck_assert_int_eq(cspmd_raw_check_input(f, "sum", TP, ty(LV, LP), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LV, LV));
}
END_TEST

/* What each reduce op takes, on all_reduce (-> R) and reduce_scatter
 * (-> V), spelled as c10d and funcol spell it. */
START_TEST(test_reduce_ops)
{
    static const struct {
        const char *op;
        int p, v, r, i; /* accepted input types */
    } cases[] = {
        {"sum", 1, 1, 0, 0},     {"SUM", 1, 1, 0, 0},     {"premul_sum", 1, 1, 0, 0},
        {"avg", 1, 1, 1, 1},     {"product", 0, 1, 1, 1}, {"min", 0, 1, 1, 1},
        {"max", 0, 1, 1, 1},     {"MAX", 0, 1, 1, 1},     {"band", 0, 1, 1, 1},
        {"bor", 0, 1, 1, 1},     {"bxor", 0, 1, 1, 1},
    };
    const char *names[] = {"c10d::allreduce_", "_c10d_functional::all_reduce",
                           "_c10d_functional::reduce_scatter_tensor",
                           "_c10d_functional::all_reduce_coalesced"};
    for (size_t n = 0; n < sizeof names / sizeof *names; n++) {
        const cspmd_raw_rule_t *r = cspmd_raw_rule_find(names[n]);
        ck_assert_ptr_nonnull(r);
        ck_assert_int_eq(r->reduces, 1);
        cspmd_ltype_t dst = strstr(names[n], "scatter") ? LV : LR;
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            const cspmd_ltype_t ins[] = {LP, LV, LR, LI};
            const int ok[] = {cases[c].p, cases[c].v, cases[c].r, cases[c].i};
            for (int k = 0; k < 4; k++) {
                cspmd_type_t out = 0;
                cspmd_status_t st = cspmd_raw_check_input(r, cases[c].op, TP, ty(LR, ins[k]), &out);
                ck_assert_msg(st == (ok[k] ? CSPMD_OK : CSPMD_ERR_SPMD_TYPE), "%s %s of %s: %d",
                              names[n], cases[c].op, cspmd_ltype_letter(ins[k]), (int)st);
                if (ok[k])
                    ck_assert_uint_eq(out, ty(LR, dst));
            }
        }
    }
    const cspmd_raw_rule_t *r = cspmd_raw_rule_find("c10d::allreduce_");
    cspmd_type_t out = 0;
    ck_assert_int_eq(cspmd_raw_check_input(r, "max", TP, ty(LR, LP), &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "all_reduce: a max reduction takes each rank's value, but the input is P on "
                     "axis tp: each rank holds a summand of the value, not the value. Sum it "
                     "first (all_reduce P -> R), then reduce with max.");
    ck_assert_int_eq(cspmd_raw_check_input(r, "unused", TP, ty(LR, LV), &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "no rule for the reduce op 'unused'"));
    ck_assert_int_eq(cspmd_raw_check_input(r, "maximum", TP, ty(LR, LV), &out),
                     CSPMD_ERR_SPMD_TYPE); /* a name is matched whole */
    ck_assert_int_eq(cspmd_raw_check_input(r, NULL, TP, ty(LR, LP), &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "'(unreadable)'"));
    /* A collective that does not reduce ignores the name. */
    const cspmd_raw_rule_t *g = cspmd_raw_rule_find("_c10d_functional::all_gather_into_tensor");
    ck_assert_int_eq(g->reduces, 0);
    ck_assert_int_eq(cspmd_raw_check_input(g, "max", TP, ty(LR, LV), &out), CSPMD_OK);
    ck_assert_uint_eq(out, ty(LR, LR));
}
END_TEST

/* Which ops take the raw kernel: those with a rule, and any other op of
 * torch.distributed's namespaces that the op table does not type. */
START_TEST(test_raw_namespaces)
{
    ck_assert_int_eq(cspmd_raw_op_is_raw("c10d::allreduce_"), 1);
    ck_assert_int_eq(cspmd_raw_op_is_raw("_c10d_functional::all_reduce"), 1);
    ck_assert_int_eq(cspmd_raw_op_is_raw("_c10d_functional::some_future_collective"), 1);
    ck_assert_int_eq(cspmd_raw_op_is_raw("c10d_functional::all_reduce"), 1);
    ck_assert_int_eq(cspmd_raw_op_is_raw("_c10d_functional_autograd::all_to_all_single"), 1);
    ck_assert_int_eq(cspmd_raw_op_is_raw("_c10d_functional::wait_tensor"), 0); /* op table */
    ck_assert_int_eq(cspmd_raw_op_is_raw("aten::add"), 0);
    ck_assert_int_eq(cspmd_raw_op_is_raw("c10dx::allreduce_"), 0);
    ck_assert_int_eq(cspmd_raw_op_is_raw(NULL), 0);
    /* The namespaces are checked first: every rule must be in one. */
    for (int i = 0; i < cspmd_raw_rule_count(); i++)
        ck_assert_msg(cspmd_raw_op_is_raw(cspmd_raw_rule(i)->name), "%s",
                      cspmd_raw_rule(i)->name);
    ck_assert_int_eq(cspmd_raw_refuse("_c10d_functional::some_future_collective"),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "cspmd: _c10d_functional::some_future_collective is a torch.distributed op "
                     "that cspmd cannot type, so it is refused on typed tensors; use cspmd's "
                     "collectives instead");
}
END_TEST

Suite *suite_raw(void)
{
    Suite *s = suite_create("raw");
    TCase *tc = tcase_create("raw");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_group_registry);
    tcase_add_test(tc, test_group_registry_grows);
    tcase_add_test(tc, test_group_description_names_axis_on_use);
    tcase_add_test(tc, test_rule_table);
    tcase_add_test(tc, test_all_reduce_input);
    tcase_add_test(tc, test_outputs_and_unsupported);
    tcase_add_test(tc, test_reduce_ops);
    tcase_add_test(tc, test_raw_namespaces);
    suite_add_tcase(s, tc);
    return s;
}
