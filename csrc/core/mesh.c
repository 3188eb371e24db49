/*
 * mesh.c -- the per-thread checker state: the current-mesh
 * stack and the enabled / strict flags.
 *
 * A mesh is an interned axis set (trivial axes dropped, outermost first),
 * so the stack holds small ids and cspmdi_mesh_id() is a plain
 * thread-local read.  Mesh id 0 means "no mesh".  A thread that never set
 * any state (an autograd device thread) reads the state a checking thread
 * published last -- with several threads checking on different meshes at
 * once, such a thread sees the most recent one.
 */
#include <stdatomic.h>
#include <string.h>

#include "core.h"
#include "table.h"

#define MESH_CAP 4096u
#define MESH_DEPTH 64

typedef struct mesh_rec {
    cspmd_axis_t axes[CSPMD_MAX_AXES];  /* outermost first, unused 0 */
    cspmd_axis_t local[CSPMD_MAX_AXES]; /* local axes (global mode), unused 0 */
    uint32_t n, nlocal;
} mesh_rec_t;

static mesh_rec_t mesh_chunk0[CSPMDI_CHUNK];
CSPMDI_TABLE_DEFINE(mesh_tab, "mesh", mesh_rec_t, sizeof(mesh_rec_t), MESH_CAP, 1, mesh_chunk0);

/* The stack holds interned mesh ids: a mesh is its axis set and the local
 * axes of that entry, so replacing the current mesh is one id write. */
static _Thread_local uint32_t tl_stack[MESH_DEPTH];
static _Thread_local int tl_depth;
static _Thread_local int tl_enabled = 0;
static _Thread_local int tl_strict = 1;
static _Thread_local int tl_local = 1; /* typecheck(local=...) */

/* Threads that never set checker state themselves -- the autograd engine's
 * device threads, which run a CUDA backward with the dispatch keys captured
 * at backward() -- read the state last published by a checking thread. */
static _Thread_local int tl_owner;
static _Atomic uint32_t g_mesh;
static _Atomic int g_strict = 1;
static _Atomic int g_local = 1;

static void publish(void)
{
    if (!tl_enabled)
        return;
    atomic_store_explicit(&g_mesh, tl_depth ? tl_stack[tl_depth - 1] : 0u,
                          memory_order_relaxed);
    atomic_store_explicit(&g_strict, tl_strict, memory_order_relaxed);
    atomic_store_explicit(&g_local, tl_local, memory_order_relaxed);
}

static int has_axis(const cspmd_axis_t *axes, int n, cspmd_axis_t a)
{
    for (int j = 0; j < n; j++)
        if (axes[j] == a)
            return 1;
    return 0;
}

cspmd_status_t cspmd_mesh_intern(const cspmd_axis_t *axes, int n, const cspmd_axis_t *local,
                                 int nlocal, uint32_t *id)
{
    if (n < 0 || (n > 0 && axes == NULL) || nlocal < 0 || (nlocal > 0 && local == NULL) ||
        id == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE,
                               "cspmd_mesh_intern: bad arguments (n = %d, nlocal = %d)", n, nlocal);
    mesh_rec_t rec;
    memset(&rec, 0, sizeof rec);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!cspmdi_axis_valid(axes[i]))
            return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_mesh_push: unknown axis id %u",
                                   (unsigned)axes[i]);
        if (cspmd_axis_size(axes[i]) == 1 || has_axis(rec.axes, m, axes[i]))
            continue; /* size-1 axes are dropped; the same axis twice is one axis */
        if (m == CSPMD_MAX_AXES)
            return cspmd_error_set(CSPMD_ERR_VALUE, "cspmd: at most %d mesh axes are supported",
                                   CSPMD_MAX_AXES);
        rec.axes[m++] = axes[i];
    }
    cspmd_status_t st = cspmd_axes_check_orthogonal(rec.axes, m);
    if (st != CSPMD_OK)
        return st;
    cspmdi_axes_sort(rec.axes, m, 0); /* orthogonal: never tie */
    rec.n = (uint32_t)m;
    int nl = 0;
    for (int i = 0; i < nlocal; i++) {
        if (!has_axis(rec.axes, m, local[i]))
            return cspmd_error_set(CSPMD_ERR_MISUSE,
                                   "cspmd_mesh_set_local_axes: axis %u is not in the current mesh",
                                   (unsigned)local[i]);
        if (!has_axis(rec.local, nl, local[i]))
            rec.local[nl++] = local[i];
    }
    cspmdi_axes_sort(rec.local, nl, 0); /* one record per set */
    rec.nlocal = (uint32_t)nl;
    return cspmdi_table_intern(&mesh_tab, &rec, NULL, id);
}

cspmd_status_t cspmd_mesh_apply(uint32_t id)
{
    if (id != 0 && cspmdi_table_get(&mesh_tab, id) == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_mesh_apply: unknown mesh id %u",
                               (unsigned)id);
    if (id == 0) {
        tl_depth = 0;
    } else {
        tl_stack[0] = id;
        tl_depth = 1;
    }
    tl_owner = 1;
    publish();
    return CSPMD_OK;
}

uint32_t cspmd_mesh_current_id(void)
{
    return tl_depth ? tl_stack[tl_depth - 1] : 0u;
}

