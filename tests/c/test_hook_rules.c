/* The typing rules of spmd_typecheck hooks (csrc/core/hook_rules.c):
 * cspmd_rules_einsum and cspmd_rules_transition. */
#include <string.h>

#include "cspmd.h"
#include "ctype_helpers.h"
#include "infer_helpers.h"
#include "suites.h"

static void setup(void)
{
    h_setup();
    cspmd_checker_set(0, 1); /* no typecheck(): every axis reads its spec */
}

static void teardown(void)
{
    h_teardown();
}

#define ELL CSPMD_EINSUM_ELLIPSIS
#define OPQ CSPMD_EINSUM_OPAQUE

/* A 2-d type on tp with tp sharding dim d (-1: no spec). */
static cspmd_type_t sharded(cspmd_ltype_t lt, int d)
{
    cspmd_spec_t spec;
    memset(&spec, 0, sizeof spec);
    spec.ndim = 2;
    if (d >= 0) {
        spec.nentry[d] = 1;
        spec.entry[d][0] = TP;
    }
    return ty_spec(NONE, lt, d >= 0 ? &spec : NULL);
}

static cspmd_einsum_operand_t EOP(const int32_t *labels, int n, int ndim, cspmd_type_t t,
                                  int group)
{
    cspmd_einsum_operand_t o = {labels, n, ndim, t, group};
    return o;
}

static const int32_t MK[] = {'m', 'k'}, NK[] = {'n', 'k'}, MN[] = {'m', 'n'}, KN[] = {'k', 'n'};

START_TEST(test_einsum_contraction_is_partial)
{
    cspmd_einsum_operand_t ops[2] = {EOP(MK, 2, 2, sharded(LV, 1), -1),
                                     EOP(NK, 2, 2, sharded(LV, 1), -1)};
    cspmd_type_t out = 0;
    int32_t nd = -1;
    ck_assert_int_eq(cspmd_rules_einsum("mk,nk->mn", ops, 2, MN, 2, &out, &nd), CSPMD_OK);
    ck_assert_uint_eq(out, tt(LP));
    ck_assert_int_eq(nd, 2);
    /* A kept sharded label keeps its axis in the output's spec. */
    ops[0] = EOP(MK, 2, 2, sharded(LV, 0), -1);
    ops[1] = EOP(KN, 2, 2, tt(LR), -1);
    ck_assert_int_eq(cspmd_rules_einsum("mk,kn->mn", ops, 2, MN, 2, &out, &nd), CSPMD_OK);
    ck_assert_uint_eq(out, sharded(LV, 0));
    /* Local mode reads no spec: the non-linear rule alone (V). */
    cspmd_checker_set(1, 1);
    ops[0] = EOP(MK, 2, 2, sharded(LV, 1), -1);
    ops[1] = EOP(NK, 2, 2, sharded(LV, 1), -1);
    ck_assert_int_eq(cspmd_rules_einsum("mk,nk->mn", ops, 2, MN, 2, &out, &nd), CSPMD_OK);
    ck_assert_uint_eq(out, tt(LV));
}
END_TEST

START_TEST(test_einsum_sharding_errors)
{
    cspmd_type_t out = 7;
    int32_t nd = -1;
    cspmd_einsum_operand_t ops[2] = {EOP(MK, 2, 2, sharded(LV, 1), -1),
                                     EOP(NK, 2, 2, sharded(LV, 0), -1)};
    ck_assert_int_eq(cspmd_rules_einsum("mk,nk->mn", ops, 2, MN, 2, &out, &nd),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "axis tp shards both"));
    ck_assert_uint_eq(out, 7);
    /* The same label on different axes. */
    ops[1] = EOP(NK, 2, 2, tt(LV), -1);
    ck_assert_int_eq(cspmd_rules_einsum("mk,nk->mn", ops, 2, MN, 2, &out, &nd),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "label 'k' of 'mk,nk->mn' is sharded "
                                                     "inconsistently: (tp) vs None"));
    /* Broadcast over a sharded label: must not vary. */
    static const int32_t N[] = {'n'}, MK2[] = {'m', 'k'};
    cspmd_einsum_operand_t b[2] = {EOP(MK2, 2, 2, sharded(LV, 0), -1), EOP(N, 1, 1, tt(LV), -1)};
    static const int32_t MKN[] = {'m', 'k', 'n'};
    ck_assert_int_eq(cspmd_rules_einsum("mk,n->mkn", b, 2, MKN, 3, &out, &nd),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "operand 1 of 'mk,n->mkn' broadcasts over "
                                                     "'m', which is sharded on tp"));
    /* An opaque dim must not be sharded. */
    static const int32_t IO[] = {'i', OPQ};
    cspmd_einsum_operand_t o[1] = {EOP(IO, 2, 2, sharded(LV, 1), -1)};
    ck_assert_int_eq(cspmd_rules_einsum("i_->i_", o, 1, IO, 2, &out, &nd), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "marks '_' (must not be sharded)"));
}
END_TEST

