/*
 * kernel_internal.h -- helpers shared by the kernel's C files (not part of
 * any API; hidden in the library).
 */
#ifndef CSPMD_KERNEL_INTERNAL_H
#define CSPMD_KERNEL_INTERNAL_H

#include "cspmd.h"
#include "torch/shim.h"

#if defined(__GNUC__)
#define CSPMDK_HIDDEN __attribute__((visibility("hidden")))
#else
#define CSPMDK_HIDDEN
#endif

/* The operands of one call: inline up to OPERANDS_INLINE (the hot path
 * allocates nothing), on the heap past that, so ops over any number of
 * tensors (cat of thousands of chunks, _foreach_* over every parameter)
 * are checked whole. */
#define OPERANDS_INLINE 96

typedef struct operands {
    int n, cap;
    cspmd_operand_t *v;
    cspmd_operand_t inl[OPERANDS_INLINE];
} operands_t;

CSPMDK_HIDDEN void cspmdk_operands_init(operands_t *o);
CSPMDK_HIDDEN void cspmdk_operands_free(operands_t *o);
/* Room for `need` operands in total (keeps the ones there).  NOMEM. */
CSPMDK_HIDDEN cspmd_status_t cspmdk_operands_reserve(operands_t *o, int need);
/* Append one (room reserved by the caller). */
CSPMDK_HIDDEN void cspmdk_operand_push(operands_t *o, cspmd_type_t type, int arg,
                                       cspmd_operand_kind_t kind);
/* Append tensor r of args at schema argument arg: a weak scalar if it is a
 * wrapped number, else a tensor flagged NO_GRAD when it cannot receive a
 * gradient (room reserved by the caller). */
CSPMDK_HIDDEN void cspmdk_operand_push_ref(operands_t *o, const cspmd_args_t *args,
                                           const cspmd_tensor_ref_t *r, int arg);
/* 1 if some non-scalar operand carries a type. */
CSPMDK_HIDDEN int cspmdk_any_typed(const cspmd_operand_t *ops, int n);

/* Give the thread's error its context: the op's call (arguments with
 * their types), the mesh, the backward node and the user's line (the
 * core's cspmd_error_context_*); returns st. */
CSPMDK_HIDDEN cspmd_status_t cspmdk_with_context(cspmd_status_t st, const cspmd_call_t *call,
                                                 const cspmd_args_t *args);
/* One tensor of the call being described (cspmd_error_context_tensor). */
CSPMDK_HIDDEN void cspmdk_context_tensor(int elem, const cspmd_tensor_t *tensor,
                                         cspmd_type_t type);
/* The in-place / out= check of written tensor r against the inferred type
 * (the message names the op, and the list element for list arguments). */
CSPMDK_HIDDEN cspmd_status_t cspmdk_check_mutation(const cspmd_call_t *call,
                                                   const cspmd_args_t *args,
                                                   const cspmd_tensor_ref_t *r, cspmd_type_t out);

/* Views whose base was retyped by a write through another view read as
 * the join of their own type and the base's (in args, not stored). */
CSPMDK_HIDDEN void cspmdk_refresh_view_types(cspmd_args_t *args);

/* A write of `out`-typed data to r: if r views another tensor, that
 * tensor's joined type in *joined (UNTYPED: nothing to change), or the
 * error with context.  _apply sets it (after the kernel ran; the join
 * was checked before). */
CSPMDK_HIDDEN cspmd_status_t cspmdk_view_write_join(const cspmd_call_t *call,
                                                    const cspmd_args_t *args,
                                                    const cspmd_tensor_ref_t *r,
                                                    cspmd_type_t out, cspmd_type_t *joined);
CSPMDK_HIDDEN void cspmdk_view_write_apply(const cspmd_call_t *call, const cspmd_args_t *args,
                                           const cspmd_tensor_ref_t *r, cspmd_type_t out);

/* A FOREACH op (foreach_kernel.c): every list element checked alone. */
/* Whether global inference runs for the current op: global mode (forward
 * and backward ops alike). */
CSPMDK_HIDDEN int cspmdk_global_active(void);
/* Whether the autograd engine runs the current op (a backward node). */
CSPMDK_HIDDEN int cspmdk_in_backward(void);

/* Global mode: each result's type (outs, CSPMD_MAX_RESULTS long) from the
 * op's local type, by the core's global inference (global_kernel.c). */
/* An op's local rule and global shard rule, looked up by name once per
 * operator, bound to its schema and cached (op_kernel.c); lock-free after
 * the first call. */
typedef struct cspmdk_op_rules {
    cspmd_rule_t local;
    cspmd_shard_rule_t shard;
    const char *display; /* "aten::add.Tensor", for global mode's messages */
} cspmdk_op_rules_t;
/* Errors (first call only): the rule's binding to the schema fails
 * (RUNTIME: a defect of the rule table), NOMEM. */
CSPMDK_HIDDEN cspmd_status_t cspmdk_op_rules(const cspmd_call_t *call, cspmdk_op_rules_t *out);

CSPMDK_HIDDEN cspmd_status_t cspmdk_global_types(const cspmd_call_t *call,
                                                 const cspmd_args_t *args,
                                                 cspmd_type_t local_out, cspmd_type_t *outs);

CSPMDK_HIDDEN cspmd_status_t cspmdk_foreach_run(cspmd_call_t *call, cspmd_rule_t rule);

#endif /* CSPMD_KERNEL_INTERNAL_H */
