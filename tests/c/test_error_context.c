/* An error's context: the fields the kernel and the shim describe, the one
 * text the core writes from them, and what a new error drops. */
#include <stdio.h>
#include <stdlib.h>
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

static const char *field(cspmd_error_field_t f)
{
    return cspmd_error_field(f);
}

/* aten::add.Tensor(self: f32[2, ?] {dp: R, tp: P}, other: f32[2] {tp: R}, alpha: 1) */
static cspmd_status_t add_error(const char *node, const char *fwd, const char *site)
{
    cspmd_status_t st = cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "bad add");
    int64_t s2[2] = {2, -1}, s1[1] = {2};
    cspmd_error_context_begin("aten::add.Tensor");
    cspmd_error_context_arg("self", NULL);
    cspmd_error_context_tensor(-1, "f32", s2, 2, ty(LR, LP));
    cspmd_error_context_arg("other", NULL);
    cspmd_error_context_tensor(-1, "f32", s1, 1, ty(NONE, LR));
    cspmd_error_context_arg("alpha", "1");
    return cspmd_error_context_end(st, node, fwd, site);
}

START_TEST(test_text_and_fields)
{
    ck_assert_int_eq(add_error(NULL, NULL, "train.py:7"), CSPMD_ERR_SPMD_TYPE);
    const char *ctx = "  In aten::add.Tensor(\n"
                      "    self: f32[2, ?] {dp: R, tp: P},\n"
                      "    other: f32[2] {tp: R},\n"
                      "    alpha: 1,\n"
                      "  )\n  at train.py:7";
    ck_assert_str_eq(field(CSPMD_ERROR_FIELD_CONTEXT), ctx);
    ck_assert_str_eq(field(CSPMD_ERROR_FIELD_MESSAGE), "bad add");
    ck_assert_str_eq(field(CSPMD_ERROR_FIELD_OP), "aten::add.Tensor");
    ck_assert_str_eq(field(CSPMD_ERROR_FIELD_SITE), "train.py:7");
    ck_assert_str_eq(field(CSPMD_ERROR_FIELD_NODE), "");
    ck_assert_str_eq(field(CSPMD_ERROR_FIELD_HINT), "");
    char full[512];
    snprintf(full, sizeof full, "bad add\n\n%s", ctx);
    ck_assert_str_eq(cspmd_last_error(), full);

    ck_assert_int_eq(cspmd_error_operand_count(), 3);
    cspmd_error_operand_t o;
    ck_assert_int_eq(cspmd_error_operand(0, &o), CSPMD_OK);
    ck_assert_str_eq(o.name, "self");
    ck_assert_str_eq(o.dtype, "f32");
    ck_assert_int_eq(o.ndim, 2);
    ck_assert_int_eq(o.sizes[0], 2);
    ck_assert_int_eq(o.sizes[1], -1);
    ck_assert_uint_eq(o.type, ty(LR, LP));
    ck_assert_ptr_null(o.text);
    ck_assert_int_eq(cspmd_error_operand(2, &o), CSPMD_OK);
    ck_assert_str_eq(o.name, "alpha");
    ck_assert_ptr_null(o.dtype);
    ck_assert_str_eq(o.text, "1");
    ck_assert_int_eq(cspmd_error_operand(3, &o), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_error_operand(0, NULL), CSPMD_ERR_MISUSE);
    ck_assert_str_eq(field(CSPMD_ERROR_FIELD_OP), "aten::add.Tensor"); /* unchanged */

    ck_assert_str_eq(cspmd_error_field_name(CSPMD_ERROR_FIELD_MESSAGE), "msg");
    ck_assert_str_eq(cspmd_error_field_name(CSPMD_ERROR_FIELD_NODE), "backward_node");
    ck_assert_ptr_null(cspmd_error_field_name(CSPMD_ERROR_FIELD_COUNT));
}
END_TEST

START_TEST(test_mesh_and_backward)
{
    cspmd_axis_t mesh[2] = {TP, DP};
    ck_assert_int_eq(cspmd_mesh_push(mesh, 2), CSPMD_OK);
    add_error("AddBackward0", "model.py:3", "train.py:9");
    const char *ctx = field(CSPMD_ERROR_FIELD_CONTEXT);
    const char *tail = "  ) under mesh {dp, tp}\n"
                       "  during backward, in AddBackward0 (the gradient of the forward op "
                       "that created it)\n"
                       "  forward op at model.py:3\n"
                       "  backward() called at train.py:9";
    ck_assert_msg(strstr(ctx, tail) != NULL, "%s", ctx);
    ck_assert_str_eq(field(CSPMD_ERROR_FIELD_NODE), "AddBackward0");
    ck_assert_str_eq(field(CSPMD_ERROR_FIELD_FORWARD_SITE), "model.py:3");

    /* no anomaly mode: the text says how to see the forward line */
    add_error("AddBackward0", "", "");
    ctx = field(CSPMD_ERROR_FIELD_CONTEXT);
    ck_assert_msg(strstr(ctx, "set_detect_anomaly(True) to see the forward op's source line)") !=
                      NULL, "%s", ctx);
    ck_assert_ptr_null(strstr(ctx, " at "));
    ck_assert_str_eq(field(CSPMD_ERROR_FIELD_SITE), "");
}
END_TEST