START_TEST(test_einsum_binding)
{
    cspmd_type_t out = 0;
    int32_t nd = -1;
    static const int32_t I1[] = {'i'}, EK[] = {ELL, 'k'}, E[] = {ELL};
    cspmd_einsum_operand_t a[1] = {EOP(I1, 1, 2, tt(LR), -1)};
    ck_assert_int_eq(cspmd_rules_einsum("i->i", a, 1, I1, 1, &out, &nd), CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(),
                     "rules.einsum: 'i->i': operand 0 has 1 label(s) but 2 dim(s)");
    cspmd_einsum_operand_t b[2] = {EOP(EK, 2, 3, tt(LR), -1), EOP(EK, 2, 2, tt(LR), -1)};
    ck_assert_int_eq(cspmd_rules_einsum("...k,...k->...", b, 2, E, 1, &out, &nd),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "operand 0 gives it 2 and operand 1 "
                                                     "gives it 1"));
    b[1] = EOP(EK, 2, 3, tt(LR), -1);
    ck_assert_int_eq(cspmd_rules_einsum("...k,...k->...", b, 2, E, 1, &out, &nd), CSPMD_OK);
    ck_assert_int_eq(nd, 2);
    ck_assert_uint_eq(out, tt(LR));
    /* Too many dims is an error, not a truncation. */
    static const int32_t BAD[] = {-3};
    cspmd_einsum_operand_t c[1] = {EOP(E, 1, 17, tt(LR), -1)};
    ck_assert_int_eq(cspmd_rules_einsum("...->...", c, 1, E, 1, &out, &nd), CSPMD_ERR_VALUE);
    c[0] = EOP(BAD, 1, 1, tt(LR), -1);
    ck_assert_int_eq(cspmd_rules_einsum("?", c, 1, E, 1, &out, &nd), CSPMD_ERR_MISUSE);
    ck_assert_int_eq(cspmd_rules_einsum("?", c, 1, E, 1, NULL, &nd), CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_einsum_linear_in)
{
    cspmd_type_t out = 0;
    int32_t nd = -1;
    static const int32_t IJ[] = {'i', 'j'};
    cspmd_einsum_operand_t a[1] = {EOP(IJ, 2, 2, tt(LP), -1)};
    ck_assert_int_eq(cspmd_rules_einsum("ij->ij", a, 1, IJ, 2, &out, &nd), CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "declare linear_in=(0,) if the op is "
                                                     "linear in it"));
    a[0].linear_group = 0;
    ck_assert_int_eq(cspmd_rules_einsum("ij->ij", a, 1, IJ, 2, &out, &nd), CSPMD_OK);
    ck_assert_uint_eq(out, tt(LP));
    /* Jointly linear: all or none P. */
    cspmd_einsum_operand_t b[2] = {EOP(IJ, 2, 2, tt(LP), 0), EOP(IJ, 2, 2, tt(LR), 0)};
    ck_assert_int_eq(cspmd_rules_einsum("ij,ij->ij", b, 2, IJ, 2, &out, &nd),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "declared jointly linear"));
    b[1].type = tt(LP);
    ck_assert_int_eq(cspmd_rules_einsum("ij,ij->ij", b, 2, IJ, 2, &out, &nd), CSPMD_OK);
    ck_assert_uint_eq(out, tt(LP));
    /* Multilinear: one P factor with R; with V it is an error. */
    b[0].linear_group = 0;
    b[1] = EOP(IJ, 2, 2, tt(LR), 1);
    ck_assert_int_eq(cspmd_rules_einsum("ij,ij->ij", b, 2, IJ, 2, &out, &nd), CSPMD_OK);
    ck_assert_uint_eq(out, tt(LP));
    b[1].type = tt(LV);
    ck_assert_int_eq(cspmd_rules_einsum("ij,ij->ij", b, 2, IJ, 2, &out, &nd),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "operand 1 is V on axis tp while "
                                                     "operand(s) [0] are Partial there"));
    /* Two P factors in separate groups. */
    b[1].type = tt(LP);
    ck_assert_int_eq(cspmd_rules_einsum("ij,ij->ij", b, 2, IJ, 2, &out, &nd),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "linear_in=((0, 1),) for jointly linear"));
}
END_TEST

