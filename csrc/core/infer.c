/*
 * infer.c -- output type inference for ordinary ops.
 *
 * cspmd_infer(rule, operands) -> output local type, or SPMD_TYPE with the
 * reference's message (including fix suggestions).  Memoised per thread:
 * a direct-mapped cache keyed by (rule, current mesh id, strictness,
 * operands) answers repeated calls without locks, allocation or string
 * work.  Errors are not memoised (they are computed again, so the message
 * is always fresh).
 *
 * The per-axis rule only depends on the *set* of types on the axis and the
 * number of P among them, so it is evaluated on counts; the ordered list is
 * kept (up to LIST_CAP entries) for the "Found types: [...]" text only.
 * Operand lists of any length are handled without allocation: each pass
 * re-reads the operands' types through the lock-free type accessor.
 *
 * Operand views.  Inference runs over a *view* of the operand list: the
 * operands whose schema argument is in a mask, optionally preceded by one
 * synthetic type (the MULTILINEAR stage's result in the addmm family's
 * LINEAR(MULTILINEAR(a, b), self) decomposition).  "args[i]" in messages is
 * the index among the view's tensor-like elements (tensors and typed
 * scalars; weak scalars are appended after them, as in the reference).
 *
 * LINEAR rules with nonlinear positions treat those arguments as fixed
 * coefficients: per axis, result = MULTILINEAR(LINEAR(free...), coef...).
 * MULTILINEAR rules with nonlinear positions (div, backward ops) are plain
 * MULTILINEAR over all operands after the "Partial in nonlinear argument"
 * check.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "cspmd.h"
#include "rules.h"

#define LIST_CAP 256
#define UNION_CAP 64
#define MSG_CAP 4096
#define MEMO_SIZE 512 /* entries per thread, a power of two */
#define MEMO_OPS 8    /* operands stored inline in an entry */

/* ===================================================================== */
/* Per-axis type lists and the raw rule                                  */
/* ===================================================================== */

/* CSPMD_LT_NONE (0) stands for the weak scalar _S.  Each entry has the
 * type the rule counts (after the R/I coercion of operands that take no
 * gradient) and the operand's own type, which messages and fix
 * suggestions use. */
typedef struct tlist {
    int n;
    int cnt[5];  /* counted types */
    int ocnt[5]; /* own types     */
    uint8_t v[LIST_CAP];  /* own types, for "Found types: [...]" */
    uint8_t cv[LIST_CAP]; /* counted types                        */
} tlist_t;

static void tl_init(tlist_t *l)
{
    memset(l->cnt, 0, sizeof l->cnt);
    memset(l->ocnt, 0, sizeof l->ocnt);
    l->n = 0;
}

static void tl_push_as(tlist_t *l, cspmd_ltype_t own, cspmd_ltype_t counted)
{
    l->cnt[counted]++;
    l->ocnt[own]++;
    if (l->n < LIST_CAP) {
        l->v[l->n] = (uint8_t)own;
        l->cv[l->n] = (uint8_t)counted;
    }
    l->n++;
}

static void tl_push(tlist_t *l, cspmd_ltype_t t)
{
    tl_push_as(l, t, t);
}

typedef enum axis_error {
    AXIS_ERR_OK = 0,
    AXIS_ERR_EMPTY,
    AXIS_ERR_I_MIX,
    AXIS_ERR_P_V,
    AXIS_ERR_P_NONLIN,
    AXIS_ERR_P_LIN,
    AXIS_ERR_P_MULTI,
    AXIS_ERR_INCOMPAT
} axis_error_t;

static _Thread_local int tl_relax;

void cspmd_infer_backward_relax(int on)
{
    tl_relax = on;
}

int cspmdi_backward_relaxed(void)
{
    return tl_relax;
}

/* ---- parked typed scalars ---------------------------------------------- */

/* Any number per thread: a small inline array, a heap array past it
 * (freed when the thread parks a short list again or clears). */
#define PENDING_INLINE 8
static _Thread_local cspmd_type_t tl_pending_inline[PENDING_INLINE];
static _Thread_local cspmd_type_t *tl_pending_heap;
static _Thread_local int tl_npending;

static cspmd_type_t *pending_slots(void)
{
    return tl_pending_heap != NULL ? tl_pending_heap : tl_pending_inline;
}

cspmd_status_t cspmd_pending_scalars(const cspmd_type_t *types, int n)
{
    if (n < 0 || (n > 0 && types == NULL))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_pending_scalars: bad arguments");
    for (int i = 0; i < n; i++)
        if (!cspmdi_type_valid(types[i]))
            return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_pending_scalars: unknown type id %u",
                                   (unsigned)types[i]);
    cspmd_type_t *heap = NULL;
    if (n > PENDING_INLINE) {
        heap = malloc((size_t)n * sizeof *heap);
        if (heap == NULL)
            return cspmd_error_set(CSPMD_ERR_NOMEM,
                                   "cspmd_pending_scalars: out of memory for %d Scalars", n);
    }
    free(tl_pending_heap);
    tl_pending_heap = heap;
    cspmd_type_t *slots = pending_slots();
    for (int i = 0; i < n; i++)
        slots[i] = types[i];
    tl_npending = n;
    return CSPMD_OK;
}

int cspmd_pending_scalars_count(void)
{
    return tl_npending;
}

