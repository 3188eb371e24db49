/*
 * shim.h -- the C face of libtorch that cspmd's C kernel is written against.
 *
 * Implemented in C++ (the .cpp files beside it), the only C++ in the project.  The
 * shim decides nothing: it reads the dispatcher's boxed stack, redispatches,
 * stores type ids on tensors, and calls c10d's functional collectives.
 * Every function catches C++ exceptions and returns a status; a pending
 * torch exception (a shape error from the real kernel, say) is kept per
 * thread and rethrown by the outermost C++ frame.
 */
#ifndef CSPMD_SHIM_H
#define CSPMD_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include "cspmd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A dispatcher call in flight (operator, key set, boxed stack). */
typedef struct cspmd_call cspmd_call_t;
/* A tensor, borrowed from the stack or from a shim result: valid until the
 * call returns (or, for results of shim ops, until cspmd_tensor_release). */
typedef struct cspmd_tensor cspmd_tensor_t;

/* CSPMD_ERR_PENDING (cspmd.h's status list) is returned when a C++
 * exception is pending: the trampoline rethrows it. */

/* ---- the operator --------------------------------------------------- */

/* A pointer that identifies the operator for the life of the process. */
const void *cspmd_call_op_key(const cspmd_call_t *call);
/* "aten::add" and "Tensor" ("" for the default overload). */
const char *cspmd_call_op_name(const cspmd_call_t *call);
const char *cspmd_call_op_overload(const cspmd_call_t *call);

/* ---- the arguments on the stack ------------------------------------- */

typedef enum cspmd_arg_kind {
    CSPMD_ARG_OTHER = 0,    /* int, float, bool, string, list of ints ... */
    CSPMD_ARG_TENSOR,       /* a defined tensor                            */
    CSPMD_ARG_TENSOR_LIST,  /* Tensor[] or Tensor?[]                       */
    CSPMD_ARG_SCALAR,       /* a schema `Scalar`                           */
    CSPMD_ARG_NONE          /* an undefined optional                       */
} cspmd_arg_kind_t;

/* One tensor found among the arguments (or results). */
typedef struct cspmd_tensor_ref {
    cspmd_tensor_t *tensor;
    cspmd_type_t type;      /* its stored type id (UNTYPED if none)        */
    uint16_t arg;           /* schema argument (or result) index           */
    uint8_t number;         /* it stands for a plain number: CSPMD_NUMBER
                               (a wrapped number, or a tensor the kernel
                               marked), CSPMD_NUMBER_ZERO (known zero), 0 */
    uint8_t written;        /* the schema marks the argument as written    */
    uint8_t out;            /* written and keyword-only: an out= tensor    */
    uint8_t requires_grad;
    uint8_t base_requires_grad; /* the base (below) requires grad          */
    uint8_t data;           /* it carries CSPMD_MARK_DATA                  */
    int32_t elem;           /* position in its list argument (None
                               entries counted), -1 for a plain tensor    */
    cspmd_tensor_t *base;   /* the tensor this one views (its root base),
                               NULL if not a view (arguments only)        */
} cspmd_tensor_ref_t;

/* The tensors of a call's arguments (or results).  Up to
 * CSPMD_ARGS_INLINE refs live inside the struct (the hot path allocates
 * nothing); past that the shim grows a heap array, so every tensor of an
 * op of any arity is seen.  Release with cspmd_args_release. */
#define CSPMD_ARGS_INLINE 64
typedef struct cspmd_args {
    int nargs;                  /* schema arguments                          */
    int grad_enabled;           /* gradients flow: grad mode is on, or the
                                   autograd engine runs a backward           */
    uint64_t scalar_args;       /* bit i: argument i is a Scalar or a list of
                                   Scalars (i < 64)                          */
    uint64_t zero_scalars;      /* bit i: argument i is a Scalar equal to 0  */
    int ntensors;               /* tensors found, in argument order          */
    int cap;                    /* capacity of tensors                       */
    cspmd_tensor_ref_t *tensors; /* inline_refs, or a heap array            */
    cspmd_tensor_ref_t inline_refs[CSPMD_ARGS_INLINE];
} cspmd_args_t;

/* Read the call's arguments (allocation-free up to CSPMD_ARGS_INLINE
 * tensors).  Errors: PENDING, NOMEM.  Always release args afterwards. */
