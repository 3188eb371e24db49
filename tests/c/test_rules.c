/* The op rule table: lookup of representative aten ops, forward and
 * backward, kinds, wildcards, prefixes and the table's own consistency. */
#include <stdio.h>
#include <string.h>

#include "cspmd.h"
#include "rule_schemas.h"
#include "rules.h"
#include "suites.h"

static void expect(const char *name, const char *ovl, const char *want_name,
                   cspmd_rule_kind_t want_kind)
{
    cspmd_rule_t r = cspmd_rule_find(name, ovl);
    ck_assert_msg(strcmp(cspmd_rule_name(r), want_name) == 0, "%s.%s: %s, want %s", name, ovl,
                  cspmd_rule_name(r), want_name);
    ck_assert_msg(cspmd_rule_kind(r) == want_kind, "%s.%s: kind %d", name, ovl,
                  (int)cspmd_rule_kind(r));
}

#define LIN_(n, o) expect(n, o, "LINEAR", CSPMD_KIND_INFER)
#define MUL_(n, o) expect(n, o, "MULTILINEAR", CSPMD_KIND_INFER)
#define NON_(n, o) expect(n, o, "NONLINEAR", CSPMD_KIND_INFER)

START_TEST(test_observed_transformer_ops)
{
    /* The ops seen on torch 2.11 for a small transformer, fwd + bwd. */
    NON_("aten::_log_softmax", "");
    MUL_("aten::_log_softmax_backward_data", "");
    NON_("aten::_safe_softmax", "");
    NON_("aten::_softmax", "");
    MUL_("aten::_softmax_backward_data", "");
    LIN_("aten::_unsafe_view", "");
    LIN_("aten::add", "Tensor");
    LIN_("aten::add_", "Scalar");
    expect("aten::addmm", "", "DECOMPOSED", CSPMD_KIND_INFER);
    expect("aten::arange", "", "FACTORY", CSPMD_KIND_FACTORY);
    expect("aten::arange", "start_step", "FACTORY", CSPMD_KIND_FACTORY);
    expect("aten::bernoulli_", "float", "RANDOM_FILL", CSPMD_KIND_RANDOM_FILL);
    MUL_("aten::bmm", "");
    LIN_("aten::cat", "");
    LIN_("aten::complex", "");
    LIN_("aten::polar", "");
    LIN_("aten::clone", "");
    LIN_("aten::detach", "");
    MUL_("aten::div", "Scalar");
    MUL_("aten::div_", "Scalar");
    LIN_("aten::embedding", "");
    MUL_("aten::embedding_dense_backward", "");
    NON_("aten::empty", "memory_format");
    LIN_("aten::empty_like", ""); /* uninitialized: takes the operand type */
    LIN_("aten::expand", "");
    expect("aten::full", "", "FACTORY", CSPMD_KIND_FACTORY);
    NON_("aten::gelu", "");
    MUL_("aten::gelu_backward", "");
    expect("aten::lift_fresh", "", "FACTORY", CSPMD_KIND_FACTORY);
    NON_("aten::scatter", "reduce");
    LIN_("aten::scatter", "src");
    LIN_("aten::upsample_nearest2d", "vec");
    LIN_("aten::_fft_c2r", "");
    MUL_("aten::replication_pad1d_backward", "");
    LIN_("aten::mean", "");
    LIN_("aten::mean", "dim");
    MUL_("aten::mm", "");
    MUL_("aten::mul", "Scalar");
    MUL_("aten::mul", "Tensor");
    NON_("aten::native_layer_norm", "");
    MUL_("aten::native_layer_norm_backward", "");
    MUL_("aten::nll_loss_backward", "");
    NON_("aten::nll_loss_forward", "");
    expect("aten::ones", "", "FACTORY", CSPMD_KIND_FACTORY);
    expect("aten::ones_like", "", "FACTORY", CSPMD_KIND_FACTORY);
    NON_("aten::pow", "Tensor_Scalar");
    expect("aten::randn", "", "RANDOM_FILL", CSPMD_KIND_RANDOM_FILL); /* fresh: {} */
    NON_("aten::rsqrt", "");
    expect("aten::scalar_tensor", "", "FACTORY", CSPMD_KIND_FACTORY);
    NON_("aten::silu", "");
    MUL_("aten::silu_backward", "");
    LIN_("aten::split", "Tensor");
    LIN_("aten::sum", "dim_IntList");
    LIN_("aten::t", "");
    LIN_("aten::transpose", "int");
    LIN_("aten::tril", "");
    LIN_("aten::view", "");
    LIN_("aten::where", "self");
    expect("aten::zeros", "", "FACTORY", CSPMD_KIND_FACTORY);
}
END_TEST