int cspmd_pending_scalars_take(cspmd_operand_t *ops, int cap)
{
    int n = tl_npending < cap ? tl_npending : cap;
    const cspmd_type_t *slots = pending_slots();
    for (int i = 0; i < n; i++) {
        ops[i].type = slots[i];
        ops[i].arg = UINT16_MAX; /* at no declared position */
        ops[i].kind = CSPMD_OPERAND_TYPED;
        ops[i].flags = CSPMD_OPERAND_NO_GRAD; /* a typed scalar takes no gradient */
    }
    tl_npending = 0;
    free(tl_pending_heap);
    tl_pending_heap = NULL;
    return n;
}

/* The raw per-axis rule on type counts (index = cspmd_ltype_t, 0 = _S). */
static int rule_eval(int lin, const int cnt[5], cspmd_ltype_t *out)
{
    int s = cnt[0], r = cnt[CSPMD_LT_R], i = cnt[CSPMD_LT_I], v = cnt[CSPMD_LT_V],
        p = cnt[CSPMD_LT_P];
    if (tl_relax && lin == CSPMDI_LIN_LINEAR && p > 0 && v > 0) {
        p += v; /* backward accumulation: V contributes to the pending sum */
        v = 0;
    }
    if (s + r + i + v + p == 0)
        return AXIS_ERR_EMPTY;
    if (i + v + p == 0) {
        *out = CSPMD_LT_R;
        return AXIS_ERR_OK;
    }
    if (r + v + p == 0) {
        *out = CSPMD_LT_I;
        return AXIS_ERR_OK;
    }
    if (i + p == 0) {
        *out = CSPMD_LT_V;
        return AXIS_ERR_OK;
    }
    if (i > 0)
        return AXIS_ERR_I_MIX;
    if (p > 0) {
        if (v > 0)
            return AXIS_ERR_P_V;
        if (lin == CSPMDI_LIN_NONLINEAR)
            return AXIS_ERR_P_NONLIN;
        if (lin == CSPMDI_LIN_LINEAR && (r > 0 || s > 0))
            return AXIS_ERR_P_LIN;
        if (lin == CSPMDI_LIN_MULTILINEAR && p > 1)
            return AXIS_ERR_P_MULTI;
        *out = CSPMD_LT_P;
        return AXIS_ERR_OK;
    }
    return AXIS_ERR_INCOMPAT; /* unreachable */
}

/* ===================================================================== */
/* Message building                                                      */
/* ===================================================================== */

typedef struct sbuf {
    char *p;
    size_t cap, len;
} sbuf_t;

