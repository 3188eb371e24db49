/* Inference: the per-axis rule, its messages and fix
 * suggestions, multi-axis inference, strict/permissive, scalars, nonlinear
 * positions, decompositions, factories and fills, and the memo. */
#include <stdio.h>
#include <string.h>

#include "cspmd.h"
#include "infer_helpers.h"
#include "suites.h"

/* Expect OK with type want for an op with no operands. */
#define INFER0(name, ovl, want)                                                        \
    do {                                                                               \
        cspmd_type_t out_ = 12345;                                                     \
        ck_assert_int_eq(cspmd_infer(cspmd_rule_find(name, ovl), NULL, 0, &out_), CSPMD_OK); \
        ck_assert_uint_eq(out_, (want));                                               \
    } while (0)

static void setup(void)
{
    h_setup();
}

static void teardown(void)
{
    h_teardown();
}

/* ---- the raw per-axis rule --------------------------------------------- */

static cspmd_status_t axis_rule(const char *lin, int n, const cspmd_ltype_t *t,
                                cspmd_ltype_t *out)
{
    return cspmd_infer_axis(lin, t, n, TP, out);
}

#define AX_OK(lin, want, ...)                                                        \
    do {                                                                            \
        cspmd_ltype_t t_[] = {__VA_ARGS__};                                         \
        cspmd_ltype_t o_ = NONE;                                                    \
        cspmd_status_t s_ = axis_rule(lin, (int)(sizeof t_ / sizeof t_[0]), t_, &o_); \
        ck_assert_msg(s_ == CSPMD_OK, "%s", cspmd_last_error());                    \
        ck_assert_int_eq(o_, want);                                                 \
    } while (0)

#define AX_ERR(lin, sub, ...)                                                        \
    do {                                                                            \
        cspmd_ltype_t t_[] = {__VA_ARGS__};                                         \
        cspmd_ltype_t o_ = NONE;                                                    \
        ck_assert_int_eq(axis_rule(lin, (int)(sizeof t_ / sizeof t_[0]), t_, &o_),  \
                         CSPMD_ERR_SPMD_TYPE);                                      \
        ck_assert_msg(strstr(cspmd_last_error(), sub) != NULL, "%s", cspmd_last_error()); \
    } while (0)

#define AX_MSG(lin, want, ...)                                                       \
    do {                                                                            \
        cspmd_ltype_t t_[] = {__VA_ARGS__};                                         \
        cspmd_ltype_t o_ = NONE;                                                    \
        ck_assert_int_eq(axis_rule(lin, (int)(sizeof t_ / sizeof t_[0]), t_, &o_),  \
                         CSPMD_ERR_SPMD_TYPE);                                      \
        ck_assert_str_eq(cspmd_last_error(), want);                                 \
    } while (0)

START_TEST(test_rule_rows_ok)
{
    const char *lins[] = {"NONLINEAR", "LINEAR", "MULTILINEAR"};
    for (int k = 0; k < 3; k++) {
        const char *l = lins[k];
        AX_OK(l, LR, LR);              /* row 1 */
        AX_OK(l, LR, LR, LR, NONE);
        AX_OK(l, LR, NONE);            /* all-scalar -> R */
        AX_OK(l, LI, LI);              /* row 2 */
        AX_OK(l, LI, LI, NONE, LI);
        AX_OK(l, LV, LV);              /* row 3 */
        AX_OK(l, LV, LR, LV);
        AX_OK(l, LV, LV, NONE);
        AX_OK(l, LV, NONE, LR, LV);
    }
    AX_OK("LINEAR", LP, LP);           /* row 5: all-P linear */
    AX_OK("LINEAR", LP, LP, LP, LP);
    AX_OK("MULTILINEAR", LP, LP);
    AX_OK("MULTILINEAR", LP, LP, LR);  /* single P with R */
    AX_OK("MULTILINEAR", LP, NONE, LP); /* P * 2 */
    AX_OK("MULTILINEAR", LP, LR, LP, NONE, LR);
}
END_TEST

START_TEST(test_rule_rows_errors)
{
    /* row 4: I mixes with nothing */
    AX_ERR("NONLINEAR", "Invariant type on axis tp cannot mix", LI, LR);
    AX_ERR("LINEAR", "Invariant type on axis tp cannot mix", LI, LV);
    AX_ERR("MULTILINEAR", "Invariant type on axis tp cannot mix", LP, LI);
    /* row 5: P with V, whatever the linearity */
    AX_ERR("LINEAR", "cannot combine with Varying", LP, LV);
    AX_ERR("MULTILINEAR", "cannot combine with Varying", LV, LP);
    AX_ERR("NONLINEAR", "cannot combine with Varying", LR, LP, LV);
    /* NONLINEAR P */
    AX_ERR("NONLINEAR", "cannot propagate through non-linear ops", LP);
    AX_ERR("NONLINEAR", "cannot propagate through non-linear ops", LP, LP);
    /* LINEAR P + R / scalar */
    AX_ERR("LINEAR", "in a linear op requires all operands to be Partial", LP, LR);
    AX_ERR("LINEAR", "in a linear op requires all operands to be Partial", LP, NONE);
    /* MULTILINEAR P * P */
    AX_ERR("MULTILINEAR", "Partial in multiple factors of multilinear op on axis tp", LP, LP);
}
END_TEST

START_TEST(test_rule_misuse)
{
    cspmd_ltype_t o, t[2] = {LR, LR};
    ck_assert_int_eq(cspmd_infer_axis("LINEAR", t, 0, TP, &o), CSPMD_ERR_VALUE);
    ck_assert_str_eq(cspmd_last_error(), "No types provided for axis tp");
    ck_assert_int_eq(cspmd_infer_axis("AFFINE", t, 2, TP, &o), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_infer_axis(NULL, t, 2, TP, &o), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_infer_axis("LINEAR", NULL, 2, TP, &o), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_infer_axis("LINEAR", t, -1, TP, &o), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_infer_axis("LINEAR", t, 2, TP, NULL), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_infer_axis("LINEAR", t, 2, 777777, &o), CSPMD_ERR_MISUSE);
    cspmd_ltype_t bad[1] = {(cspmd_ltype_t)9};
    ck_assert_int_eq(cspmd_infer_axis("LINEAR", bad, 1, TP, &o), CSPMD_ERR_MISUSE);
}
END_TEST

#define SUGG "\nAre you missing a collective or a reinterpret/convert call? e.g.,"
#define FIX_IR "\n  convert(tensor, tp, src=I, dst=R) on the Invariant operand (no-op forward, all-reduce in backward)"
#define FIX_PR "\n  all_reduce(tensor, tp, src=P, dst=R) on the Partial operand (all-reduce in forward, all-reduce in backward)"
#define FIX_PI "\n  all_reduce(tensor, tp, src=P, dst=I) on the Partial operand (all-reduce in forward, no-op backward)"
#define FIX_RP "\n  convert(tensor, tp, src=R, dst=P) on the Replicate operand (zeros non-rank-0 in forward, zeros non-rank-0 in backward)"

