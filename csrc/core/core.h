/*
 * core.h -- internal helpers shared by the core's modules (not installed).
 *
 * Everything here is hidden (cspmdi_ prefix, hidden visibility).  All
 * functions are lock-free and allocation-free unless said otherwise, and
 * validate their id arguments (an unknown id gives -1 / 0, never a crash).
 */
#ifndef CSPMD_CORE_H
#define CSPMD_CORE_H

#include <stdint.h>

#include "cspmd.h"
#include "table.h" /* CSPMDI_HIDDEN */

/* ---- axes (axis.c) ----------------------------------------------------- */

/* 1 if axis is a known id (0, the trivial axis, always is). */
CSPMDI_HIDDEN int cspmdi_axis_valid(cspmd_axis_t axis);

/* Sort axes[0..n) outermost first: max stride descending, then id
 * ascending (the order of cspmd_mesh_current and of "{dp,cp}" names).
 * Unknown ids sort last. */
CSPMDI_HIDDEN void cspmdi_axes_sort_outer(cspmd_axis_t *axes, int n);

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

/* ---- checker state (mesh.c) -------------------------------------------- */

/* Small interned id of the calling thread's current mesh axis set: 0 when
 * no mesh is current; equal axis sets get equal ids (an empty mesh, e.g.
 * one made only of trivial axes, has a nonzero id).  For memo keys. */
CSPMDI_HIDDEN uint32_t cspmdi_mesh_id(void);

/* The axes of a mesh id (outermost first) into axes (CSPMD_MAX_AXES long);
 * returns their count, -1 for 0 or an unknown id. */
CSPMDI_HIDDEN int cspmdi_mesh_axes(uint32_t mesh, cspmd_axis_t *axes);

#endif /* CSPMD_CORE_H */
