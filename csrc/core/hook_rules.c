/*
 * hook_rules.c -- the typing rules an spmd_typecheck hook composes
 * (cspmd.rules): the einsum rule of an opaque kernel, and the type-only
 * collectives and transitions.  They reuse the op rule (cspmd_infer) and
 * the collectives' (src, dst) table (cspmd_coll_validate); what is theirs
 * is reading shardings from partition specs and the exact-src check.
 */
#include <stdio.h>
#include <string.h>

#include "core.h"

#define EINSUM_MAX_OPS 64
/* Synthetic labels of the dims "..." stands for: ELLIPSIS_BASE - k. */
#define ELLIPSIS_BASE (-100)

static const char *ax(cspmd_axis_t a)
{
    return cspmd_axis_display(a, cspmd_axis_print_debug());
}

/* ---- einsum ----------------------------------------------------------- */

/* The axes sharding one label (global axes only), outermost first. */
typedef struct label_axes {
    int32_t label;
    int n;
    cspmd_axis_t axes[CSPMD_MAX_AXES];
} label_axes_t;

typedef struct einsum_state {
    const char *eq;
    int nlabels;
    label_axes_t labels[EINSUM_MAX_OPS * CSPMD_MAX_DIMS];
    int naxis;
    cspmd_axis_t axis[CSPMD_MAX_AXES * CSPMD_MAX_DIMS]; /* axis -> the label it shards */
    int32_t axis_label[CSPMD_MAX_AXES * CSPMD_MAX_DIMS];
} einsum_state_t;

/* A label as written: a letter in UTF-8, "_" or "...k". */
typedef struct label_text {
    char s[16];
} label_text_t;

static label_text_t label_str(int32_t l)
{
    label_text_t r;
    unsigned c = (unsigned)l;
    if (l == CSPMD_EINSUM_OPAQUE)
        snprintf(r.s, sizeof r.s, "_");
    else if (l <= ELLIPSIS_BASE)
        snprintf(r.s, sizeof r.s, "...%d", (int)(ELLIPSIS_BASE - l));
    else if (c < 0x80)
        snprintf(r.s, sizeof r.s, "%c", (char)c);
    else if (c < 0x800)
        snprintf(r.s, sizeof r.s, "%c%c", (char)(0xC0 | c >> 6), (char)(0x80 | (c & 0x3F)));
    else if (c < 0x10000)
        snprintf(r.s, sizeof r.s, "%c%c%c", (char)(0xE0 | c >> 12),
                 (char)(0x80 | (c >> 6 & 0x3F)), (char)(0x80 | (c & 0x3F)));
    else
        snprintf(r.s, sizeof r.s, "%c%c%c%c", (char)(0xF0 | c >> 18),
                 (char)(0x80 | (c >> 12 & 0x3F)), (char)(0x80 | (c >> 6 & 0x3F)),
                 (char)(0x80 | (c & 0x3F)));
    return r;
}

/* "(a, b)" or "None" for a label's axes. */
typedef struct axes_text {
    char s[256];
} axes_text_t;

static axes_text_t axes_str(const cspmd_axis_t *axes, int n)
{
    axes_text_t r;
    if (n == 0) {
        snprintf(r.s, sizeof r.s, "None");
        return r;
    }
    size_t k = (size_t)snprintf(r.s, sizeof r.s, "(");
    for (int i = 0; i < n && k < sizeof r.s; i++)
        k += (size_t)snprintf(r.s + k, sizeof r.s - k, "%s%s", i ? ", " : "", ax(axes[i]));
    if (k < sizeof r.s)
        snprintf(r.s + k, sizeof r.s - k, ")");
    return r;
}

/* Expand one term's labels: "..." becomes ell synthetic labels. */
static int expand(const int32_t *labels, int n, int ell, int32_t *out)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (labels[i] == CSPMD_EINSUM_ELLIPSIS)
            for (int j = 0; j < ell; j++)
                out[k++] = ELLIPSIS_BASE - j;
        else
            out[k++] = labels[i];
    }
    return k;
}

static label_axes_t *find_label(einsum_state_t *s, int32_t label)
{
    for (int i = 0; i < s->nlabels; i++)
        if (s->labels[i].label == label)
            return &s->labels[i];
    return NULL;
}

static int has_label(const int32_t *labels, int n, int32_t label)
{
    for (int i = 0; i < n; i++)
        if (labels[i] == label)
            return 1;
    return 0;
}