START_TEST(test_messages_and_suggestions)
{
    /* [I, R] -> only I->R */
    AX_MSG("NONLINEAR",
           "Invariant type on axis tp cannot mix with other types. Found types: [I, R]" SUGG FIX_IR,
           LI, LR);
    /* [P, R] NONLINEAR -> only P->R */
    AX_MSG("NONLINEAR",
           "Partial type on axis tp cannot propagate through non-linear ops (non-linear of a "
           "partial sum != partial sum of non-linear). Reduce first with all_reduce or "
           "reduce_scatter. Found types: [P, R]" SUGG FIX_PR,
           LP, LR);
    /* [P, R] LINEAR -> P->R and R->P */
    AX_MSG("LINEAR",
           "Partial type on axis tp in a linear op requires all operands to be Partial (sum of "
           "partial sums is a partial sum, but adding a Replicate or scalar value makes the "
           "result affine -- the non-partial term gets summed N times across ranks). Found "
           "types: [P, R]" SUGG FIX_PR FIX_RP,
           LP, LR);
    /* [P, I] MULTILINEAR -> I->R and P->I */
    AX_MSG("MULTILINEAR",
           "Invariant type on axis tp cannot mix with other types. Found types: [P, I]" SUGG
               FIX_IR FIX_PI,
           LP, LI);
    /* [P, V] -> P->R */
    AX_MSG("LINEAR",
           "Partial type on axis tp cannot combine with Varying. Reduce Partial first "
           "(all_reduce -> R, or reduce_scatter -> V). Found types: [P, V]" SUGG FIX_PR,
           LP, LV);
    /* [P, P] MULTILINEAR -> P->R (result R*P = P = natural P) */
    AX_MSG("MULTILINEAR",
           "Partial in multiple factors of multilinear op on axis tp is forbidden. Reduce all "
           "but one factor first. Found types: [P, P]" SUGG FIX_PR,
           LP, LP);
    /* P + scalar: the scalar prints as Scalar; P->R is the only fix. */
    AX_MSG("LINEAR",
           "Partial type on axis tp in a linear op requires all operands to be Partial (sum of "
           "partial sums is a partial sum, but adding a Replicate or scalar value makes the "
           "result affine -- the non-partial term gets summed N times across ranks). Found "
           "types: [P, Scalar]" SUGG FIX_PR,
           LP, NONE);
    /* [I, V]: no suggestion survives the natural-output filter except I->R
     * (R,V -> V == natural V). */
    AX_MSG("NONLINEAR",
           "Invariant type on axis tp cannot mix with other types. Found types: [I, V]" SUGG FIX_IR,
           LI, LV);
}
END_TEST

/* ---- multi-axis inference ------------------------------------------------ */

START_TEST(test_multi_axis_basic)
{
    INFER_OK("aten::add", "Tensor", ty(LR, LV), TEN(ty(LR, LR), 0), TEN(ty(LR, LV), 1));
    INFER_OK("aten::mul", "Tensor", ty(LV, LP), TEN(ty(LV, LR), 0), TEN(ty(LR, LP), 1));
    INFER_OK("aten::exp", "", ty(LI, LV), TEN(ty(LI, LV), 0));
    INFER_OK("aten::add", "Tensor", ty(LP, LP), TEN(ty(LP, LP), 0), TEN(ty(LP, LP), 1));
    /* processing order is by display name: dp's error comes before tp's */
    INFER_ERR("aten::add", "Tensor", CSPMD_ERR_SPMD_TYPE, "on axis dp", TEN(ty(LI, LI), 0),
              TEN(ty(LR, LR), 1));
    INFER_ERR("aten::exp", "", CSPMD_ERR_SPMD_TYPE,
              "Partial type on axis tp cannot propagate", TEN(ty(LR, LP), 0));
}
END_TEST

START_TEST(test_strict_missing_axis_mesh)
{
    mesh_both();
    INFER_ERR("aten::add", "Tensor", CSPMD_ERR_SPMD_TYPE, "", TEN(ty(LR, NONE), 0),
              TEN(ty(LR, LR), 1));
    /* with the reference's hint: the operands' axis sets differ */
    ck_assert_str_eq(cspmd_last_error(),
                     "args[0] missing axis tp from the current mesh {dp, tp}. args[0] has axes "
                     "{dp}.\n\nHint: The operand axes {dp} and {dp, tp} are cross-mesh "
                     "compatible. Use reinterpret_mesh() to convert the operand with axes {dp} "
                     "to axes {dp, tp} before this operation.");
    /* untyped operand under a mesh */
    INFER_ERR("aten::exp", "", CSPMD_ERR_SPMD_TYPE, "", TEN(CSPMD_TYPE_UNTYPED, 0));
    ck_assert_str_eq(cspmd_last_error(),
                     "args[0] missing axis dp from the current mesh {dp, tp}. args[0] has axes {}. "
                     "args[0] has no type at all: annotate it with assert_type().");
    /* typed, with no axes: no hint about annotating */
    INFER_ERR("aten::exp", "", CSPMD_ERR_SPMD_TYPE, "", TEN(CSPMD_TYPE_EMPTY, 0));
    ck_assert_str_eq(cspmd_last_error(),
                     "args[0] missing axis dp from the current mesh {dp, tp}. args[0] has axes {}.");
    /* completeness: every operand must carry every mesh axis */
    INFER_ERR("aten::exp", "", CSPMD_ERR_SPMD_TYPE, "args[0] missing axis dp",
              TEN(ty(NONE, LR), 0));
    INFER_OK("aten::exp", "", ty(LR, LV), TEN(ty(LR, LV), 0));
}
END_TEST

START_TEST(test_strict_missing_axis_no_mesh)
{
    INFER_ERR("aten::add", "Tensor", CSPMD_ERR_SPMD_TYPE, "", TEN(ty(LR, LR), 0),
              TEN(ty(LR, NONE), 1));
    ck_assert_str_eq(cspmd_last_error(),
                     "args[1] missing axis tp. args[1] has axes {dp}, but the union of all "
                     "operand axes is {dp, tp}. All operands must be annotated on the same set of "
                     "mesh axes.");
    /* untyped + typed, no mesh: strict error */
    INFER_ERR("aten::add", "Tensor", CSPMD_ERR_SPMD_TYPE, "args[0] missing axis tp",
              TEN(CSPMD_TYPE_UNTYPED, 0), TEN(tt(LR), 1));
    /* all untyped / {} with no mesh -> {} */
    INFER_OK("aten::add", "Tensor", CSPMD_TYPE_EMPTY, TEN(CSPMD_TYPE_UNTYPED, 0),
             TEN(CSPMD_TYPE_EMPTY, 1));
}
END_TEST

START_TEST(test_permissive)
{
    cspmd_checker_set(1, 0);
    INFER_OK("aten::add", "Tensor", ty(LR, LV), TEN(ty(LR, NONE), 0), TEN(ty(LR, LV), 1));
    INFER_OK("aten::add", "Tensor", tt(LV), TEN(CSPMD_TYPE_UNTYPED, 0), TEN(tt(LV), 1));
    mesh_both();
    /* a mesh axis nobody is typed on: the output lacks it */
    INFER_OK("aten::exp", "", tt(LR), TEN(tt(LR), 0));
    INFER_OK("aten::exp", "", CSPMD_TYPE_EMPTY, TEN(CSPMD_TYPE_UNTYPED, 0));
}
END_TEST

/* ---- scalars ---------------------------------------------------- */

START_TEST(test_weak_scalars)
{
    INFER_OK("aten::add", "Tensor", tt(LR), TEN(tt(LR), 0), SCA(1));
    INFER_OK("aten::add", "Scalar", tt(LI), TEN(tt(LI), 0), SCA(1), SCA(2));
    INFER_OK("aten::add", "Scalar", tt(LV), TEN(tt(LV), 0), SCA(1));
    /* P + 1 is affine; alpha (arg 2) is not a declared position */
    INFER_ERR("aten::add", "Scalar", CSPMD_ERR_SPMD_TYPE, "Found types: [P, Scalar]",
              TEN(tt(LP), 0), SCA(1));
    INFER_OK("aten::add", "Tensor", tt(LP), TEN(tt(LP), 0), TEN(tt(LP), 1), SCA(2));
    INFER_ERR("aten::rsub", "Scalar", CSPMD_ERR_SPMD_TYPE, "linear op", TEN(tt(LP), 0), SCA(1));
    /* mul has no declared positions: the scalar is ignored */
    INFER_OK("aten::mul", "Scalar", tt(LP), TEN(tt(LP), 0), SCA(1));
    INFER_OK("aten::mul", "Tensor", tt(LP), TEN(tt(LP), 0), SCA(1));
    /* P / 2 */
    INFER_OK("aten::div", "Scalar", tt(LP), TEN(tt(LP), 0), SCA(1));
    /* no operand has an axis: scalars add nothing */
    INFER_OK("aten::add", "Scalar", CSPMD_TYPE_EMPTY, TEN(CSPMD_TYPE_EMPTY, 0), SCA(1));
    /* weak scalars span every operand axis */
    INFER_OK("aten::add", "Scalar", ty(LR, LV), TEN(ty(LR, LV), 0), SCA(1));
}
END_TEST