cspmd_status_t cspmd_call_args(const cspmd_call_t *call, cspmd_args_t *args);
/* Free what cspmd_call_args / cspmd_call_results grew (idempotent). */
void cspmd_args_release(cspmd_args_t *args);
/* Run the real kernel with cspmd's key off (nested ops are not checked). */
cspmd_status_t cspmd_call_redispatch(cspmd_call_t *call);
/* After redispatch: the tensors among the results, in result order
 * (release as for cspmd_call_args). */
cspmd_status_t cspmd_call_results(const cspmd_call_t *call, cspmd_args_t *results);

/* For a dtype cast (cspmd_rule_casts: _to_copy, to, copy_): the schema
 * index of the argument it casts (*source) and the kinds of values it
 * casts from and to; returns 0 where they cannot be read (no target dtype:
 * a device move). */
int cspmd_call_cast(const cspmd_call_t *call, int *source, cspmd_value_kind_t *from,
                    cspmd_value_kind_t *to);

/* The c10d group of the call (a `group_name` string or a ProcessGroup
 * argument) into buf; returns the buffer size the whole name needs (its
 * length + 1: larger than len means buf holds a cut name, ask again with
 * that much), or 0 if the op names no group. */
int cspmd_call_group_name(const cspmd_call_t *call, char *buf, size_t len);
/* The call's reduce op (its `reduce_op` or `reduceOp` argument: a string,
 * or c10d's ReduceOp, written as its lower-case name) into buf; returns 1,
 * or 0 if the op takes none or it cannot be read. */
int cspmd_call_reduce_op(const cspmd_call_t *call, char *buf, size_t len);

/* The schema's argument count, and whether argument i is a Tensor,
 * Tensor?, Tensor[] or Tensor?[] (0 if out of range): the op rules bind
 * their argument names against these at the operator's first call. */
int cspmd_call_nargs(const cspmd_call_t *call);
int cspmd_call_arg_is_tensor(const cspmd_call_t *call, int i);
/* Schema argument name (for error context; the op rules' binding); "" if
 * out of range.  Valid for the life of the operator. */
const char *cspmd_call_arg_name(const cspmd_call_t *call, int i);
/* Render argument i as text for error context ("f32[8, 16]" for a tensor
 * is done by the caller; this renders non-tensors: "3", "[0, 1]", "None").
 * Returns the length needed. */
size_t cspmd_call_arg_text(const cspmd_call_t *call, int i, char *buf, size_t len);

/* Global mode's fallback (fallback.cpp): DTensor's own propagation of the
 * call's op on one mesh axis of the given size, with in[i] the placement
 * of the call's i-th tensor operand in argument order (nin of them); sets
 * out[r] / ndim[r] for each of nout results and returns CSPMD_OK, or
 * writes why and returns CSPMD_SHARD_NO_STRATEGY. */
int cspmd_call_dtensor_placements(const cspmd_call_t *call, const int8_t *in, int nin,
                                  int64_t size, int8_t *out, int8_t *ndim, int nout, char *why,
                                  size_t whylen);

/* How many results the operator's schema returns. */
int cspmd_call_nreturns(const cspmd_call_t *call);
/* Argument i as integers into v (cap long): the count for an int or bool
 * (1) or an int list (its length; only cap written), -2 for None, -1 for
 * anything else (also a symbolic integer). */
int cspmd_call_arg_ints(const cspmd_call_t *call, int i, int64_t *v, int cap);

/* ---- tensors -------------------------------------------------------- */

cspmd_type_t cspmd_tensor_get_type(const cspmd_tensor_t *t);
/* Store a type id (UNTYPED removes it).  Allocation-free after the first
 * use of each id, except torch's own ExtraMeta on a fresh tensor. */
cspmd_status_t cspmd_tensor_set_type(cspmd_tensor_t *t, cspmd_type_t type);
/* Store a type id with a mark: a number mark (cspmd_rule_result_number's
 * answer: later ops read the tensor as that number, cspmd_tensor_ref_t.number)
 * or CSPMD_MARK_DATA (cspmd_rule_result_data: cspmd_tensor_ref_t.data);
 * 0 for none.  cspmd_tensor_set_type drops the mark. */