/* Check the terms against the ranks; *ell is the rank "..." stands for. */
static cspmd_status_t bind_terms(const char *eq, const cspmd_einsum_operand_t *ops, int n,
                                 int *ell)
{
    int rank = -1, from = -1;
    for (int i = 0; i < n; i++) {
        int has_ell = 0;
        for (int j = 0; j < ops[i].nlabels; j++)
            has_ell |= ops[i].labels[j] == CSPMD_EINSUM_ELLIPSIS;
        int explicit_n = ops[i].nlabels - has_ell;
        if (!has_ell) {
            if (ops[i].ndim != explicit_n)
                return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                       "rules.einsum: '%s': operand %d has %d label(s) but %d "
                                       "dim(s)",
                                       eq, i, explicit_n, (int)ops[i].ndim);
            continue;
        }
        int r = ops[i].ndim - explicit_n;
        if (r < 0)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "rules.einsum: '%s': operand %d needs at least %d dim(s) for "
                                   "its explicit labels but has %d",
                                   eq, i, explicit_n, (int)ops[i].ndim);
        if (rank >= 0 && r != rank)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "rules.einsum: '%s': '...' must stand for the same number of "
                                   "dims on every operand, but operand %d gives it %d and "
                                   "operand %d gives it %d",
                                   eq, from, rank, i, r);
        rank = r;
        from = i;
    }
    *ell = rank < 0 ? 0 : rank;
    return CSPMD_OK;
}

/* The global axes of one spec entry, in order. */
static cspmd_status_t global_entry(const cspmd_spec_t *spec, int dim, int all_global,
                                   cspmd_axis_t *axes, int *n)
{
    *n = 0;
    if (spec == NULL || dim >= spec->ndim)
        return CSPMD_OK;
    for (int j = 0; j < spec->nentry[dim]; j++) {
        int global = 1;
        if (!all_global) {
            cspmd_status_t st = cspmd_axis_is_global(spec->entry[dim][j], &global);
            if (st != CSPMD_OK)
                return st;
        }
        if (global)
            axes[(*n)++] = spec->entry[dim][j];
    }
    return CSPMD_OK;
}

/* Which label every global axis shards, with the consistency rules. */
static cspmd_status_t read_shardings(einsum_state_t *s, const cspmd_einsum_operand_t *ops, int n,
                                     int32_t (*labels)[CSPMD_MAX_DIMS], const int *nl)
{
    int all_global = !cspmd_checker_enabled();
    for (int i = 0; i < n; i++) {
        const cspmd_spec_t *spec = cspmdi_type_spec_ref(ops[i].type);
        if (cspmdi_spec_strided(spec))
            return cspmdi_type_refuse_strided(ops[i].type, "rules.einsum");
        for (int d = 0; d < nl[i]; d++) {
            cspmd_axis_t axes[CSPMD_MAX_AXES];
            int na;
            cspmd_status_t st = global_entry(spec, d, all_global, axes, &na);
            if (st != CSPMD_OK)
                return st;
            int32_t l = labels[i][d];
            if (l == CSPMD_EINSUM_OPAQUE) {
                if (na)
                    return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                           "rules.einsum: operand %d of '%s' is sharded on %s at "
                                           "dim %d, which the equation marks '_' (must not be "
                                           "sharded)",
                                           i, s->eq, axes_str(axes, na).s, d);
                continue;
            }
            label_axes_t *prev = find_label(s, l);
            if (prev == NULL) {
                prev = &s->labels[s->nlabels++];
                prev->label = l;
                prev->n = na;
                memcpy(prev->axes, axes, (size_t)na * sizeof axes[0]);
            } else if (prev->n != na ||
                       memcmp(prev->axes, axes, (size_t)na * sizeof axes[0]) != 0) {
                return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                       "rules.einsum: label '%s' of '%s' is sharded "
                                       "inconsistently: %s vs %s (operand %d, dim %d)",
                                       label_str(l).s, s->eq, axes_str(prev->axes, prev->n).s,
                                       axes_str(axes, na).s, i, d);
            }
            for (int k = 0; k < na; k++) {
                int j = 0;
                while (j < s->naxis && s->axis[j] != axes[k])
                    j++;
                if (j == s->naxis) {
                    s->axis[s->naxis] = axes[k];
                    s->axis_label[s->naxis++] = l;
                } else if (s->axis_label[j] != l) {
                    return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                           "rules.einsum: axis %s shards both '%s' and '%s' in "
                                           "'%s'; an axis may shard only one dim",
                                           ax(axes[k]), label_str(s->axis_label[j]).s,
                                           label_str(l).s, s->eq);
                }
            }
        }
    }
    /* An operand broadcast over a sharded label holds one value for every
     * shard: it must not vary along that label's axis. */
    for (int j = 0; j < s->naxis; j++)
        for (int i = 0; i < n; i++)
            if (!has_label(labels[i], nl[i], s->axis_label[j]) &&
                cspmd_type_get(ops[i].type, s->axis[j]) == CSPMD_LT_V)
                return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                       "rules.einsum: operand %d of '%s' broadcasts over '%s', "
                                       "which is sharded on %s, so it must be replicated on %s, "
                                       "but it is Varying",
                                       i, s->eq, label_str(s->axis_label[j]).s, ax(s->axis[j]),
                                       ax(s->axis[j]));
    return CSPMD_OK;
}

