/*
 * cspmd.h -- the public C API of cspmd's core.
 *
 * The core does all type reasoning for local SPMD types: mesh axes, interned
 * type values, the per-thread checker state (current mesh stack, strictness),
 * the op rule table and per-axis inference, assert_type refinement,
 * mutation checks, and the collectives' (src, dst) tables.  It links no torch
 * symbol and allocates nothing on the hot path (cspmd_infer on a memo hit).
 *
 * Conventions
 *   - Every fallible call returns cspmd_status_t (CSPMD_OK == 0, errors < 0)
 *     and, on error, leaves a message in a per-thread buffer read with
 *     cspmd_last_error().  No call aborts, longjmps or throws on bad input.
 *   - Ids are small integers, interned: equal values <=> equal ids.  Ids are
 *     valid for the life of the process and may be shared between threads.
 *   - Unless said otherwise, functions are thread-safe; "per thread" state is
 *     the calling thread's own.
 */
#ifndef CSPMD_H
#define CSPMD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CSPMD_API __attribute__((visibility("default")))
#else
#define CSPMD_API
#endif

/* ===================================================================== */
/* Status codes and errors                                               */
/* ===================================================================== */

/* The one list of status codes: X(NAME, value, description).  It generates
 * the enum below, cspmd_status_name(), and the constants the Python front
 * reads from the library (cspmd._codes); nothing else spells a number. */
#define CSPMD_STATUS_LIST(X)                                                        \
    X(OK, 0, "success")                                                             \
    X(ERR_SPMD_TYPE, -1, "a typing error: Python SpmdTypeError")                    \
    X(ERR_VALUE, -2, "bad argument value: Python ValueError")                       \
    X(ERR_TYPE, -3, "bad argument kind: Python TypeError")                          \
    X(ERR_MISUSE, -4, "API misuse (bad id, NULL, stack underflow)")                 \
    X(ERR_NOMEM, -5, "allocation failed / a fixed table is full")                   \
    X(ERR_RUNTIME, -6, "Python RuntimeError (e.g. no current mesh)")                \
    X(ERR_REDISTRIBUTE, -7, "global mode: a collective on a non-innermost spec axis: "  \
                            "Python RedistributeError")                                 \
    X(ERR_PROPAGATION, -8, "global mode: a shard the op cannot carry: "                  \
                           "Python DTensorPropagationError")                            \
    X(ERR_PENDING, -100, "the shim holds a torch exception for its caller to rethrow")

typedef enum cspmd_status {
#define CSPMD_STATUS_ENUM_(name, value, doc) CSPMD_##name = value,
    CSPMD_STATUS_LIST(CSPMD_STATUS_ENUM_)
#undef CSPMD_STATUS_ENUM_
} cspmd_status_t;

/* "CSPMD_OK", "CSPMD_ERR_SPMD_TYPE", ...; "CSPMD_ERR_UNKNOWN" otherwise. */
CSPMD_API const char *cspmd_status_name(cspmd_status_t status);

/* The calling thread's last error message ("" if none).  The pointer stays
 * valid until the next failing cspmd call on this thread. */
CSPMD_API const char *cspmd_last_error(void);

/* Set the calling thread's error message (printf-style) and return status.
 * Used by the kernel and the shim to report through the same channel. */