static void sb_add(sbuf_t *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void sb_add(sbuf_t *b, const char *fmt, ...)
{
    if (b->len + 1 >= b->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (r < 0)
        return;
    b->len += (size_t)r;
    if (b->len >= b->cap)
        b->len = b->cap - 1;
}

static const char *lt_name(int t)
{
    return t == 0 ? "Scalar" : cspmd_ltype_letter((cspmd_ltype_t)t);
}

static void sb_list(sbuf_t *b, const tlist_t *l)
{
    sb_add(b, "[");
    int shown = l->n < LIST_CAP ? l->n : LIST_CAP;
    for (int k = 0; k < shown; k++)
        sb_add(b, "%s%s", k ? ", " : "", lt_name(l->v[k]));
    if (l->n > shown)
        sb_add(b, ", ... (%d more)", l->n - shown);
    sb_add(b, "]");
}

static void sb_base_error(sbuf_t *b, axis_error_t err, const char *ax, const tlist_t *l)
{
    switch (err) {
    case AXIS_ERR_I_MIX:
        sb_add(b, "Invariant type on axis %s cannot mix with other types. Found types: ", ax);
        break;
    case AXIS_ERR_P_V:
        sb_add(b,
               "Partial type on axis %s cannot combine with Varying. Reduce Partial first "
               "(all_reduce -> R, or reduce_scatter -> V). Found types: ",
               ax);
        break;
    case AXIS_ERR_P_NONLIN:
        sb_add(b,
               "Partial type on axis %s cannot propagate through non-linear ops (non-linear of "
               "a partial sum != partial sum of non-linear). Reduce first with all_reduce or "
               "reduce_scatter. Found types: ",
               ax);
        break;
    case AXIS_ERR_P_LIN:
        sb_add(b,
               "Partial type on axis %s in a linear op requires all operands to be Partial (sum "
               "of partial sums is a partial sum, but adding a Replicate or scalar value makes "
               "the result affine -- the non-partial term gets summed N times across ranks). "
               "Found types: ",
               ax);
        break;
    case AXIS_ERR_P_MULTI:
        sb_add(b,
               "Partial in multiple factors of multilinear op on axis %s is forbidden. Reduce "
               "all but one factor first. Found types: ",
               ax);
        break;
    case AXIS_ERR_OK:
    case AXIS_ERR_EMPTY:
    case AXIS_ERR_INCOMPAT:
        sb_add(b, "Incompatible types on axis %s: ", ax);
        break;
    }
    sb_list(b, l);
}

/* Fix-suggestion candidates, in the reference's order. */
static const struct {
    cspmd_ltype_t from, to;
    const char *fn;
    const char *consequence;
} fixes[] = {
    {CSPMD_LT_I, CSPMD_LT_R, "convert", "no-op forward, all-reduce in backward"},
    {CSPMD_LT_I, CSPMD_LT_P, "convert", "zeros non-rank-0 in forward, no-op backward"},
    {CSPMD_LT_P, CSPMD_LT_R, "all_reduce", "all-reduce in forward, all-reduce in backward"},
    {CSPMD_LT_P, CSPMD_LT_I, "all_reduce", "all-reduce in forward, no-op backward"},
    {CSPMD_LT_R, CSPMD_LT_P, "convert",
     "zeros non-rank-0 in forward, zeros non-rank-0 in backward"},
};

static const char *full_name(cspmd_ltype_t t)
{
    switch (t) {
    case CSPMD_LT_R: return "Replicate";
    case CSPMD_LT_I: return "Invariant";
    case CSPMD_LT_V: return "Varying";
    case CSPMD_LT_P: return "Partial";
    case CSPMD_LT_NONE: return "Scalar"; /* the weak scalar _S */
    }
    return "Scalar";
}

static void sb_suggestions(sbuf_t *b, int lin, const int cnt[5], const char *ax)
{
    int any = 0;
    for (size_t k = 0; k < sizeof fixes / sizeof fixes[0]; k++) {
        int from = fixes[k].from, to = fixes[k].to;
        if (cnt[from] == 0)
            continue;
        int mod[5], rem[5], total = 0;
        memcpy(mod, cnt, sizeof mod);
        mod[from]--;
        mod[to]++;
        cspmd_ltype_t fix_out, nat_out;
        if (rule_eval(lin, mod, &fix_out) != AXIS_ERR_OK)
            continue;
        memcpy(rem, cnt, sizeof rem);
        rem[from]--;
        for (int t = 0; t < 5; t++)
            total += rem[t];
        if (total > 0 && rule_eval(lin, rem, &nat_out) == AXIS_ERR_OK && nat_out != fix_out)
            continue;
        if (!any)
            sb_add(b, "\nAre you missing a collective or a reinterpret/convert call? e.g.,");
        any = 1;
        sb_add(b, "\n  %s(tensor, %s, src=%s, dst=%s) on the %s operand (%s)", fixes[k].fn, ax,
               cspmd_ltype_letter(fixes[k].from), cspmd_ltype_letter(fixes[k].to),
               full_name(fixes[k].from), fixes[k].consequence);
    }
}

/* The per-axis rule with the reference's error text and suggestions. */
static cspmd_status_t axis_rule(int lin, const tlist_t *l, cspmd_axis_t axis,
                                cspmd_ltype_t *out)
{
    int err = rule_eval(lin, l->cnt, out);
    if (err == AXIS_ERR_OK)
        return CSPMD_OK;
    const char *ax = cspmd_axis_display(axis, 0);
    if (err == AXIS_ERR_EMPTY)
        return cspmd_error_set(CSPMD_ERR_VALUE, "No types provided for axis %s", ax);
    char msg[MSG_CAP];
    sbuf_t b = {msg, sizeof msg, 0};
    msg[0] = '\0';
    sb_base_error(&b, err, ax, l);
    size_t hint_at = b.len;
    /* Suggestions describe explicit conversions: judged on the own types. */
    sb_suggestions(&b, lin, l->ocnt, ax);
    cspmd_status_t st = cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "%s", msg);
    if (b.len > hint_at)
        cspmdi_error_hint_from(hint_at);
    return st;
}

cspmd_status_t cspmd_infer_axis(const char *linearity, const cspmd_ltype_t *types, int n,
                                cspmd_axis_t axis, cspmd_ltype_t *out)
{
    if (linearity == NULL || out == NULL || n < 0 || (n > 0 && types == NULL))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_infer_axis: bad arguments");
    int lin;
    if (strcmp(linearity, "LINEAR") == 0)
        lin = CSPMDI_LIN_LINEAR;
    else if (strcmp(linearity, "MULTILINEAR") == 0)
        lin = CSPMDI_LIN_MULTILINEAR;
    else if (strcmp(linearity, "NONLINEAR") == 0)
        lin = CSPMDI_LIN_NONLINEAR;
    else
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_infer_axis: unknown linearity '%s'",
                               linearity);
    if (!cspmdi_axis_valid(axis))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_infer_axis: unknown axis id %u",
                               (unsigned)axis);
    tlist_t l;
    tl_init(&l);
    for (int k = 0; k < n; k++) {
        if ((int)types[k] < 0 || (int)types[k] > CSPMD_LT_P)
            return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_infer_axis: bad local type %d",
                                   (int)types[k]);
        tl_push(&l, types[k]);
    }
    return axis_rule(lin, &l, axis, out);
}

/* ===================================================================== */
/* Operand views                                                         */
/* ===================================================================== */

static uint64_t arg_bit(unsigned arg)
{
    return UINT64_C(1) << (arg < 63 ? arg : 63);
}

typedef struct view {
    int has_lead;
    cspmd_type_t lead;
    const cspmd_operand_t *ops;
    int n;
    uint64_t argmask;    /* operands whose arg is in the mask belong      */
    uint64_t coefmask;   /* ... and are coefficients when also in this    */
    uint64_t scalarmask; /* SCALAR operands at these args are weak _S     */
    uint64_t zeromask;   /* ... unless zero (CSPMD_OPERAND_ZERO) here     */
} view_t;

/* One tensor-like element of a view. */
typedef struct elem {
    int n;
    cspmd_axis_t axes[CSPMD_MAX_AXES];
    cspmd_ltype_t lt[CSPMD_MAX_AXES];
    int coef;
    int untyped; /* no type at all (never annotated), not merely no axes */
    int no_grad; /* cannot receive a gradient from this op */
} elem_t;

/* Element k of the operand list, if it is a tensor-like element of the
 * view (returns 1 and fills e), else 0.  k == -1 is the lead. */