START_TEST(test_typed_scalars)
{
    INFER_OK("aten::add", "Tensor", tt(LV), TEN(tt(LR), 0), TYP(tt(LV), 1));
    INFER_OK("aten::mul", "Tensor", tt(LP), TEN(tt(LP), 0), TYP(tt(LR), 1));
    /* a typed scalar takes no gradient: its I reads as R next to P */
    INFER_OK("aten::mul", "Tensor", tt(LP), TEN(tt(LP), 0), TYP(tt(LI), 1));
    INFER_ERR("aten::mul", "Tensor", CSPMD_ERR_SPMD_TYPE, "Varying", TEN(tt(LP), 0),
              TYP(tt(LV), 1));
    INFER_ERR("aten::mul", "Tensor", CSPMD_ERR_SPMD_TYPE, "multiple factors", TEN(tt(LP), 0),
              TYP(tt(LP), 1));
    INFER_OK("aten::add", "Tensor", tt(LP), TEN(tt(LP), 0), TYP(tt(LP), 1));
    INFER_ERR("aten::add", "Tensor", CSPMD_ERR_SPMD_TYPE, "linear op", TEN(tt(LR), 0),
              TYP(tt(LP), 1));
    INFER_ERR("aten::add", "Tensor", CSPMD_ERR_SPMD_TYPE, "Invariant", TEN(tt(LI), 0),
              TYP(tt(LV), 1));
    /* a typed scalar at a non-tensor position: narrow(R, 0, Scalar(V), Scalar(V)) */
    INFER_OK("aten::narrow", "", tt(LV), TEN(tt(LR), 0), SCA(1), TYP(tt(LV), 2), TYP(tt(LV), 3));
    INFER_ERR("aten::narrow", "", CSPMD_ERR_SPMD_TYPE, "Varying", TEN(tt(LP), 0),
              TYP(tt(LV), 2));
    /* a factory given typed scalars infers from them */
    INFER_OK("aten::arange", "start", tt(LV), TYP(tt(LV), 0), TYP(tt(LV), 1));
    /* ... but typed scalars with no axes add nothing: still a factory */
    mesh_tp();
    INFER_OK("aten::arange", "start", tt(LR), TYP(CSPMD_TYPE_EMPTY, 0), TYP(CSPMD_TYPE_EMPTY, 1));
}
END_TEST

/* ---- the R/I coercion of operands that take no gradient ------------------ */

static cspmd_operand_t NG(cspmd_type_t t, int arg)
{
    cspmd_operand_t o = TEN(t, arg);
    o.flags = CSPMD_OPERAND_NO_GRAD;
    return o;
}

START_TEST(test_no_grad_coercion)
{
    /* no-grad R/I take the flavour of the operands that can take one */
    INFER_OK("aten::add", "Tensor", tt(LV), NG(tt(LI), 0), NG(tt(LV), 1));
    INFER_OK("aten::add", "Tensor", tt(LR), NG(tt(LI), 0), NG(tt(LR), 1));
    INFER_OK("aten::add", "Tensor", tt(LR), NG(tt(LI), 0), TEN(tt(LR), 1));
    INFER_OK("aten::add", "Tensor", tt(LI), TEN(tt(LI), 0), NG(tt(LR), 1));
    INFER_OK("aten::mul", "Tensor", tt(LP), NG(tt(LI), 0), TEN(tt(LP), 1));
    /* all I stays I; an I that takes a gradient still cannot meet V */
    INFER_OK("aten::add", "Tensor", tt(LI), NG(tt(LI), 0), NG(tt(LI), 1));
    INFER_ERR("aten::add", "Tensor", CSPMD_ERR_SPMD_TYPE, "Found types: [I, V]",
              TEN(tt(LI), 0), NG(tt(LV), 1));
    /* R and I both taking a gradient: no flavour, the mix is an error */
    INFER_ERR("aten::add", "Tensor", CSPMD_ERR_SPMD_TYPE, "Found types: [R, I]",
              TEN(tt(LR), 0), TEN(tt(LI), 1));
    /* coefficients too: a no-grad I index next to an R operand */
    INFER_OK("aten::gather", "", tt(LR), TEN(tt(LR), 0), SCA(1), NG(tt(LI), 2));
    /* the memo tells flags apart */
    cspmd_rule_t add = cspmd_rule_find("aten::add", "Tensor");
    cspmd_operand_t with[2] = {NG(tt(LI), 0), NG(tt(LV), 1)};
    cspmd_operand_t without[2] = {TEN(tt(LI), 0), NG(tt(LV), 1)};
    cspmd_type_t out;
    ck_assert_int_eq(cspmd_infer(add, with, 2, &out), CSPMD_OK);
    ck_assert_int_eq(cspmd_infer(add, without, 2, &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_infer(add, with, 2, &out), CSPMD_OK);
    /* unknown flag bits are misuse */
    cspmd_operand_t bad[1] = {TEN(tt(LR), 0)};
    bad[0].flags = 0x80;
    ck_assert_int_eq(cspmd_infer(add, bad, 1, &out), CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_no_grad_collective_input)
{
    cspmd_type_t out;
    ck_assert_int_eq(cspmd_coll_infer("convert", TP, LI, LV, tt(LR), &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_coll_infer_input("convert", TP, LI, LV, tt(LR), 1, &out), CSPMD_OK);
    ck_assert_uint_eq(out, tt(LV));
    ck_assert_int_eq(cspmd_coll_infer_input("convert", TP, LR, LV, tt(LI), 1, &out), CSPMD_OK);
    /* only R<->I: P and V are still checked */
    ck_assert_int_eq(cspmd_coll_infer_input("all_reduce", TP, LP, LR, tt(LI), 1, &out),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_coll_infer_input("all_gather", TP, LV, LR, tt(LR), 1, &out),
                     CSPMD_ERR_SPMD_TYPE);
}
END_TEST

/* ---- nonlinear positions, coefficients, backward ops --------------------- */

START_TEST(test_division)
{
    INFER_OK("aten::div", "Tensor", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 1));
    INFER_OK("aten::div", "Tensor", tt(LV), TEN(tt(LR), 0), TEN(tt(LV), 1));
    INFER_ERR("aten::div", "Tensor", CSPMD_ERR_SPMD_TYPE, "", TEN(tt(LR), 0), TEN(tt(LP), 1));
    ck_assert_str_eq(cspmd_last_error(),
                     "div: Partial type in nonlinear argument on axis tp is not allowed (the op "
                     "is not linear in this argument, e.g. a divisor, an index or a saved "
                     "activation). Reduce it first with all_reduce.");
    INFER_ERR("aten::div_", "Tensor", CSPMD_ERR_SPMD_TYPE, "div_: Partial type in nonlinear",
              TEN(tt(LP), 0), TEN(tt(LP), 1));
    INFER_ERR("aten::div", "Tensor", CSPMD_ERR_SPMD_TYPE, "on axis dp is not allowed",
              TEN(ty(LR, LR), 0), TEN(ty(LP, LP), 1));
    /* rounding division is not linear */
    INFER_ERR("aten::div", "Tensor_mode", CSPMD_ERR_SPMD_TYPE, "non-linear", TEN(tt(LP), 0),
              TEN(tt(LR), 1));
}
END_TEST

START_TEST(test_backward_ops)
{
    INFER_OK("aten::gelu_backward", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 1));
    INFER_OK("aten::gelu_backward", "", tt(LV), TEN(tt(LV), 0), TEN(tt(LV), 1));
    INFER_OK("aten::gelu_backward", "", tt(LV), TEN(tt(LR), 0), TEN(tt(LV), 1));
    INFER_ERR("aten::gelu_backward", "", CSPMD_ERR_SPMD_TYPE, "cannot combine with Varying",
              TEN(tt(LP), 0), TEN(tt(LV), 1));
    INFER_ERR("aten::silu_backward", "", CSPMD_ERR_SPMD_TYPE,
              "silu_backward: Partial type in nonlinear argument", TEN(tt(LR), 0),
              TEN(tt(LP), 1));
    /* nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight) */
    INFER_OK("aten::nll_loss_backward", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 1),
             TEN(tt(LR), 2), TEN(tt(LR), 6));
    /* total_weight is read by reduction='mean' only; global mode makes it P
     * for a batch-sharded reduction='sum' loss: no operand */
    INFER_OK("aten::nll_loss_backward", "", tt(LR), TEN(tt(LR), 0), TEN(tt(LR), 1),
             TEN(tt(LR), 2), TEN(tt(LP), 6));
    INFER_ERR("aten::nll_loss_backward", "", CSPMD_ERR_SPMD_TYPE, "nonlinear argument",
              TEN(tt(LR), 0), TEN(tt(LP), 1), TEN(tt(LR), 2), TEN(tt(LR), 6));
    /* native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, mask) */
    INFER_OK("aten::native_layer_norm_backward", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 1),
             TEN(tt(LR), 3), TEN(tt(LR), 4), TEN(tt(LR), 5), TEN(tt(LR), 6));
    /* SDPA backward: grad_out, q, k, v, out, logsumexp, ... */
    INFER_OK("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "", tt(LV),
             TEN(tt(LV), 0), TEN(tt(LV), 1), TEN(tt(LV), 2), TEN(tt(LV), 3), TEN(tt(LV), 4),
             TEN(tt(LV), 5));
    INFER_OK("aten::embedding_dense_backward", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 1));
    INFER_OK("aten::_softmax_backward_data", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 1));
    INFER_OK("aten::threshold_backward", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 1), SCA(2));
    INFER_OK("aten::native_dropout_backward", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 1));
    INFER_OK("aten::slice_backward", "", tt(LP), TEN(tt(LP), 0));
}
END_TEST