/* "[0, 2]" */
static void index_list(char *buf, size_t len, const int *idx, int n)
{
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < n && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%d", i ? ", " : "", idx[i]);
    if (k < len)
        snprintf(buf + k, len - k, "]");
}

/* linear_in: per axis, the P operands must all lie in one group, the
 * rest of that group be P too, every other operand R; they then combine
 * as R and the output is P there.  Rewrites types[] and marks forced[]. */
static cspmd_status_t linear_partials(const char *eq, const cspmd_einsum_operand_t *ops, int n,
                                      cspmd_type_t *types, cspmd_axis_t *forced, int *nforced)
{
    cspmd_axis_t axes[EINSUM_MAX_OPS * CSPMD_MAX_AXES];
    int naxes = 0;
    for (int i = 0; i < n; i++) {
        cspmd_axis_t a[CSPMD_MAX_AXES];
        int na = cspmdi_type_axes(types[i], a, NULL);
        for (int k = 0; k < na; k++) {
            int j = 0;
            while (j < naxes && axes[j] != a[k])
                j++;
            if (j == naxes)
                axes[naxes++] = a[k];
        }
    }
    cspmdi_axes_sort(axes, naxes, 1);
    *nforced = 0;
    for (int j = 0; j < naxes; j++) {
        cspmd_axis_t a = axes[j];
        int p_ops[EINSUM_MAX_OPS], np = 0, group = -2, one_group = 1;
        for (int i = 0; i < n; i++)
            if (cspmd_type_get(types[i], a) == CSPMD_LT_P) {
                p_ops[np++] = i;
                if (ops[i].linear_group < 0 || (group != -2 && group != ops[i].linear_group))
                    one_group = 0;
                group = ops[i].linear_group;
            }
        if (np == 0)
            continue;
        char list[512];
        index_list(list, sizeof list, p_ops, np);
        if (!one_group) {
            char joined[512];
            index_list(joined, sizeof joined, p_ops, np);
            joined[strlen(joined) - 1] = '\0'; /* "[0, 1" -> "0, 1" below */
            if (np == 1)
                return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                       "rules.einsum: '%s': operand(s) %s are Partial on axis "
                                       "%s; a Partial may only pass through operands the op is "
                                       "linear in, all within one linear_in group (declare "
                                       "linear_in=(%s,) if the op is linear in it)",
                                       eq, list, ax(a), joined + 1);
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "rules.einsum: '%s': operand(s) %s are Partial on axis %s; a "
                                   "Partial may only pass through operands the op is linear in, "
                                   "all within one linear_in group (declare linear_in=(%s,) for "
                                   "multilinear, or linear_in=((%s),) for jointly linear)",
                                   eq, list, ax(a), joined + 1, joined + 1);
        }
        int members[EINSUM_MAX_OPS], nm = 0, all_p = 1;
        for (int i = 0; i < n; i++)
            if (ops[i].linear_group == group) {
                members[nm++] = i;
                all_p &= cspmd_type_get(types[i], a) == CSPMD_LT_P;
            }
        if (nm > 1 && !all_p) {
            char ml[512];
            index_list(ml, sizeof ml, members, nm);
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "rules.einsum: '%s': operands %s are declared jointly linear, "
                                   "so on axis %s either all or none of them may be Partial; %s "
                                   "are Partial and the rest are not (P + R is affine: the "
                                   "Replicate term would be summed once per rank)",
                                   eq, ml, ax(a), list);
        }
        for (int i = 0; i < n; i++) {
            cspmd_ltype_t t = cspmd_type_get(types[i], a);
            if (t == CSPMD_LT_P) {
                cspmd_status_t st = cspmd_type_with(types[i], a, CSPMD_LT_R, &types[i]);
                if (st != CSPMD_OK)
                    return st;
            } else if (t != CSPMD_LT_NONE && t != CSPMD_LT_R) {
                return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                       "rules.einsum: '%s': operand %d is %s on axis %s while "
                                       "operand(s) %s are Partial there; a Partial combines "
                                       "only with Replicate",
                                       eq, i, cspmd_ltype_letter(t), ax(a), list);
            }
        }
        forced[(*nforced)++] = a;
    }
    return CSPMD_OK;
}