static int view_elem(const view_t *v, int k, elem_t *e)
{
    if (k < 0) {
        if (!v->has_lead)
            return 0;
        e->n = cspmdi_type_axes(v->lead, e->axes, e->lt);
        if (e->n < 0)
            e->n = 0;
        e->coef = 0;
        e->untyped = v->lead == CSPMD_TYPE_UNTYPED;
        e->no_grad = 0; /* an intermediate result: counted as able to */
        return 1;
    }
    const cspmd_operand_t *o = &v->ops[k];
    uint64_t bit = arg_bit(o->arg);
    if (!(v->argmask & bit) || o->kind == CSPMD_OPERAND_SCALAR)
        return 0;
    e->n = cspmdi_type_axes(o->type, e->axes, e->lt);
    if (e->n < 0)
        e->n = 0;
    if (o->kind == CSPMD_OPERAND_TYPED && e->n == 0)
        return 0; /* a Scalar wrapper with no axes adds nothing */
    e->coef = (v->coefmask & bit) != 0;
    e->untyped = o->type == CSPMD_TYPE_UNTYPED;
    e->no_grad = o->kind == CSPMD_OPERAND_TYPED || (o->flags & CSPMD_OPERAND_NO_GRAD) != 0;
    return 1;
}

static cspmd_ltype_t elem_get(const elem_t *e, cspmd_axis_t axis)
{
    for (int j = 0; j < e->n; j++)
        if (e->axes[j] == axis)
            return e->lt[j];
    return CSPMD_LT_NONE;
}

/* The missing-axis errors' hint: when the elements of v are typed on more
 * than one set of axes, the cross-mesh advice for their types (a
 * compatible mesh to reinterpret to, a sub-axis, a rank overlap), after a
 * blank line.  Error path only: it may allocate. */
static void sb_cross_mesh_hint(sbuf_t *b, const view_t *v)
{
    cspmd_type_t *types = malloc((size_t)(v->n + 1) * sizeof *types);
    if (types == NULL)
        return;
    int n = 0;
    elem_t e;
    for (int k = v->has_lead ? -1 : 0; k < v->n; k++) {
        if (!view_elem(v, k, &e))
            continue;
        types[n++] = k < 0 ? v->lead : v->ops[k].type;
    }
    char advice[MSG_CAP];
    if (cspmd_cross_mesh_advice(types, n, advice, sizeof advice) > 0)
        sb_add(b, "\n\nHint: %s", advice);
    free(types);
}

/* Sort by display name, then id. */
static void sort_by_name(cspmd_axis_t *a, int n)
{
    for (int i = 1; i < n; i++) {
        cspmd_axis_t x = a[i];
        const char *xn = cspmd_axis_display(x, 0);
        int j = i - 1;
        while (j >= 0) {
            int c = strcmp(cspmd_axis_display(a[j], 0), xn);
            if (c < 0 || (c == 0 && a[j] < x))
                break;
            a[j + 1] = a[j];
            j--;
        }
        a[j + 1] = x;
    }
}

static void sb_axis_set(sbuf_t *b, const cspmd_axis_t *axes, int n)
{
    cspmd_axis_t tmp[UNION_CAP];
    if (n > UNION_CAP)
        n = UNION_CAP;
    memcpy(tmp, axes, (size_t)n * sizeof tmp[0]);
    cspmd_axes_sort_outer(tmp, n);
    sb_add(b, "{");
    for (int i = 0; i < n; i++)
        sb_add(b, "%s%s", i ? ", " : "", cspmd_axis_display(tmp[i], 0));
    sb_add(b, "}");
}

typedef struct mesh_info {
    int n; /* -1: no current mesh */
    cspmd_axis_t axes[CSPMD_MAX_AXES];
    int strict;
} mesh_info_t;

static int axis_in(const cspmd_axis_t *a, int n, cspmd_axis_t x)
{
    for (int i = 0; i < n; i++)
        if (a[i] == x)
            return 1;
    return 0;
}

/* The R/I coercion on one axis: R and I differ only in the gradient they
 * accept.  When I meets a type other than I (weak scalars aside), the R
 * and I operands that cannot receive a gradient take the flavour of those
 * that can -- I if those are I, R if they are R or there are none.  When
 * both R and I operands can receive one, nothing is coerced (the mix is an
 * error).  Returns the flavour, or CSPMD_LT_NONE for no coercion. */
static cspmd_ltype_t ri_flavour(const view_t *v, cspmd_axis_t axis)
{
    int has_i = 0, other = 0, fixed_r = 0, fixed_i = 0;
    elem_t e;
    for (int k = v->has_lead ? -1 : 0; k < v->n; k++) {
        if (!view_elem(v, k, &e))
            continue;
        cspmd_ltype_t t = elem_get(&e, axis);
        if (t == CSPMD_LT_NONE)
            continue;
        if (t == CSPMD_LT_I)
            has_i = 1;
        else
            other = 1;
        if (!e.no_grad) {
            fixed_r |= t == CSPMD_LT_R;
            fixed_i |= t == CSPMD_LT_I;
        }
    }
    if (!has_i || !other || (fixed_r && fixed_i))
        return CSPMD_LT_NONE;
    return fixed_i ? CSPMD_LT_I : CSPMD_LT_R;
}