cspmd_status_t cspmd_mesh_push(const cspmd_axis_t *axes, int n)
{
    if (n < 0 || (n > 0 && axes == NULL))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_mesh_push: bad axis list (n = %d)", n);
    if (tl_depth == MESH_DEPTH)
        return cspmd_error_set(CSPMD_ERR_NOMEM, "cspmd_mesh_push: mesh stack is full (%d entries)",
                               MESH_DEPTH);
    uint32_t id;
    cspmd_status_t st = cspmd_mesh_intern(axes, n, NULL, 0, &id);
    if (st != CSPMD_OK)
        return st;
    tl_stack[tl_depth++] = id;
    tl_owner = 1;
    publish();
    return CSPMD_OK;
}

cspmd_status_t cspmd_mesh_pop(void)
{
    if (tl_depth == 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_mesh_pop: no current mesh to pop");
    tl_depth--;
    publish();
    return CSPMD_OK;
}

int cspmdi_mesh_axes(uint32_t mesh, cspmd_axis_t *axes)
{
    if (mesh == 0)
        return -1;
    mesh_rec_t *r = cspmdi_table_get(&mesh_tab, mesh);
    if (r == NULL)
        return -1;
    if (axes != NULL)
        memcpy(axes, r->axes, r->n * sizeof *axes);
    return (int)r->n;
}

uint32_t cspmdi_mesh_id(void)
{
    if (!tl_owner)
        return atomic_load_explicit(&g_mesh, memory_order_relaxed);
    return tl_depth ? tl_stack[tl_depth - 1] : 0;
}

int cspmd_mesh_current(cspmd_axis_t *axes)
{
    return cspmdi_mesh_axes(cspmdi_mesh_id(), axes);
}

void cspmd_checker_set(int enabled, int strict)
{
    tl_enabled = enabled != 0;
    tl_strict = strict != 0;
    tl_owner = 1;
    publish();
}

int cspmd_checker_enabled(void)
{
    return tl_enabled;
}

int cspmd_checker_strict(void)
{
    if (!tl_owner)
        return atomic_load_explicit(&g_strict, memory_order_relaxed);
    return tl_strict;
}

void cspmd_checker_set_local(int local)
{
    tl_local = local != 0;
    tl_owner = 1;
    publish();
}

int cspmd_checker_local(void)
{
    if (!tl_owner)
        return atomic_load_explicit(&g_local, memory_order_relaxed);
    return tl_local;
}

cspmd_status_t cspmd_mesh_set_local_axes(const cspmd_axis_t *axes, int n)
{
    if (n < 0 || n > CSPMD_MAX_AXES || (n > 0 && axes == NULL))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_mesh_set_local_axes: bad axis list");
    if (tl_depth == 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_mesh_set_local_axes: no current mesh");
    const mesh_rec_t *r = cspmdi_table_get(&mesh_tab, tl_stack[tl_depth - 1]);
    uint32_t id;
    cspmd_status_t st = cspmd_mesh_intern(r->axes, (int)r->n, axes, n, &id);
    if (st != CSPMD_OK)
        return st;
    tl_stack[tl_depth - 1] = id;
    publish();
    return CSPMD_OK;
}

int cspmd_mesh_local_axes(cspmd_axis_t *axes)
{
    if (!tl_owner || tl_depth == 0)
        return 0; /* device threads: no local axes (all global) */
    const mesh_rec_t *r = cspmdi_table_get(&mesh_tab, tl_stack[tl_depth - 1]);
    if (r == NULL)
        return 0;
    if (axes != NULL)
        memcpy(axes, r->local, r->nlocal * sizeof *axes);
    return (int)r->nlocal;
}

uint32_t cspmdi_global_policy(void)
{
    if (cspmd_checker_local())
        return CSPMDI_POLICY_LOCAL;
    if (!tl_owner || tl_depth == 0)
        return CSPMDI_POLICY_ALL_GLOBAL; /* no local axes (cspmd_mesh_local_axes) */
    uint32_t id = tl_stack[tl_depth - 1];
    const mesh_rec_t *r = cspmdi_table_get(&mesh_tab, id);
    return r == NULL || r->nlocal == 0 ? CSPMDI_POLICY_ALL_GLOBAL : id + 2u;
}

cspmd_status_t cspmd_axis_is_global(cspmd_axis_t axis, int *global)
{
    if (global == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_axis_is_global: NULL out");
    if (cspmd_checker_local()) {
        *global = 0;
        return CSPMD_OK;
    }
    cspmd_axis_t local[CSPMD_MAX_AXES], mesh[CSPMD_MAX_AXES];
    int nl = cspmd_mesh_local_axes(local);
    if (nl == 0) {
        *global = 1;
        return CSPMD_OK;
    }
    int nm = cspmd_mesh_current(mesh), in = 0;
    for (int j = 0; j < nm; j++)
        in |= mesh[j] == axis;
    if (!in)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "Axis %s is not in the current mesh, so its local/global "
                               "typechecking policy is undefined",
                               cspmd_axis_display(axis, 0));
    *global = 1;
    for (int j = 0; j < nl; j++)
        if (local[j] == axis)
            *global = 0;
    return CSPMD_OK;
}