/* The NONLINEAR op rule over the operands' local types. */
static cspmd_status_t infer_nonlinear(const char *eq, const cspmd_type_t *types, int n,
                                      cspmd_type_t *out)
{
    cspmd_operand_t ops[EINSUM_MAX_OPS];
    for (int i = 0; i < n; i++) {
        ops[i].type = cspmd_type_local(types[i]);
        ops[i].arg = (uint16_t)i;
        ops[i].kind = CSPMD_OPERAND_TENSOR;
        ops[i].flags = 0;
    }
    cspmd_status_t st = cspmd_infer(0, ops, n, out);
    if (st == CSPMD_ERR_SPMD_TYPE) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", cspmdi_error_message());
        return cspmd_error_set(st, "rules.einsum: '%s': %s", eq, msg);
    }
    return st;
}

/* The output is P on the axes of a contracted sharded label. */
static cspmd_status_t contract(einsum_state_t *s, const int32_t *out_labels, int n_out,
                               cspmd_type_t *out)
{
    for (int j = 0; j < s->naxis; j++) {
        if (has_label(out_labels, n_out, s->axis_label[j]))
            continue;
        cspmd_axis_t a = s->axis[j];
        cspmd_ltype_t t = cspmd_type_get(*out, a);
        if (t == CSPMD_LT_R)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "rules.einsum: '%s': the contraction over '%s' is sharded on "
                                   "%s but the inferred type there is R (Replicate). A "
                                   "replicated result cannot be partial -- this likely "
                                   "indicates an unsharded contraction dimension.",
                                   s->eq, label_str(s->axis_label[j]).s, ax(a));
        if (t == CSPMD_LT_I)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "rules.einsum: '%s': cannot mark axis %s as partial with type "
                                   "I; a sharded contraction makes only a V or P result partial",
                                   s->eq, ax(a));
        cspmd_status_t st = cspmd_type_with(*out, a, CSPMD_LT_P, out);
        if (st != CSPMD_OK)
            return st;
    }
    return CSPMD_OK;
}

static cspmd_status_t einsum_args_ok(const cspmd_einsum_operand_t *ops, int n,
                                     const int32_t *out_labels, int n_out, const void *out,
                                     const void *out_ndim)
{
    if (out == NULL || out_ndim == NULL || n < 0 || n_out < 0 || (n > 0 && ops == NULL) ||
        (n_out > 0 && out_labels == NULL))
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_rules_einsum: bad arguments");
    if (n > EINSUM_MAX_OPS)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "rules.einsum: %d operands; at most %d are supported", n,
                               EINSUM_MAX_OPS);
    for (int i = 0; i <= n; i++) {
        const int32_t *labels = i < n ? ops[i].labels : out_labels;
        int nl = i < n ? ops[i].nlabels : n_out;
        if (nl < 0 || (nl > 0 && labels == NULL) || (i < n && ops[i].ndim < 0))
            return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_rules_einsum: bad term %d", i);
        if (i < n && !cspmdi_type_valid(ops[i].type))
            return cspmd_error_set(CSPMD_ERR_MISUSE,
                                   "cspmd_rules_einsum: operand %d has unknown type id %u", i,
                                   (unsigned)ops[i].type);
        if ((i < n ? ops[i].ndim : 0) > CSPMD_MAX_DIMS || nl > CSPMD_MAX_DIMS + 1)
            return cspmd_error_set(CSPMD_ERR_VALUE,
                                   "rules.einsum: operand %d has more than %d dims; "
                                   "rules.einsum supports at most %d",
                                   i, CSPMD_MAX_DIMS, CSPMD_MAX_DIMS);
        for (int j = 0; j < nl; j++)
            if (labels[j] < CSPMD_EINSUM_OPAQUE)
                return cspmd_error_set(CSPMD_ERR_MISUSE,
                                       "cspmd_rules_einsum: bad label code %d", (int)labels[j]);
    }
    return CSPMD_OK;
}