/* Full multi-axis inference over a view with linearity lin. */
static cspmd_status_t infer_view(const view_t *v, int lin, const mesh_info_t *m,
                                 cspmd_type_t *out)
{
    cspmd_axis_t all[UNION_CAP];
    int nall = 0, any_axes = 0, nfree_s = 0, ncoef_s = 0;
    elem_t e;

    /* Union of operand axes, and the weak scalars. */
    for (int k = v->has_lead ? -1 : 0; k < v->n; k++) {
        if (k >= 0 && v->ops[k].kind == CSPMD_OPERAND_SCALAR) {
            uint64_t bit = arg_bit(v->ops[k].arg);
            if ((v->zeromask & bit) && (v->ops[k].flags & CSPMD_OPERAND_ZERO))
                continue; /* a zero adds nothing to a linear op */
            if ((v->argmask & bit) && (v->scalarmask & bit)) {
                if (v->coefmask & bit)
                    ncoef_s++;
                else
                    nfree_s++;
            }
            continue;
        }
        if (!view_elem(v, k, &e))
            continue;
        for (int j = 0; j < e.n; j++) {
            any_axes = 1;
            if (!axis_in(all, nall, e.axes[j])) {
                if (nall == UNION_CAP)
                    return cspmd_error_set(CSPMD_ERR_NOMEM,
                                           "cspmd_infer: more than %d axes among the operands",
                                           UNION_CAP);
                all[nall++] = e.axes[j];
            }
        }
    }
    if (!any_axes)
        nfree_s = ncoef_s = 0; /* scalars add nothing without axes */
    for (int j = 0; j < m->n; j++) {
        if (axis_in(all, nall, m->axes[j]))
            continue;
        if (nall == UNION_CAP)
            return cspmd_error_set(CSPMD_ERR_NOMEM,
                                   "cspmd_infer: more than %d axes among the operands and the "
                                   "current mesh",
                                   UNION_CAP);
        all[nall++] = m->axes[j];
    }
    sort_by_name(all, nall);

    cspmd_axis_t oaxes[CSPMD_MAX_AXES];
    cspmd_ltype_t olt[CSPMD_MAX_AXES];
    int nout = 0;
    tlist_t fl, cl;
    for (int a = 0; a < nall; a++) {
        cspmd_axis_t axis = all[a];
        tl_init(&fl);
        tl_init(&cl);
        cspmd_ltype_t flavour = ri_flavour(v, axis);
        int idx = 0, present = 0;
        for (int k = v->has_lead ? -1 : 0; k < v->n; k++) {
            if (!view_elem(v, k, &e))
                continue;
            int my = idx++;
            cspmd_ltype_t t = elem_get(&e, axis);
            if (t == CSPMD_LT_NONE) {
                if (!m->strict)
                    continue;
                char msg[MSG_CAP];
                sbuf_t b = {msg, sizeof msg, 0};
                msg[0] = '\0';
                if (m->n >= 0 && axis_in(m->axes, m->n, axis)) {
                    sb_add(&b, "args[%d] missing axis %s from the current mesh ", my,
                           cspmd_axis_display(axis, 0));
                    sb_axis_set(&b, m->axes, m->n);
                    sb_add(&b, ". args[%d] has axes ", my);
                    sb_axis_set(&b, e.axes, e.n);
                    sb_add(&b, ".");
                } else {
                    sb_add(&b, "args[%d] missing axis %s. args[%d] has axes ", my,
                           cspmd_axis_display(axis, 0), my);
                    sb_axis_set(&b, e.axes, e.n);
                    sb_add(&b, ", but the union of all operand axes is ");
                    sb_axis_set(&b, all, nall);
                    sb_add(&b, ". All operands must be annotated on the same set of mesh axes.");
                }
                if (e.untyped)
                    sb_add(&b, " args[%d] has no type at all: annotate it with assert_type().",
                           my);
                sb_cross_mesh_hint(&b, v);
                return cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "%s", msg);
            }
            present++;
            int coerce = flavour != CSPMD_LT_NONE && e.no_grad &&
                         (t == CSPMD_LT_R || t == CSPMD_LT_I);
            tl_push_as(e.coef ? &cl : &fl, t, coerce ? flavour : t);
        }
        if (present == 0)
            continue; /* nobody is typed on this axis: the output lacks it */
        for (int s = 0; s < nfree_s; s++)
            tl_push(&fl, CSPMD_LT_NONE);
        for (int s = 0; s < ncoef_s; s++)
            tl_push(&cl, CSPMD_LT_NONE);

        cspmd_ltype_t r;
        cspmd_status_t st;
        if (cl.n == 0) {
            st = axis_rule(lin, &fl, axis, &r);
        } else {
            /* LINEAR in the free operands, coefficients multiply. */
            tlist_t g;
            tl_init(&g);
            if (fl.n > 0) {
                st = axis_rule(CSPMDI_LIN_LINEAR, &fl, axis, &r);
                if (st != CSPMD_OK)
                    return st;
                tl_push(&g, r);
            }
            int shown = cl.n < LIST_CAP ? cl.n : LIST_CAP;
            for (int k = 0; k < shown; k++)
                tl_push_as(&g, (cspmd_ltype_t)cl.v[k], (cspmd_ltype_t)cl.cv[k]);
            if (cl.n > shown) { /* keep exact counts past LIST_CAP */
                for (int t = 0; t < 5; t++) {
                    g.cnt[t] += cl.cnt[t];
                    g.ocnt[t] += cl.ocnt[t];
                }
                for (int k = 0; k < shown; k++) {
                    g.cnt[cl.cv[k]]--;
                    g.ocnt[cl.v[k]]--;
                }
                g.n += cl.n - shown;
            }
            st = axis_rule(CSPMDI_LIN_MULTILINEAR, &g, axis, &r);
        }
        if (st != CSPMD_OK)
            return st;
        if (nout == CSPMD_MAX_AXES)
            return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd: more than %d axes in one type",
                                   CSPMD_MAX_AXES);
        oaxes[nout] = axis;
        olt[nout] = r;
        nout++;
    }
    if (nout == 0) {
        *out = CSPMD_TYPE_EMPTY;
        return CSPMD_OK;
    }
    return cspmd_type_make(oaxes, olt, nout, NULL, out);
}