START_TEST(test_more_ops)
{
    MUL_("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "");
    MUL_("aten::_scaled_dot_product_efficient_attention_backward", "");
    MUL_("aten::_scaled_dot_product_flash_attention_backward", "");
    MUL_("aten::_scaled_dot_product_cudnn_attention_backward", "");
    NON_("aten::_scaled_dot_product_flash_attention_for_cpu", "");
    NON_("aten::native_dropout", "");
    MUL_("aten::native_dropout_backward", "");
    NON_("aten::_fused_rms_norm", "");
    MUL_("aten::_fused_rms_norm_backward", "");
    MUL_("aten::threshold_backward", "");
    MUL_("aten::tanh_backward", "");
    MUL_("aten::sigmoid_backward", "");
    LIN_("aten::masked_fill", "Scalar");
    LIN_("aten::masked_fill_", "Tensor");
    LIN_("aten::slice", "Tensor");
    LIN_("aten::slice_backward", "");
    LIN_("aten::select", "int");
    LIN_("aten::select_backward", "");
    LIN_("aten::unsqueeze", "");
    LIN_("aten::squeeze", "dim");
    LIN_("aten::squeeze", "dims");
    LIN_("aten::squeeze", "");
    LIN_("aten::permute", "");
    LIN_("aten::alias", "");
    LIN_("aten::as_strided", "");
    LIN_("aten::unbind", "int");
    LIN_("aten::split_with_sizes", "");
    LIN_("aten::chunk", "");
    LIN_("aten::stack", "");
    LIN_("aten::narrow", "");
    LIN_("aten::index_select", "");
    LIN_("aten::gather", "");
    LIN_("aten::index", "Tensor");
    LIN_("aten::index_put_", "");
    LIN_("aten::scatter_add", "");
    expect("aten::new_zeros", "", "FACTORY", CSPMD_KIND_FACTORY);
    expect("aten::new_ones", "", "FACTORY", CSPMD_KIND_FACTORY);
    expect("aten::new_full", "", "FACTORY", CSPMD_KIND_FACTORY);
    LIN_("aten::new_empty", "");
    LIN_("aten::new_empty_strided", "");
    expect("aten::zeros_like", "", "FACTORY", CSPMD_KIND_FACTORY);
    expect("aten::full_like", "", "FACTORY", CSPMD_KIND_FACTORY);
    NON_("aten::randn_like", "");
    NON_("aten::rand_like", "");
    expect("aten::fill_", "Scalar", "FILL", CSPMD_KIND_FILL);
    expect("aten::fill_", "Tensor", "FILL", CSPMD_KIND_FILL);
    expect("aten::zero_", "", "FILL", CSPMD_KIND_FILL);
    LIN_("aten::copy_", "");
    expect("aten::normal_", "", "RANDOM_FILL", CSPMD_KIND_RANDOM_FILL);
    expect("aten::uniform_", "", "RANDOM_FILL", CSPMD_KIND_RANDOM_FILL);
    expect("aten::random_", "from", "RANDOM_FILL", CSPMD_KIND_RANDOM_FILL);
    expect("aten::exponential_", "", "RANDOM_FILL", CSPMD_KIND_RANDOM_FILL);
    LIN_("aten::_to_copy", "");
    LIN_("aten::sum", "");
    LIN_("aten::negative_", "");
    LIN_("aten::sub", "Tensor");
    LIN_("aten::sub_", "Scalar");
    LIN_("aten::rsub", "Scalar");
    NON_("aten::_local_scalar_dense", "");
    LIN_("_c10d_functional::wait_tensor", "");
    NON_("_c10d_functional::all_reduce", "");
    NON_("aten::div", "Tensor_mode");
    NON_("aten::view", "dtype");
    expect("aten::addcmul_", "", "DECOMPOSED", CSPMD_KIND_INFER);
    expect("aten::baddbmm", "", "DECOMPOSED", CSPMD_KIND_INFER);
}
END_TEST

START_TEST(test_passthrough)
{
    const char *names[] = {"aten::_has_compatible_shallow_copy_type", "aten::is_same_size",
                           "aten::record_stream", "aten::set_", "aten::resize_",
                           "aten::is_pinned", "aten::sym_size", "aten::sym_numel",
                           "aten::_nested_tensor_size",
                           "aten::_amp_foreach_non_finite_check_and_unscale_"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        expect(names[i], "", "PASSTHROUGH", CSPMD_KIND_PASSTHROUGH);
    expect("aten::set_", "source_Storage", "PASSTHROUGH", CSPMD_KIND_PASSTHROUGH);
}
END_TEST

/* List ops: _foreach_<op> carries <op>'s rule per element; the fused
 * optimizers have their own, and keep state_steps out of the result. */
START_TEST(test_foreach_rules)
{
    const char *names[] = {"aten::_foreach_add_", "aten::_foreach_mul", "aten::_foreach_norm",
                           "aten::_fused_adamw_", "aten::_fused_adam", "aten::_fused_sgd_",
                           "aten::_fused_adagrad_"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        expect(names[i], "List", "FOREACH", CSPMD_KIND_FOREACH);
    cspmd_rule_t add = cspmd_rule_find("aten::_foreach_add_", "Scalar");
    cspmd_rule_t adam = cspmd_rule_find("aten::_fused_adam_", "");
    ck_assert_int_eq(cspmd_rule_takes_result(add, 0), 1);
    ck_assert_int_eq(cspmd_rule_takes_result(add, 1), 1);
    ck_assert_int_eq(cspmd_rule_takes_result(adam, 0), 1); /* params      */
    ck_assert_int_eq(cspmd_rule_takes_result(adam, 1), 0); /* grads       */
    ck_assert_int_eq(cspmd_rule_takes_result(adam, 4), 1); /* max_exp_avg_sqs */
    ck_assert_int_eq(cspmd_rule_takes_result(adam, 5), 0); /* state_steps */
    ck_assert_int_eq(cspmd_rule_takes_result(adam, 99), 0);
    /* a name too long for the element lookup still gets the default */
    char longname[400];
    memset(longname, 'x', sizeof longname);
    memcpy(longname, "aten::_foreach_", 15);
    longname[sizeof longname - 1] = '\0';
    ck_assert_int_eq(cspmd_rule_kind(cspmd_rule_find(longname, "")), CSPMD_KIND_FOREACH);
    /* ids that only look like list ids are not */
    ck_assert_int_eq(cspmd_rule_kind(-1), CSPMD_KIND_INFER);
    ck_assert_str_eq(cspmd_rule_name((1 << 24) | (1 << 20)), "UNKNOWN");
}
END_TEST

START_TEST(test_lookup_edges)
{
    /* unknown ops: rule 0, NONLINEAR */
    ck_assert_int_eq(cspmd_rule_find("aten::exp", ""), 0);
    ck_assert_int_eq(cspmd_rule_find("aten::no_such_op", "whatever"), 0);
    ck_assert_int_eq(cspmd_rule_find(NULL, ""), 0);
    ck_assert_int_eq(cspmd_rule_find("", ""), 0);
    ck_assert_str_eq(cspmd_rule_name(0), "NONLINEAR");
    ck_assert_int_eq(cspmd_rule_kind(0), CSPMD_KIND_INFER);
    /* "", "default" and NULL are the default overload */
    cspmd_rule_t v = cspmd_rule_find("aten::view", "");
    ck_assert_int_ne(v, 0);
    ck_assert_int_eq(cspmd_rule_find("aten::view", "default"), v);
    ck_assert_int_eq(cspmd_rule_find("aten::view", NULL), v);
    /* an exact overload entry wins over the wildcard */
    ck_assert_int_ne(cspmd_rule_find("aten::view", "dtype"), v);
    /* names are exact: no namespace, no match */
    ck_assert_int_eq(cspmd_rule_find("add", "Tensor"), 0);
    ck_assert_int_eq(cspmd_rule_find("aten::ad", "Tensor"), 0);
    ck_assert_int_eq(cspmd_rule_find("aten::addd", "Tensor"), 0);
    /* bad ids */
    ck_assert_str_eq(cspmd_rule_name(-1), "UNKNOWN");
    ck_assert_str_eq(cspmd_rule_name(1 << 30), "UNKNOWN");
    ck_assert_int_eq(cspmd_rule_kind(-5), CSPMD_KIND_INFER);
}
END_TEST

START_TEST(test_table_consistency)
{
    /* every entry is found under its own key (so keys are unique and the
     * index is sorted), and its fields are in range */
    int n = 0;
    for (cspmd_rule_t id = 1; id < cspmd_rule_count(); id++, n++) {
        cspmd_rule_info_t r;
        ck_assert_int_eq(cspmd_rule_info(id, &r), CSPMD_OK);
        size_t len = strlen(r.name);
        ck_assert_msg(strncmp(r.name, "aten::", 6) == 0 || strstr(r.name, "::") != NULL, "%s",
                      r.name);
        ck_assert(r.kind <= CSPMD_KIND_FOREACH);
        if (r.bound && strcmp(r.linearity, "DECOMPOSED") == 0)
            ck_assert(r.product_a >= 0 && r.product_b >= 0 && r.sum_self >= 0);
        if (r.name[len - 1] == '*') {
            char probe[128];
            snprintf(probe, sizeof probe, "%.*sxyz", (int)(len - 1), r.name);
            ck_assert_msg(cspmd_rule_find(probe, "") == id, "prefix %s", r.name);
            continue;
        }
        ck_assert_msg(cspmd_rule_find(r.name, r.overload) == id, "%s.%s found as %d", r.name,
                      r.overload, (int)cspmd_rule_find(r.name, r.overload));
        if (strstr(r.name, "_backward") != NULL)
            ck_assert_str_ne(r.linearity, "NONLINEAR");
    }
    ck_assert_int_gt(n, 300);
    ck_assert_ptr_null(cspmdi_rule_get(-1));
    ck_assert_ptr_null(cspmdi_rule_get(cspmd_rule_count()));
}
END_TEST

/* cspmd_rule_info describes each row by schema argument masks. */
START_TEST(test_rule_info)
{
    ck_assert_int_gt(cspmd_rule_count(), 300);
    cspmd_rule_info_t info;
    ck_assert_int_eq(cspmd_rule_info(cspmd_rule_find("aten::gather", ""), &info), CSPMD_OK);
    ck_assert_str_eq(info.name, "aten::gather");
    ck_assert_str_eq(info.overload, "*");
    ck_assert_str_eq(info.linearity, "LINEAR");
    ck_assert_uint_eq(info.coefficient_args, 1u << 2); /* index */
    ck_assert_int_eq(info.product_a, -1);
    ck_assert_int_eq(cspmd_rule_info(cspmd_rule_find("aten::addmm", ""), &info), CSPMD_OK);
    ck_assert_str_eq(info.linearity, "DECOMPOSED");
    ck_assert_int_eq(info.product_a, 1);
    ck_assert_int_eq(info.product_b, 2);
    ck_assert_int_eq(info.sum_self, 0);
    ck_assert_uint_eq(info.operand_args, 7u);
    ck_assert_int_eq(cspmd_rule_info(cspmd_rule_find("aten::constant_pad_nd", ""), &info),
                     CSPMD_OK);
    ck_assert_uint_eq(info.zero_free_args, 1u << 2);
    /* a list op gives its element rule's row */
    ck_assert_int_eq(cspmd_rule_info(cspmd_rule_find("aten::_foreach_add_", "List"), &info),
                     CSPMD_OK);
    ck_assert_str_eq(info.name, "aten::add_");
    ck_assert_int_eq(info.kind, CSPMD_KIND_FOREACH);
    ck_assert_int_eq(cspmd_rule_info(0, &info), CSPMD_OK);
    ck_assert_str_eq(info.linearity, "NONLINEAR");
    ck_assert_int_eq(cspmd_rule_info(-1, &info), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_rule_info(cspmd_rule_count(), &info), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_rule_info(1, NULL), CSPMD_ERR_MISUSE);
}
END_TEST

/* ---- binding argument names to an overload's positions --------------- */

static cspmd_status_t bind(const char *name, const char *ovl, const char *args)
{
    return h_bind(cspmd_rule_find(name, ovl), name, args);
}

static void expect_error(cspmd_status_t st, cspmd_status_t want, const char *sub)
{
    ck_assert_int_eq(st, want);
    ck_assert_msg(strstr(cspmd_last_error(), sub) != NULL, "message: %s", cspmd_last_error());
}

START_TEST(test_bind_success)
{
    cspmd_rule_t gather = cspmd_rule_find("aten::gather", "");
    cspmd_rule_info_t info;
    ck_assert_int_eq(bind("aten::gather", "", "self:T dim index:T sparse_grad"), CSPMD_OK);
    ck_assert_int_eq(cspmd_rule_bound(gather), 1);
    ck_assert_int_eq(cspmd_rule_info(gather, &info), CSPMD_OK);
    ck_assert_int_eq(info.bound, 1);
    ck_assert_uint_eq(info.coefficient_args, 1u << 2); /* index */
    ck_assert_uint_eq(info.scalar_args, 1u << 0);      /* self  */
    /* a backward row: every argument but the gradient is a coefficient */
    ck_assert_int_eq(bind("aten::gelu_backward", "", "grad_output:T self:T approximate"),
                     CSPMD_OK);
    ck_assert_int_eq(cspmd_rule_info(cspmd_rule_find("aten::gelu_backward", ""), &info),
                     CSPMD_OK);
    ck_assert_uint_eq(info.coefficient_args, ~UINT64_C(1));
    /* rows that name no argument need no binding, and accept any */
    ck_assert_int_eq(cspmd_rule_bound(cspmd_rule_find("aten::mm", "")), 1);
    ck_assert_int_eq(bind("aten::mm", "", "self:T mat2:T"), CSPMD_OK);
    ck_assert_int_eq(cspmd_rule_bound(0), 1);
    /* binding the same overload twice agrees with itself */
    ck_assert_int_eq(bind("aten::gather", "", "self:T dim index:T sparse_grad"), CSPMD_OK);
}
END_TEST

START_TEST(test_bind_alternatives)
{
    /* add's other operand is 'other', or a foreach op's 'scalar' or
     * 'scalars': each overload binds position 1 */
    ck_assert_int_eq(bind("aten::add", "Tensor", "self:T other:T alpha"), CSPMD_OK);
    ck_assert_int_eq(h_bind(cspmd_rule_find("aten::_foreach_add", "Scalar"),
                            "aten::_foreach_add.Scalar", "self:T scalar"),
                     CSPMD_OK);
    ck_assert_int_eq(h_bind(cspmd_rule_find("aten::_foreach_add", "ScalarList"),
                            "aten::_foreach_add.ScalarList", "self:T scalars"),
                     CSPMD_OK);
    cspmd_rule_info_t info;
    ck_assert_int_eq(cspmd_rule_info(cspmd_rule_find("aten::add", ""), &info), CSPMD_OK);
    ck_assert_uint_eq(info.scalar_args, 3u);
    /* two spellings present as two arguments are ambiguous */
    expect_error(bind("aten::add", "Tensor", "self:T other:T scalar"), CSPMD_ERR_RUNTIME,
                 "two different arguments");
}
END_TEST

START_TEST(test_bind_missing_name)
{
    /* (rows no other test binds, so that the suite runs unforked too) */
    cspmd_rule_t idx = cspmd_rule_find("aten::take", "");
    /* a schema without the row's 'index': nothing is bound */
    expect_error(bind("aten::take", "", "self:T idx:T"), CSPMD_ERR_RUNTIME,
                 "names 'index' as a coefficient, which this overload does not have");
    ck_assert_msg(strstr(cspmd_last_error(), "aten::take.*") != NULL, "%s", cspmd_last_error());
    ck_assert_msg(strstr(cspmd_last_error(), "self, idx") != NULL, "%s", cspmd_last_error());
    ck_assert_int_eq(cspmd_rule_bound(idx), 0);
    cspmd_type_t out = 12345;
    cspmd_operand_t ops[1] = {{0, 0, CSPMD_OPERAND_TENSOR, 0}};
    expect_error(cspmd_infer(idx, ops, 1, &out), CSPMD_ERR_MISUSE, "no overload's schema");
    ck_assert_uint_eq(out, 12345);
    /* an operand name that is no tensor argument */
    expect_error(bind("aten::copy", "", "self:T src non_blocking"), CSPMD_ERR_RUNTIME,
                 "which is no tensor argument here (argument 1");
    /* past the 64 arguments a mask holds */
    char many[1024] = "";
    for (int i = 0; i < 70; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "a%d ", i);
    strcat(many, "tensors:T dim");
    expect_error(bind("aten::concat", "", many), CSPMD_ERR_RUNTIME, "past the 64 arguments");
}
END_TEST

START_TEST(test_bind_disagreement)
{
    cspmd_rule_t sum = cspmd_rule_find("aten::sum", "");
    ck_assert_int_eq(bind("aten::sum", "", "self:T dtype"), CSPMD_OK);
    cspmd_rule_info_t before, after;
    ck_assert_int_eq(cspmd_rule_info(sum, &before), CSPMD_OK);
    /* another overload with 'self' at position 1: a table defect, named */
    expect_error(h_bind(sum, "aten::sum.weird", "dim self:T"), CSPMD_ERR_RUNTIME,
                 "aten::sum.weird: cspmd's rule table is wrong for this op: its row aten::sum.* "
                 "names 'self' as a weak scalar, at another position than in aten::sum, bound "
                 "first (argument 1");
    ck_assert_int_eq(cspmd_rule_info(sum, &after), CSPMD_OK);
    ck_assert_uint_eq(after.scalar_args, before.scalar_args); /* unchanged */
    /* a backward row whose gradient moves */
    ck_assert_int_eq(bind("aten::tanh_backward", "", "grad_output:T output:T"), CSPMD_OK);
    expect_error(h_bind(cspmd_rule_find("aten::tanh_backward", ""), "aten::tanh_backward.x",
                        "output:T grad_output:T"),
                 CSPMD_ERR_RUNTIME, "names 'grad_output' as the gradient");
}
END_TEST

START_TEST(test_bind_bad_arguments)
{
    const char *names[] = {"self", NULL};
    const uint8_t tensor[] = {1, 0};
    ck_assert_int_eq(cspmd_rule_bind(-1, "op", names, tensor, 1), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_rule_bind(cspmd_rule_count(), "op", names, tensor, 1),
                     CSPMD_ERR_MISUSE);
    cspmd_rule_t neg = cspmd_rule_find("aten::negative_", "");
    ck_assert_int_eq(cspmd_rule_bind(neg, NULL, names, tensor, 1), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_rule_bind(neg, "aten::negative_", NULL, tensor, 1), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_rule_bind(neg, "aten::negative_", names, NULL, 1), CSPMD_ERR_MISUSE);
    expect_error(cspmd_rule_bind(neg, "aten::negative_", names, tensor, 2), CSPMD_ERR_MISUSE,
                 "argument 1 has no name");
    ck_assert_int_eq(cspmd_rule_bound(neg), 0);
    /* no arguments at all: the row's 'self' is missing */
    expect_error(cspmd_rule_bind(neg, "aten::negative_", NULL, NULL, 0), CSPMD_ERR_RUNTIME,
                 "which this overload does not have");
    ck_assert_int_eq(cspmd_rule_bound(neg), 0);
    ck_assert_int_eq(cspmd_rule_bind(neg, "aten::negative_", names, tensor, 1), CSPMD_OK);
    ck_assert_int_eq(cspmd_rule_bound(neg), 1);
    ck_assert_int_eq(cspmd_rule_bound(-3), 0);
}
END_TEST

Suite *suite_rules(void)
{
    Suite *s = suite_create("rules");
    TCase *tc = tcase_create("rules");
    tcase_add_checked_fixture(tc, h_bind_rules, NULL);
    tcase_add_test(tc, test_observed_transformer_ops);
    tcase_add_test(tc, test_more_ops);
    tcase_add_test(tc, test_passthrough);
    tcase_add_test(tc, test_foreach_rules);
    tcase_add_test(tc, test_lookup_edges);
    tcase_add_test(tc, test_table_consistency);
    tcase_add_test(tc, test_rule_info);
    suite_add_tcase(s, tc);
    /* binding, on unbound rows: no fixture */
    TCase *tb = tcase_create("bind");
    tcase_add_test(tb, test_bind_success);
    tcase_add_test(tb, test_bind_alternatives);
    tcase_add_test(tb, test_bind_missing_name);
    tcase_add_test(tb, test_bind_disagreement);
    tcase_add_test(tb, test_bind_bad_arguments);
    suite_add_tcase(s, tb);
    return s;
}