cspmd_status_t cspmd_rules_einsum(const char *equation, const cspmd_einsum_operand_t *ops, int n,
                                  const int32_t *out_labels, int n_out, cspmd_type_t *out,
                                  int32_t *out_ndim)
{
    cspmd_status_t st = einsum_args_ok(ops, n, out_labels, n_out, out, out_ndim);
    if (st != CSPMD_OK)
        return st;
    const char *eq = equation ? equation : "";
    int ell = 0;
    if ((st = bind_terms(eq, ops, n, &ell)) != CSPMD_OK)
        return st;
    int32_t labels[EINSUM_MAX_OPS][CSPMD_MAX_DIMS], outl[CSPMD_MAX_DIMS + 1];
    int nl[EINSUM_MAX_OPS];
    for (int i = 0; i < n; i++)
        nl[i] = expand(ops[i].labels, ops[i].nlabels, ell, labels[i]);
    int nout = 0;
    for (int j = 0; j < n_out; j++)
        nout += out_labels[j] == CSPMD_EINSUM_ELLIPSIS ? ell : 1;
    if (nout > CSPMD_MAX_DIMS)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "rules.einsum: '%s': the output has %d dims; at most %d are "
                               "supported",
                               eq, nout, CSPMD_MAX_DIMS);
    expand(out_labels, n_out, ell, outl);

    static _Thread_local einsum_state_t s; /* too large for small thread stacks */
    s.eq = eq;
    s.nlabels = 0;
    s.naxis = 0;
    if ((st = read_shardings(&s, ops, n, labels, nl)) != CSPMD_OK)
        return st;

    cspmd_type_t types[EINSUM_MAX_OPS];
    for (int i = 0; i < n; i++)
        types[i] = ops[i].type;
    cspmd_axis_t forced[EINSUM_MAX_OPS * CSPMD_MAX_AXES];
    int nforced;
    if ((st = linear_partials(eq, ops, n, types, forced, &nforced)) != CSPMD_OK)
        return st;
    cspmd_type_t t;
    if ((st = infer_nonlinear(eq, types, n, &t)) != CSPMD_OK)
        return st;
    if ((st = contract(&s, outl, nout, &t)) != CSPMD_OK)
        return st;
    for (int k = 0; k < nforced; k++)
        if ((st = cspmd_type_with(t, forced[k], CSPMD_LT_P, &t)) != CSPMD_OK)
            return st;

    /* The output's spec: the axes of its sharded labels. */
    cspmd_spec_t spec;
    memset(&spec, 0, sizeof spec);
    spec.ndim = (int8_t)nout;
    int any = 0;
    for (int d = 0; d < nout; d++) {
        const label_axes_t *la = outl[d] == CSPMD_EINSUM_OPAQUE ? NULL : find_label(&s, outl[d]);
        int na = la ? la->n : 0;
        spec.nentry[d] = (uint8_t)na;
        if (na)
            memcpy(spec.entry[d], la->axes, (size_t)na * sizeof la->axes[0]);
        any |= na > 0;
    }
    cspmd_axis_t axes[CSPMD_MAX_AXES];
    cspmd_ltype_t lts[CSPMD_MAX_AXES];
    int na = cspmdi_type_axes(t, axes, lts);
    if (na < 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_rules_einsum: bad inferred type");
    cspmd_type_t result;
    if (t == CSPMD_TYPE_UNTYPED && !any)
        result = CSPMD_TYPE_UNTYPED;
    else if ((st = cspmd_type_make(axes, lts, na, any ? &spec : NULL, &result)) != CSPMD_OK)
        return st;
    *out = result;
    *out_ndim = (int32_t)nout;
    return CSPMD_OK;
}

/* ---- type-only collectives and transitions ----------------------------- */

/* "rules.all_reduce(tp, src=P, dst=R)" */
typedef struct call_text {
    char s[160];
} call_text_t;