/* R on every axis of the current mesh, or {} without one. */
static cspmd_status_t deterministic(const mesh_info_t *m, cspmd_type_t *out)
{
    if (m->n <= 0) {
        *out = CSPMD_TYPE_EMPTY;
        return CSPMD_OK;
    }
    cspmd_ltype_t lt[CSPMD_MAX_AXES];
    for (int j = 0; j < m->n; j++)
        lt[j] = CSPMD_LT_R;
    return cspmd_type_make(m->axes, lt, m->n, NULL, out);
}

/* "<op>: Partial type in nonlinear argument on axis X is not allowed". */
static cspmd_status_t check_nonlinear_args(const cspmdi_rule_t *r, const cspmd_operand_t *ops,
                                           int n)
{
    if (r->nonlin_pos == 0)
        return CSPMD_OK;
    for (int k = 0; k < n; k++) {
        if (ops[k].kind == CSPMD_OPERAND_SCALAR || !(r->nonlin_pos & arg_bit(ops[k].arg)))
            continue;
        cspmd_axis_t axes[CSPMD_MAX_AXES];
        cspmd_ltype_t lt[CSPMD_MAX_AXES];
        int na = cspmdi_type_axes(ops[k].type, axes, lt);
        cspmd_axis_t bad[CSPMD_MAX_AXES];
        int nb = 0;
        for (int j = 0; j < na; j++)
            if (lt[j] == CSPMD_LT_P)
                bad[nb++] = axes[j];
        if (nb == 0)
            continue;
        sort_by_name(bad, nb);
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "%s: Partial type in nonlinear argument on axis %s is not allowed "
                               "(the op is not linear in this argument, e.g. a divisor, an index "
                               "or a saved activation). Reduce it first with all_reduce.",
                               cspmdi_rule_short_name(r), cspmd_axis_display(bad[0], 0));
    }
    return CSPMD_OK;
}

static int has_axes(cspmd_type_t t)
{
    return cspmdi_type_axes(t, NULL, NULL) > 0;
}

/* A factory shaped like its tensor operand (CSPMDI_RF_LIKE): inferred as
 * a nonlinear op over the operand's type with P read as R, then P put
 * back on those axes when the fill is zero. */
static cspmd_status_t infer_like(const cspmdi_rule_t *r, const cspmd_operand_t *ops, int n,
                                 const mesh_info_t *m, cspmd_type_t *out)
{
    int self = -1, zero = (r->flags & CSPMDI_RF_ZEROS) != 0;
    for (int k = 0; k < n; k++) {
        if (ops[k].kind == CSPMD_OPERAND_SCALAR) {
            zero |= ops[k].arg < 64 && ((r->zero_free_pos >> ops[k].arg) & 1u) &&
                    (ops[k].flags & CSPMD_OPERAND_ZERO);
            continue;
        }
        if (self < 0 && ops[k].kind == CSPMD_OPERAND_TENSOR)
            self = k;
    }
    cspmd_axis_t axes[CSPMD_MAX_AXES];
    cspmd_ltype_t lt[CSPMD_MAX_AXES];
    int na = self < 0 ? 0 : cspmdi_type_axes(ops[self].type, axes, lt);
    int any_p = 0;
    for (int j = 0; j < na; j++)
        any_p |= lt[j] == CSPMD_LT_P;
    if (!any_p) { /* the plain rule: the operand's type */
        view_t plain = {0, 0, ops, n, ~UINT64_C(0), 0, r->scalar_pos, r->zero_free_pos};
        return infer_view(&plain, r->lin, m, out);
    }
    cspmd_type_t read = ops[self].type;
    for (int j = 0; j < na; j++)
        if (lt[j] == CSPMD_LT_P) {
            cspmd_status_t st = cspmd_type_with(read, axes[j], CSPMD_LT_R, &read);
            if (st != CSPMD_OK)
                return st;
        }
    /* the other operands (a typed fill value) as the rule says, the
     * operand itself replaced by its P-free reading */
    view_t v = {1, read, ops, n, ~arg_bit(ops[self].arg), 0, r->scalar_pos, r->zero_free_pos};
    cspmd_status_t st = infer_view(&v, r->lin, m, out);
    if (st != CSPMD_OK || !zero)
        return st;
    for (int j = 0; j < na; j++)
        if (lt[j] == CSPMD_LT_P && cspmd_type_get(*out, axes[j]) == CSPMD_LT_R) {
            st = cspmd_type_with(*out, axes[j], CSPMD_LT_P, out);
            if (st != CSPMD_OK)
                return st;
        }
    return CSPMD_OK;
}