#define CSPMD_MARK_DATA 3
cspmd_status_t cspmd_tensor_set_marked_type(cspmd_tensor_t *t, cspmd_type_t type, int mark);
/* 1 if the tensor carries CSPMD_MARK_DATA. */
int cspmd_tensor_is_data(const cspmd_tensor_t *t);
int64_t cspmd_tensor_dim(const cspmd_tensor_t *t);
/* 1 if every element is zero (runs an op with the key off; error path
 * only), 0 otherwise or for a tensor without data (meta). */
int cspmd_tensor_is_zero(cspmd_tensor_t *t);
/* The extent of dim d, -1 if it is not one number (symbolic, ragged). */
int64_t cspmd_tensor_size(const cspmd_tensor_t *t, int64_t d);
/* The extents of dims 0..n-1 into sizes (each as cspmd_tensor_size), in
 * one call; n at most the tensor's dims. */
void cspmd_tensor_sizes(const cspmd_tensor_t *t, int64_t *sizes, int64_t n);
/* "f32", "bf16", "i64", ... */
const char *cspmd_tensor_dtype_abbrev(const cspmd_tensor_t *t);

/* ---- the user's source line ----------------------------------------- */

/* "file.py:12" of the innermost Python frame outside torch and cspmd, or
 * "" when Python is not running this thread.  Error path only. */
size_t cspmd_python_user_frame(char *buf, size_t len);

/* End the current error's context (cspmd_error_context_end) with what only
 * the shim sees: the autograd node being run and its forward op's line
 * (cspmd_autograd_node), and the user's line (cspmd_python_user_frame).
 * Returns status.  Error path only. */
cspmd_status_t cspmd_error_context_finish(cspmd_status_t status);


/* ---- tracing -------------------------------------------------------- */

/* Whether op tracing is on (process-wide; one relaxed load). */
int cspmd_trace_enabled(void);
void cspmd_trace_set(int on);
/* Emit one trace line to Python's logger "cspmd.runtime.trace" at INFO
 * (takes the GIL); dropped when Python is not running. */
void cspmd_trace_emit(const char *line);

/* ---- the autograd node being run (error path only) ------------------ */

/* If the autograd engine is running a node on this thread: its name
 * ("MmBackward0") in name, and -- when anomaly mode recorded it -- the
 * forward op's user source line ("file.py:12") in where; returns 1.
 * Returns 0 outside backward. */
int cspmd_autograd_node(char *name, size_t name_len, char *where, size_t where_len);

/* ---- register_no_typecheck ------------------------------------------ */

/* 1 if unchecked code is active on this thread: a code object registered
 * with the core (cspmd_unchecked_code_add) on its Python stack (takes the
 * GIL), or the autograd node being run is the backward of an op run there.
 * Call only when cspmd_unchecked_code_armed(). */
int cspmd_in_unchecked_code(void);
/* Run the call unchecked: redispatch with the key off, results untyped;
 * the autograd node the op records is marked so that its backward runs
 * unchecked, returning gradients typed by cspmd_unchecked_grad_type. */
cspmd_status_t cspmd_call_run_unchecked(cspmd_call_t *call);

/* ---- tensor ops for the collectives --------------------------------- */
/* Results are owned references: release each with cspmd_tensor_release.
 * The caller runs them with cspmd's key off.  dtype codes are torch's
 * ScalarType values; -1 means "unchanged". */

void cspmd_tensor_release(cspmd_tensor_t *t);
cspmd_tensor_t *cspmd_tensor_retain(cspmd_tensor_t *t);
int cspmd_tensor_dtype(const cspmd_tensor_t *t);
/* Floating-point bits of a dtype (64, 32, 16; 0 for non-float). */
int cspmd_dtype_float_bits(int dtype);

cspmd_status_t cspmd_op_alias(cspmd_tensor_t *x, cspmd_tensor_t **out);
cspmd_status_t cspmd_op_clone(cspmd_tensor_t *x, cspmd_tensor_t **out);
cspmd_status_t cspmd_op_contiguous(cspmd_tensor_t *x, cspmd_tensor_t **out);
cspmd_status_t cspmd_op_to_dtype(cspmd_tensor_t *x, int dtype, cspmd_tensor_t **out);
/* Contiguous copies of a slice. */
cspmd_status_t cspmd_op_select(cspmd_tensor_t *x, int64_t dim, int64_t index, cspmd_tensor_t **out);
cspmd_status_t cspmd_op_narrow(cspmd_tensor_t *x, int64_t dim, int64_t start, int64_t length,
                               cspmd_tensor_t **out);
