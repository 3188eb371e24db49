/*
 * gradient_rules.c -- the backward pass's type rules: the loss check of backward()
 * and gradient duality (a tensor's gradient has the dual of its
 * type on every axis, with V accepted where P is due).
 */
#include <stdio.h>
#include <string.h>

#include "core.h"

/* R and I gradients are both complete and the same on every rank; they
 * differ only in what a second backward would do.  A backward op that mixes
 * them types its result by the R/I coercion (its operands take no gradient),
 * so either stands for the other where one of them is due. */
static int reduced_either(cspmd_ltype_t due, cspmd_ltype_t got)
{
    return (due == CSPMD_LT_R || due == CSPMD_LT_I) && (got == CSPMD_LT_R || got == CSPMD_LT_I);
}

cspmd_status_t cspmd_loss_check(cspmd_type_t loss)
{
    int n = cspmd_type_naxes(loss);
    if (n < 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_loss_check: unknown type id %u",
                               (unsigned)loss);
    if (loss == CSPMD_TYPE_UNTYPED) {
        if (!cspmd_checker_strict())
            return CSPMD_OK;
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "backward() called on a loss tensor with no SPMD type annotation. "
                               "In strict mode, annotate the loss with assert_type() before "
                               "calling backward().");
    }
    for (int i = 0; i < n; i++) {
        cspmd_axis_t axis;
        cspmd_ltype_t lt;
        cspmd_status_t st = cspmd_type_entry(loss, i, &axis, &lt);
        if (st != CSPMD_OK)
            return st;
        if (lt == CSPMD_LT_I || lt == CSPMD_LT_P)
            continue;
        const char *ax = cspmd_axis_display(axis, 0);
        const char *name = lt == CSPMD_LT_R ? "Replicate" : "Varying";
        const char *advice =
            lt == CSPMD_LT_R
                ? "this usually means an upstream all_reduce reduced to R instead of I. "
                  "Consider: all_reduce(..., dst=I) for the loss, or call backward() on the "
                  "local Partial loss before the all_reduce."
                : "each rank holds a different local loss. Use reinterpret(loss, %s, src=V, "
                  "dst=P) to declare that the global loss is the sum of the local ones.";
        char tail[512];
        snprintf(tail, sizeof tail, advice, ax);
        return cspmd_error_set(
            CSPMD_ERR_SPMD_TYPE,
            "backward() on a %s loss on axis %s would produce incorrect gradients. The implicit "
            "grad_output is a 1.0 scalar on each rank (Invariant), but only Invariant or Partial "
            "losses are valid for backward() without an explicit gradient.\n"
            "The loss is %s on axis %s -- %s",
            name, ax, name, ax, tail);
    }
    return CSPMD_OK;
}