static cspmd_status_t infer_uncached(const cspmdi_rule_t *r, const cspmd_operand_t *ops, int n,
                                     const mesh_info_t *m, cspmd_type_t *out)
{
    view_t v = {0, 0, ops, n, ~UINT64_C(0), 0, r->scalar_pos, r->zero_free_pos};
    if (r->operand_pos)
        v.argmask = r->operand_pos;
    if (r->lin == CSPMDI_LIN_LINEAR && !(r->flags & CSPMDI_RF_DECOMP))
        v.coefmask = r->nonlin_pos;

    cspmd_status_t st = check_nonlinear_args(r, ops, n);
    if (st != CSPMD_OK)
        return st;

    switch ((cspmd_rule_kind_t)r->kind) {
    case CSPMD_KIND_PASSTHROUGH:
        *out = CSPMD_TYPE_UNTYPED;
        return CSPMD_OK;
    case CSPMD_KIND_FACTORY: {
        if (r->flags & CSPMDI_RF_IGNORE_OPERANDS)
            return deterministic(m, out);
        int counted = 0;
        for (int k = 0; k < n; k++) {
            if (ops[k].kind == CSPMD_OPERAND_SCALAR)
                continue;
            if (ops[k].kind == CSPMD_OPERAND_TENSOR && !(r->flags & CSPMDI_RF_FRESH))
                counted++;
            else if (has_axes(ops[k].type))
                counted++;
        }
        if (counted == 0)
            return deterministic(m, out);
        if (r->flags & CSPMDI_RF_LIKE)
            return infer_like(r, ops, n, m, out);
        return infer_view(&v, r->lin, m, out);
    }
    case CSPMD_KIND_FILL:
    case CSPMD_KIND_RANDOM_FILL: {
        int self = -1, others = 0;
        for (int k = 0; k < n; k++) {
            if (ops[k].kind == CSPMD_OPERAND_TENSOR && ops[k].arg == 0 && self < 0)
                self = k;
            else if (ops[k].kind != CSPMD_OPERAND_SCALAR && has_axes(ops[k].type))
                others = 1;
        }
        int self_typed = self >= 0 && has_axes(ops[self].type);
        if (r->kind == CSPMD_KIND_RANDOM_FILL) {
            *out = self_typed ? cspmd_type_local(ops[self].type) : CSPMD_TYPE_EMPTY;
            return CSPMD_OK;
        }
        if (!others)
            return self_typed ? (*out = cspmd_type_local(ops[self].type), CSPMD_OK)
                              : deterministic(m, out);
        if (!self_typed)
            v.argmask &= ~arg_bit(0); /* infer from the fill value alone */
        return infer_view(&v, r->lin, m, out);
    }
    case CSPMD_KIND_INFER:
    case CSPMD_KIND_FOREACH: /* an element of a list op: the rule below */
        break;
    }

    if (r->flags & CSPMDI_RF_DECOMP) {
        view_t mm = {0, 0, ops, n, arg_bit((unsigned)r->dec_a) | arg_bit((unsigned)r->dec_b), 0,
                     0, 0};
        cspmd_type_t t1;
        st = infer_view(&mm, CSPMDI_LIN_MULTILINEAR, m, &t1);
        if (st != CSPMD_OK)
            return st;
        int have_self = 0;
        for (int k = 0; k < n; k++)
            if (ops[k].kind != CSPMD_OPERAND_SCALAR && ops[k].arg == (unsigned)r->dec_self)
                have_self = 1;
        if (!have_self) {
            *out = t1;
            return CSPMD_OK;
        }
        view_t lin = {1, t1, ops, n, arg_bit((unsigned)r->dec_self), 0, 0, 0};
        return infer_view(&lin, CSPMDI_LIN_LINEAR, m, out);
    }
    return infer_view(&v, r->lin, m, out);
}

/* ===================================================================== */
/* The per-thread memo                                                   */
/* ===================================================================== */

typedef struct memo_op {
    uint32_t type;
    uint16_t arg;
    uint8_t kind;
    uint8_t flags;
} memo_op_t;

typedef struct memo_entry {
    int32_t rule_plus1; /* 0: empty slot */
    uint32_t mesh;
    uint8_t strict, n;
    uint16_t pad;
    cspmd_type_t out;
    memo_op_t ops[MEMO_OPS];
} memo_entry_t;

static _Thread_local memo_entry_t tl_memo[MEMO_SIZE];

/* Operand lists up to this long are auto-reinterpreted onto the mesh in
 * a stack array; longer ones in a heap array. */
#define AUTO_REINTERPRET_INLINE 128
/* Rules describe schema arguments with 64-bit masks (a weak scalar past
 * them is at no declared position, as a typed one is). */
#define RULE_ARGS_MAX 64

static uint32_t mix(uint32_t h, uint32_t x)
{
    h ^= x;
    h *= 0x01000193u;
    return h ^ (h >> 15);
}

static void memo_key(const cspmd_operand_t *ops, int n, memo_op_t *k)
{
    for (int i = 0; i < n; i++) {
        k[i].type = ops[i].kind == CSPMD_OPERAND_SCALAR ? 0u : ops[i].type;
        k[i].arg = ops[i].arg;
        k[i].kind = ops[i].kind;
        /* DATA marks the user's data and changes no inferred type. */
        k[i].flags = ops[i].flags & (uint8_t)~CSPMD_OPERAND_DATA;
    }
}

/* A cast that truncates (CSPMD_OPERAND_TRUNCATED) takes no Partial operand. */
static cspmd_status_t check_truncated(cspmd_type_t type)
{
    int n = cspmd_type_naxes(type);
    for (int i = 0; i < n; i++) {
        cspmd_axis_t axis;
        cspmd_ltype_t t;
        if (cspmd_type_entry(type, i, &axis, &t) == CSPMD_OK && t == CSPMD_LT_P)
            return cspmd_error_set(
                CSPMD_ERR_SPMD_TYPE,
                "Partial type on axis %s cannot be cast to an integer or bool dtype (the "
                "truncation of a partial sum != the partial sum of truncations). Reduce first "
                "with all_reduce or reduce_scatter, then cast.",
                cspmd_axis_display(axis, 0));
    }
    return CSPMD_OK;
}

