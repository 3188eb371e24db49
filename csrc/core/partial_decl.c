/*
 * partial_decl.c -- out_partial_axes: a region that declares the global
 * axes on which its ops' results become Partial.
 *
 * Global inference derives Partial by itself (a contraction or a sum over a
 * sharded dim); the declaration makes that explicit and is checked against
 * it: inside a region, an op whose result propagation makes Partial on an
 * undeclared axis is an error, and a declared axis on which no op of the
 * region derived a Partial is an error when the region ends.  Regions nest
 * on a per-thread stack that grows as needed and is freed when the
 * outermost region ends: the innermost one says which axes are declared,
 * and a Partial derived inside it counts for the enclosing ones too.
 * Each region has an id and ends by it, in any order (generators).
 */
#include <stdlib.h>
#include <string.h>

#include "core.h"

typedef struct decl {
    cspmd_axis_t axis[CSPMD_MAX_AXES];
    int n;
    uint32_t derived; /* bit i: axis[i] was derived Partial */
    int64_t id;       /* unique in the process: regions end by id */
} decl_t;

static _Thread_local decl_t *tl_stack;
static _Thread_local int tl_depth, tl_cap;
static _Atomic int64_t next_id = 1;

static const char *ax(cspmd_axis_t a)
{
    return cspmd_axis_display(a, cspmd_axis_print_debug());
}

cspmd_status_t cspmd_partial_decl_push(const cspmd_axis_t *axes, int n)
{
    int64_t id;
    return cspmd_partial_decl_open(axes, n, &id);
}

cspmd_status_t cspmd_partial_decl_open(const cspmd_axis_t *axes, int n, int64_t *id)
{
    if (id == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_partial_decl_open: id is NULL");
    if (n < 1 || n > CSPMD_MAX_AXES || axes == NULL)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "out_partial_axes: expected 1 to %d mesh axes, got %d",
                               CSPMD_MAX_AXES, n);
    if (cspmd_checker_local())
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "out_partial_axes needs global mode (typecheck(local=False)): "
                               "local mode derives no Partial to check the declaration against");
    for (int i = 0; i < n; i++) {
        if (!cspmdi_axis_valid(axes[i]))
            return cspmd_error_set(CSPMD_ERR_MISUSE, "out_partial_axes: unknown axis id %u",
                                   (unsigned)axes[i]);
        int global = 0;
        cspmd_status_t st = cspmd_axis_is_global(axes[i], &global);
        if (st != CSPMD_OK)
            return st;
        if (!global)
            return cspmd_error_set(CSPMD_ERR_VALUE,
                                   "out_partial_axes: axis %s is a local axis (set_current_mesh"
                                   "(..., local_axes=...)): no shard is propagated on it",
                                   ax(axes[i]));
        for (int j = 0; j < i; j++)
            if (axes[j] == axes[i])
                return cspmd_error_set(CSPMD_ERR_VALUE, "out_partial_axes: axis %s given twice",
                                       ax(axes[i]));
    }
    if (tl_depth == tl_cap) {
        int cap = tl_cap ? tl_cap * 2 : 4;
        decl_t *grown = realloc(tl_stack, (size_t)cap * sizeof *grown);
        if (grown == NULL)
            return cspmd_error_set(CSPMD_ERR_NOMEM, "out_partial_axes: out of memory");
        tl_stack = grown;
        tl_cap = cap;
    }
    decl_t *d = &tl_stack[tl_depth++];
    memcpy(d->axis, axes, (size_t)n * sizeof *axes);
    d->n = n;
    d->derived = 0;
    d->id = *id = next_id++;
    return CSPMD_OK;
}

cspmd_status_t cspmd_partial_decl_pop(void)
{
    if (tl_depth == 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "out_partial_axes: no region to end");
    return cspmd_partial_decl_end(tl_stack[tl_depth - 1].id);
}

cspmd_status_t cspmd_partial_decl_end(int64_t id)
{
    int at = tl_depth - 1;
    while (at >= 0 && tl_stack[at].id != id)
        at--;
    if (at < 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE,
                               "out_partial_axes: region %lld is not open on this thread (a "
                               "region ends on the thread that opened it)",
                               (long long)id);
    /* Closed out of order (a generator left early): the regions opened
     * after it stay open, in order. */
    decl_t d = tl_stack[at];
    memmove(&tl_stack[at], &tl_stack[at + 1], (size_t)(tl_depth - at - 1) * sizeof *tl_stack);
    tl_depth--;
    if (tl_depth == 0) {
        free(tl_stack);
        tl_stack = NULL;
        tl_cap = 0;
    }
    for (int i = 0; i < d.n; i++)
        if (!(d.derived >> i & 1u))
            return cspmd_error_set(
                CSPMD_ERR_SPMD_TYPE,
                "out_partial_axes declares axis %s, but no op in the region made its result "
                "Partial on it (a Partial arises from a contraction or a sum over a dim sharded "
                "on %s)",
                ax(d.axis[i]), ax(d.axis[i]));
    return CSPMD_OK;
}

int cspmd_partial_decl_depth(void) { return tl_depth; }

cspmd_status_t cspmdi_partial_decl_check(const char *op, const cspmd_axis_t *axes, int n,
                                         uint32_t promoted)
{
    if (tl_depth == 0 || promoted == 0)
        return CSPMD_OK;
    decl_t *d = &tl_stack[tl_depth - 1];
    uint32_t derived = 0;
    for (int j = 0; j < n; j++) {
        if (!(promoted >> j & 1u))
            continue;
        int i = 0;
        while (i < d->n && d->axis[i] != axes[j])
            i++;
        if (i == d->n) {
            cspmdi_text_t t;
            char buf[160];
            cspmdi_text_init(&t, buf, sizeof buf);
            for (int k = 0; k < d->n; k++)
                cspmdi_text_putf(&t, "%s%s", k ? ", " : "", ax(d->axis[k]));
            cspmd_status_t st = cspmd_error_set(
                CSPMD_ERR_SPMD_TYPE,
                "%s makes its result Partial on axis %s, which out_partial_axes does not declare "
                "(declared: %s): add %s to out_partial_axes, or reduce before the region",
                op, ax(axes[j]), t.buf, ax(axes[j]));
            cspmdi_text_free(&t);
            return st;
        }
        derived |= 1u << i;
    }
    d->derived |= derived;
    /* The op ran inside the enclosing regions too: mark their axes. */
    for (int k = tl_depth - 2; k >= 0; k--)
        for (int i = 0; i < tl_stack[k].n; i++)
            for (int j = 0; j < n; j++)
                if (promoted >> j & 1u && tl_stack[k].axis[i] == axes[j])
                    tl_stack[k].derived |= 1u << i;
    return CSPMD_OK;
}