/* Views. */
cspmd_status_t cspmd_op_movedim(cspmd_tensor_t *x, int64_t from, int64_t to, cspmd_tensor_t **out);
cspmd_status_t cspmd_op_unsqueeze(cspmd_tensor_t *x, int64_t dim, cspmd_tensor_t **out);
cspmd_status_t cspmd_op_cat(cspmd_tensor_t *const *xs, int n, int64_t dim, cspmd_tensor_t **out);
/* Zeros like x, with `extent` on dim (extent < 0: x's shape); with
 * new_dim != 0 a new dim of size `extent` is inserted at dim instead. */
cspmd_status_t cspmd_op_zeros(cspmd_tensor_t *x, int64_t dim, int64_t extent, int new_dim,
                              cspmd_tensor_t **out);
/* dst.narrow(dim, start, src.size(dim)).copy_(src) (dst written in place). */
cspmd_status_t cspmd_op_copy_into(cspmd_tensor_t *dst, int64_t dim, int64_t start,
                                  cspmd_tensor_t *src);

/* ---- LocalTensorMode: one tensor per simulated rank ------------------ */
/* A LocalTensor (torch.distributed._local_tensor) holds every simulated
 * rank's tensor.  Ops on it run per rank below cspmd's key; the steps of a
 * collective that depend on the rank are run here once per rank. */
typedef struct cspmd_local cspmd_local_t;

/* If x is a LocalTensor: *out holds its per-rank tensors, each with its
 * rank's index in `group`; otherwise *out is NULL.  Free with
 * cspmd_local_free.  Errors: PENDING (a rank outside the group's layout). */
cspmd_status_t cspmd_local_split(cspmd_tensor_t *x, const char *group, cspmd_local_t **out);
int cspmd_local_count(const cspmd_local_t *l);
/* Rank i's tensor (borrowed) and, in *group_rank, its index in the group. */
cspmd_tensor_t *cspmd_local_get(const cspmd_local_t *l, int i, int64_t *group_rank);
/* Replace rank i's tensor with t (an owned reference, taken over). */
void cspmd_local_put(cspmd_local_t *l, int i, cspmd_tensor_t *t);
/* A new LocalTensor of the per-rank tensors; *out is an owned reference. */
cspmd_status_t cspmd_local_join(cspmd_local_t *l, cspmd_tensor_t **out);
void cspmd_local_free(cspmd_local_t *l);

/* ---- c10d functional collectives (by group name), waited on ----------- */

cspmd_status_t cspmd_group_info(const char *group, int64_t *rank, int64_t *size);
cspmd_status_t cspmd_c10d_all_reduce(cspmd_tensor_t *x, const char *group, int inplace,
                                     cspmd_tensor_t **out);
/* Gathered / scattered along dim 0 (x contiguous). */
cspmd_status_t cspmd_c10d_all_gather(cspmd_tensor_t *x, const char *group, int64_t size,
                                     cspmd_tensor_t **out);
cspmd_status_t cspmd_c10d_reduce_scatter(cspmd_tensor_t *x, const char *group, int64_t size,
                                         cspmd_tensor_t **out);
cspmd_status_t cspmd_c10d_all_to_all(cspmd_tensor_t *x, const int64_t *out_sizes,
                                     const int64_t *in_sizes, int n, const char *group,
                                     cspmd_tensor_t **out);
/* root's x on every rank of the group (root: the rank's index in the
 * group; x contiguous, not written). */
cspmd_status_t cspmd_c10d_broadcast(cspmd_tensor_t *x, const char *group, int64_t root,
                                    cspmd_tensor_t **out);
/* The sum of every rank's x on root, into a new tensor; what the other
 * ranks get back is unspecified (backends differ: Gloo leaves the sum). */
cspmd_status_t cspmd_c10d_reduce(cspmd_tensor_t *x, const char *group, int64_t root,
                                 cspmd_tensor_t **out);

#ifdef __cplusplus
}
#endif

#endif /* CSPMD_SHIM_H */
