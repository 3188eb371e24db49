/*
 * rules.h -- internal: the op rule record shared by rules.c and infer.c
 * (not installed).
 */
#ifndef CSPMD_RULES_H
#define CSPMD_RULES_H

#include <stdint.h>

#include "cspmd.h"
#include "table.h" /* CSPMDI_HIDDEN */

/* How an op interacts with Partial. */
typedef enum cspmdi_lin {
    CSPMDI_LIN_NONLINEAR = 0,
    CSPMDI_LIN_LINEAR = 1,
    CSPMDI_LIN_MULTILINEAR = 2
} cspmdi_lin_t;

/* Rule flags. */
enum {
    /* result = LINEAR(MULTILINEAR(arg dec_a, arg dec_b), arg dec_self)
     * (the addmm family); operands at other args are ignored. */
    CSPMDI_RF_DECOMP = 1u << 0,
    /* FACTORY that ignores its operands (new_zeros/new_ones/new_full). */
    CSPMDI_RF_IGNORE_OPERANDS = 1u << 1,
    /* FACTORY whose tensor operands are fresh: untyped ones do not count
     * as operands (lift_fresh: the tensor torch.tensor() just built). */
    CSPMDI_RF_FRESH = 1u << 2,
    /* A backward op (for tracing/tests only; no effect on inference). */
    CSPMDI_RF_BACKWARD = 1u << 3,
    /* FACTORY shaped like its tensor operand (zeros_like, ones_like,
     * full_like): the result takes the operand's type, with P kept only
     * when the fill is zero (zeros are every type) and R for any other
     * fill (a fresh constant, the same on every rank).  The fill is zero
     * for a CSPMDI_RF_ZEROS rule, or when the Scalar at a zero_free_pos
     * argument is. */
    CSPMDI_RF_LIKE = 1u << 4,
    CSPMDI_RF_ZEROS = 1u << 5,
    /* FACTORY whose 0-d result stands for the number at its weak-scalar
     * argument (scalar_tensor: torch materializes where(c, x, 0)'s 0 with
     * it), so later ops take the result as that number. */
    CSPMDI_RF_NUMBER = 1u << 6,
    /* An op that makes new data from numbers and shapes alone (factories,
     * random factories, *_like, torch.tensor's lift_fresh): its result is
     * the user's data, not a value the program computed (see
     * cspmd_rule_result_data). */
    CSPMDI_RF_DATA = 1u << 7,
    /* A dtype cast (_to_copy, to, copy_): see cspmd_rule_casts. */
    CSPMDI_RF_CAST = 1u << 8
};

/* A rule row bound to argument positions (rules.c binds its names with
 * cspmd_rule_bind; a row that names no argument is bound from the start).
 * Bit i of a mask is schema argument i. */
typedef struct cspmdi_rule {
    const char *name;      /* "aten::add"                                   */
    const char *overload;  /* "Tensor"; "" = default; "*" = any overload    */
    uint8_t lin;           /* CSPMDI_LIN_*                                  */
    uint8_t kind;          /* cspmd_rule_kind_t                             */
    uint16_t flags;        /* CSPMDI_RF_*                                   */
    int8_t dec_a, dec_b, dec_self; /* CSPMDI_RF_DECOMP arg indices          */
    uint64_t scalar_pos;   /* args where a SCALAR operand is the weak _S    */
    uint64_t nonlin_pos;   /* args where P is an error; for LINEAR rules
                              these args are fixed coefficients             */
    uint64_t operand_pos;  /* 0 = all args are operands; else only these    */
    uint64_t result_pos;   /* 0 = every written arg takes the result; else
                              only these (FOREACH: the fused optimizers)    */
    uint64_t zero_free_pos; /* scalar_pos args whose number, when zero, is
                               no operand (constant_pad_nd's value)         */
} cspmdi_rule_t;

/* Rule ids with this bit are "_foreach_<op>": element rule = id without it. */
#define CSPMDI_FOREACH_BIT (INT32_C(1) << 24)

/* The bound record of an id, NULL for an unknown id or a row not bound
 * yet.  Rule 0 is the default NONLINEAR rule given to unknown ops. */
CSPMDI_HIDDEN const cspmdi_rule_t *cspmdi_rule_get(cspmd_rule_t rule);
/* The error for an id cspmdi_rule_get gave NULL for (unknown, or not
 * bound), naming the caller who. */
CSPMDI_HIDDEN cspmd_status_t cspmdi_rule_missing(cspmd_rule_t rule, const char *who);

/* The per-element rule of a FOREACH id (the rule itself otherwise). */
CSPMDI_HIDDEN cspmd_rule_t cspmdi_rule_element(cspmd_rule_t rule);

/* The op name without its namespace ("aten::div" -> "div"). */
CSPMDI_HIDDEN const char *cspmdi_rule_short_name(const cspmdi_rule_t *r);

#endif /* CSPMD_RULES_H */