cspmd_status_t cspmd_grad_check(cspmd_type_t fwd, cspmd_type_t grad, const char *what,
                                cspmd_type_t *out)
{
    int n = cspmd_type_naxes(fwd);
    if (n < 0 || cspmd_type_naxes(grad) < 0 || out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_grad_check: bad arguments");
    if (what == NULL)
        what = "tensor";
    cspmd_type_t result = grad;
    for (int i = 0; i < n; i++) {
        cspmd_axis_t axis;
        cspmd_ltype_t t;
        cspmd_status_t st = cspmd_type_entry(fwd, i, &axis, &t);
        if (st != CSPMD_OK)
            return st;
        cspmd_ltype_t due = cspmd_ltype_dual(t), got = cspmd_type_get(grad, axis);
        if (got == due)
            continue;
        if (got == CSPMD_LT_NONE && !cspmd_checker_strict())
            continue;
        if ((due == CSPMD_LT_P && got == CSPMD_LT_V) || reduced_either(due, got)) {
            /* A per-rank contribution to a pending sum: V -> P is free;
             * a reduced gradient is relabelled to the flavour due. */
            st = cspmd_type_with(result, axis, due, &result);
            if (st != CSPMD_OK)
                return st;
            continue;
        }
        char fbuf[256], gbuf[256];
        cspmd_type_format(fwd, fbuf, sizeof fbuf);
        cspmd_type_format(grad, gbuf, sizeof gbuf);
        const char *hint;
        if (got == CSPMD_LT_NONE)
            hint = "the gradient carries no type on this axis: was it computed outside the "
                   "checked region, or passed to backward() untyped?";
        else if (due == CSPMD_LT_P)
            hint = "the gradient is already reduced (R/I) but the tensor is Replicate, so its "
                   "gradient is still a pending sum: it would be reduced again (a missing "
                   "reinterpret/convert, or a collective applied twice in backward)";
        else if (got == CSPMD_LT_P)
            hint = "the gradient is still a pending sum (P): is an all_reduce missing in "
                   "backward (e.g. a custom backward that skips it, or reinterpret used where "
                   "convert was needed)?";
        else
            hint = "the gradient's type does not match the tensor's forward type";
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "Gradient type mismatch for %s on axis %s: the tensor is %s, so "
                               "its gradient must be %s%s, but the gradient is %s.\n"
                               "  tensor type:   %s\n  gradient type: %s\nHint: %s",
                               what, cspmd_axis_display(axis, 0), cspmd_ltype_letter(t),
                               cspmd_ltype_letter(due), due == CSPMD_LT_P ? " (or V)" : "",
                               got == CSPMD_LT_NONE ? "untyped" : cspmd_ltype_letter(got), fbuf,
                               gbuf, hint);
    }
    *out = result;
    return CSPMD_OK;
}

static const char *seed_hint(cspmd_ltype_t due, cspmd_ltype_t got)
{
    if (got == CSPMD_LT_NONE)
        return "the gradient carries no type on this axis; give it the output's dual type "
               "there, or pass an untyped gradient (or one a factory such as torch.ones "
               "made), which takes the dual of the output's type on every axis";
    if (due == CSPMD_LT_P)
        return "the output is Replicate, so its gradient is a pending sum (P): an already "
               "reduced (R/I) gradient would be reduced again.  A gradient computed from "
               "typed values has their type; a factory's (torch.ones_like(output)) or an "
               "untyped one takes the dual, or declare it with reinterpret";
    if (got == CSPMD_LT_P)
        return "the gradient is still a pending sum (P): is an all_reduce of it missing "
               "before backward()?";
    return "a gradient has the dual of its output's type on every axis (R->P, I->I, V->V, "
           "P->R).  A gradient computed from typed values has their type; a factory's "
           "(torch.ones(...), torch.ones_like(y)) or an untyped one takes the dual "
           "automatically, or reinterpret the gradient to it";
}

cspmd_status_t cspmd_grad_seed(cspmd_type_t out, cspmd_type_t grad, int grad_is_data,
                               const char *out_what, const char *grad_what, cspmd_type_t *seed)
{
    int n = cspmd_type_naxes(out);
    if (n < 0 || cspmd_type_naxes(grad) < 0 || seed == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_grad_seed: bad arguments");
    if (out_what == NULL)
        out_what = "output";
    if (grad_what == NULL)
        grad_what = "gradient";
    if (out == CSPMD_TYPE_UNTYPED || grad == CSPMD_TYPE_UNTYPED || grad_is_data) {
        *seed = out == CSPMD_TYPE_UNTYPED ? grad : cspmd_type_dual(out);
        return CSPMD_OK;
    }
    cspmd_type_t result = grad;
    for (int i = 0; i < n; i++) {
        cspmd_axis_t axis;
        cspmd_ltype_t t;
        cspmd_status_t st = cspmd_type_entry(out, i, &axis, &t);
        if (st != CSPMD_OK)
            return st;
        cspmd_ltype_t due = cspmd_ltype_dual(t), got = cspmd_type_get(grad, axis);
        if (got == due)
            continue;
        if ((due == CSPMD_LT_P && got == CSPMD_LT_V) ||
            (got == CSPMD_LT_NONE && (!cspmd_checker_strict() || !cspmd_checker_local()))) {
            /* V is this rank's piece of the pending sum; a missing axis says
             * nothing (an error in local strict mode only: in global mode a
             * gradient is completed per axis as an untyped one is whole). */
            st = cspmd_type_with(result, axis, due, &result);
            if (st != CSPMD_OK)
                return st;
            continue;
        }
        char obuf[256], gbuf[256];
        cspmd_type_format(out, obuf, sizeof obuf);
        cspmd_type_format(grad, gbuf, sizeof gbuf);
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "Explicit gradient type mismatch on axis %s: %s is %s, so its "
                               "gradient %s must be %s%s, but it is %s.\n"
                               "  output type:   %s\n  gradient type: %s\nHint: %s",
                               cspmd_axis_display(axis, 0), out_what, cspmd_ltype_letter(t),
                               grad_what, cspmd_ltype_letter(due),
                               due == CSPMD_LT_P ? " (or V)" : "",
                               got == CSPMD_LT_NONE ? "untyped" : cspmd_ltype_letter(got), obuf,
                               gbuf, seed_hint(due, got));
    }
    *seed = result;
    return CSPMD_OK;
}