START_TEST(test_coefficients)
{
    /* gather(self, dim, index): the index is a coefficient */
    INFER_OK("aten::gather", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 2));
    INFER_OK("aten::gather", "", tt(LV), TEN(tt(LR), 0), TEN(tt(LV), 2));
    INFER_ERR("aten::gather", "", CSPMD_ERR_SPMD_TYPE, "cannot combine with Varying",
              TEN(tt(LP), 0), TEN(tt(LV), 2));
    INFER_ERR("aten::gather", "", CSPMD_ERR_SPMD_TYPE, "gather: Partial type in nonlinear",
              TEN(tt(LR), 0), TEN(tt(LP), 2));
    INFER_OK("aten::index_select", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 2));
    INFER_OK("aten::index", "Tensor", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 1), TEN(tt(LR), 1));
    INFER_OK("aten::embedding", "", tt(LV), TEN(tt(LV), 0), TEN(tt(LR), 1));
    /* masked_fill(self, mask, value): P with a fill value is affine */
    INFER_ERR("aten::masked_fill", "Scalar", CSPMD_ERR_SPMD_TYPE, "linear op", TEN(tt(LP), 0),
              TEN(tt(LR), 1), SCA(2));
    INFER_OK("aten::masked_fill", "Scalar", tt(LV), TEN(tt(LR), 0), TEN(tt(LV), 1), SCA(2));
    /* ... but filling with 0 keeps P (the kernel flags a zero number) */
    INFER_OK("aten::masked_fill", "Scalar", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 1), ZERO(2));
    /* where(condition, self, other) with a number in a value position (the
     * 0-d tensor torch makes of where(c, x, 0)): a zero keeps P, any other
     * number is affine */
    INFER_OK("aten::where", "self", tt(LP), TEN(tt(LR), 0), TEN(tt(LP), 1), ZERO(2));
    INFER_OK("aten::where", "self", tt(LP), TEN(tt(LR), 0), ZERO(1), TEN(tt(LP), 2));
    INFER_ERR("aten::where", "self", CSPMD_ERR_SPMD_TYPE, "linear op", TEN(tt(LR), 0),
              TEN(tt(LP), 1), SCA(2));
    INFER_OK("aten::where", "self", tt(LV), TEN(tt(LV), 0), TEN(tt(LR), 1), SCA(2));
    INFER_OK("aten::where", "self", tt(LV), TEN(tt(LR), 0), TEN(tt(LV), 1), SCA(2));
    INFER_OK("aten::index_fill", "int_Scalar", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 2), ZERO(3));
    INFER_OK("aten::scatter", "value", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 2), ZERO(3));
    /* scatter with reduce="multiply" is not linear */
    INFER_ERR("aten::scatter", "reduce", CSPMD_ERR_SPMD_TYPE, "non-linear", TEN(tt(LP), 0),
              TEN(tt(LR), 2), TEN(tt(LP), 3));
    /* where(cond, self, other): linear in (self, other) jointly */
    INFER_OK("aten::where", "self", tt(LP), TEN(tt(LR), 0), TEN(tt(LP), 1), TEN(tt(LP), 2));
    INFER_ERR("aten::where", "self", CSPMD_ERR_SPMD_TYPE, "Found types: [P, R]", TEN(tt(LR), 0),
              TEN(tt(LP), 1), TEN(tt(LR), 2));
    INFER_OK("aten::where", "self", tt(LV), TEN(tt(LV), 0), TEN(tt(LR), 1), TEN(tt(LR), 2));
    /* index_put_(self, indices, values, accumulate) */
    INFER_OK("aten::index_put_", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 1), TEN(tt(LP), 2));
    INFER_ERR("aten::index_put_", "", CSPMD_ERR_SPMD_TYPE, "linear op", TEN(tt(LP), 0),
              TEN(tt(LR), 1), TEN(tt(LR), 2));
}
END_TEST

/* Ops torch's derivatives.yaml marks linear (tests/python/
 * test_linear_from_torch.py cross-checks the whole list). */
