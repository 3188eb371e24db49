/*
 * view_rules.c -- what writing through a view does to the tensor it views.
 *
 * A view shares its base's memory: `buf[:4].copy_(v)` changes part of
 * `buf`.  After the write, `buf` holds its old data in some elements and
 * the written data in others, so its type is the per-axis join of the two:
 * equal types stay; Varying data written into part of a Replicate or
 * Invariant buffer makes the whole buffer Varying (some elements now
 * differ across ranks) and the reverse keeps it Varying; any other mix --
 * a Partial sum in some elements and not in others, R next to I -- has no
 * type, and the write is an error; so is Partial data written into a tensor
 * with no type on that axis (the pending sum would be lost).  Varying data
 * written into a tensor with no type on that axis (never annotated, or
 * typed on other axes only) makes it Varying there: Varying claims nothing
 * about the old elements, so it is the one sound type for the mix; other
 * data written there leaves the axis untyped.  A buffer that requires grad
 * may not change its type on an axis it is typed on (as for any in-place
 * op; an axis it has no type on may gain one, as in-place ops allow).
 */
#include <string.h>

#include "core.h"
#include "cspmd.h"

static int varying_join(cspmd_ltype_t a, cspmd_ltype_t b)
{
    return (a == CSPMD_LT_V && (b == CSPMD_LT_R || b == CSPMD_LT_I || b == CSPMD_LT_V)) ||
           (b == CSPMD_LT_V && (a == CSPMD_LT_R || a == CSPMD_LT_I));
}

/* Both types as text, for the two refusals of a write through a view. */
typedef struct {
    char base[256], written[256];
} types_text_t;

static void types_text(cspmd_type_t base, cspmd_type_t written, types_text_t *t)
{
    cspmd_type_format(base, t->base, sizeof t->base);
    cspmd_type_format(written, t->written, sizeof t->written);
}

/* The join of base and written per axis (see the file comment).  quiet:
 * report a refusal by status alone, with no message (the per-op read of
 * a view must not format text). */
static cspmd_status_t join(const char *op, cspmd_type_t base, cspmd_type_t written,
                           int requires_grad, int quiet, cspmd_type_t *out)
{
    if (written == CSPMD_TYPE_UNTYPED || base == written) {
        *out = base;
        return CSPMD_OK;
    }
    cspmd_axis_t axes[CSPMD_MAX_AXES];
    cspmd_ltype_t lts[CSPMD_MAX_AXES];
    int n = cspmdi_type_axes(written, axes, lts);
    cspmd_type_t joined = base;
    for (int i = 0; i < n; i++) {
        cspmd_ltype_t was = cspmd_type_get(base, axes[i]);
        cspmd_ltype_t now = lts[i];
        if (was == CSPMD_LT_NONE && now == CSPMD_LT_V) {
            /* Unknown old elements next to Varying new ones: Varying. */
            cspmd_type_t from =
                joined == CSPMD_TYPE_UNTYPED ? CSPMD_TYPE_EMPTY : cspmd_type_local(joined);
            cspmd_status_t st = cspmd_type_with(from, axes[i], CSPMD_LT_V, &joined);
            if (st != CSPMD_OK)
                return st;
            continue;
        }
        if (was == CSPMD_LT_NONE && now == CSPMD_LT_P) {
            /* Keeping no type here would drop a pending sum unseen. */
            if (quiet)
                return CSPMD_ERR_SPMD_TYPE;
            types_text_t t;
            types_text(base, written, &t);
            return cspmd_error_set(
                CSPMD_ERR_SPMD_TYPE,
                "%s: writing %s data into part of a %s tensor through a view: the tensor has no "
                "type on axis %s, so the Partial sum in the written elements would be lost. "
                "all_reduce the Partial value before storing it, or annotate the whole tensor.",
                op ? op : "?", t.written, t.base, cspmd_axis_display(axes[i], 0));
        }
        if (was == CSPMD_LT_NONE || was == now)
            continue; /* R, I on an axis the base has no type on: it keeps none */
        if (!varying_join(was, now)) {
            if (quiet)
                return CSPMD_ERR_SPMD_TYPE;
            types_text_t t;
            types_text(base, written, &t);
            return cspmd_error_set(
                CSPMD_ERR_SPMD_TYPE,
                "%s: writing %s data into part of a %s tensor through a view: the tensor would "
                "be %s in some elements and %s in others on axis %s, which no single type "
                "describes. Convert the data (or the whole tensor) to one type first, e.g. "
                "all_reduce a Partial value before storing it.",
                op ? op : "?", t.written, t.base, cspmd_ltype_letter(now), cspmd_ltype_letter(was),
                cspmd_axis_display(axes[i], 0));
        }
        if (was == CSPMD_LT_V)
            continue; /* V joined with R or I stays V */
        if (requires_grad)
            return cspmd_error_set(
                CSPMD_ERR_SPMD_TYPE,
                "%s: writing through a view would change the SPMD type of the viewed tensor on "
                "axis %s from %s to %s, and it requires grad. In-place and out= operations "
                "cannot change the type of a tensor that requires grad.",
                op ? op : "?", cspmd_axis_display(axes[i], 0), cspmd_ltype_letter(was),
                cspmd_ltype_letter(CSPMD_LT_V));
        cspmd_status_t st = cspmd_type_with(cspmd_type_local(joined), axes[i], CSPMD_LT_V, &joined);
        if (st != CSPMD_OK)
            return st;
    }
    *out = joined;
    return CSPMD_OK;
}

cspmd_status_t cspmd_type_join_view_write(const char *op, cspmd_type_t base, cspmd_type_t written,
                                          int requires_grad, cspmd_type_t *out)
{
    if (out == NULL || !cspmdi_type_valid(base) || !cspmdi_type_valid(written))
        return cspmd_error_set(CSPMD_ERR_MISUSE,
                               "cspmd_type_join_view_write: bad arguments (%u, %u)",
                               (unsigned)base, (unsigned)written);
    return join(op, base, written, requires_grad, 0, out);
}

cspmd_type_t cspmd_type_view_read(cspmd_type_t own, cspmd_type_t base)
{
    cspmd_type_t joined;
    if (base == CSPMD_TYPE_UNTYPED || own == base || !cspmdi_type_valid(own) ||
        !cspmdi_type_valid(base))
        return own;
    /* The base changed after this view took its type (a write through
     * another view made it V, perhaps from no type at all): the view is
     * part of it and takes the join.  Types no join relates (annotated
     * apart) are left alone. */
    return join("", own, base, 0, 1, &joined) == CSPMD_OK ? joined : own;
}