CSPMD_API cspmd_status_t cspmd_error_set(cspmd_status_t status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ===================================================================== */
/* Local types                                                           */
/* ===================================================================== */

/* Per-axis local type: X(NAME, value, meaning).  CSPMD_LT_NONE means "no
 * type on this axis".  Generates the enum and the Python front's codes. */
#define CSPMD_LTYPE_LIST(X)                                                         \
    X(NONE, 0, "no type on this axis")                                              \
    X(R, 1, "Replicate")                                                            \
    X(I, 2, "Invariant")                                                            \
    X(V, 3, "Varying")                                                              \
    X(P, 4, "Partial")

typedef enum cspmd_ltype {
#define CSPMD_LTYPE_ENUM_(name, value, doc) CSPMD_LT_##name = value,
    CSPMD_LTYPE_LIST(CSPMD_LTYPE_ENUM_)
#undef CSPMD_LTYPE_ENUM_
} cspmd_ltype_t;

/* R<->P, I<->I, V<->V; NONE -> NONE. */
CSPMD_API cspmd_ltype_t cspmd_ltype_dual(cspmd_ltype_t t);
/* "R", "I", "V", "P" ("?" for NONE / invalid). */
CSPMD_API const char *cspmd_ltype_letter(cspmd_ltype_t t);

/* ===================================================================== */
/* Mesh axes                                                              */
/* ===================================================================== */

/* An interned, canonical (coalesced) layout.  0 is the trivial axis (every
 * size-1 layout canonicalizes to it). */
typedef uint32_t cspmd_axis_t;
#define CSPMD_AXIS_TRIVIAL ((cspmd_axis_t)0)
#define CSPMD_MAX_MODES 8 /* modes in one layout                 */
#define CSPMD_MAX_AXES 8  /* axes in one type / mesh / operation */

/* Intern the layout (sizes[k], strides[k]) given outermost-first; it is
 * canonicalized first (size-1 modes dropped, adjacent modes merged).
 * Errors: MISUSE (n outside 0..64, size < 1, stride < 0, a layout whose
 * size or largest rank overflows int64), VALUE (more than CSPMD_MAX_MODES
 * modes once merged), NOMEM (table full). */
CSPMD_API cspmd_status_t cspmd_axis_intern(const int64_t *sizes, const int64_t *strides,
                                           int n, cspmd_axis_t *out);

/* Build the layout of a sorted-or-not list of global ranks (recursive
 * algorithm, ranks shifted so the smallest is 0) and intern it.
 * Errors: VALUE (no ranks, or the ranks are not a layout). */
CSPMD_API cspmd_status_t cspmd_axis_from_ranks(const int64_t *ranks, int n, cspmd_axis_t *out);

/* The canonical layout: writes up to CSPMD_MAX_MODES modes, returns the
 * number of modes (0 for the trivial axis), -1 for an unknown id. */
CSPMD_API int cspmd_axis_layout(cspmd_axis_t axis, int64_t *sizes, int64_t *strides);
/* Product of the sizes (1 for trivial); 0 for an unknown id. */
CSPMD_API int64_t cspmd_axis_size(cspmd_axis_t axis);
/* The largest stride (0 for trivial): outermost-first ordering key. */
CSPMD_API int64_t cspmd_axis_max_stride(cspmd_axis_t axis);
/* Sort axes[0..n) outermost first -- max stride descending, then display
 * name, then id (unknown ids last): the one order of meshes, "{dp, tp}"
 * texts in messages, and the Python front's axis lists.  Error paths and
 * setup only (may take the names lock). */
CSPMD_API void cspmd_axes_sort_outer(cspmd_axis_t *axes, int n);
/* 1 if the ranks-from-zero of a are a subset of those of b, else 0 (also
 * 0 when undecided: see cspmd_axis_le_checked). */
CSPMD_API int cspmd_axis_le(cspmd_axis_t a, cspmd_axis_t b);
/* *out = cspmd_axis_le(a, b) when decided.  Errors: VALUE when deciding
 * takes more than 2^26 rank tests (axes of more than 2^26 ranks). */
CSPMD_API cspmd_status_t cspmd_axis_le_checked(cspmd_axis_t a, cspmd_axis_t b, int *out);
/* 1 if the axes' non-trivial modes are jointly radix separable, else 0
 * (0 also for an unknown id or n > CSPMD_MAX_AXES; 1 for n == 0). */
CSPMD_API int cspmd_axes_orthogonal(const cspmd_axis_t *axes, int n);
/* OK, or SPMD_TYPE with the orthogonality message (first non-orthogonal pair, or
 * the whole set when only jointly non-separable).  VALUE for more than
 * CSPMD_MAX_AXES axes, MISUSE for an unknown id. */
CSPMD_API cspmd_status_t cspmd_axes_check_orthogonal(const cspmd_axis_t *axes, int n);
/* Flatten.  Errors: VALUE (n < 1, not orthogonal, more than CSPMD_MAX_AXES). */
CSPMD_API cspmd_status_t cspmd_axes_flatten(const cspmd_axis_t *axes, int n, cspmd_axis_t *out);

/* Register a display name for an axis (the name registry, including
 * the `name[<layout>]` rewrite when one base name is registered for two
 * different axes).  Errors: MISUSE (bad id, empty name), NOMEM. */
CSPMD_API cspmd_status_t cspmd_axis_name_add(cspmd_axis_t axis, const char *name);
/* The display text of an axis (preferred name, "(trivial)" suffix,
 * "{dp,cp}" flattening of named axes, "MeshAxis(4:1)").  Pointer valid for
 * the life of the process (display texts are cached; re-derived when names
 * change).  With debug != 0, the debug form ("SP/TP{4:1}").  Lock-free
 * when cached.  An unknown id gives "MeshAxis(<unknown id>)". */
CSPMD_API const char *cspmd_axis_display(cspmd_axis_t axis, int debug);
/* Forget every registered name (between tests). */
CSPMD_API void cspmd_axis_names_reset(void);

/* ===================================================================== */
/* Type values                                                            */
/* ===================================================================== */

/* An interned type value: a set of (axis, local type) pairs over mutually
 * orthogonal non-trivial axes, plus an optional partition spec.
 * CSPMD_TYPE_UNTYPED (0) is "no type attribute" (absent); CSPMD_TYPE_EMPTY
 * (1) is "typed but unknown on every axis" ({}). */
typedef uint32_t cspmd_type_t;
#define CSPMD_TYPE_UNTYPED ((cspmd_type_t)0)
#define CSPMD_TYPE_EMPTY ((cspmd_type_t)1)

/* A partition spec: for each tensor dim, 0..CSPMD_MAX_AXES axes, major to
 * minor.  ndim == -1 means "no spec".
 *
 * split[d][i] > 1 makes entry[d][i] a *strided* shard: the part of dim d
 * that the axes before it leave is read as split[d][i] equal chunks, and
 * the axis shards each chunk (its rank holds its block of every chunk).
 * View merges make them: (b, h) sharded (dp, tp) merged into b * h puts
 * tp on the merged dim strided by h's outer extent, b's local size.  0 or
 * 1 is an ordinary shard, and no user-written spec has any; the ops that
 * only keep dims in place carry them, a view that splits the dim at the
 * chunk boundary turns them back into ordinary shards, everything else
 * refuses them. */
#define CSPMD_MAX_DIMS 16
typedef struct cspmd_spec {
    int8_t ndim;
    uint8_t nentry[CSPMD_MAX_DIMS];
    cspmd_axis_t entry[CSPMD_MAX_DIMS][CSPMD_MAX_AXES];
    uint32_t split[CSPMD_MAX_DIMS][CSPMD_MAX_AXES];
} cspmd_spec_t;

/* Intern a type from parallel arrays (order irrelevant; trivial axes are
 * dropped; duplicate or unknown axes are MISUSE; ltypes must be R/I/V/P,
 * else TYPE).  spec may be NULL.  Trivial axes leave the spec too.
 * Validates orthogonality (SPMD_TYPE) and that every spec axis is V
 * (SPMD_TYPE); spec axes absent from axes are added as V.  No axes and no spec gives CSPMD_TYPE_EMPTY. */
CSPMD_API cspmd_status_t cspmd_type_make(const cspmd_axis_t *axes, const cspmd_ltype_t *ltypes,
                                         int n, const cspmd_spec_t *spec, cspmd_type_t *out);
/* The partition spec that S(d) annotations describe: axes[i] shards tensor
 * dim dims[i] (negative counts from the end) of a tensor of ndim dims, laid
 * out by cspmd_shards_layout's annotation rule (by_order 0: a trivial axis
 * is skipped; one axis per dim, two axes on one dim need an explicit spec
 * to order them), with its SPMD_TYPE errors.  VALUE (ndim outside
 * 0..CSPMD_MAX_DIMS); MISUSE (NULL, n outside 0..CSPMD_MAX_AXES).
 * On error *out is untouched. */
CSPMD_API cspmd_status_t cspmd_spec_from_shards(const cspmd_axis_t *axes, const int32_t *dims,
                                                int n, int ndim, cspmd_spec_t *out);
/* Number of axes (0 for UNTYPED / EMPTY; -1 for an unknown id). */
CSPMD_API int cspmd_type_naxes(cspmd_type_t type);
/* The i-th (axis, ltype) pair in canonical order (sorted by display name,
 * then by id).  Errors: MISUSE. */
CSPMD_API cspmd_status_t cspmd_type_entry(cspmd_type_t type, int i, cspmd_axis_t *axis,
                                          cspmd_ltype_t *ltype);
/* The local type on one axis, CSPMD_LT_NONE if absent. */
CSPMD_API cspmd_ltype_t cspmd_type_get(cspmd_type_t type, cspmd_axis_t axis);
/* The spec (ndim == -1 when none).  Errors: MISUSE. */
CSPMD_API cspmd_status_t cspmd_type_spec(cspmd_type_t type, cspmd_spec_t *spec);
/* cspmd_type_spec for code that knows only ordinary shards: a spec with a
 * strided shard (split > 1) is SPMD_TYPE, naming what ("all_gather",
 * "get_partition_spec", ...) and the type; *spec is untouched then. */
CSPMD_API cspmd_status_t cspmd_type_spec_plain(cspmd_type_t type, const char *what,
                                               cspmd_spec_t *spec);
/* The same type without its spec (UNTYPED for an unknown id). */
CSPMD_API cspmd_type_t cspmd_type_local(cspmd_type_t type);
/* Per-axis dual (R<->P, I, V), spec dropped; UNTYPED -> UNTYPED (also for
 * an unknown id).  dual and local are lock-free after the first call. */
CSPMD_API cspmd_type_t cspmd_type_dual(cspmd_type_t type);
/* Replace (or add, when absent) one axis's local type; lt ==
 * CSPMD_LT_NONE removes the axis; a trivial axis leaves type unchanged.
 * A spec axis whose type stops being V leaves the spec.  Errors: MISUSE
 * (unknown id), TYPE (bad lt), SPMD_TYPE (not orthogonal). */
CSPMD_API cspmd_status_t cspmd_type_with(cspmd_type_t type, cspmd_axis_t axis, cspmd_ltype_t lt,
                                         cspmd_type_t *out);
/* "{dp: R, tp: P}" (letters, axes in canonical order; spec appended as
 * " PartitionSpec(tp, None)"; UNTYPED prints "{}").  Writes at most len
 * bytes, NUL-terminated when len > 0; returns the length that was needed
 * (snprintf-style, so buf may be NULL with len 0). */
CSPMD_API size_t cspmd_type_format(cspmd_type_t type, char *buf, size_t len);

/* assert_type refinement: existing V + new P becomes
 * P; other differences are SPMD_TYPE "SPMD type mismatch on axis X: tensor
 * has A, expected B"; axes are merged (orthogonality checked); specs are
 * refined per dim with the PartitionSpec conflict errors (an axis that
 * went V -> P leaves the spec).  existing may be UNTYPED (result: new);
 * next UNTYPED gives existing.  On error *out is untouched. */
CSPMD_API cspmd_status_t cspmd_type_refine(cspmd_type_t existing, cspmd_type_t next,
                                           cspmd_type_t *out);
/* cspmd_type_refine for what an autograd Function (register_autograd_function
 * with typecheck_forward) declares of an output its own forward computed:
 * where the computed type is R and the declared I, or the reverse, the
 * declared one is taken -- the two differ only in the gradient the output
 * takes, and the Function's backward is the one that takes it.  Every
 * other difference is refused as by cspmd_type_refine. */
CSPMD_API cspmd_status_t cspmd_type_refine_declared(cspmd_type_t existing, cspmd_type_t next,
                                                    cspmd_type_t *out);

/* mutate_type: for each i, axes[i] must carry src[i] (else
 * SPMD_TYPE "mutate_type: axis X not found ..." / "mutate_type: expected
 * current type A on axis X, got B") and is set to dst[i]; size-1 axes are
 * skipped.  All checked before any is changed.  An untyped type becomes {}
 * first.  The partition spec is kept for axes that stay V. */
CSPMD_API cspmd_status_t cspmd_type_mutate(cspmd_type_t type, const cspmd_axis_t *axes,
                                           const cspmd_ltype_t *src, const cspmd_ltype_t *dst,
                                           int n, cspmd_type_t *out);

/* reinterpret_no_grad: R <-> I on axis, for a tensor no gradient can
 * reach.  VALUE when requires_grad ("... requires tensor.requires_grad=False")
 * or dst is not R or I (dst_shard_dim >= 0 prints it as S(d)); a size-1 axis
 * leaves the type as it is; SPMD_TYPE when the type lacks the axis or holds
 * neither R nor I on it.  On error *out is untouched. */
CSPMD_API cspmd_status_t cspmd_type_reinterpret_no_grad(cspmd_type_t type, cspmd_axis_t axis,
                                                        cspmd_ltype_t dst, int32_t dst_shard_dim,
                                                        int requires_grad, cspmd_type_t *out);

/* The type of Scalar-Scalar arithmetic: the same axes on both
 * sides, per axis equal -> that type, {R, V} -> V; anything else is TYPE
 * (Python: NotImplemented, so a TypeError). */
CSPMD_API cspmd_status_t cspmd_type_merge_scalars(cspmd_type_t a, cspmd_type_t b,
                                                  cspmd_type_t *out);

/* In-place / out= validation: for every axis of inferred that
 * old also has, equal, or R->V / I->V when !requires_grad.  op names the op
 * in the message.  *out = inferred on success.  While the calling thread's
 * backward relaxation is on (cspmd_infer_backward_relax) and
 * !requires_grad -- a gradient accumulated in place by the autograd
 * engine -- R<->I is accepted and *out keeps old's letter on that axis,
 * and V->P is accepted (*out has P). */
CSPMD_API cspmd_status_t cspmd_type_check_mutation(const char *op, cspmd_type_t old,
                                                   cspmd_type_t inferred, int requires_grad,
                                                   cspmd_type_t *out);

/* A write of `written` data through a view of a tensor typed `base`
 * (`buf[:4] = v`, `out=` into a slice, `x.diagonal().add_(y)`): the base's
 * new type, the per-axis join -- equal stays, V with R or I gives V --
 * or SPMD_TYPE when the parts cannot share one type (P in part of an R
 * tensor, R next to I) or when the base requires grad and would change.
 * On an axis the base has no type on (an UNTYPED base has none), written
 * V makes it V, written P is SPMD_TYPE (the pending sum would be lost),
 * and R or I leave it untyped there.  An UNTYPED write leaves base as it
 * is.  op names the op.  The base's spec is dropped when it changes. */
CSPMD_API cspmd_status_t cspmd_type_join_view_write(const char *op, cspmd_type_t base,
                                                    cspmd_type_t written, int requires_grad,
                                                    cspmd_type_t *out);

/* The type a view reads as, given its own and its base's: the join when a
 * write through another view changed the base since it was taken; its own
 * type when the two are equal, the base is UNTYPED, or no join relates
 * them (an UNTYPED view of a base that became V reads as V there).
 * Sets no error (called on every op over a view). */
CSPMD_API cspmd_type_t cspmd_type_view_read(cspmd_type_t own, cspmd_type_t base);

/* ===================================================================== */
/* Types that move with values                                            */
/* ===================================================================== */

/* The type of a tensor `to` (to_ndim dims) that replaces a tensor typed
 * `from` holding the same values: a module's parameter moved to another
 * dtype or device, a deep copy, a parameter loaded from a state_dict.  An
 * untyped `to` takes `from` (its partition spec only if to_ndim matches);
 * an untyped `from` or an equal `to` keeps `to`.  Two different types are
 * SPMD_TYPE, the message starting with `what`.  Errors: MISUSE (unknown ids,
 * NULL out). */
CSPMD_API cspmd_status_t cspmd_type_carry(cspmd_type_t from, cspmd_type_t to, int to_ndim,
                                          const char *what, cspmd_type_t *out);

/* A type's stable text form, for saving with a tensor ("cspmd1:4:1=V|2:4=R",
 * spec appended after '#'): axes as rank layouts, so it reads back the same
 * in any process of the same world.  snprintf-style: writes at most len
 * bytes, NUL-terminated when len > 0, returns the length needed; "" for
 * UNTYPED or an unknown id. */
CSPMD_API size_t cspmd_type_encode(cspmd_type_t type, char *buf, size_t len);
/* Read a text form back (interning its axes and type).  Errors: VALUE
 * (not a saved type), SPMD_TYPE (axes not orthogonal), MISUSE (NULL). */
CSPMD_API cspmd_status_t cspmd_type_decode(const char *text, cspmd_type_t *out);

/* ===================================================================== */
/* Per-thread checker state                                               */
/* ===================================================================== */

/* Current mesh stack.  push interns the axis set (trivial axes dropped,
 * repeated axes collapsed, orthogonality checked: SPMD_TYPE; unknown ids:
 * MISUSE; more than CSPMD_MAX_AXES axes: VALUE), pop removes the top (MISUSE
 * if empty).  Depth is bounded (NOMEM past 64).  On error the stack is
 * unchanged. */
CSPMD_API cspmd_status_t cspmd_mesh_push(const cspmd_axis_t *axes, int n);
CSPMD_API cspmd_status_t cspmd_mesh_pop(void);
/* A mesh as one id: the axis set (as push takes it) and the local axes of
 * that entry (each in the set: else MISUSE), interned -- equal meshes get
 * equal ids, never 0.  Errors as push; NOMEM when the table is full.
 * Thread-safe; changes no thread's state. */
CSPMD_API cspmd_status_t cspmd_mesh_intern(const cspmd_axis_t *axes, int n,
                                           const cspmd_axis_t *local, int nlocal, uint32_t *id);
/* Make the calling thread's current mesh exactly id (its whole stack
 * becomes that one entry; 0: no mesh).  For a front that keeps its own
 * order-independent list of open regions and mirrors the innermost one
 * here.  Errors: MISUSE (unknown id; nothing changes). */
CSPMD_API cspmd_status_t cspmd_mesh_apply(uint32_t id);
/* The calling thread's current mesh id (0: none). */
CSPMD_API uint32_t cspmd_mesh_current_id(void);
/* The current mesh's axes, outermost first (sorted by max stride desc);
 * returns their count, -1 when no mesh is current. */
CSPMD_API int cspmd_mesh_current(cspmd_axis_t *axes /* CSPMD_MAX_AXES */);

/* Checker flags of the calling thread: enabled (typecheck() active and not
 * paused) and strict (1) / permissive (0).  Both default to 0 / 1.  A
 * thread that never set state or pushed a mesh (an autograd device thread
 * running a backward) reads the mesh and strictness last published by a
 * thread that checks (set here, or pushed/popped while enabled). */
CSPMD_API void cspmd_checker_set(int enabled, int strict);
CSPMD_API int cspmd_checker_enabled(void);
CSPMD_API int cspmd_checker_strict(void);

/* ===================================================================== */
/* Ops: rules and inference                                               */
/* ===================================================================== */

typedef int32_t cspmd_rule_t;

/* The rule for an aten-level op ("aten::add", "Tensor"; overload "" for
 * the default).  Unknown ops get the NONLINEAR rule.  Never fails; the
 * caller caches the result per operator. */
CSPMD_API cspmd_rule_t cspmd_rule_find(const char *name, const char *overload);

/* What the kernel must do with a rule's op. */
typedef enum cspmd_rule_kind {
    CSPMD_KIND_INFER = 0,    /* infer the output type from the operands     */
    CSPMD_KIND_PASSTHROUGH,  /* run unchecked, leave outputs untyped        */
    CSPMD_KIND_FACTORY,      /* deterministic factory: R on the mesh when no
                                operand, else inference                     */
    CSPMD_KIND_FILL,         /* in-place fill of self (zero_, fill_, copy_
                                of an untyped self): deterministic          */
    CSPMD_KIND_RANDOM_FILL,  /* in-place random fill (normal_, uniform_...) */
    CSPMD_KIND_FOREACH       /* list op (_foreach_*, fused optimizers): each
                                element i is inferred alone, from element i
                                of every list argument and the plain
                                arguments, with cspmd_infer_element         */
} cspmd_rule_kind_t;
CSPMD_API cspmd_rule_kind_t cspmd_rule_kind(cspmd_rule_t rule);

/* Whether a written tensor at schema argument (or result) index arg takes
 * the op's inferred type: 1 for every argument of every rule except the
 * fused optimizers' bookkeeping lists (state_steps), which keep theirs. */
CSPMD_API int cspmd_rule_takes_result(cspmd_rule_t rule, int arg);
/* "LINEAR", "MULTILINEAR", "NONLINEAR", ... (for tests and tracing). */
CSPMD_API const char *cspmd_rule_name(cspmd_rule_t rule);

/* One row of the op rule table, for tests that check the table against
 * torch's own schemas and metadata.  Bit i of a mask is schema argument i
 * of every overload the row covers, as bound by cspmd_rule_bind. */
typedef struct cspmd_rule_info {
    const char *name;         /* "aten::gather"; a trailing '*' matches every
                                 name with that prefix                       */
    const char *overload;     /* "" the default, "*" every overload without
                                 a row of its own                            */
    const char *linearity;    /* cspmd_rule_name()                           */
    cspmd_rule_kind_t kind;
    uint64_t operand_args;    /* args whose tensors are operands; 0 = all   */
    uint64_t coefficient_args; /* P here is an error (for a LINEAR rule the
                                  fixed coefficients: indices, masks)        */
    uint64_t scalar_args;     /* Scalar args counted as the weak scalar     */
    uint64_t zero_free_args;  /* ... except when the number is zero         */
    uint64_t result_args;     /* written args that take the result; 0 = all */
    int32_t product_a, product_b, sum_self; /* DECOMPOSED rules:
                                  LINEAR(MULTILINEAR(a, b), self); else -1   */
    int bound;                /* the masks are bound (cspmd_rule_bind); 0:
                                 the row names arguments, and no overload
                                 has bound them yet (the masks read 0)       */
} cspmd_rule_info_t;

/* Rows name their arguments by schema name.  Bind rule's names to one
 * overload's arguments (arg_names[0..n_args), arg_is_tensor[i] nonzero for a
 * Tensor, Tensor? or Tensor list argument), op naming that overload
 * ("aten::add.Tensor") for messages.  A FOREACH id binds its element rule
 * (against the list op's own schema).  The first overload bound fixes the
 * row's argument positions; every later one must agree: a name this
 * overload lacks, a name at another position, or an operand, result,
 * gradient or product name that is no tensor here is a defect of cspmd's
 * table, reported as RUNTIME naming the op, row, argument and position,
 * and changes nothing.  cspmd_infer refuses a row that names arguments
 * until it is bound (MISUSE).  Rows that name no argument need no binding.
 * Thread-safe; the kernel binds each operator at its first call.  Errors:
 * RUNTIME, MISUSE (unknown rule, NULL lists or names), NOMEM. */
CSPMD_API cspmd_status_t cspmd_rule_bind(cspmd_rule_t rule, const char *op,
                                         const char *const *arg_names,
                                         const uint8_t *arg_is_tensor, size_t n_args);
/* 1 if rule's positions are bound (or it names no argument), else 0. */
CSPMD_API int cspmd_rule_bound(cspmd_rule_t rule);

/* Rules are ids 0 .. cspmd_rule_count() - 1 (0 is the default for
 * unknown ops). */
CSPMD_API int cspmd_rule_count(void);
/* The row of rule (a FOREACH id gives its element rule's row, kind
 * FOREACH).  Errors: MISUSE for an unknown id or a NULL out. */
CSPMD_API cspmd_status_t cspmd_rule_info(cspmd_rule_t rule, cspmd_rule_info_t *out);

/* One operand of an op, in flattened operand order. */
typedef enum cspmd_operand_kind {
    CSPMD_OPERAND_TENSOR = 0,  /* a tensor (type may be UNTYPED)                */
    CSPMD_OPERAND_SCALAR = 1,  /* a plain number or wrapped-number tensor; weak
                                  scalar _S if at a declared position          */
    CSPMD_OPERAND_TYPED = 2    /* a typed scalar (cspmd.Scalar): its exact type */
} cspmd_operand_kind_t;

typedef struct cspmd_operand {
    cspmd_type_t type;  /* the tensor's type (ignored for SCALAR)        */
    uint16_t arg;       /* schema argument index it came from            */
    uint8_t kind;       /* cspmd_operand_kind_t                          */
    uint8_t flags;      /* CSPMD_OPERAND_NO_GRAD, _ZERO, _DATA, _TRUNCATED */
} cspmd_operand_t;

/* The operand cannot receive a gradient from this op (it does not require
 * grad, or grad mode is off; typed scalars never do).  R and I differ only
 * in the gradient they accept, so where I meets other types on an axis
 * such an R or I operand takes the flavour of the R/I operands that can
 * receive one (R if none can); messages still show its own type. */
#define CSPMD_OPERAND_NO_GRAD 0x1u
/* A SCALAR operand whose number is zero: rules that say so count it as no
 * operand (padding with 0 keeps P; padding with 1 does not). */
#define CSPMD_OPERAND_ZERO 0x2u
/* A TENSOR operand holding the user's data (cspmd_rule_result_data). */
#define CSPMD_OPERAND_DATA 0x4u
/* A TENSOR operand the op truncates (a cast of floating values to an
 * integer dtype, of other values to bool: cspmd_rule_casts): Partial on
 * any axis is an error, whatever the rule (the truncation of a sum is not
 * the sum of the truncations). */
#define CSPMD_OPERAND_TRUNCATED 0x8u

/* Whether the result of rule's op over ops[0..n) stands for a plain number
 * (aten::scalar_tensor of a number: torch builds where(c, x, 0)'s 0 so):
 * CSPMD_NUMBER, CSPMD_NUMBER_ZERO when that number is zero, or 0 (not a
 * number: another op, or a typed cspmd.Scalar among the operands).  The
 * kernel marks such a result, and passes it to later ops as a SCALAR
 * operand (flag CSPMD_OPERAND_ZERO for CSPMD_NUMBER_ZERO). */
#define CSPMD_NUMBER 1
#define CSPMD_NUMBER_ZERO 2
CSPMD_API int cspmd_rule_result_number(cspmd_rule_t rule, const cspmd_operand_t *ops, int n);

/* Whether rule's op is a dtype cast (_to_copy, to, copy_), LINEAR in its
 * source: then the kernel reads the kinds of values the call casts from
 * and to, and flags the source operand CSPMD_OPERAND_TRUNCATED where
 * cspmd_cast_truncates says so. */
CSPMD_API int cspmd_rule_casts(cspmd_rule_t rule);

/* The kind of values a dtype holds, as far as casts between them go. */
typedef enum cspmd_value_kind {
    CSPMD_VALUES_BOOL = 0,
    CSPMD_VALUES_INTEGER, /* signed or unsigned integers                   */
    CSPMD_VALUES_REAL,    /* floating point or complex                     */
    CSPMD_VALUES_OTHER    /* quantized, bits, ...: no cast rule            */
} cspmd_value_kind_t;
/* Whether a cast from one kind of values to another truncates: real values
 * to integers, anything but bool to bool.  A sum does not survive such a
 * cast (int(0.6) + int(0.6) != int(1.2)); every other cast keeps it. */
CSPMD_API int cspmd_cast_truncates(cspmd_value_kind_t from, cspmd_value_kind_t to);

/* Whether the result of rule's op over ops[0..n) is the user's data rather
 * than a value the program computed: 1 for an op that makes data from
 * numbers and shapes alone (zeros, ones, full, arange, randn, *_like,
 * torch.tensor's lift_fresh, empty), and for any other op (foreach ops
 * and number results aside) whose tensor operands are all data or
 * untyped, at least one data, with no typed Scalar; else 0.  Its type is
 * inferred as usual; the kernel marks it, passes it to later ops with the
 * flag CSPMD_OPERAND_DATA, and drops the mark when a type is written on
 * it (assert_type).  Only gradient seeding reads it: a gradient given to
 * backward() that is the user's data seeds as an untyped one
 * (cspmd_grad_seed). */
CSPMD_API int cspmd_rule_result_data(cspmd_rule_t rule, const cspmd_operand_t *ops, int n);

/* Infer the output local type for rule over ops[0..n).  Uses the calling
 * thread's current mesh and strictness.  On a type error returns
 * SPMD_TYPE with the message (including fix suggestions) but
 * without operator context (the kernel appends it).  Allocation-free and
 * lock-free on a memo hit. */
CSPMD_API cspmd_status_t cspmd_infer(cspmd_rule_t rule, const cspmd_operand_t *ops, int n,
                                     cspmd_type_t *out);

/* Element index of a FOREACH rule's op: infer it with the rule of the
 * single-tensor op (_foreach_add_ -> add_; the fused optimizers' own
 * per-parameter rule), over ops[0..n) = element index of every list
 * argument plus the plain arguments.  An error is the element rule's
 * message prefixed with the op and the index ("_foreach_add_: list
 * element [3]: ...").  MISUSE for a rule that is not FOREACH.  Lock- and
 * allocation-free on a memo hit, as cspmd_infer. */
CSPMD_API cspmd_status_t cspmd_infer_element(cspmd_rule_t rule, int64_t index,
                                             const cspmd_operand_t *ops, int n,
                                             cspmd_type_t *out);

/* Park typed scalars for the next op the kernel sees (cspmd.Scalar at a
 * position that takes a plain number, e.g. narrow's start): they become
 * TYPED operands of that op.  n == 0 clears.  Any number; per thread
 * (allocates past 8).  Errors: MISUSE (bad id), NOMEM. */
CSPMD_API cspmd_status_t cspmd_pending_scalars(const cspmd_type_t *types, int n);

/* How many typed scalars are parked on the calling thread. */
CSPMD_API int cspmd_pending_scalars_count(void);

/* Take the parked typed scalars (at most cap) as TYPED operands at no
 * declared position into ops, and clear them.  Returns how many were
 * written.  Per thread; the kernel calls it once per op. */
CSPMD_API int cspmd_pending_scalars_take(cspmd_operand_t *ops, int cap);

/* Backward relaxation: while on (per thread), a LINEAR op combining P and
 * V yields P -- gradient accumulation in backward adds a per-rank
 * contribution to a pending sum -- and cspmd_type_check_mutation accepts
 * the in-place accumulation (R<->I keeping the destination's letter,
 * V->P).  The kernel sets it only to retry an op the autograd engine runs
 * that failed on exactly that. */
CSPMD_API void cspmd_infer_backward_relax(int on);

/* The raw per-axis rule for tests: types[0..n) with
 * CSPMD_LT_NONE standing for the weak scalar _S.  linearity is one of
 * "LINEAR", "MULTILINEAR", "NONLINEAR".  axis names the axis in messages. */
CSPMD_API cspmd_status_t cspmd_infer_axis(const char *linearity, const cspmd_ltype_t *types,
                                          int n, cspmd_axis_t axis, cspmd_ltype_t *out);

/* ===================================================================== */
/* Collectives                                                            */
/* ===================================================================== */

/* Which calls of a collective whose src and dst agree change nothing
 * (cspmd_coll_noop), the last column of CSPMD_COLL_LIST. */
typedef enum cspmd_coll_noop_kind {
    CSPMD_NOOP_NEVER,     /* it communicates or retypes even between equal types */
    CSPMD_NOOP_EQUAL,     /* a conversion: any equal pair is the input itself
                           * (V and S(d) share V; two shards need one dim)      */
    CSPMD_NOOP_REPLICATED /* R -> R and I -> I only: the data is already the
                           * same on every rank (broadcast)                     */
} cspmd_coll_noop_kind_t;

/* The collectives and conversions, one row each: X(NAME, python name,
 * NOOP), NOOP naming a cspmd_coll_noop_kind_t without its CSPMD_NOOP_
 * prefix.  Generates the enum, cspmd_coll_name(), cspmd_coll_noop()'s
 * answer, and the Python front's codes (cspmd._codes.COLL, and
 * cspmd.collectives' no-op table).  The per-op rules that are code, not a
 * column (the (src, dst) table, backward, dims, the local computation), are
 * switches without a default: the compiler lists each one a new row needs. */
#define CSPMD_COLL_LIST(X)                                                          \
    X(ALL_REDUCE, "all_reduce", NEVER)                                              \
    X(ALL_GATHER, "all_gather", NEVER)                                              \
    X(REDUCE_SCATTER, "reduce_scatter", NEVER)                                      \
    X(ALL_TO_ALL, "all_to_all", NEVER)                                              \
    X(REINTERPRET, "reinterpret", EQUAL)                                            \
    X(CONVERT, "convert", EQUAL)                                                    \
    X(REDISTRIBUTE, "redistribute", EQUAL)                                          \
    X(INVARIANT_TO_REPLICATE, "invariant_to_replicate", NEVER)                      \
    X(BROADCAST, "broadcast", REPLICATED)

typedef enum cspmd_coll {
#define CSPMD_COLL_ENUM_(name, text, noop) CSPMD_COLL_##name,
    CSPMD_COLL_LIST(CSPMD_COLL_ENUM_)
#undef CSPMD_COLL_ENUM_
} cspmd_coll_t;

/* How many collectives the list has (not a cspmd_coll_t value, so switches
 * over cspmd_coll_t need no case for it). */
#define CSPMD_COLL_ONE_(name, text, noop) +1
enum { CSPMD_COLL_COUNT = 0 CSPMD_COLL_LIST(CSPMD_COLL_ONE_) };
#undef CSPMD_COLL_ONE_

/* "all_reduce", ...; "?" for a value outside the list. */
CSPMD_API const char *cspmd_coll_name(cspmd_coll_t op);

/* A per-axis collective type: a local type, or S(dim) when ltype == V and
 * shard_dim >= 0 (plain V has shard_dim == -1). */
typedef struct cspmd_ctype {
    cspmd_ltype_t ltype;
    int32_t shard_dim;
} cspmd_ctype_t;

/* Validate (src, dst) for a collective or conversion and the expert gate.
 * VALUE with the reference's message on a bad pair or a missing
 * expert_mode. */
CSPMD_API cspmd_status_t cspmd_coll_validate(cspmd_coll_t op, cspmd_ctype_t src,
                                             cspmd_ctype_t dst, int expert_mode);

/* What a call reports when the S(d) written for its src or dst is out of
 * range for an input of ndim dims (d outside -ndim..ndim-1).  src and dst
 * are given as written: a local type, whether it is a shard (then the type
 * is V) and the shard's dim (negative dims count from the end; ignored
 * when not a shard).  The reference resolves some arguments' shards before
 * it checks the (src, dst) pair and the others after: all_gather resolves
 * src first, reduce_scatter dst, all_to_all, convert and redistribute both;
 * all_reduce never does and reinterpret refuses every shard first.  So an
 * argument resolved first that is out of range is SPMD_TYPE "<op>: src=S(d)
 * is out of range for a tensor with n dims" (src before dst); else a bad
 * pair is cspmd_coll_validate's VALUE error (shards shown as written);
 * else the first argument out of range is that SPMD_TYPE error.  OK when
 * every shard is in range: the caller then resolves the dims and the
 * collective validates the pair as usual.  MISUSE for an unknown op, a
 * type outside R/I/V/P, a shard that is not V or ndim outside
 * 0..INT32_MAX.
 * Thread-safe, no state. */
CSPMD_API cspmd_status_t cspmd_coll_check_shard_range(cspmd_coll_t op, cspmd_ltype_t src,
                                                      int src_is_shard, int64_t src_dim,
                                                      cspmd_ltype_t dst, int dst_is_shard,
                                                      int64_t dst_dim, int64_t ndim,
                                                      int expert_mode);

/* The local type a collective reduces its src as: all_reduce and
 * reduce_scatter take src=V by first reinterpreting it as P (a call of its
 * own: reinterpret(V, P), then the reduction from P); every other (op,
 * src) is taken as it is (*as = src).  MISUSE for an unknown op, a src
 * outside R/I/V/P or NULL as.  Thread-safe, no state. */
CSPMD_API cspmd_status_t cspmd_coll_src_as(cspmd_coll_t op, cspmd_ltype_t src,
                                           cspmd_ltype_t *as);

/* The backward op of a forward (op, src, dst) pair:
 * writes the backward op and its (src, dst).  Compositions (reinterpret
 * I->V, I->P) report the first backward step of the reverse chain. */
CSPMD_API cspmd_status_t cspmd_coll_backward(cspmd_coll_t op, cspmd_ctype_t src,
                                             cspmd_ctype_t dst, cspmd_coll_t *bop,
                                             cspmd_ctype_t *bsrc, cspmd_ctype_t *bdst);

/* The checker rule of a collective: resolve axis against in (including
 * flattened sub-axes), check the input type is src (V accepted for P),
 * and set the resolved axes to dst.  fn names the op in messages. */
CSPMD_API cspmd_status_t cspmd_coll_infer(const char *fn, cspmd_axis_t axis, cspmd_ltype_t src,
                                          cspmd_ltype_t dst, cspmd_type_t in, cspmd_type_t *out);
/* cspmd_coll_infer for an input that cannot receive a gradient
 * (input_no_grad != 0: it does not require grad, or grad mode is off):
 * then an R input is also accepted where I is declared and an I input
 * where R is (they differ only in the gradient they accept). */
CSPMD_API cspmd_status_t cspmd_coll_infer_input(const char *fn, cspmd_axis_t axis,
                                                cspmd_ltype_t src, cspmd_ltype_t dst,
                                                cspmd_type_t in, int input_no_grad,
                                                cspmd_type_t *out);


/* The op that redistribute(src, dst) runs: REDISTRIBUTE itself
 * means "no-op: return the input".  Routed converts run in expert mode. */
CSPMD_API cspmd_status_t cspmd_coll_route(cspmd_ctype_t src, cspmd_ctype_t dst, cspmd_coll_t *op);

/* Resolve a collective's dims in place (-1 = not given): dim_a is
 * all_gather's gather_dim, reduce_scatter's scatter_dim, all_to_all's
 * split_dim, convert's shard dim; dim_b is all_to_all's concat_dim.  Shard
 * dims of src/dst win (a conflicting explicit dim is VALUE "conflict");
 * split sizes are checked against the pair (VALUE).  Shard dims must be
 * canonical (non-negative) already. */
CSPMD_API cspmd_status_t cspmd_coll_dims(cspmd_coll_t op, cspmd_ctype_t src, cspmd_ctype_t dst,
                                         int has_split_sizes, int64_t *dim_a, int64_t *dim_b);

/* broadcast's root: the source rank's index within the axis group (carried
 * as the call's dim_a; cspmd_coll_dims leaves it as given).  VALUE naming
 * the root and the group size unless 0 <= root < group_size.  Thread-safe,
 * no state. */
CSPMD_API cspmd_status_t cspmd_coll_root_check(int64_t root, int64_t group_size);

/* dtype options of one collective call.  dtypes are opaque codes
 * (-1 = not given); *_bits are their floating-point widths (0: not float). */
typedef struct cspmd_dtype_info {
    int in_dtype, in_bits;
    int op_dtype, op_bits;
    int out_dtype, out_bits;
    int needs_grad;            /* input requires grad and grad mode is on */
    int has_backward_op_dtype; /* backward_options names an op_dtype      */
} cspmd_dtype_info_t;

/* Resolve (op_dtype, out_dtype) and apply the reduced-precision rule:
 * VALUE when a backward that reduces would run below 32 bits without an
 * explicit backward op_dtype. */
CSPMD_API cspmd_status_t cspmd_coll_dtypes(cspmd_coll_t op, cspmd_ctype_t src, cspmd_ctype_t dst,
                                           const cspmd_dtype_info_t *d, int *op_dtype,
                                           int *out_dtype);


/* Whether a call changes nothing, by the NOOP column of CSPMD_COLL_LIST:
 * src and dst agree -- the same local type, and for two shards the same
 * dim (as written: S(-1) and S(1) differ) -- and the op's column admits
 * that type (EQUAL: any; REPLICATED: R and I), except a reinterpret with a
 * shard on either side, which cspmd_coll_validate refuses whatever the
 * other side.  The caller then returns the input once its type on the
 * axis is checked to be src. */
CSPMD_API int cspmd_coll_noop(cspmd_coll_t op, cspmd_ctype_t src, cspmd_ctype_t dst);

/* Whether a call runs as two autograd nodes, src -> *mid -> dst (each
 * checked and differentiated on its own), and through which type: 1 for
 * reinterpret I -> V and I -> P, through R (I -> R all-reduces the gradient
 * in backward, R -> V|P relabels it); 0 otherwise (*mid untouched).
 * Never fails; NULL mid is 0. */
CSPMD_API int cspmd_coll_split(cspmd_coll_t op, cspmd_ctype_t src, cspmd_ctype_t dst,
                               cspmd_ctype_t *mid);

/* Where the first node of a split call (cspmd_coll_split) takes its
 * backward reduction's dtype from: X(NAME, meaning).  Generates the enum
 * and the Python front's codes (cspmd._codes.DTSRC). */
#define CSPMD_DTYPE_SOURCE_LIST(X)                                                  \
    X(NONE, "not given: the gradient's own dtype decides")                          \
    X(BACKWARD, "the caller's backward op_dtype")                                   \
    X(OP, "the forward op_dtype")                                                   \
    X(INPUT, "the input's dtype")

typedef enum cspmd_dtype_source {
#define CSPMD_DTYPE_SOURCE_ENUM_(name, doc) CSPMD_DTYPE_FROM_##name,
    CSPMD_DTYPE_SOURCE_LIST(CSPMD_DTYPE_SOURCE_ENUM_)
#undef CSPMD_DTYPE_SOURCE_ENUM_
} cspmd_dtype_source_t;

/* The first node's gradient reduction has no reduction of its own in the
 * composed call, so it is told its dtype explicitly (and the
 * reduced-precision rule accepts it): the backward op_dtype if the caller
 * gave one; else, for a floating-point input, the forward op_dtype if
 * given, else the input's dtype; else none. */
CSPMD_API cspmd_dtype_source_t cspmd_coll_split_backward_dtype(int has_backward_op_dtype,
                                                               int input_is_float,
                                                               int has_op_dtype);

/* torch.chunk sizing of an extent n over ws ranks: piece s starts at
 * s * ceil(n / ws) and the last pieces are short (or empty).  Writes the
 * piece's offset and length.  VALUE when n < 0, ws < 1 or s outside
 * 0..ws-1. */
CSPMD_API cspmd_status_t cspmd_coll_chunk(int64_t n, int64_t ws, int64_t s, int64_t *off,
                                          int64_t *len);

/* One resolved collective call: the routed op, its (src, dst) and dims as
 * cspmd_coll_dims resolved them. */
typedef struct cspmd_coll_step {
    cspmd_coll_t op;
    cspmd_ctype_t src, dst;
    int64_t dim_a, dim_b;
} cspmd_coll_step_t;

/* What the backward of a forward call needs from the forward beyond its
 * step: the split sizes it must pass (given, swapped, or computed). */
typedef enum cspmd_coll_sizes {
    CSPMD_COLL_SIZES_SAME,    /* the forward's sizes_a, sizes_b as they are   */
    CSPMD_COLL_SIZES_SWAPPED, /* the forward's sizes_b as sizes_a and back    */
    CSPMD_COLL_SIZES_CHUNKS   /* sizes_a = the cspmd_coll_chunk pieces of the
                               * forward input's dst shard dim, no sizes_b   */
} cspmd_coll_sizes_t;

/* The backward call of a forward call: op and types from
 * cspmd_coll_backward, except that all_to_all reverses its exchange (split
 * on the forward's concat dim, concat on its split dim, typed S(forward
 * split) -> S(forward concat) so shard semantics are kept); a backward
 * with a shard on either side lets the shard dims decide (dims -1).
 * has_sizes: the forward was given split sizes; *sizes says which sizes
 * the backward takes (convert R|I -> S(d) without sizes split with
 * torch.chunk sizing, and its backward places each piece at its own
 * offset).  Errors as cspmd_coll_backward; MISUSE for NULL. */
CSPMD_API cspmd_status_t cspmd_coll_backward_step(const cspmd_coll_step_t *fwd, int has_sizes,
                                                  cspmd_coll_step_t *bwd,
                                                  cspmd_coll_sizes_t *sizes);

/* ===================================================================== */
/* Typing rules of spmd_typecheck hooks (cspmd.rules)                     */
/* ===================================================================== */

/* Label codes of a rules.einsum term besides letters (a letter is its
 * Unicode code point, >= 0): "..." and "_" (a dim that must not be
 * sharded). */
#define CSPMD_EINSUM_ELLIPSIS (-1)
#define CSPMD_EINSUM_OPAQUE (-2)

/* One operand of rules.einsum: its term's labels as written (at most one
 * ELLIPSIS, no letter twice: the front checks the syntax), its rank and
 * type, and its linear_in group (-1: the op is not declared linear in it;
 * operands with the same group id >= 0 are jointly linear). */
typedef struct cspmd_einsum_operand {
    const int32_t *labels;
    int32_t nlabels;
    int32_t ndim;
    cspmd_type_t type;
    int32_t linear_group;
} cspmd_einsum_operand_t;

/* The type of an einsum-shaped computation (rules.einsum): binds the
 * terms to the ranks ("..." must stand for the same number of dims
 * everywhere), reads each global axis' sharding of every label from the
 * operands' partition specs (all axes are global when no typecheck() is
 * on; local axes and local mode read no spec), checks that a label is
 * sharded alike wherever it appears, that an axis shards one label, that
 * "_" dims are unsharded and that an operand broadcast over a sharded
 * label is not V there; then infers per axis with the NONLINEAR op rule
 * (cspmd_infer), makes the output P on the axes of contracted sharded
 * labels and lets P operands through only inside one linear_in group with
 * every other operand R.  *out carries the output's spec (the axes of its
 * sharded labels) and *out_ndim its rank.  equation names the call in
 * messages.  Errors: SPMD_TYPE ("rules.einsum: '<eq>': ..."); VALUE (more
 * than 64 operands or CSPMD_MAX_DIMS dims per term); MISUSE (NULL, bad
 * label code, unknown type id).  On error *out is untouched. */
CSPMD_API cspmd_status_t cspmd_rules_einsum(const char *equation,
                                            const cspmd_einsum_operand_t *ops, int n,
                                            const int32_t *out_labels, int n_out,
                                            cspmd_type_t *out, int32_t *out_ndim);

/* The type of a type-only collective or local transition on one axis
 * (rules.all_reduce, all_gather, reduce_scatter, all_to_all, reinterpret,
 * convert) applied to a value typed in with ndim dims.  (src, dst) must be
 * a pair cspmd_coll_validate admits in expert mode (the rules state every
 * pair the type system has); negative shard dims count from the end of
 * the input.  The input must carry exactly src on axis (no implicit V ->
 * P; with no_grad != 0 R and I stand for each other), and for src S(i) be
 * sharded on dim i along axis in its spec.  The result has dst on axis,
 * the spec entry of axis moved (or dropped), one more leading dim for
 * all_gather from plain V (stack) and one fewer for reduce_scatter to
 * plain V (unbind).  A trivial axis only changes the rank.  The front
 * establishes src on an input that lacks the axis before calling.
 * Errors: SPMD_TYPE ("rules.<op>(<axis>, src=.., dst=..) ..."); MISUSE (an
 * op outside those six, unknown ids, NULL).  On error *out is untouched. */
CSPMD_API cspmd_status_t cspmd_rules_transition(cspmd_coll_t op, cspmd_axis_t axis,
                                                cspmd_ctype_t src, cspmd_ctype_t dst,
                                                cspmd_type_t in, int32_t ndim, int no_grad,
                                                cspmd_type_t *out, int32_t *out_ndim);

/* ===================================================================== */
/* Backward (cspmd's gradient duality)                                    */
/* ===================================================================== */

/* The loss check of backward() without an explicit gradient: every axis
 * of the loss must be I or P; an untyped loss is an error in strict mode.
 * SPMD_TYPE with the reference's messages. */
CSPMD_API cspmd_status_t cspmd_loss_check(cspmd_type_t loss);

/* Gradient duality: grad must carry, on every axis of fwd, the dual of
 * fwd's type (R->P, I->I, V->V, P->R), except that V is accepted where P is
 * due (then *out has P there: V -> P is a free reinterpretation).  A grad
 * lacking an axis is an error in strict mode.  `what` names the tensor in
 * the message.  *out: grad with those V axes set to P. */
CSPMD_API cspmd_status_t cspmd_grad_check(cspmd_type_t fwd, cspmd_type_t grad, const char *what,
                                          cspmd_type_t *out);

/* Global mode: the partition spec of a leaf's gradient.  The gradient of
 * each local entry of a leaf is the gradient of the global entry it holds,
 * so on every axis where the gradient is V (the dual of V) it is sharded as
 * the leaf is: *out is grad with fwd's spec entries for those axes.  A
 * gradient that already carries a spec must carry exactly that one, else
 * SPMD_TYPE naming `what` and both specs.  Errors: MISUSE (unknown ids). */
CSPMD_API cspmd_status_t cspmd_grad_spec(cspmd_type_t fwd, cspmd_type_t grad, const char *what,
                                         cspmd_type_t *out);

/* Global mode: the gradient reaching a sharded leaf.  A gradient with no
 * spec that is R on a global axis where fwd is sharded (V with a spec
 * entry) holds the same values on every rank: a replicated gradient
 * broadcast back to the leaf's local sizes (sum's backward), which is the
 * leaf's shard of the global gradient.  *out is grad with V on those axes
 * (cspmd_grad_spec then gives it the leaf's spec); otherwise grad.
 * Errors: MISUSE (unknown ids, NULL out). */
CSPMD_API cspmd_status_t cspmd_grad_global_shard(cspmd_type_t fwd, cspmd_type_t grad,
                                                 cspmd_type_t *out);

/* Gradient accumulation into a leaf's .grad: the gradient .grad already
 * holds (held, from earlier backward passes) must itself be a gradient of
 * the leaf's forward type fwd -- the dual per axis, V accepted where P is
 * due -- or adding this pass's gradient mixes, e.g., an already reduced (R)
 * .grad with a pending (P) one.  held UNTYPED (a buffer of an unchecked
 * backward) passes; held_is_zero != 0 passes (zeros are every type: a
 * .grad zeroed in place by zero_grad(set_to_none=False)).  what names the
 * leaf.  Errors: SPMD_TYPE; MISUSE (unknown ids). */
CSPMD_API cspmd_status_t cspmd_grad_accum_check(cspmd_type_t fwd, cspmd_type_t held,
                                                int held_is_zero, const char *what);

/* The starting gradient of one output of backward() / autograd.grad given
 * an explicit gradient (grad_tensors / grad_outputs / Tensor.backward's
 * gradient).  A grad that is the user's data (grad_is_data: made by a
 * factory inside the region, cspmd_rule_result_data) is taken as untyped:
 * its type says how its values were made, not which gradient it is.  An
 * untyped grad takes, per axis, the dual of out's type --
 * the type the implicit seed would have had (R->P, I->I, V->V, P->R); a
 * typed grad must carry that dual on every axis of out (V accepted where P
 * is due, then P there; a missing axis is filled with the dual in
 * permissive mode and in global mode, an error in local strict mode).  out UNTYPED: *seed =
 * grad.  out_what / grad_what name the output and its gradient in the
 * message ("tensors[0]", "grad_tensors[0]").  Errors: SPMD_TYPE naming both
 * and showing both types; MISUSE (unknown ids, NULL seed). */
CSPMD_API cspmd_status_t cspmd_grad_seed(cspmd_type_t out, cspmd_type_t grad,
                                         int grad_is_data, const char *out_what,
                                         const char *grad_what, cspmd_type_t *seed);

/* ===================================================================== */
/* Cross-mesh reinterpretation                                            */
/* ===================================================================== */

/* Reinterpret src onto another presentation of the same ranks.  Two
 * modes:
 *   - full:      dst_full is the destination type (its axes and local
 *                types; any spec on it is ignored); dst_axes must be
 *                NULL / n == 0;
 *   - axes only: dst_full == CSPMD_TYPE_UNTYPED and dst_axes[0..n) are the
 *                destination axes (trivial and repeated axes dropped; they
 *                must be mutually orthogonal); destination types are
 *                derived from src.
 * Shared axes keep their type; the remaining axes are matched group by
 * group (two-pointer walk, outermost first); src's partition spec is
 * remapped group by group.  When src has no axis outside the destination
 * *out == src (also its spec).  Interns the result (may take a lock; no
 * allocation beyond the intern tables).  Errors: SPMD_TYPE with the
 * reference's messages (src UNTYPED: "reinterpret_mesh requires a tensor
 * with an existing local SPMD type."); MISUSE (unknown ids, NULL out, both
 * modes at once); VALUE (a group that cannot be flattened).  On error *out
 * is untouched. */
CSPMD_API cspmd_status_t cspmd_type_reinterpret_mesh(cspmd_type_t src, cspmd_type_t dst_full,
                                                     const cspmd_axis_t *dst_axes, int n,
                                                     cspmd_type_t *out);

/* Automatic reinterpretation of operand arg_index onto the calling
 * thread's current mesh: the axes-only mode
 * with the mesh's axes as destination.  *out == t (allocation- and
 * lock-free) when there is no current mesh, t is UNTYPED / EMPTY, or every
 * axis of t is a mesh axis.  Errors: SPMD_TYPE "args[i] cannot be
 * auto-reinterpreted from {..} to the current mesh {..}. <reason>";
 * MISUSE (unknown id, NULL out).  On error *out == t. */
CSPMD_API cspmd_status_t cspmd_type_to_mesh(cspmd_type_t t, int arg_index, cspmd_type_t *out);

/* The cross-mesh advice of strict-mode missing-axis errors for
 * the distinct axis sets of types[0..n): the advice sentences joined by
 * " ", or "" when there is none (callers append "\n\nHint: " + text when
 * non-empty).  Writes at most len bytes, NUL-terminated when len > 0;
 * returns the length needed (snprintf-style).  Never fails; an error path:
 * it may allocate and take locks.  Leaves the calling thread's error
 * message as it found it. */
CSPMD_API size_t cspmd_cross_mesh_advice(const cspmd_type_t *types, int n, char *buf,
                                         size_t len);

/* Process-wide axis print option (Python's set_printoptions(debug=...),
 * MESH_AXIS_DEBUG=1): the error texts of this section show axes with
 * cspmd_axis_display(axis, cspmd_axis_print_debug()).  Default 0.
 * Thread-safe (atomic). */
CSPMD_API void cspmd_axis_print_debug_set(int debug);
CSPMD_API int cspmd_axis_print_debug(void);


/* ===================================================================== */
/* Global SPMD (typecheck(local=False))                                   */
/* ===================================================================== */

/* Per-thread checking mode: local (1, the default) or global (0).  In
 * global mode every Varying axis that is global must carry a partition
 * spec entry, and ops propagate specs with the shard rules below.  A
 * thread that never set state reads the mode last published by a checking
 * thread (as cspmd_checker_strict). */
CSPMD_API void cspmd_checker_set_local(int local);
CSPMD_API int cspmd_checker_local(void);

/* The local axes of the current mesh entry (an outermost prefix of the
 * mesh's axes, validated by the front): on them V needs no spec and no
 * shard propagation happens.  n == 0 clears.  Errors: MISUSE (no current
 * mesh, unknown axis, an axis outside the mesh, n > CSPMD_MAX_AXES). */
CSPMD_API cspmd_status_t cspmd_mesh_set_local_axes(const cspmd_axis_t *axes, int n);
/* The current mesh entry's local axes into axes (CSPMD_MAX_AXES long);
 * returns their count (0 without a mesh). */
CSPMD_API int cspmd_mesh_local_axes(cspmd_axis_t *axes);

/* Whether axis is typed globally now: 0 in local mode or on a local axis.
 * With local axes set, an axis outside the current mesh is SPMD_TYPE
 * ("Axis X is not in the current mesh, so its local/global typechecking
 * policy is undefined"). */
CSPMD_API cspmd_status_t cspmd_axis_is_global(cspmd_axis_t axis, int *global);

/* Global mode's operand check: on every global axis, V needs a partition
 * spec entry and a spec entry needs V.  SPMD_TYPE with the reference's
 * messages; UNTYPED and EMPTY pass. */
CSPMD_API cspmd_status_t cspmd_global_check_operand(cspmd_type_t type);

/* One mesh axis' placement of one tensor: Shard(d) for d >= 0, else: */
#define CSPMD_PLACE_REPLICATE (-1) /* R or I (same values on every rank)   */
#define CSPMD_PLACE_PARTIAL (-2)   /* P (a pending sum)                    */
#define CSPMD_PLACE_NONE (-3)      /* not a tensor result                  */

/* A shard rule: how shard dims flow through one aten op (the core's rule
 * table).  -1: the op has none, and global mode rejects it when an
 * operand is sharded on a global axis. */
typedef int32_t cspmd_shard_rule_t;
/* The rule of "aten::mm" / overload ("" for the default); -1 if none. */
CSPMD_API cspmd_shard_rule_t cspmd_shard_rule_find(const char *name, const char *overload);
/* The rule's family ("pointwise", "mm", ...; "none" for -1). */
CSPMD_API const char *cspmd_shard_rule_name(cspmd_shard_rule_t rule);

/* out_partial_axes, this thread: push a region declaring the global axes
 * (n >= 1, distinct) on which its ops' results may become Partial.  While
 * it is the innermost region, global inference of an op whose result it
 * promotes V -> P on an undeclared axis is SPMD_TYPE, and each declared
 * axis so derived is marked (in the enclosing regions too).  Errors: VALUE (n out of range, an axis twice,
 * local mode, a local axis), SPMD_TYPE (an axis outside the current mesh
 * while local axes are set), MISUSE (unknown axis), NOMEM. */
CSPMD_API cspmd_status_t cspmd_partial_decl_push(const cspmd_axis_t *axes, int n);
/* cspmd_partial_decl_push, and *id: the region's id (unique in the
 * process), for cspmd_partial_decl_end.  MISUSE if id is NULL. */
CSPMD_API cspmd_status_t cspmd_partial_decl_open(const cspmd_axis_t *axes, int n, int64_t *id);
/* End region id wherever it is among this thread's open regions (those
 * opened after it stay open, in order): SPMD_TYPE if one of its axes was
 * never derived Partial (the region ends anyway); MISUSE if no region of
 * this thread has that id (ended already, or opened on another thread). */
CSPMD_API cspmd_status_t cspmd_partial_decl_end(int64_t id);
/* End the innermost region (cspmd_partial_decl_end of it); MISUSE with
 * no region. */
CSPMD_API cspmd_status_t cspmd_partial_decl_pop(void);
/* How many regions are open on this thread. */
CSPMD_API int cspmd_partial_decl_depth(void);

/* register_no_typecheck: code exempted from checking.  Keys are opaque
 * pointers (the shim's Python code objects, kept alive by the front), kept
 * for the life of the process; adding one twice keeps one.  Errors: MISUSE
 * (NULL), NOMEM.  armed is 0 until the first key is added: one relaxed
 * load, what the kernel reads on every op.  has and count take no lock. */
CSPMD_API cspmd_status_t cspmd_unchecked_code_add(const void *code);
CSPMD_API int cspmd_unchecked_code_armed(void);
CSPMD_API int cspmd_unchecked_code_has(const void *code);
CSPMD_API int cspmd_unchecked_code_count(void);
/* Forget every key (tests: leave the process as it was found). */
CSPMD_API void cspmd_unchecked_code_clear(void);
/* An op run while unchecked code is active on its thread (a registered
 * code object on the Python stack, or the backward of an op run there) is
 * not checked: its results stay untyped and written tensors keep their
 * types, as under no_typecheck().  The gradient its backward returns for a
 * forward input of type `input` is typed as this says: the dual (UNTYPED
 * stays UNTYPED). */
CSPMD_API cspmd_type_t cspmd_unchecked_grad_type(cspmd_type_t input);

/* Global mode, this thread: while on, an operand that is R with no spec
 * on a shard axis whose rule finds no strategy is tried as sharded on
 * each of its dims (the first placement the rule accepts is taken): in
 * backward a replicated gradient broadcast back to a sharded input's
 * local sizes (sum's backward) holds that input's shard of the global
 * gradient.  The kernel sets it only to retry an op the autograd engine
 * runs.  Returns the previous setting. */
CSPMD_API int cspmd_global_backward_relax(int on);

#define CSPMD_GLOBAL_MAX_TENSORS 64
#define CSPMD_MAX_RESULTS 4

/* One tensor operand of an op call as the shard rules see it. */
typedef struct cspmd_gtensor {
    cspmd_type_t type;   /* its type (UNTYPED if none)                 */
    uint16_t arg;        /* schema argument it came from               */
    int8_t ndim;         /* dims (at most CSPMD_MAX_DIMS)              */
    uint8_t scalar;      /* a wrapped Python number (no placement)     */
    int64_t sizes[CSPMD_MAX_DIMS]; /* local sizes                      */
} cspmd_gtensor_t;

/* One schema argument as integers: an int or bool (n == 1), an int list
 * (n values, at most CSPMD_MAX_DIMS), None (n == CSPMD_GARG_NONE) or
 * anything else (n == CSPMD_GARG_OTHER). */
#define CSPMD_GARG_NONE (-2)
#define CSPMD_GARG_OTHER (-1)
typedef struct cspmd_garg {
    int32_t n;
    int64_t v[CSPMD_MAX_DIMS];
} cspmd_garg_t;

/* An op call for global inference.  tensors are the operands (out=
 * excluded) in argument order; args[i] is schema argument i. */
typedef struct cspmd_gcall {
    const char *name;    /* "aten::mm" (messages)                      */
    int ntensors;        /* at most CSPMD_GLOBAL_MAX_TENSORS           */
    const cspmd_gtensor_t *tensors;
    int nargs;
    const cspmd_garg_t *args;
    int nresults;        /* the schema's returns, at most CSPMD_MAX_RESULTS */
} cspmd_gcall_t;

/* Global inference of one op whose local type is local_out: checks every
 * operand (cspmd_global_check_operand), collects the shard axes (global
 * axes of local_out that some operand's spec names) in topological order
 * of the specs' multi-axis entries (an ordering conflict is SPMD_TYPE),
 * runs rule on each of them, checks each result's placement against the
 * local type, promotes V to P where the results are Partial (a sharded
 * contraction or reduction), and builds each result's spec (axes sharing
 * a result dim must be ordered by some operand's spec).  outs[r] is result
 * r's type.  With no shard axis every result takes local_out.  rule -1
 * with a shard axis is SPMD_TYPE ("global mode: no shard rule for ...").
 * Errors: SPMD_TYPE ("No valid sharding strategy for <op> on axis X: ..."
 * and the reshape errors), MISUSE (bad call). */
CSPMD_API cspmd_status_t cspmd_global_infer(cspmd_shard_rule_t rule, const cspmd_gcall_t *call,
                                            cspmd_type_t local_out, cspmd_type_t *outs);

/* Placements of an op's results on one axis supplied from outside the
 * core: global mode's fallback to DTensor's own propagation for an op with
 * no C rule.  Given each call tensor's placement (in) and the axis' size,
 * it sets out[r] and ndim[r] for each of the call's results and returns
 * CSPMD_OK; or writes why (NUL-terminated, at most whylen bytes) and
 * returns CSPMD_SHARD_NO_STRATEGY; or returns an error status it has set. */
#define CSPMD_SHARD_NO_STRATEGY 1
typedef int (*cspmd_shard_oracle_t)(void *ctx, const int8_t *in, int64_t size, int8_t *out,
                                    int8_t *ndim, char *why, size_t whylen);

/* cspmd_global_infer for an op with no C shard rule: the oracle supplies
 * each shard axis' placements, the core does the rest (operand check, axis
 * order, local/global correspondence, V -> P, specs). */
CSPMD_API cspmd_status_t cspmd_global_infer_oracle(const cspmd_gcall_t *call,
                                                   cspmd_shard_oracle_t oracle, void *ctx,
                                                   cspmd_type_t local_out, cspmd_type_t *outs);

/* Global mode's part of a collective (or conversion) over axis, after
 * cspmd_coll_infer typed the result local_out (out_ndim dims) from the
 * input type in.  In local mode *out = local_out.  In global mode the
 * input is checked (cspmd_global_check_operand); on a global axis an axis
 * not innermost in its multi-axis spec entry is ERR_REDISTRIBUTE, V without
 * a spec entry and an S(i) src that is not the input's shard are
 * SPMD_TYPE, and the result's spec is the input's with the axis removed
 * and, for dst S(j), added innermost on dim j; on a local axis the input's
 * spec is kept.  Axes resolving to both local and global axes are
 * SPMD_TYPE.  fn names the collective in messages. */
CSPMD_API cspmd_status_t cspmd_global_coll(const char *fn, cspmd_axis_t axis, cspmd_ctype_t src,
                                           cspmd_ctype_t dst, cspmd_type_t in,
                                           cspmd_type_t local_out, int out_ndim,
                                           cspmd_type_t *out);

/* One step of a spec-to-spec redistribution: the collective op on axis
 * from src to dst (S(d) is V with shard_dim d). */
typedef struct cspmd_redist_step {
    cspmd_coll_t op;
    cspmd_axis_t axis;
    cspmd_ctype_t src, dst;
} cspmd_redist_step_t;

/* Plan spmd.redistribute_spec: the collectives (all_gather, all_to_all,
 * reduce_scatter, all_reduce, convert(R|I, S), and the per-axis
 * redistribute for R/I/P changes and S -> P) that take a tensor of type cur and
 * local sizes sizes[0..ndim) to the type dst.  src is cur's local types
 * with the caller's src_partition_spec: it must equal cur (else
 * SPMD_TYPE).  dst gives the wanted spec and, per axis, R, I or P for the
 * axes it does not shard; an axis dst leaves out keeps R, I or P, and a
 * shard becomes R.  Each step is valid in global mode as it comes: shards
 * leave and join spec entries innermost.  Writes at most cap steps and
 * sets *nsteps to the plan's length (NOMEM when cap is too small: call
 * again with *nsteps).  At most 3 steps per axis.  Errors: SPMD_TYPE (an
 * untyped tensor, src differs from cur, an axis dst names that the tensor
 * lacks, a local axis that would change), VALUE (dims disagree, a shard
 * that does not divide a local size evenly), MISUSE. */
CSPMD_API cspmd_status_t cspmd_redistribute_plan(cspmd_type_t cur, cspmd_type_t src,
                                                 cspmd_type_t dst, const int64_t *sizes,
                                                 int ndim, cspmd_redist_step_t *steps, int cap,
                                                 int *nsteps);

/* The type that redistribute_spec's src_partition_spec claims for a tensor
 * of type cur: cur's local types with every axis of spec V (an axis cur
 * lacks is added as V), and that spec (encoded [ndim, n0, axes..., n1,
 * ...]; n == 0: no spec).  cspmd_redistribute_plan then requires it to
 * equal cur.  Errors: SPMD_TYPE (cur untyped, as the planner words it, or
 * a spec cspmd_type_make refuses), VALUE (more than CSPMD_MAX_DIMS dims),
 * MISUSE (a malformed encoding).  On error *out is untouched. */
CSPMD_API cspmd_status_t cspmd_redistribute_src(cspmd_type_t cur, const int64_t *spec, int n,
                                                cspmd_type_t *out);

/* ===================================================================== */
/* Raw torch.distributed collectives                                      */
/* ===================================================================== */

/* Bind a c10d process group name to its mesh axis (done when the Python
 * front first sees the group).  display (NULL or "" for none; copied) is
 * the group's description, which cspmd_group_axis registers as the axis's
 * display name.  Rebinding a name replaces both.  The table grows: any
 * number of groups, names of any length.  Errors: MISUSE (empty name or
 * unknown axis), NOMEM (no memory for the table or the copies). */
CSPMD_API cspmd_status_t cspmd_group_bind(const char *name, cspmd_axis_t axis,
                                          const char *display);
/* 1 and *axis if the name is bound, else 0.  A use of the group: its
 * description, if bound, becomes a display name of *axis
 * (cspmd_axis_name_add), as a raw collective on the group names it. */
CSPMD_API int cspmd_group_axis(const char *name, cspmd_axis_t *axis);

typedef enum cspmd_raw_effect {
    CSPMD_RAW_CHECK = 0,     /* check input (and pre-annotated outputs) only */
    CSPMD_RAW_SET_INPUT,     /* in place: the input's axis becomes dst       */
    CSPMD_RAW_SET_RESULT,    /* a new result typed input-with-dst            */
    CSPMD_RAW_PASS,          /* not a data collective (barrier)              */
    CSPMD_RAW_UNSUPPORTED    /* typing not implemented: an error             */
} cspmd_raw_effect_t;

/* One raw collective op.  in_arg / out_arg: schema argument of the input
 * and pre-annotated output tensors (-1 none).  dst == -2: output R or I. */
typedef struct cspmd_raw_rule {
    const char *name; /* "c10d::allreduce_"            */
    const char *fn;   /* "all_reduce", for messages    */
    int in_arg, out_arg;
    int src, dst;
    cspmd_raw_effect_t effect;
    int out_is_list; /* outputs named "tensor_list[i]" in messages */
    int reduces;     /* takes a reduce op (its argument "reduce_op")  */
} cspmd_raw_rule_t;

CSPMD_API int cspmd_raw_rule_count(void);
CSPMD_API const cspmd_raw_rule_t *cspmd_raw_rule(int i);
/* The rule of an op name ("c10d::allreduce_"), NULL if none. */
CSPMD_API const cspmd_raw_rule_t *cspmd_raw_rule_find(const char *name);
/* 1 if the op takes the raw kernel on the checker's key: it has a raw
 * rule, or it is an op of torch.distributed's namespaces (c10d::,
 * _c10d_functional::, c10d_functional::, _c10d_functional_autograd::) that
 * the op table does not type either -- a collective cspmd cannot type. */
CSPMD_API int cspmd_raw_op_is_raw(const char *name);
/* The error for a raw op cspmd does not type (an UNSUPPORTED rule, or an
 * op with none); always returns CSPMD_ERR_SPMD_TYPE. */
CSPMD_API cspmd_status_t cspmd_raw_refuse(const char *name);
/* Check one input tensor's type on the group's axis (strictness from the
 * thread), and give the type it has afterwards (*out).  reduce_op: the
 * reduction's name as torch spells it ("sum", "MAX", ...; case ignored),
 * read for rules that reduce: a sum takes P, or V taken as summands (never
 * R or I, counted world-size times); avg takes P (the sum scaled) or values
 * (V, R, I); product, min, max, band, bor and bxor take values only, never
 * P.  The result is R (all_reduce) or V
 * (reduce_scatter) whatever the reduction. */
CSPMD_API cspmd_status_t cspmd_raw_check_input(const cspmd_raw_rule_t *r, const char *reduce_op,
                                               cspmd_axis_t axis, cspmd_type_t in,
                                               cspmd_type_t *out);
/* Check a pre-annotated output tensor (list_index >= 0 for list outputs). */
CSPMD_API cspmd_status_t cspmd_raw_check_output(const cspmd_raw_rule_t *r, cspmd_axis_t axis,
                                                cspmd_type_t out_type, int list_index);

/* ===================================================================== */
/* An error's context (error path only: allocates)                      */
/* ===================================================================== */

/*
 * The one place where an error's context is put together.  The kernel and
 * the shim describe the call that failed -- the op, each argument (its
 * tensors, or its text), the autograd node when it ran in backward, and
 * the user's line -- and the core keeps them as fields, next to the
 * message, until the next cspmd_error_set on this thread.  The context's
 * text is written here and nowhere else:
 *
 *     "  In aten::add.Tensor(\n    self: f32[2] {tp: P},\n    other: ...,\n  )"
 *     " under mesh {dp, tp}" "\n  during backward, in ..." "\n  at file.py:12"
 *
 * cspmd_last_error() then reads "<message>\n\n<context>"; the shim hands
 * the fields to Python one by one (SpmdTypeError.msg, .context, .op, ...),
 * so nothing parses the text back. */

/* The fields of an error: X(NAME, python attribute, meaning).  Absent
 * fields read as "". */
#define CSPMD_ERROR_FIELD_LIST(X)                                                          \
    X(MESSAGE, "msg", "the error itself, without its context")                             \
    X(CONTEXT, "context", "the failed call described, \"  In op(...)...\"")                \
    X(OP, "op", "the op's name, \"aten::add.Tensor\" or \"all_reduce\"")                   \
    X(HINT, "hint", "the fix the message suggests (its last lines), if any")               \
    X(NODE, "backward_node", "the autograd node the op ran in, in backward")               \
    X(FORWARD_SITE, "forward_site", "the forward op's line for that node (anomaly mode)")  \
    X(SITE, "site", "the user's line, \"file.py:12\" (in backward: where backward() ran)")

typedef enum cspmd_error_field {
#define CSPMD_ERROR_FIELD_ENUM_(name, attr, doc) CSPMD_ERROR_FIELD_##name,
    CSPMD_ERROR_FIELD_LIST(CSPMD_ERROR_FIELD_ENUM_)
#undef CSPMD_ERROR_FIELD_ENUM_
    CSPMD_ERROR_FIELD_COUNT
} cspmd_error_field_t;

/* Start describing the call that caused the current error: drops any
 * earlier context, keeps the message and its status. */
CSPMD_API void cspmd_error_context_begin(const char *op);
/* The next argument.  text: how a non-tensor argument reads; NULL when
 * tensors follow (cspmd_error_context_tensor). */
CSPMD_API void cspmd_error_context_arg(const char *name, const char *text);
/* A tensor of the current argument: elem its index in a list argument (-1
 * for a plain tensor), dtype ("f32"), sizes (-1: unknown, shown "?"), type.
 * The text shows the first 16 of an argument's tensors and counts the
 * rest; the fields keep them all. */
CSPMD_API void cspmd_error_context_tensor(int elem, const char *dtype, const int64_t *sizes,
                                          int ndim, cspmd_type_t type);
/* Finish: node and forward_site when the op ran in backward (NULL or ""
 * otherwise), site the user's line (NULL or "" when unknown).  Adds the
 * current mesh and writes the context text.  Returns status. */
CSPMD_API cspmd_status_t cspmd_error_context_end(cspmd_status_t status, const char *node,
                                                 const char *forward_site, const char *site);

/* A field of the calling thread's current error ("" when absent). */
CSPMD_API const char *cspmd_error_field(cspmd_error_field_t field);
/* The field's Python attribute name ("msg", "context", ...); NULL if out of range. */
CSPMD_API const char *cspmd_error_field_name(cspmd_error_field_t field);

/* One described tensor or argument of the current error's context. */
typedef struct cspmd_error_operand {
    const char *name;     /* the argument's name */
    int elem;             /* index in a list argument, -1 otherwise */
    const char *dtype;    /* "f32"; NULL for a non-tensor argument */
    const int64_t *sizes; /* ndim sizes (-1: unknown); NULL for a non-tensor */
    int ndim;
    cspmd_type_t type;    /* the tensor's type id (UNTYPED if none) */
    const char *text;     /* a non-tensor argument's text; NULL for a tensor */
} cspmd_error_operand_t;

/* How many operands the current error's context describes (0 if none). */
CSPMD_API int cspmd_error_operand_count(void);
/* Operand i into *out (pointers valid until the next error call on this
 * thread).  MISUSE for i out of range or NULL out, leaving the current
 * error as it is (no message is set). */
CSPMD_API cspmd_status_t cspmd_error_operand(int i, cspmd_error_operand_t *out);

/* ===================================================================== */
/* Annotations as written                                                 */
/* ===================================================================== */

/* An axis as an annotation names it, before a mesh resolves it: an axis id
 * (>= 0) for a MeshAxis, or a negative key for a name (interned here, so
 * that equal names give equal keys).  Keys written alike compare equal. */
typedef int64_t cspmd_axis_key_t;

/* The key of an axis name.  Thread-safe; the key stays valid for the life
 * of the process.  Errors: VALUE (empty name), MISUSE (NULL), NOMEM. */
CSPMD_API cspmd_status_t cspmd_axis_key_of_name(const char *name, cspmd_axis_key_t *out);

/* merge_types: the entries (keys[i], ltypes[i], shard_dims[i]) of several
 * partial types, in the order written, must agree on every key they share
 * (S(d) is V with shard_dims >= 0; -1 otherwise).  SPMD_TYPE "Conflicting
 * types on axis 'tp': R and V" for the first disagreement; MISUSE for a bad
 * local type code.  Changes nothing. */
CSPMD_API cspmd_status_t cspmd_annotation_merge_check(const cspmd_axis_key_t *keys,
                                                      const cspmd_ltype_t *ltypes,
                                                      const int32_t *shard_dims, int n);

/* SpmdType(local_type, partition_spec): with has_spec, no entry may be
 * S(d), and every axis of the spec (spec_keys[j] as written,
 * spec_resolved[j] the axis it names in the current mesh or -1) that the
 * local type also names (the same key, else the same resolved axis:
 * keys_resolved[i]) must be V there.  SPMD_TYPE naming the axis as written
 * and its type otherwise; MISUSE for a bad code. */
CSPMD_API cspmd_status_t cspmd_annotation_check_spec(int has_spec, const cspmd_axis_key_t *keys,
                                                     const cspmd_axis_key_t *keys_resolved,
                                                     const cspmd_ltype_t *ltypes,
                                                     const int32_t *shard_dims, int n,
                                                     const cspmd_axis_key_t *spec_keys,
                                                     const cspmd_axis_key_t *spec_resolved,
                                                     int nspec);

/* merge_types: the partition specs of several partial types must agree.
 * Each spec is encoded as [ndim, n0, axes..., n1, axes..., ...] (n_d axes
 * on dim d), the specs one after another: written holds the axes as
 * written (keys), resolved the same layout with the axis each key names
 * in the current mesh (-1 when none; CSPMD_AXIS_TRIVIAL is left out of
 * the comparison).  Specs agree when they are written alike or name the
 * same axes on every dim.  SPMD_TYPE "Conflicting PartitionSpecs: <texts>"
 * otherwise (texts: the specs as the caller shows them); MISUSE for a bad
 * encoding or NULL.  Changes nothing. */
CSPMD_API cspmd_status_t cspmd_annotation_specs_check(const cspmd_axis_key_t *written,
                                                      const cspmd_axis_key_t *resolved, int n,
                                                      const char *texts);

/* The partition spec that S(d) entries describe, as each entry's place:
 * entry i (keys[i] as written) shards tensor dim dims[i] (negative counts
 * from the end) of a tensor of ndim dims.  order lists entry indices
 * (-1: an axis with no S(d) entry, skipped; a repeat counts once): those
 * entries come first on their dim, in that order, then the others as
 * given.  Writes spec_dims[i] (the dim, 0..ndim-1) and spec_pos[i] (the
 * entry's position on it).  by_order selects the API's rule:
 *   1 (shard_types_to_partition_spec): an entry that order does not place
 *     on a dim already taken is SPMD_TYPE "Tensor dim d is sharded on
 *     multiple axes (a, b) but axis_order does not resolve their
 *     ordering. ..." (the axes placed so far); a dim out of range
 *     "S(d) is out of bounds for tensor with ndim=n";
 *   0 (an annotation): a trivial axis (key CSPMD_AXIS_TRIVIAL) is skipped
 *     (spec_dims[i] = spec_pos[i] = -1); after every range check ("S(d)
 *     is out of range for a tensor with n dims"), the first dim that
 *     several entries share is SPMD_TYPE "Tensor dim d is sharded on
 *     multiple axes (a, b). Use an explicit PartitionSpec to specify the
 *     axis ordering.".
 * Errors are met in placement order.  VALUE for ndim < 0; MISUSE for bad
 * counts or an order index outside -1..n-1.  On error nothing is written.
 * Thread-safe. */
CSPMD_API cspmd_status_t cspmd_shards_layout(const cspmd_axis_key_t *keys, const int32_t *dims,
                                             int32_t *spec_dims, int32_t *spec_pos, int n,
                                             const int32_t *order, int norder, int ndim,
                                             int by_order);

/* ===================================================================== */
/* DTensor placements                                                     */
/* ===================================================================== */

/* A DTensor placement by its kind: X(NAME, meaning).  Generates the enum
 * and the Python front's codes (cspmd._codes.PLACEMENT). */
#define CSPMD_PLACEMENT_LIST(X)                                                     \
    X(NONE, "no placement given")                                                   \
    X(REPLICATE, "Replicate()")                                                     \
    X(SHARD, "Shard(dim)")                                                          \
    X(PARTIAL, "Partial()")

typedef enum cspmd_placement {
#define CSPMD_PLACEMENT_ENUM_(name, doc) CSPMD_PLACEMENT_##name,
    CSPMD_PLACEMENT_LIST(CSPMD_PLACEMENT_ENUM_)
#undef CSPMD_PLACEMENT_ENUM_
} cspmd_placement_t;

/* The local type of a DTensor's local tensor on one mesh dim: Replicate is
 * R when grad_placement is PARTIAL (its gradient is a partial sum), else
 * I (grad_placement REPLICATE, SHARD or NONE: not given); Shard(d) is V
 * (S(d): the caller keeps d); Partial is P.  MISUSE for placement NONE
 * (or outside the list) or NULL.  Thread-safe, no state. */
CSPMD_API cspmd_status_t cspmd_placement_ltype(cspmd_placement_t placement,
                                               cspmd_placement_t grad_placement,
                                               cspmd_ltype_t *ltype);
/* The DTensor placement of a local type: R and I are Replicate, S(d) (V
 * with shard_dim >= 0) is Shard(d), P is Partial.  VALUE "Cannot convert
 * plain Varying to a DTensor placement. ..." for V without a dim; MISUSE
 * for NONE or NULL.  Thread-safe, no state. */
CSPMD_API cspmd_status_t cspmd_ltype_placement(cspmd_ltype_t ltype, int32_t shard_dim,
                                               cspmd_placement_t *placement);

/* ===================================================================== */
/* The functions the Python front calls                                   */
/* ===================================================================== */

/* One row per function of this header that Python calls directly, as
 * cspmd._lib.ops.<name> for cspmd_<name>.  The shim binds every row with
 * one marshaller (csrc/torch/core_calls.cpp) that reads each parameter by
 * its C type: an integer, id or enum from an int; const char * from a str;
 * a cspmd_ctype_t from a pair (local type, shard dim); a run of const T *
 * parameters followed by int n from one list each (n is their common
 * length); a non-const T * is an output, returned (inside a run, before its
 * int n: a list of n outputs).  A status result is raised as the Python
 * exception of its status; another result is returned ahead of the outputs.
 * A function whose parameters fit those rules needs only its row here. */
#define CSPMD_PY_CALL_LIST(X)                                                        \
    X(axis_intern) X(axis_from_ranks) X(axis_display) X(axis_le_checked)            \
    X(axis_name_add) X(axis_names_reset) X(axis_print_debug_set) X(axis_print_debug) \
    X(axes_orthogonal) X(axes_check_orthogonal) X(axes_flatten) X(axis_key_of_name) \
    X(type_refine) X(type_refine_declared) X(type_dual) X(ltype_dual)               \
    X(type_local) X(type_merge_scalars)                                             \
    X(type_mutate) X(type_reinterpret_no_grad) X(type_reinterpret_mesh)             \
    X(type_to_mesh) X(type_carry) X(loss_check) X(grad_check) X(grad_seed)          \
    X(pending_scalars) X(group_bind) X(mesh_intern) X(checker_set_local)            \
    X(partial_decl_push) X(partial_decl_pop) X(partial_decl_depth)                  \
    X(partial_decl_open) X(partial_decl_end)                                        \
    X(rule_count) X(rule_find) X(shard_rule_find) X(shard_rule_name)                \
    X(coll_noop) X(coll_validate) X(coll_check_shard_range) X(coll_split)           \
    X(coll_split_backward_dtype) X(coll_src_as) X(coll_root_check) X(rules_transition) \
    X(annotation_merge_check)                                                       \
    X(annotation_check_spec) X(annotation_specs_check) X(shards_layout)             \
    X(placement_ltype) X(ltype_placement) X(redistribute_src)                       \
    X(unchecked_code_clear) X(unchecked_code_count)

#ifdef __cplusplus
}
#endif

#endif /* CSPMD_H */