START_TEST(test_torch_linear_ops)
{
    INFER_OK("aten::upsample_nearest2d", "", tt(LP), TEN(tt(LP), 0));
    INFER_OK("aten::upsample_bilinear2d", "vec", tt(LP), TEN(tt(LP), 0));
    INFER_OK("aten::avg_pool2d", "", tt(LP), TEN(tt(LP), 0));
    INFER_OK("aten::_adaptive_avg_pool2d", "", tt(LP), TEN(tt(LP), 0));
    INFER_OK("aten::reflection_pad2d", "", tt(LP), TEN(tt(LP), 0));
    INFER_OK("aten::_fft_r2c", "", tt(LP), TEN(tt(LP), 0));
    INFER_OK("aten::_fft_c2c", "", tt(LP), TEN(tt(LP), 0));
    INFER_OK("aten::pixel_shuffle", "", tt(LP), TEN(tt(LP), 0));
    INFER_OK("aten::im2col", "", tt(LP), TEN(tt(LP), 0));
    /* constant_pad_nd(self, pad, value): a zero value keeps P, another is
     * the weak scalar (P + scalar is an error) */
    INFER_OK("aten::constant_pad_nd", "", tt(LP), TEN(tt(LP), 0), ZERO(2));
    INFER_ERR("aten::constant_pad_nd", "", CSPMD_ERR_SPMD_TYPE, "linear op", TEN(tt(LP), 0),
              SCA(2));
    INFER_OK("aten::constant_pad_nd", "", tt(LR), TEN(tt(LR), 0), SCA(2));
    /* scatters of a slice: linear in self and src jointly */
    INFER_OK("aten::slice_scatter", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LP), 1));
    INFER_ERR("aten::slice_scatter", "", CSPMD_ERR_SPMD_TYPE, "Found types: [P, R]",
              TEN(tt(LP), 0), TEN(tt(LR), 1));
    INFER_OK("aten::select_scatter", "", tt(LV), TEN(tt(LR), 0), TEN(tt(LV), 1));
    /* max_unpool2d(self, indices, ...): the indices a coefficient */
    INFER_OK("aten::max_unpool2d", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 1));
    INFER_ERR("aten::max_unpool2d", "", CSPMD_ERR_SPMD_TYPE, "nonlinear argument",
              TEN(tt(LR), 0), TEN(tt(LP), 1));
    /* backward ops: linear in the gradient, the saved input a coefficient */
    INFER_OK("aten::reflection_pad2d_backward", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 1));
    INFER_OK("aten::upsample_nearest1d_backward", "", tt(LP), TEN(tt(LP), 0));
    INFER_ERR("aten::adaptive_max_pool2d_backward", "", CSPMD_ERR_SPMD_TYPE,
              "nonlinear argument", TEN(tt(LR), 0), TEN(tt(LP), 1), TEN(tt(LR), 2));
    /* a typed tensor through lift_fresh keeps its type */
    INFER_OK("aten::lift_fresh", "", tt(LP), TEN(tt(LP), 0));
}
END_TEST

/* ---- decompositions ------------------------------------------------------- */

START_TEST(test_addmm_decomposition)
{
    INFER_ERR("aten::addmm", "", CSPMD_ERR_SPMD_TYPE, "Found types: [R, P]", TEN(tt(LP), 0),
              TEN(tt(LR), 1), TEN(tt(LR), 2), SCA(3), SCA(4));
    INFER_OK("aten::addmm", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LP), 1), TEN(tt(LR), 2));
    INFER_ERR("aten::addmm", "", CSPMD_ERR_SPMD_TYPE, "multiple factors", TEN(tt(LR), 0),
              TEN(tt(LP), 1), TEN(tt(LP), 2));
    INFER_OK("aten::addmm", "", tt(LV), TEN(tt(LV), 0), TEN(tt(LR), 1), TEN(tt(LR), 2));
    INFER_OK("aten::baddbmm", "", tt(LV), TEN(tt(LR), 0), TEN(tt(LV), 1), TEN(tt(LR), 2));
    INFER_OK("aten::addmv", "", tt(LR), TEN(tt(LR), 0), TEN(tt(LR), 1), TEN(tt(LR), 2));
    INFER_OK("aten::addr", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 1), TEN(tt(LP), 2));
    INFER_OK("aten::addbmm", "", tt(LI), TEN(tt(LI), 0), TEN(tt(LI), 1), TEN(tt(LI), 2));
    /* addcdiv: the divisor (arg 2) is nonlinear */
    INFER_ERR("aten::addcdiv_", "", CSPMD_ERR_SPMD_TYPE, "nonlinear argument", TEN(tt(LR), 0),
              TEN(tt(LR), 1), TEN(tt(LP), 2));
    /* linear(input, weight, bias?) */
    INFER_OK("aten::linear", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LR), 1));
    /* strictness applies inside each stage */
    INFER_ERR("aten::addmm", "", CSPMD_ERR_SPMD_TYPE, "args[1] missing axis dp", TEN(ty(LR, LR), 0),
              TEN(ty(LR, LR), 1), TEN(ty(NONE, LR), 2));
}
END_TEST

/* ---- casts ------------------------------------------------------ */

START_TEST(test_truncating_casts)
{
    mesh_both();
    /* A cast is linear: P stays P (a bf16 sum is the sum in bf16) ... */
    INFER_OK("aten::_to_copy", "", ty(LR, LP), TEN(ty(LR, LP), 0));
    ck_assert(cspmd_rule_casts(cspmd_rule_find("aten::_to_copy", "")));
    ck_assert(cspmd_rule_casts(cspmd_rule_find("aten::copy_", "")));
    ck_assert(!cspmd_rule_casts(cspmd_rule_find("aten::add", "Tensor")));
    /* Which casts truncate: real to integer, anything but bool to bool. */
    ck_assert(cspmd_cast_truncates(CSPMD_VALUES_REAL, CSPMD_VALUES_INTEGER));
    ck_assert(cspmd_cast_truncates(CSPMD_VALUES_REAL, CSPMD_VALUES_BOOL));
    ck_assert(cspmd_cast_truncates(CSPMD_VALUES_INTEGER, CSPMD_VALUES_BOOL));
    ck_assert(!cspmd_cast_truncates(CSPMD_VALUES_BOOL, CSPMD_VALUES_BOOL));
    ck_assert(!cspmd_cast_truncates(CSPMD_VALUES_INTEGER, CSPMD_VALUES_INTEGER));
    ck_assert(!cspmd_cast_truncates(CSPMD_VALUES_INTEGER, CSPMD_VALUES_REAL));
    ck_assert(!cspmd_cast_truncates(CSPMD_VALUES_REAL, CSPMD_VALUES_REAL));
    ck_assert(!cspmd_cast_truncates(CSPMD_VALUES_BOOL, CSPMD_VALUES_INTEGER));
    /* ... unless it truncates: the truncation of a sum is not the sum of
     * the truncations.  Other types pass; the memo does not mix the two. */
    INFER_ERR("aten::_to_copy", "", CSPMD_ERR_SPMD_TYPE,
              "Partial type on axis tp cannot be cast to an integer or bool dtype",
              TRUNC(ty(LR, LP), 0));
    INFER_OK("aten::_to_copy", "", ty(LR, LP), TEN(ty(LR, LP), 0));
    INFER_OK("aten::_to_copy", "", ty(LV, LR), TRUNC(ty(LV, LR), 0));
    INFER_ERR("aten::copy_", "", CSPMD_ERR_SPMD_TYPE, "Partial type on axis dp cannot be cast",
              TEN(ty(LR, LR), 0), TRUNC(ty(LP, LR), 1));
}
END_TEST

/* ---- factories and fills -------------------------------------- */