cspmd_status_t cspmd_grad_accum_check(cspmd_type_t fwd, cspmd_type_t held, int held_is_zero,
                                      const char *what)
{
    int n = cspmd_type_naxes(fwd);
    if (n < 0 || cspmd_type_naxes(held) < 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_grad_accum_check: bad arguments");
    if (fwd == CSPMD_TYPE_UNTYPED || held == CSPMD_TYPE_UNTYPED || held_is_zero)
        return CSPMD_OK;
    if (what == NULL)
        what = "tensor";
    for (int i = 0; i < n; i++) {
        cspmd_axis_t axis;
        cspmd_ltype_t t;
        cspmd_status_t st = cspmd_type_entry(fwd, i, &axis, &t);
        if (st != CSPMD_OK)
            return st;
        cspmd_ltype_t due = cspmd_ltype_dual(t), got = cspmd_type_get(held, axis);
        if (got == due || (due == CSPMD_LT_P && got == CSPMD_LT_V) || got == CSPMD_LT_NONE ||
            reduced_either(due, got))
            continue;
        char fbuf[256], hbuf[256];
        cspmd_type_format(fwd, fbuf, sizeof fbuf);
        cspmd_type_format(held, hbuf, sizeof hbuf);
        const char *hint =
            due == CSPMD_LT_P
                ? "the .grad was already reduced (e.g. all-reduced after the previous "
                  "micro-batch), and this backward adds a pending (unreduced) gradient to it: "
                  "the sum is neither.  Accumulate the micro-batches' pending gradients and "
                  "reduce once after the last backward, or set .grad to None (zero_grad()) "
                  "before the next backward"
                : got == CSPMD_LT_P
                      ? "the .grad holds a pending sum (P) that was never reduced, and this "
                        "backward adds a reduced gradient to it: reduce the .grad (or zero it) "
                        "before the next backward"
                      : "the .grad holds a value that is not a gradient of this tensor's type";
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "Gradient accumulation type mismatch for %s on axis %s: the tensor "
                               "is %s, so its .grad must be %s%s, but the .grad this backward "
                               "accumulates into is %s.\n"
                               "  tensor type: %s\n  .grad type:  %s\nHint: %s",
                               what, cspmd_axis_display(axis, 0), cspmd_ltype_letter(t),
                               cspmd_ltype_letter(due), due == CSPMD_LT_P ? " (or V)" : "",
                               cspmd_ltype_letter(got), fbuf, hbuf, hint);
    }
    return CSPMD_OK;
}

/* The spec as text: "(tp, None)", "((dp, tp), None)", "none". */
static void spec_text(const cspmd_spec_t *s, char *buf, size_t len)
{
    if (s->ndim < 0) {
        snprintf(buf, len, "none");
        return;
    }
    size_t n = (size_t)snprintf(buf, len, "(");
    for (int d = 0; d < s->ndim && n < len; d++) {
        n += (size_t)snprintf(buf + n, len - n, "%s%s", d ? ", " : "",
                              s->nentry[d] > 1 ? "(" : s->nentry[d] ? "" : "None");
        for (int e = 0; e < s->nentry[d] && n < len; e++)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", e ? ", " : "",
                                  cspmd_axis_display(s->entry[d][e], 0));
        if (s->nentry[d] > 1 && n < len)
            n += (size_t)snprintf(buf + n, len - n, ")");
    }
    if (n < len)
        snprintf(buf + n, len - n, ")");
}