static call_text_t call_str(cspmd_coll_t op, cspmd_axis_t axis, cspmd_ctype_t src,
                            cspmd_ctype_t dst)
{
    call_text_t r;
    snprintf(r.s, sizeof r.s, "rules.%s(%s, src=%s, dst=%s)", cspmd_coll_name(op), ax(axis),
             cspmdi_ctype_text(src).s, cspmdi_ctype_text(dst).s);
    return r;
}

/* The dim of spec that axis shards, -1 if none. */
static int spec_dim_of(const cspmd_spec_t *spec, cspmd_axis_t axis)
{
    for (int d = 0; spec && d < spec->ndim; d++)
        for (int j = 0; j < spec->nentry[d]; j++)
            if (spec->entry[d][j] == axis)
                return d;
    return -1;
}

/* A shard dim must lie in the input (the front resolves negative dims). */
static cspmd_status_t check_dim(cspmd_ctype_t t, int32_t ndim)
{
    if (t.ltype == CSPMD_LT_V && t.shard_dim < -1)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_rules_transition: bad shard dim %d",
                               (int)t.shard_dim);
    if (cspmdi_is_shard(t) && t.shard_dim >= ndim)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "S(%d) is out of bounds for tensor with ndim=%d", (int)t.shard_dim,
                               (int)ndim);
    return CSPMD_OK;
}

static int rules_op(cspmd_coll_t op)
{
    switch (op) {
    case CSPMD_COLL_ALL_REDUCE:
    case CSPMD_COLL_ALL_GATHER:
    case CSPMD_COLL_REDUCE_SCATTER:
    case CSPMD_COLL_ALL_TO_ALL:
    case CSPMD_COLL_REINTERPRET:
    case CSPMD_COLL_CONVERT:
        return 1;
    case CSPMD_COLL_REDISTRIBUTE:
    case CSPMD_COLL_INVARIANT_TO_REPLICATE:
    case CSPMD_COLL_BROADCAST: /* cspmd's own; rules.* is the reference's namespace */
        return 0;
    }
    return 0;
}