START_TEST(test_factories)
{
    INFER_OK("aten::zeros", "", CSPMD_TYPE_EMPTY, SCA(1));
    INFER0("aten::randn", "", CSPMD_TYPE_EMPTY);
    mesh_both();
    cspmd_type_t rr = ty(LR, LR);
    INFER0("aten::zeros", "", rr);
    INFER0("aten::ones", "", rr);
    INFER_OK("aten::full", "", rr, SCA(1));
    INFER_OK("aten::arange", "start", rr, SCA(0), SCA(1));
    INFER_OK("aten::scalar_tensor", "", rr, SCA(0));
    /* scalar_tensor's result stands for its number; a typed cspmd.Scalar
     * makes typed data, and no other factory makes a number */
    {
        cspmd_rule_t st = cspmd_rule_find("aten::scalar_tensor", "");
        cspmd_operand_t one = SCA(0), zero = ZERO(0), typed = TYP(ty(LR, LV), 0);
        ck_assert_int_eq(cspmd_rule_result_number(st, &one, 1), CSPMD_NUMBER);
        ck_assert_int_eq(cspmd_rule_result_number(st, &zero, 1), CSPMD_NUMBER_ZERO);
        ck_assert_int_eq(cspmd_rule_result_number(st, &typed, 1), 0);
        ck_assert_int_eq(cspmd_rule_result_number(cspmd_rule_find("aten::full", ""), &one, 1), 0);
        ck_assert_int_eq(cspmd_rule_result_number(cspmd_rule_find("aten::add", "Tensor"), &one, 1),
                         0);
    }
    INFER_OK("aten::full", "", ty(LR, LV), TYP(ty(LR, LV), 1));
    /* Factories make the user's data; ops over data (and untyped tensors,
     * and numbers) keep it; a computed value or a typed Scalar ends it. */
    {
        cspmd_operand_t one = SCA(0), typed = TYP(ty(LR, LV), 1);
        cspmd_operand_t data = TEN(rr, 0), computed = TEN(rr, 1), untyped = TEN(CSPMD_TYPE_UNTYPED, 1);
        data.flags = CSPMD_OPERAND_DATA;
        const char *makers[][2] = {{"aten::zeros", ""}, {"aten::ones", ""}, {"aten::full", ""},
                                   {"aten::arange", "start"}, {"aten::randn", ""},
                                   {"aten::randn_like", ""}, {"aten::ones_like", ""},
                                   {"aten::lift_fresh", ""}, {"aten::empty", "memory_format"}};
        for (size_t i = 0; i < sizeof makers / sizeof makers[0]; i++)
            ck_assert_msg(cspmd_rule_result_data(cspmd_rule_find(makers[i][0], makers[i][1]),
                                                 &computed, 1) == 1, "%s", makers[i][0]);
        cspmd_rule_t add = cspmd_rule_find("aten::add", "Tensor");
        cspmd_operand_t pair[2] = {data, one};
        ck_assert_int_eq(cspmd_rule_result_data(add, pair, 2), 1);
        pair[1] = untyped;
        ck_assert_int_eq(cspmd_rule_result_data(add, pair, 2), 1);
        pair[1] = computed;
        ck_assert_int_eq(cspmd_rule_result_data(add, pair, 2), 0);
        pair[1] = typed;
        ck_assert_int_eq(cspmd_rule_result_data(add, pair, 2), 0);
        ck_assert_int_eq(cspmd_rule_result_data(add, &untyped, 1), 0);
        /* scalar_tensor's result is a number, not data */
        ck_assert_int_eq(cspmd_rule_result_data(cspmd_rule_find("aten::scalar_tensor", ""), &one, 1),
                         0);
    }
    /* fresh tensors from torch.tensor() */
    INFER_OK("aten::lift_fresh", "", rr, TEN(CSPMD_TYPE_UNTYPED, 0));
    INFER_OK("aten::lift_fresh", "", ty(LV, LV), TEN(ty(LV, LV), 0));
    /* new_* ignore the receiver */
    INFER_OK("aten::new_zeros", "", rr, TEN(ty(LV, LP), 0));
    INFER_OK("aten::new_full", "", rr, TEN(ty(LV, LV), 0), SCA(2));
    /* *_like infer from the operand */
    INFER_OK("aten::zeros_like", "", ty(LV, LR), TEN(ty(LV, LR), 0));
    INFER_OK("aten::empty_like", "", ty(LV, LR), TEN(ty(LV, LR), 0));
    INFER_OK("aten::randn_like", "", rr, TEN(rr, 0));
    /* a P operand: zeros keep P (zeros are every type), any other fill is R */
    INFER_OK("aten::zeros_like", "", ty(LR, LP), TEN(ty(LR, LP), 0));
    INFER_OK("aten::zeros_like", "", ty(LV, LP), TEN(ty(LV, LP), 0));
    INFER_OK("aten::ones_like", "", ty(LR, LR), TEN(ty(LR, LP), 0));
    INFER_OK("aten::ones_like", "", ty(LI, LR), TEN(ty(LI, LP), 0));
    INFER_OK("aten::full_like", "", ty(LR, LP), TEN(ty(LR, LP), 0), ZERO(1));
    INFER_OK("aten::full_like", "", ty(LR, LR), TEN(ty(LR, LP), 0), SCA(1));
    INFER_OK("aten::full_like", "", ty(LV, LV), TEN(ty(LV, LV), 0), SCA(1));
    /* a typed fill value still counts: the values are the fill's */
    INFER_OK("aten::full_like", "", ty(LR, LV), TEN(ty(LR, LP), 0), TYP(ty(LR, LV), 1));
    INFER_ERR("aten::randn_like", "", CSPMD_ERR_SPMD_TYPE, "non-linear", TEN(ty(LR, LP), 0));
    INFER_ERR("aten::ones_like", "", CSPMD_ERR_SPMD_TYPE, "missing axis",
              TEN(CSPMD_TYPE_UNTYPED, 0));
    /* no operands: {} even under a mesh */
    INFER0("aten::randn", "", CSPMD_TYPE_EMPTY);
    INFER0("aten::empty", "memory_format", CSPMD_TYPE_EMPTY);
    INFER0("aten::exp", "", CSPMD_TYPE_EMPTY);
    /* a mesh made of nothing but trivial axes */
    cspmd_axis_t triv = CSPMD_AXIS_TRIVIAL;
    ck_assert_int_eq(cspmd_mesh_push(&triv, 1), CSPMD_OK);
    INFER0("aten::zeros", "", CSPMD_TYPE_EMPTY);
}
END_TEST

START_TEST(test_fills)
{
    mesh_tp();
    INFER_OK("aten::zero_", "", tt(LR), TEN(CSPMD_TYPE_UNTYPED, 0));
    INFER_OK("aten::zero_", "", tt(LR), TEN(CSPMD_TYPE_EMPTY, 0));
    INFER_OK("aten::zero_", "", tt(LV), TEN(tt(LV), 0));
    INFER_OK("aten::zero_", "", tt(LP), TEN(tt(LP), 0));
    INFER_OK("aten::fill_", "Scalar", tt(LR), TEN(CSPMD_TYPE_UNTYPED, 0), SCA(1));
    INFER_OK("aten::fill_", "Scalar", tt(LI), TEN(tt(LI), 0), SCA(1));
    INFER_OK("aten::fill_", "Tensor", tt(LV), TEN(CSPMD_TYPE_UNTYPED, 0), TEN(tt(LV), 1));
    INFER_OK("aten::fill_", "Tensor", tt(LV), TEN(tt(LR), 0), TEN(tt(LV), 1));
    INFER_OK("aten::fill_", "Tensor", tt(LR), TEN(CSPMD_TYPE_UNTYPED, 0),
             TEN(CSPMD_TYPE_UNTYPED, 1));
    /* random fills */
    INFER_OK("aten::normal_", "", CSPMD_TYPE_EMPTY, TEN(CSPMD_TYPE_UNTYPED, 0), SCA(1), SCA(2));
    INFER_OK("aten::uniform_", "", tt(LV), TEN(tt(LV), 0));
    INFER_OK("aten::bernoulli_", "float", tt(LR), TEN(tt(LR), 0), SCA(1));
    /* copy_: the type comes from src */
    INFER_OK("aten::copy_", "", tt(LR), TEN(tt(LV), 0), TEN(tt(LR), 1));
    INFER_OK("aten::copy_", "", tt(LP), TEN(tt(LR), 0), TEN(tt(LP), 1));
    INFER_OK("aten::copy_", "", tt(LV), TEN(CSPMD_TYPE_UNTYPED, 0), TEN(tt(LV), 1));
    /* passthrough: untyped result */
    INFER_OK("aten::is_same_size", "", CSPMD_TYPE_UNTYPED, TEN(tt(LP), 0), TEN(tt(LV), 1));
}
END_TEST