static int spec_equal(const cspmd_spec_t *a, const cspmd_spec_t *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++) {
        if (a->nentry[d] != b->nentry[d])
            return 0;
        for (int e = 0; e < a->nentry[d]; e++)
            if (a->entry[d][e] != b->entry[d][e])
                return 0;
    }
    return 1;
}

cspmd_status_t cspmd_grad_spec(cspmd_type_t fwd, cspmd_type_t grad, const char *what,
                               cspmd_type_t *out)
{
    if (cspmd_type_naxes(fwd) < 0 || cspmd_type_naxes(grad) < 0 || out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_grad_spec: bad arguments");
    if (what == NULL)
        what = "tensor";
    cspmd_spec_t fs, gs, due;
    cspmd_status_t st;
    if ((st = cspmd_type_spec_plain(fwd, what, &fs)) != CSPMD_OK ||
        (st = cspmd_type_spec_plain(grad, what, &gs)) != CSPMD_OK)
        return st;
    int any = 0;
    memset(&due, 0, sizeof due);
    due.ndim = fs.ndim;
    for (int d = 0; d < fs.ndim; d++)
        for (int e = 0; e < fs.nentry[d]; e++)
            if (cspmd_type_get(grad, fs.entry[d][e]) == CSPMD_LT_V) {
                due.entry[d][due.nentry[d]++] = fs.entry[d][e];
                any = 1;
            }
    if (!any)
        due.ndim = -1;
    if (gs.ndim >= 0 || !any) {
        if (gs.ndim < 0 || spec_equal(&gs, &due)) {
            *out = grad;
            return CSPMD_OK;
        }
        char fb[256], gb[256];
        spec_text(&due, fb, sizeof fb);
        spec_text(&gs, gb, sizeof gb);
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "Gradient PartitionSpec mismatch for %s: the tensor is sharded as "
                               "%s, so its gradient must be too, but the gradient is sharded as %s",
                               what, fb, gb);
    }
    cspmd_axis_t axes[CSPMD_MAX_AXES];
    cspmd_ltype_t lts[CSPMD_MAX_AXES];
    int n = cspmdi_type_axes(grad, axes, lts);
    if (n < 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_grad_spec: unknown type id");
    return cspmd_type_make(axes, lts, n, &due, out);
}

cspmd_status_t cspmd_grad_global_shard(cspmd_type_t fwd, cspmd_type_t grad, cspmd_type_t *out)
{
    if (cspmd_type_naxes(fwd) < 0 || cspmd_type_naxes(grad) < 0 || out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_grad_global_shard: bad arguments");
    *out = grad;
    const cspmd_spec_t *fs = cspmdi_type_spec_ref(fwd);
    if (fs == NULL || grad == CSPMD_TYPE_UNTYPED || cspmdi_type_has_spec(grad))
        return CSPMD_OK;
    if (cspmdi_spec_strided(fs))
        return cspmdi_type_refuse_strided(fwd, "a gradient's shard");
    cspmd_type_t result = grad;
    for (int d = 0; d < fs->ndim; d++)
        for (int e = 0; e < fs->nentry[d]; e++) {
            cspmd_axis_t a = fs->entry[d][e];
            int global;
            cspmd_status_t st = cspmd_axis_is_global(a, &global);
            if (st != CSPMD_OK)
                return st;
            if (global && cspmd_type_get(fwd, a) == CSPMD_LT_V &&
                cspmd_type_get(result, a) == CSPMD_LT_R &&
                (st = cspmd_type_with(result, a, CSPMD_LT_V, &result)) != CSPMD_OK)
                return st;
        }
    *out = result;
    return CSPMD_OK;
}
