/*
 * core.h -- internal helpers shared by the core's modules (not installed).
 *
 * Everything here is hidden (cspmdi_ prefix, hidden visibility).  All
 * functions are lock-free and allocation-free unless said otherwise, and
 * validate their id arguments (an unknown id gives -1 / 0, never a crash).
 */
#ifndef CSPMD_CORE_H
#define CSPMD_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "cspmd.h"
#include "table.h" /* CSPMDI_HIDDEN */

/* ---- axes (axis.c) ----------------------------------------------------- */

/* 1 if axis is a known id (0, the trivial axis, always is). */
CSPMDI_HIDDEN int cspmdi_axis_valid(cspmd_axis_t axis);

/* The one outermost-first order: max stride descending, then (by_name)
 * display name, then id; unknown ids last.  cspmd_axes_sort_outer is
 * by_name = 1.  by_name = 0 for callers that hold the names lock; they
 * sort orthogonal axes, whose max strides never tie. */
CSPMDI_HIDDEN void cspmdi_axes_sort(cspmd_axis_t *axes, int n, int by_name);

/* ---- types (type.c) ---------------------------------------------------- */

/* 1 if type is a known id (UNTYPED and EMPTY always are). */
CSPMDI_HIDDEN int cspmdi_type_valid(cspmd_type_t type);

/* Fast accessor: copies the type's pairs in *storage* order (axis id
 * ascending, NOT display order) into axes / ltypes (each CSPMD_MAX_AXES
 * long; either may be NULL) and returns their count: 0 for UNTYPED /
 * EMPTY, -1 for an unknown id. */
CSPMDI_HIDDEN int cspmdi_type_axes(cspmd_type_t type, cspmd_axis_t *axes, cspmd_ltype_t *ltypes);

/* " It has no type at all: annotate it with assert_type()." for UNTYPED
 * (never annotated, as opposed to typed on no axis), else "": the hint a
 * missing-axis message appends, the same for ops and collectives. */
CSPMDI_HIDDEN const char *cspmdi_untyped_hint(cspmd_type_t type);

/* 1 if the type carries a partition spec, 0 if not or unknown. */
CSPMDI_HIDDEN int cspmdi_type_has_spec(cspmd_type_t type);
/* The type's interned spec (stable for the process), or NULL if none. */
CSPMDI_HIDDEN const cspmd_spec_t *cspmdi_type_spec_ref(cspmd_type_t type);
/* 1 if some entry of spec (may be NULL) is a strided shard (split > 1). */
CSPMDI_HIDDEN int cspmdi_spec_strided(const cspmd_spec_t *spec);
/* The refusal of a strided shard by code that only knows ordinary ones:
 * SPMD_TYPE naming what and the type.  CSPMD_OK when type has none. */
CSPMDI_HIDDEN cspmd_status_t cspmdi_type_refuse_strided(cspmd_type_t type, const char *what);

/* ---- collective types (collective_rules.c) ------------------------------ */

/* 1 if t is S(d): V with a shard dim. */
CSPMDI_HIDDEN int cspmdi_is_shard(cspmd_ctype_t t);

/* The text of a src/dst value as messages show it: R, I, V, P or S(d). */
typedef struct cspmdi_ctype_text {
    char s[48];
} cspmdi_ctype_text_t;
CSPMDI_HIDDEN cspmdi_ctype_text_t cspmdi_ctype_text(cspmd_ctype_t t);

/* ---- inference (infer.c) ----------------------------------------------- */

/* 1 while the calling thread's backward relaxation is on
 * (cspmd_infer_backward_relax). */
CSPMDI_HIDDEN int cspmdi_backward_relaxed(void);

/* ---- checker state (mesh.c) -------------------------------------------- */

/* Small interned id of the calling thread's current mesh axis set: 0 when
 * no mesh is current; equal axis sets get equal ids (an empty mesh, e.g.
 * one made only of trivial axes, has a nonzero id).  For memo keys. */
CSPMDI_HIDDEN uint32_t cspmdi_mesh_id(void);

/* The axes of a mesh id (outermost first) into axes (CSPMD_MAX_AXES long);
 * returns their count, -1 for 0 or an unknown id. */
CSPMDI_HIDDEN int cspmdi_mesh_axes(uint32_t mesh, cspmd_axis_t *axes);

/* Which axes the calling thread types globally, as one word read once per
 * op: CSPMDI_POLICY_LOCAL (local mode: none), CSPMDI_POLICY_ALL_GLOBAL
 * (global mode, no local axes: every axis), else the current mesh entry
 * has local axes (ask cspmd_axis_is_global).  Equal words mean the same
 * policy, so it also keys memos of global-mode verdicts. */
#define CSPMDI_POLICY_LOCAL 0u
#define CSPMDI_POLICY_ALL_GLOBAL 1u
CSPMDI_HIDDEN uint32_t cspmdi_global_policy(void);

/* ---- errors (error.c, error_context.c) --------------------------------- */

/* The current error's message alone (without its context). */
CSPMDI_HIDDEN const char *cspmdi_error_message(void);

/* Called by cspmd_error_set after it wrote a new message: drops the
 * context; keeps the hint only if the new message still ends with it (a
 * prefix added by a caller, "list element [2]: ..."). */
CSPMDI_HIDDEN void cspmdi_error_context_reset(void);

/* "<message>\n\n<context>" when the current error has a context, else NULL. */
CSPMDI_HIDDEN const char *cspmdi_error_full_text(void);

/* The current message's text from byte offset `from` on is a fix
 * suggestion (its HINT field; leading newlines dropped). */
CSPMDI_HIDDEN void cspmdi_error_hint_from(size_t from);

/* A growable string (error paths only): starts on the caller's buffer,
 * moves to the heap when it fills.  On allocation failure it keeps what
 * fits and sets `failed`.  Always NUL-terminated. */
typedef struct cspmdi_text {
    char *buf;
    size_t len, cap;
    int heap, failed;
} cspmdi_text_t;

CSPMDI_HIDDEN void cspmdi_text_init(cspmdi_text_t *t, char *buf, size_t cap);
CSPMDI_HIDDEN void cspmdi_text_put(cspmdi_text_t *t, const char *s);
CSPMDI_HIDDEN void cspmdi_text_putf(cspmdi_text_t *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Empty it (keeps its storage). */
CSPMDI_HIDDEN void cspmdi_text_clear(cspmdi_text_t *t);
CSPMDI_HIDDEN void cspmdi_text_free(cspmdi_text_t *t);

/* out_partial_axes (partial_decl.c): inside a declaring region, the axes
 * (axes[j] for bit j of promoted) an op's result was promoted V -> P on
 * must be declared (else SPMD_TYPE naming op); they are marked derived.
 * Nothing is marked on error. */
CSPMDI_HIDDEN cspmd_status_t cspmdi_partial_decl_check(const char *op, const cspmd_axis_t *axes,
                                                       int n, uint32_t promoted);

/* An axis key as written (annotation.c): *quote + text + *quote, a name
 * quoted as Python quotes a str, an axis as its display text (debug as
 * cspmd_axis_display).  Both texts live as long as the process. */
CSPMDI_HIDDEN const char *cspmdi_axis_key_text(cspmd_axis_key_t key, int debug,
                                               const char **quote);

#endif /* CSPMD_CORE_H */