START_TEST(test_misc_ops)
{
    INFER_OK("_c10d_functional::wait_tensor", "", tt(LP), TEN(tt(LP), 0));
    INFER_OK("aten::_to_copy", "", tt(LP), TEN(tt(LP), 0));
    INFER_OK("aten::cat", "", tt(LP), TEN(tt(LP), 0), TEN(tt(LP), 0), TEN(tt(LP), 0));
    INFER_ERR("aten::cat", "", CSPMD_ERR_SPMD_TYPE, "Found types: [P, R, P]", TEN(tt(LP), 0),
              TEN(tt(LR), 0), TEN(tt(LP), 0));
    INFER_ERR("aten::_local_scalar_dense", "", CSPMD_ERR_SPMD_TYPE, "non-linear",
              TEN(tt(LP), 0));
    INFER_ERR("aten::view", "dtype", CSPMD_ERR_SPMD_TYPE, "non-linear", TEN(tt(LP), 0));
    INFER_OK("aten::view", "", tt(LP), TEN(tt(LP), 0));
}
END_TEST

START_TEST(test_long_operand_lists)
{
    cspmd_operand_t ops[300];
    for (int i = 0; i < 300; i++)
        ops[i] = TEN(tt(LR), 0);
    cspmd_rule_t cat = cspmd_rule_find("aten::cat", "");
    cspmd_type_t out = 0;
    ck_assert_int_eq(cspmd_infer(cat, ops, 300, &out), CSPMD_OK);
    ck_assert_uint_eq(out, tt(LR));
    ops[299] = TEN(tt(LV), 0);
    ck_assert_int_eq(cspmd_infer(cat, ops, 300, &out), CSPMD_OK);
    ck_assert_uint_eq(out, tt(LV));
    ops[5] = TEN(tt(LP), 0);
    ck_assert_int_eq(cspmd_infer(cat, ops, 300, &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_msg(strstr(cspmd_last_error(), "(44 more)]") != NULL, "%s", cspmd_last_error());
    /* index i counts the 300 operands */
    cspmd_checker_set(1, 1);
    ops[5] = TEN(tt(LR), 0);
    ops[260] = TEN(CSPMD_TYPE_UNTYPED, 0);
    ck_assert_int_eq(cspmd_infer(cat, ops, 300, &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_msg(strstr(cspmd_last_error(), "args[260] missing axis tp") != NULL, "%s",
                  cspmd_last_error());
}
END_TEST

/* Past the stack array of the mesh reinterpretation (128 operands): an
 * operand on a sub-axis of a mesh axis is still reinterpreted, wherever
 * it sits. */
START_TEST(test_long_lists_reinterpreted)
{
    enum { N = 1000 };
    static cspmd_operand_t ops[N];
    cspmd_axis_t flat;
    ck_assert_int_eq(cspmd_axes_flatten((cspmd_axis_t[]){DP, TP}, 2, &flat), CSPMD_OK);
    ck_assert_int_eq(cspmd_mesh_push(&flat, 1), CSPMD_OK);
    cspmd_type_t on_flat;
    cspmd_ltype_t r = LR;
    ck_assert_int_eq(cspmd_type_make(&flat, &r, 1, NULL, &on_flat), CSPMD_OK);
    for (int i = 0; i < N; i++)
        ops[i] = TEN(on_flat, 0);
    ops[N - 1] = TEN(ty(LR, LR), 0); /* on dp and tp: reinterpreted onto flat */
    cspmd_rule_t cat = cspmd_rule_find("aten::cat", "");
    cspmd_type_t out = 0;
    ck_assert_int_eq(cspmd_infer(cat, ops, N, &out), CSPMD_OK);
    ck_assert_uint_eq(out, on_flat);
    ops[N - 1] = TEN(ty(LR, LP), 0); /* P on tp: P on flat, and cat rejects P + R */
    ck_assert_int_eq(cspmd_infer(cat, ops, N, &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_OK);
}
END_TEST

/* Rules describe 64 schema arguments: an operand from a later argument is
 * an error naming the limit, never a silently misread bit. */
START_TEST(test_schema_argument_limit)
{
    cspmd_rule_t add = cspmd_rule_find("aten::add", "Tensor");
    cspmd_type_t out = 0;
    cspmd_operand_t ops[2] = {TEN(tt(LR), 0), TEN(tt(LP), 70)};
    ck_assert_int_eq(cspmd_infer(add, ops, 2, &out), CSPMD_ERR_VALUE);
    ck_assert_msg(strstr(cspmd_last_error(), "at most 64 schema arguments") != NULL, "%s",
                  cspmd_last_error());
    ops[1] = TEN(tt(LR), 63);
    ck_assert_int_eq(cspmd_infer(add, ops, 2, &out), CSPMD_OK);
}
END_TEST

/* Any number of parked typed scalars; taking clears them. */
START_TEST(test_pending_scalars_grow)
{
    enum { N = 300 };
    cspmd_type_t types[N];
    static cspmd_operand_t taken[N];
    for (int i = 0; i < N; i++)
        types[i] = i % 2 ? tt(LV) : tt(LR);
    ck_assert_int_eq(cspmd_pending_scalars(types, N), CSPMD_OK);
    ck_assert_int_eq(cspmd_pending_scalars_count(), N);
    ck_assert_int_eq(cspmd_pending_scalars_take(taken, N), N);
    for (int i = 0; i < N; i++) {
        ck_assert_uint_eq(taken[i].type, types[i]);
        ck_assert_uint_eq(taken[i].kind, CSPMD_OPERAND_TYPED);
    }
    ck_assert_int_eq(cspmd_pending_scalars_count(), 0);
    ck_assert_int_eq(cspmd_pending_scalars(types, 3), CSPMD_OK);
    ck_assert_int_eq(cspmd_pending_scalars(types, N), CSPMD_OK); /* replaces */
    ck_assert_int_eq(cspmd_pending_scalars(NULL, 0), CSPMD_OK);  /* clears */
    ck_assert_int_eq(cspmd_pending_scalars_count(), 0);
    types[7] = 987654;
    ck_assert_int_eq(cspmd_pending_scalars(types, N), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_pending_scalars_count(), 0); /* unchanged */
}
END_TEST

/* One list element: the single op's rule; errors name the index. */
START_TEST(test_infer_element)
{
    cspmd_rule_t each_add = cspmd_rule_find("aten::_foreach_add_", "List");
    cspmd_rule_t sgd = cspmd_rule_find("aten::_fused_sgd_", "");
    cspmd_rule_t adam = cspmd_rule_find("aten::_fused_adam_", "");
    cspmd_type_t out = 0;
    cspmd_operand_t ok[2] = {TEN(tt(LP), 0), TEN(tt(LP), 1)};
    ck_assert_int_eq(cspmd_infer_element(each_add, 7, ok, 2, &out), CSPMD_OK);
    ck_assert_uint_eq(out, tt(LP));
    cspmd_operand_t bad[2] = {TEN(tt(LR), 0), TEN(tt(LP), 1)};
    ck_assert_int_eq(cspmd_infer_element(each_add, 7, bad, 2, &out), CSPMD_ERR_SPMD_TYPE);
    ck_assert_msg(strncmp(cspmd_last_error(), "list element [7]: Partial type on axis tp in a "
                                              "linear op", 47) == 0,
                  "%s", cspmd_last_error());
    /* sgd: param, grad, momentum; a P grad on an R param is the missing
     * all-reduce; state_steps-like args outside the operands are ignored */
    cspmd_operand_t step[4] = {TEN(tt(LR), 0), TEN(tt(LP), 1), TEN(tt(LR), 2), TEN(tt(LP), 5)};
    ck_assert_int_eq(cspmd_infer_element(sgd, 0, step, 4, &out), CSPMD_ERR_SPMD_TYPE);
    step[1] = TEN(tt(LR), 1);
    ck_assert_int_eq(cspmd_infer_element(sgd, 0, step, 4, &out), CSPMD_OK);
    ck_assert_uint_eq(out, tt(LR));
    cspmd_operand_t adam_ops[5] = {TEN(tt(LV), 0), TEN(tt(LV), 1), TEN(tt(LV), 2),
                                   TEN(tt(LV), 3), TEN(tt(LR), 5)};
    ck_assert_int_eq(cspmd_infer_element(adam, 0, adam_ops, 5, &out), CSPMD_OK);
    ck_assert_uint_eq(out, tt(LV));
    /* not a list rule */
    ck_assert_int_eq(cspmd_infer_element(cspmd_rule_find("aten::add", ""), 0, ok, 2, &out),
                     CSPMD_ERR_MISUSE);
}
END_TEST

/* ---- the memo ----------------------------------------------------------- */

START_TEST(test_memo)
{
    cspmd_rule_t add = cspmd_rule_find("aten::add", "Tensor");
    cspmd_operand_t ops[2] = {TEN(ty(LR, NONE), 0), TEN(ty(LR, LV), 1)};
    cspmd_type_t a = 0, b = 0;
    /* strict: error, twice (errors are not memoised) */
    ck_assert_int_eq(cspmd_infer(add, ops, 2, &a), CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_infer(add, ops, 2, &a), CSPMD_ERR_SPMD_TYPE);
    /* permissive: ok, twice, same answer */
    cspmd_checker_set(1, 0);
    ck_assert_int_eq(cspmd_infer(add, ops, 2, &a), CSPMD_OK);
    ck_assert_int_eq(cspmd_infer(add, ops, 2, &b), CSPMD_OK);
    ck_assert_uint_eq(a, ty(LR, LV));
    ck_assert_uint_eq(a, b);
    /* back to strict: the memoised permissive answer is not reused */
    cspmd_checker_set(1, 1);
    ck_assert_int_eq(cspmd_infer(add, ops, 2, &a), CSPMD_ERR_SPMD_TYPE);

    /* the mesh is part of the key */
    cspmd_rule_t zeros = cspmd_rule_find("aten::zeros", "");
    ck_assert_int_eq(cspmd_infer(zeros, NULL, 0, &a), CSPMD_OK);
    ck_assert_uint_eq(a, CSPMD_TYPE_EMPTY);
    mesh_tp();
    ck_assert_int_eq(cspmd_infer(zeros, NULL, 0, &a), CSPMD_OK);
    ck_assert_uint_eq(a, tt(LR));
    ck_assert_int_eq(cspmd_infer(zeros, NULL, 0, &b), CSPMD_OK);
    ck_assert_uint_eq(b, tt(LR));
    mesh_both();
    ck_assert_int_eq(cspmd_infer(zeros, NULL, 0, &a), CSPMD_OK);
    ck_assert_uint_eq(a, ty(LR, LR));
    ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_OK);
    ck_assert_int_eq(cspmd_infer(zeros, NULL, 0, &a), CSPMD_OK);
    ck_assert_uint_eq(a, tt(LR));
    ck_assert_int_eq(cspmd_mesh_pop(), CSPMD_OK);
    ck_assert_int_eq(cspmd_infer(zeros, NULL, 0, &a), CSPMD_OK);
    ck_assert_uint_eq(a, CSPMD_TYPE_EMPTY);

    /* operands' kinds and args are part of the key */
    cspmd_operand_t s1[2] = {TEN(tt(LP), 0), SCA(1)};
    cspmd_operand_t s2[2] = {TEN(tt(LP), 0), SCA(2)};
    ck_assert_int_eq(cspmd_infer(add, s2, 2, &a), CSPMD_OK); /* alpha: ignored */
    ck_assert_int_eq(cspmd_infer(add, s1, 2, &a), CSPMD_ERR_SPMD_TYPE);
    /* a SCALAR operand's type field does not matter */
    cspmd_operand_t s3[2] = {TEN(tt(LP), 0), {999999, 2, CSPMD_OPERAND_SCALAR, 0}};
    ck_assert_int_eq(cspmd_infer(add, s3, 2, &a), CSPMD_OK);
    ck_assert_uint_eq(a, tt(LP));
    /* many distinct keys: every answer stays right */
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 2000; i++) {
            cspmd_operand_t o[2] = {TEN(tt(LR), 0), SCA(i + 3)};
            ck_assert_int_eq(cspmd_infer(add, o, 2, &a), CSPMD_OK);
            ck_assert_uint_eq(a, tt(LR));
        }
}
END_TEST

START_TEST(test_infer_misuse)
{
    cspmd_type_t out = 0;
    cspmd_operand_t ok[1] = {TEN(tt(LR), 0)};
    ck_assert_int_eq(cspmd_infer(-1, ok, 1, &out), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_infer(1 << 30, ok, 1, &out), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_infer(0, ok, -1, &out), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_infer(0, NULL, 1, &out), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_infer(0, ok, 1, NULL), CSPMD_ERR_MISUSE);
    cspmd_operand_t badkind[1] = {{tt(LR), 0, 7, 0}};
    ck_assert_int_eq(cspmd_infer(0, badkind, 1, &out), CSPMD_ERR_MISUSE);
    cspmd_operand_t badtype[1] = {TEN(987654, 0)};
    ck_assert_int_eq(cspmd_infer(0, badtype, 1, &out), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_infer(0, NULL, 0, &out), CSPMD_OK);
    ck_assert_uint_eq(out, CSPMD_TYPE_EMPTY);
}
END_TEST

Suite *suite_infer(void)
{
    Suite *s = suite_create("infer");
    TCase *tc = tcase_create("infer");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_rule_rows_ok);
    tcase_add_test(tc, test_rule_rows_errors);
    tcase_add_test(tc, test_rule_misuse);
    tcase_add_test(tc, test_messages_and_suggestions);
    tcase_add_test(tc, test_multi_axis_basic);
    tcase_add_test(tc, test_strict_missing_axis_mesh);
    tcase_add_test(tc, test_strict_missing_axis_no_mesh);
    tcase_add_test(tc, test_permissive);
    tcase_add_test(tc, test_weak_scalars);
    tcase_add_test(tc, test_typed_scalars);
    tcase_add_test(tc, test_no_grad_coercion);
    tcase_add_test(tc, test_no_grad_collective_input);
    tcase_add_test(tc, test_division);
    tcase_add_test(tc, test_backward_ops);
    tcase_add_test(tc, test_coefficients);
    tcase_add_test(tc, test_torch_linear_ops);
    tcase_add_test(tc, test_addmm_decomposition);
    tcase_add_test(tc, test_truncating_casts);
    tcase_add_test(tc, test_factories);
    tcase_add_test(tc, test_fills);
    tcase_add_test(tc, test_misc_ops);
    tcase_add_test(tc, test_long_operand_lists);
    tcase_add_test(tc, test_long_lists_reinterpreted);
    tcase_add_test(tc, test_schema_argument_limit);
    tcase_add_test(tc, test_pending_scalars_grow);
    tcase_add_test(tc, test_infer_element);
    tcase_add_test(tc, test_memo);
    tcase_add_test(tc, test_infer_misuse);
    suite_add_tcase(s, tc);
    return s;
}