cspmd_status_t cspmd_infer(cspmd_rule_t rule, const cspmd_operand_t *ops, int n,
                           cspmd_type_t *out)
{
    const cspmdi_rule_t *r = cspmdi_rule_get(rule);
    if (r == NULL)
        return cspmdi_rule_missing(rule, "cspmd_infer");
    if (out == NULL || n < 0 || (n > 0 && ops == NULL))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_infer: bad arguments (n = %d)", n);

    uint32_t mesh = cspmdi_mesh_id();
    int strict = cspmd_checker_strict() ? 1 : 0;

    memo_op_t key[MEMO_OPS];
    memo_entry_t *slot = NULL;
    if (n <= MEMO_OPS) {
        memo_key(ops, n, key);
        uint32_t h = mix(mix(mix(0x811c9dc5u, (uint32_t)rule), mesh), (uint32_t)(strict | n << 1));
        for (int i = 0; i < n; i++)
            h = mix(mix(h, key[i].type),
                    (uint32_t)key[i].arg << 16 | (uint32_t)key[i].flags << 8 | key[i].kind);
        slot = &tl_memo[h & (MEMO_SIZE - 1)];
        if (slot->rule_plus1 == rule + 1 && slot->mesh == mesh && slot->strict == strict &&
            slot->n == n && memcmp(slot->ops, key, (size_t)n * sizeof key[0]) == 0) {
            *out = slot->out;
            return CSPMD_OK;
        }
    }

    /* Miss: validate the operands, then infer. */
    for (int i = 0; i < n; i++) {
        if (ops[i].kind > CSPMD_OPERAND_TYPED)
            return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_infer: operand %d has bad kind %u",
                                   i, (unsigned)ops[i].kind);
        if (ops[i].flags & ~(CSPMD_OPERAND_NO_GRAD | CSPMD_OPERAND_ZERO | CSPMD_OPERAND_DATA |
                             CSPMD_OPERAND_TRUNCATED))
            return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_infer: operand %d has bad flags %u",
                                   i, (unsigned)ops[i].flags);
        if ((ops[i].flags & CSPMD_OPERAND_TRUNCATED) && ops[i].kind == CSPMD_OPERAND_TENSOR) {
            cspmd_status_t st = check_truncated(ops[i].type);
            if (st != CSPMD_OK)
                return st;
        }
        if (ops[i].kind == CSPMD_OPERAND_TENSOR && ops[i].arg >= RULE_ARGS_MAX)
            return cspmd_error_set(CSPMD_ERR_VALUE,
                                   "%s: operand %d comes from schema argument %u; cspmd's op "
                                   "rules describe at most %d schema arguments, so this op "
                                   "cannot be checked",
                                   r->name[0] ? cspmdi_rule_short_name(r) : "op", i,
                                   (unsigned)ops[i].arg, RULE_ARGS_MAX);
        if (ops[i].kind != CSPMD_OPERAND_SCALAR && !cspmdi_type_valid(ops[i].type))
            return cspmd_error_set(CSPMD_ERR_MISUSE,
                                   "cspmd_infer: operand %d has unknown type id %u", i,
                                   (unsigned)ops[i].type);
    }
    mesh_info_t m;
    m.strict = strict;
    m.n = mesh ? cspmdi_mesh_axes(mesh, m.axes) : -1;

    /* Stage 1: operands typed on other axes than the current
     * mesh's are reinterpreted onto it (unchanged when their axes are mesh
     * axes already). */
    cspmd_operand_t conv_inline[AUTO_REINTERPRET_INLINE], *conv = conv_inline;
    if (mesh) {
        int changed = 0, idx = 0;
        for (int i = 0; i < n && !changed; i++) {
            if (ops[i].kind == CSPMD_OPERAND_SCALAR)
                continue;
            cspmd_type_t t;
            cspmd_status_t st = cspmd_type_to_mesh(ops[i].type, idx++, &t);
            if (st != CSPMD_OK)
                return st;
            changed = t != ops[i].type;
        }
        if (changed) {
            if (n > AUTO_REINTERPRET_INLINE) {
                conv = malloc((size_t)n * sizeof *conv);
                if (conv == NULL)
                    return cspmd_error_set(CSPMD_ERR_NOMEM,
                                           "cspmd_infer: out of memory for %d operands", n);
            }
            idx = 0;
            for (int i = 0; i < n; i++) {
                conv[i] = ops[i];
                if (ops[i].kind == CSPMD_OPERAND_SCALAR)
                    continue;
                cspmd_status_t st = cspmd_type_to_mesh(ops[i].type, idx++, &conv[i].type);
                if (st != CSPMD_OK) {
                    if (conv != conv_inline)
                        free(conv);
                    return st;
                }
            }
            ops = conv;
        }
    }

    cspmd_type_t res;
    cspmd_status_t st = infer_uncached(r, ops, n, &m, &res);
    if (conv != conv_inline)
        free(conv);
    if (st != CSPMD_OK)
        return st;
    *out = res;
    if (slot != NULL && !tl_relax) {
        slot->rule_plus1 = rule + 1;
        slot->mesh = mesh;
        slot->strict = (uint8_t)strict;
        slot->n = (uint8_t)n;
        slot->out = res;
        memcpy(slot->ops, key, (size_t)n * sizeof key[0]);
    }
    return CSPMD_OK;
}

/* ===================================================================== */
/* List ops, element by element                                          */
/* ===================================================================== */

cspmd_status_t cspmd_infer_element(cspmd_rule_t rule, int64_t index, const cspmd_operand_t *ops,
                                   int n, cspmd_type_t *out)
{
    if (cspmd_rule_kind(rule) != CSPMD_KIND_FOREACH)
        return cspmd_error_set(CSPMD_ERR_MISUSE,
                               "cspmd_infer_element: rule %d is not a list op's rule", (int)rule);
    cspmd_status_t st = cspmd_infer(cspmdi_rule_element(rule), ops, n, out);
    if (st == CSPMD_OK || st == CSPMD_ERR_MISUSE)
        return st;
    char msg[MSG_CAP];
    snprintf(msg, sizeof msg, "%s", cspmd_last_error());
    return cspmd_error_set(st, "list element [%lld]: %s", (long long)index, msg);
}