START_TEST(test_new_error_drops_context)
{
    add_error(NULL, NULL, "train.py:7");
    cspmd_error_set(CSPMD_ERR_VALUE, "other");
    ck_assert_str_eq(cspmd_last_error(), "other");
    ck_assert_str_eq(field(CSPMD_ERROR_FIELD_CONTEXT), "");
    ck_assert_str_eq(field(CSPMD_ERROR_FIELD_OP), "");
    ck_assert_int_eq(cspmd_error_operand_count(), 0);
    /* describing without a current message: begin..end still works */
    cspmd_error_context_arg("ignored", "x"); /* no begin: ignored */
    ck_assert_int_eq(cspmd_error_context_end(CSPMD_ERR_VALUE, NULL, NULL, NULL), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(), "other");
}
END_TEST

/* Long lists: 16 tensors shown, the rest counted; the fields keep all of
 * them, and the text is not cut at any fixed size. */
START_TEST(test_long_lists)
{
    enum { N = 2000 };
    cspmd_status_t st = cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "bad cat");
    int64_t sz = 3;
    cspmd_error_context_begin("aten::cat");
    cspmd_error_context_arg("tensors", NULL);
    for (int i = 0; i < N; i++)
        cspmd_error_context_tensor(i, "bf16", &sz, 1, ty(NONE, LV));
    cspmd_error_context_arg("dim", "0");
    cspmd_error_context_end(st, NULL, NULL, NULL);
    const char *ctx = field(CSPMD_ERROR_FIELD_CONTEXT);
    char want[64];
    snprintf(want, sizeof want, "      ... and %d more,\n    dim: 0,\n  )", N - 16);
    ck_assert_msg(strstr(ctx, want) != NULL, "%s", ctx);
    ck_assert_int_eq(cspmd_error_operand_count(), N + 1);
    cspmd_error_operand_t o;
    ck_assert_int_eq(cspmd_error_operand(N - 1, &o), CSPMD_OK);
    ck_assert_int_eq(o.elem, N - 1);
    ck_assert_str_eq(o.dtype, "bf16");

    /* a context longer than the message buffer is kept whole */
    st = cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "long");
    cspmd_error_context_begin("aten::foo");
    char name[32];
    for (int i = 0; i < 400; i++) {
        snprintf(name, sizeof name, "argument_%d", i);
        cspmd_error_context_arg(name, "some text");
    }
    cspmd_error_context_end(st, NULL, NULL, NULL);
    ctx = cspmd_last_error();
    ck_assert_uint_gt(strlen(ctx), 8192);
    ck_assert_msg(strstr(ctx, "    argument_399: some text,\n  )") != NULL, "%s", ctx);
}
END_TEST

/* The fix suggestion of a per-axis error is its HINT; a prefix added to
 * the message keeps it, a new error drops it. */
START_TEST(test_hint)
{
    cspmd_ltype_t t[2] = {LP, LR};
    cspmd_ltype_t out;
    ck_assert_int_eq(cspmd_infer_axis("LINEAR", t, 2, TP, &out), CSPMD_ERR_SPMD_TYPE);
    const char *hint = field(CSPMD_ERROR_FIELD_HINT);
    ck_assert_msg(strncmp(hint, "Are you missing a collective", 28) == 0, "%s", hint);
    const char *msg = cspmd_last_error();
    ck_assert_str_eq(msg + strlen(msg) - strlen(hint), hint);

    char *copy = strdup(msg);
    cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "list element [2]: %s", copy);
    free(copy);
    ck_assert_msg(strncmp(field(CSPMD_ERROR_FIELD_HINT), "Are you missing", 15) == 0, "%s",
                  field(CSPMD_ERROR_FIELD_HINT));
    add_error(NULL, NULL, NULL); /* a context keeps the message, and its hint */
    ck_assert_str_eq(field(CSPMD_ERROR_FIELD_HINT), "");
    ck_assert_int_eq(cspmd_infer_axis("LINEAR", t, 2, TP, &out), CSPMD_ERR_SPMD_TYPE);
    cspmd_error_context_begin("aten::add.Tensor");
    cspmd_error_context_end(CSPMD_ERR_SPMD_TYPE, NULL, NULL, NULL);
    ck_assert_msg(strncmp(field(CSPMD_ERROR_FIELD_HINT), "Are you missing", 15) == 0, "%s",
                  field(CSPMD_ERROR_FIELD_HINT));
    cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "unrelated");
    ck_assert_str_eq(field(CSPMD_ERROR_FIELD_HINT), "");
}
END_TEST

Suite *suite_error_context(void)
{
    Suite *s = suite_create("error_context");
    TCase *tc = tcase_create("error_context");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_text_and_fields);
    tcase_add_test(tc, test_mesh_and_backward);
    tcase_add_test(tc, test_new_error_drops_context);
    tcase_add_test(tc, test_long_lists);
    tcase_add_test(tc, test_hint);
    suite_add_tcase(s, tc);
    return s;
}