START_TEST(test_transition_types)
{
    cspmd_type_t out = 0;
    int32_t nd = -1;
    ck_assert_int_eq(cspmd_rules_transition(CSPMD_COLL_ALL_REDUCE, TP, C(LP), C(LI), ty(LR, LP),
                                            2, 0, &out, &nd),
                     CSPMD_OK);
    ck_assert_uint_eq(out, ty(LR, LI));
    ck_assert_int_eq(nd, 2);
    /* No implicit V -> P: a V sum says src=V. */
    ck_assert_int_eq(cspmd_rules_transition(CSPMD_COLL_ALL_REDUCE, TP, C(LP), C(LR), tt(LV), 2,
                                            0, &out, &nd),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "rules.all_reduce(tp, src=P, dst=R) expects its input "
                                         "to be P on axis tp, but it is V");
    /* R and I stand for each other without a gradient. */
    ck_assert_int_eq(cspmd_rules_transition(CSPMD_COLL_CONVERT, TP, C(LI), C(LR), tt(LR), 2, 0,
                                            &out, &nd),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_int_eq(cspmd_rules_transition(CSPMD_COLL_CONVERT, TP, C(LI), C(LR), tt(LR), 2, 1,
                                            &out, &nd),
                     CSPMD_OK);
    ck_assert_uint_eq(out, tt(LR));
    /* A pair the collectives' table does not have. */
    ck_assert_int_eq(cspmd_rules_transition(CSPMD_COLL_ALL_REDUCE, TP, C(LP), C(LV), tt(LP), 2,
                                            0, &out, &nd),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "rules.all_reduce: P -> V is not a transition the type "
                                         "system admits for all_reduce");
    /* Expert-only pairs of the runtime are stated by rules. */
    ck_assert_int_eq(cspmd_rules_transition(CSPMD_COLL_REINTERPRET, TP, C(LR), C(LP), tt(LR), 2,
                                            0, &out, &nd),
                     CSPMD_OK);
    ck_assert_uint_eq(out, tt(LP));
    ck_assert_int_eq(cspmd_rules_transition(CSPMD_COLL_REDISTRIBUTE, TP, C(LR), C(LP), tt(LR), 2,
                                            0, &out, &nd),
                     CSPMD_ERR_MISUSE);
}
END_TEST

START_TEST(test_transition_shards_and_ranks)
{
    cspmd_type_t out = 0;
    int32_t nd = -1;
    ck_assert_int_eq(cspmd_rules_transition(CSPMD_COLL_CONVERT, TP, C(LR), S(0), tt(LR), 2, 0,
                                            &out, &nd),
                     CSPMD_OK);
    ck_assert_uint_eq(out, sharded(LV, 0));
    ck_assert_int_eq(cspmd_rules_transition(CSPMD_COLL_ALL_TO_ALL, TP, S(0), S(1),
                                            sharded(LV, 0), 2, 0, &out, &nd),
                     CSPMD_OK);
    ck_assert_uint_eq(out, sharded(LV, 1));
    ck_assert_int_eq(cspmd_rules_transition(CSPMD_COLL_ALL_TO_ALL, TP, S(1), S(0),
                                            sharded(LV, 0), 2, 0, &out, &nd),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "sharded on dim 1 along tp, but it is "
                                                     "sharded on dim 0"));
    ck_assert_int_eq(cspmd_rules_transition(CSPMD_COLL_CONVERT, TP, S(0), S(1), sharded(LV, 0),
                                            2, 0, &out, &nd),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "use all_to_all instead"));
    ck_assert_int_eq(cspmd_rules_transition(CSPMD_COLL_CONVERT, TP, C(LR), S(2), tt(LR), 2, 0,
                                            &out, &nd),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_str_eq(cspmd_last_error(), "S(2) is out of bounds for tensor with ndim=2");
    /* Stack and unbind forms. */
    ck_assert_int_eq(cspmd_rules_transition(CSPMD_COLL_ALL_GATHER, TP, C(LV), C(LR), tt(LV), 2,
                                            0, &out, &nd),
                     CSPMD_OK);
    ck_assert_int_eq(nd, 3);
    ck_assert_uint_eq(out, tt(LR));
    ck_assert_int_eq(cspmd_rules_transition(CSPMD_COLL_REDUCE_SCATTER, TP, C(LP), C(LV), tt(LP),
                                            2, 0, &out, &nd),
                     CSPMD_OK);
    ck_assert_int_eq(nd, 1);
    ck_assert_uint_eq(out, tt(LV));
    ck_assert_int_eq(cspmd_rules_transition(CSPMD_COLL_REDUCE_SCATTER, TP, C(LP), C(LV), tt(LP),
                                            0, 0, &out, &nd),
                     CSPMD_ERR_SPMD_TYPE);
    ck_assert_ptr_nonnull(strstr(cspmd_last_error(), "cannot unbind dim 0 of a scalar"));
    /* A trivial axis changes only the rank. */
    ck_assert_int_eq(cspmd_rules_transition(CSPMD_COLL_ALL_GATHER, CSPMD_AXIS_TRIVIAL, C(LV),
                                            C(LR), tt(LV), 2, 0, &out, &nd),
                     CSPMD_OK);
    ck_assert_int_eq(nd, 3);
    ck_assert_uint_eq(out, tt(LV));
}
END_TEST

Suite *suite_hook_rules(void)
{
    Suite *s = suite_create("hook_rules");
    TCase *tc = tcase_create("rules");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_einsum_contraction_is_partial);
    tcase_add_test(tc, test_einsum_sharding_errors);
    tcase_add_test(tc, test_einsum_binding);
    tcase_add_test(tc, test_einsum_linear_in);
    tcase_add_test(tc, test_transition_types);
    tcase_add_test(tc, test_transition_shards_and_ranks);
    suite_add_tcase(s, tc);
    return s;
}