cspmd_status_t cspmd_rules_transition(cspmd_coll_t op, cspmd_axis_t axis, cspmd_ctype_t src,
                                      cspmd_ctype_t dst, cspmd_type_t in, int32_t ndim,
                                      int no_grad, cspmd_type_t *out, int32_t *out_ndim)
{
    if (out == NULL || out_ndim == NULL || !rules_op(op) || !cspmdi_axis_valid(axis) ||
        !cspmdi_type_valid(in) || ndim < 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_rules_transition: bad arguments");
    if (ndim > CSPMD_MAX_DIMS)
        return cspmd_error_set(CSPMD_ERR_VALUE,
                               "rules.%s: the input has %d dims; at most %d are supported",
                               cspmd_coll_name(op), (int)ndim, CSPMD_MAX_DIMS);
    call_text_t call = call_str(op, axis, src, dst);
    /* The pair, as the collectives' table has it (expert mode: a rule may
     * state any transition the type system has). */
    cspmd_ctype_t s = src, d = dst;
    cspmd_status_t st;
    int stack = op == CSPMD_COLL_ALL_GATHER && src.ltype == CSPMD_LT_V &&
                !cspmdi_is_shard(src);
    int unbind = op == CSPMD_COLL_REDUCE_SCATTER && dst.ltype == CSPMD_LT_V &&
                 !cspmdi_is_shard(dst);
    if ((st = check_dim(s, ndim)) != CSPMD_OK || (st = check_dim(d, ndim)) != CSPMD_OK)
        return st;
    if (op == CSPMD_COLL_CONVERT && cspmdi_is_shard(s) && cspmdi_is_shard(d) &&
        s.shard_dim != d.shard_dim)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "%s: cannot change the shard dimension from %s to %s without "
                               "communication; use all_to_all instead",
                               call.s, cspmdi_ctype_text(s).s, cspmdi_ctype_text(d).s);
    if (cspmd_coll_validate(op, s, d, 1) != CSPMD_OK)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "rules.%s: %s -> %s is not a transition the type system admits "
                               "for %s",
                               cspmd_coll_name(op), cspmdi_ctype_text(src).s,
                               cspmdi_ctype_text(dst).s, cspmd_coll_name(op));

    cspmd_spec_t spec;
    if ((st = cspmd_type_spec_plain(in, "an spmd_typecheck hook", &spec)) != CSPMD_OK)
        return st;
    int has_spec = spec.ndim >= 0;
    if (!has_spec) {
        memset(&spec, 0, sizeof spec);
        spec.ndim = (int8_t)ndim;
    }
    cspmd_type_t t = in;
    if (axis != CSPMD_AXIS_TRIVIAL) {
        cspmd_ltype_t actual = cspmd_type_get(in, axis);
        int rd = (actual == CSPMD_LT_R || actual == CSPMD_LT_I) &&
                 (s.ltype == CSPMD_LT_R || s.ltype == CSPMD_LT_I);
        if (actual == CSPMD_LT_NONE)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "%s expects its input to be %s on axis %s, but it has no type "
                                   "there",
                                   call.s, cspmdi_ctype_text(src).s, ax(axis));
        if (actual != s.ltype && !(no_grad && rd))
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "%s expects its input to be %s on axis %s, but it is %s",
                                   call.s, cspmdi_ctype_text(src).s, ax(axis),
                                   cspmd_ltype_letter(actual));
        int have = has_spec ? spec_dim_of(&spec, axis) : -1;
        if (cspmdi_is_shard(s) && have < 0)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "%s expects its input sharded on dim %d along %s, but it is "
                                   "not sharded there",
                                   call.s, (int)s.shard_dim, ax(axis));
        if (cspmdi_is_shard(s) && have != s.shard_dim)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "%s expects its input sharded on dim %d along %s, but it is "
                                   "sharded on dim %d",
                                   call.s, (int)s.shard_dim, ax(axis), have);
        /* Move axis's spec entry: out of every dim, into dst's dim. */
        for (int k = 0; k < spec.ndim; k++) {
            int m = 0;
            for (int j = 0; j < spec.nentry[k]; j++)
                if (spec.entry[k][j] != axis)
                    spec.entry[k][m++] = spec.entry[k][j];
            spec.nentry[k] = (uint8_t)m;
        }
        if (cspmdi_is_shard(d)) {
            if (spec.nentry[d.shard_dim] >= CSPMD_MAX_AXES)
                return cspmd_error_set(CSPMD_ERR_VALUE, "%s: too many axes on one dim", call.s);
            spec.entry[d.shard_dim][spec.nentry[d.shard_dim]++] = axis;
        }
        if ((st = cspmd_type_with(cspmd_type_local(in), axis, d.ltype, &t)) != CSPMD_OK)
            return st;
    } else {
        t = cspmd_type_local(in);
    }
    int32_t nd = ndim;
    if (stack) {
        if (ndim >= CSPMD_MAX_DIMS)
            return cspmd_error_set(CSPMD_ERR_VALUE, "%s: the output would have more than %d dims",
                                   call.s, CSPMD_MAX_DIMS);
        memmove(&spec.nentry[1], &spec.nentry[0], (size_t)ndim * sizeof spec.nentry[0]);
        memmove(&spec.entry[1], &spec.entry[0], (size_t)ndim * sizeof spec.entry[0]);
        spec.nentry[0] = 0;
        nd = ndim + 1;
    } else if (unbind) {
        if (ndim == 0)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "%s: cannot unbind dim 0 of a scalar",
                                   call.s);
        if (spec.nentry[0])
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "%s: dim 0 is unbound across ranks but is sharded on %s",
                                   call.s, axes_str(spec.entry[0], spec.nentry[0]).s);
        memmove(&spec.nentry[0], &spec.nentry[1], (size_t)(ndim - 1) * sizeof spec.nentry[0]);
        memmove(&spec.entry[0], &spec.entry[1], (size_t)(ndim - 1) * sizeof spec.entry[0]);
        nd = ndim - 1;
    }
    spec.ndim = (int8_t)nd;
    int any = 0;
    for (int k = 0; k < nd; k++)
        any |= spec.nentry[k] > 0;
    cspmd_axis_t axes[CSPMD_MAX_AXES];
    cspmd_ltype_t lts[CSPMD_MAX_AXES];
    int na = cspmdi_type_axes(t, axes, lts);
    if (na < 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_rules_transition: bad type");
    cspmd_type_t result = t;
    if ((t != CSPMD_TYPE_UNTYPED || any) &&
        (st = cspmd_type_make(axes, lts, na, any ? &spec : NULL, &result)) != CSPMD_OK)
        return st;
    *out = result;
    *out_ndim = nd;
    return CSPMD_OK;
}
