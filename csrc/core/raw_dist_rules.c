/*
 * raw_dist_rules.c -- typing of raw torch.distributed collectives reached inside a
 * checked region: c10d's in-place ops (dist.all_reduce, ...) and
 * the _c10d_functional ops, and the registry that maps a process group's
 * name to its mesh axis.
 */
#include <ctype.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "cspmd.h"

/* ---- group name -> axis ------------------------------------------------ */

/* Every group bound so far (a name re-used for a new group rebinds); the
 * table grows as groups are bound. */
typedef struct group_entry {
    char *name;    /* heap */
    cspmd_axis_t axis;
    char *display; /* the group's description (heap), or NULL */
} group_entry_t;

static group_entry_t *groups;
static int ngroups, groups_cap;
static pthread_mutex_t groups_mutex = PTHREAD_MUTEX_INITIALIZER;

static char *copy_text(const char *s)
{
    size_t n = strlen(s) + 1;
    char *copy = malloc(n);
    if (copy != NULL)
        memcpy(copy, s, n);
    return copy;
}

cspmd_status_t cspmd_group_bind(const char *name, cspmd_axis_t axis, const char *display)
{
    if (name == NULL || name[0] == '\0')
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_group_bind: empty group name");
    if (cspmd_axis_size(axis) == 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_group_bind: unknown axis id %u",
                               (unsigned)axis);
    char *copy = NULL, *name_copy = NULL;
    if (display != NULL && display[0] != '\0' && (copy = copy_text(display)) == NULL)
        return cspmd_error_set(CSPMD_ERR_NOMEM, "cspmd_group_bind: out of memory");
    cspmd_status_t st = CSPMD_OK;
    pthread_mutex_lock(&groups_mutex);
    int i;
    for (i = 0; i < ngroups; i++)
        if (strcmp(groups[i].name, name) == 0)
            break;
    if (i == ngroups && ngroups == groups_cap) {
        int cap = groups_cap == 0 ? 16 : groups_cap <= INT_MAX / 2 ? groups_cap * 2 : 0;
        group_entry_t *grown = cap > 0 ? realloc(groups, (size_t)cap * sizeof *grown) : NULL;
        if (grown == NULL)
            st = cspmd_error_set(CSPMD_ERR_NOMEM,
                                 "cspmd_group_bind: out of memory for group %d", ngroups + 1);
        else {
            groups = grown;
            groups_cap = cap;
        }
    }
    if (st == CSPMD_OK && i == ngroups && (name_copy = copy_text(name)) == NULL)
        st = cspmd_error_set(CSPMD_ERR_NOMEM, "cspmd_group_bind: out of memory");
    if (st == CSPMD_OK) {
        if (i == ngroups) {
            groups[i].name = name_copy;
            groups[i].display = NULL;
            ngroups++;
        }
        groups[i].axis = axis;
        free(groups[i].display);
        groups[i].display = copy;
        copy = NULL;
    }
    pthread_mutex_unlock(&groups_mutex);
    free(copy);
    return st;
}

int cspmd_group_axis(const char *name, cspmd_axis_t *axis)
{
    int found = 0;
    char *display = NULL;
    if (name == NULL || axis == NULL)
        return 0;
    pthread_mutex_lock(&groups_mutex); /* collectives are not on the per-op hot path */
    for (int i = 0; i < ngroups; i++)
        if (strcmp(groups[i].name, name) == 0) {
            *axis = groups[i].axis;
            found = 1;
            if (groups[i].display != NULL) {
                size_t n = strlen(groups[i].display) + 1;
                display = malloc(n);
                if (display != NULL)
                    memcpy(display, groups[i].display, n);
            }
            break;
        }
    pthread_mutex_unlock(&groups_mutex);
    /* A group's description becomes its axis's display name when the group
     * is first used, not when it is bound: an axis the program reaches
     * otherwise keeps the name it has (a flattening of named axes, say).
     * Registering is idempotent; a failure (out of memory) only leaves the
     * name out of messages. */
    if (display != NULL) {
        (void)cspmd_axis_name_add(*axis, display);
        free(display);
    }
    return found;
}

/* ---- the table ---------------------------------------------------------- */

#define NO_ARG (-1)
#define RI (-2) /* output must be R or I */
#define LT_P CSPMD_LT_P
#define LT_R CSPMD_LT_R
#define LT_V CSPMD_LT_V
#define CHECK CSPMD_RAW_CHECK
#define SET_INPUT CSPMD_RAW_SET_INPUT
#define SET_RESULT CSPMD_RAW_SET_RESULT
#define UNSUPPORTED(op, fn) {op, fn, 0, 0, 0, 0, CSPMD_RAW_UNSUPPORTED, 0, 0}

/* Every op of torch.distributed's namespaces that cspmd types; any other op
 * there that the op table does not know either is refused on a typed tensor
 * (cspmd_raw_op_is_raw).  Indices are schema positions. */
static const cspmd_raw_rule_t raw_rules[] = {
    /* name, fn (for messages), in arg, out arg, src, dst, effect, outputs are
     * a list, takes a reduce op */
    {"c10d::allreduce_", "all_reduce", 0, NO_ARG, LT_P, LT_R, SET_INPUT, 0, 1},
    {"c10d::allreduce_coalesced_", "all_reduce_coalesced", 0, NO_ARG, LT_P, LT_R, SET_INPUT, 0,
     1},
    {"c10d::_allgather_base_", "all_gather_into_tensor", 1, 0, LT_V, RI, CHECK, 0, 0},
    {"c10d::allgather_into_tensor_coalesced_", "all_gather_into_tensor", 1, 0, LT_V, RI, CHECK,
     1, 0},
    {"c10d::allgather_", "all_gather", 1, 0, LT_V, RI, CHECK, 1, 0},
    {"c10d::_reduce_scatter_base_", "reduce_scatter_tensor", 1, 0, LT_P, LT_V, CHECK, 0, 1},
    {"c10d::reduce_scatter_tensor_coalesced_", "reduce_scatter_tensor", 1, 0, LT_P, LT_V, CHECK,
     1, 1},
    {"c10d::alltoall_base_", "all_to_all_single", 1, 0, LT_V, LT_V, CHECK, 0, 0},
    {"c10d::barrier", "barrier", NO_ARG, NO_ARG, 0, 0, CSPMD_RAW_PASS, 0, 0},
    {"c10d::monitored_barrier_", "monitored_barrier", NO_ARG, NO_ARG, 0, 0, CSPMD_RAW_PASS, 0, 0},
    {"c10d::check_for_nan", "check_for_nan", NO_ARG, NO_ARG, 0, 0, CSPMD_RAW_PASS, 0, 0},
    UNSUPPORTED("c10d::allgather_coalesced_", "all_gather_coalesced"),
    UNSUPPORTED("c10d::alltoall_", "all_to_all"),
    UNSUPPORTED("c10d::broadcast_", "broadcast"),
    UNSUPPORTED("c10d::gather_", "gather"),
    UNSUPPORTED("c10d::gather_into_tensor_", "gather_into_tensor"),
    UNSUPPORTED("c10d::reduce_", "reduce"),
    UNSUPPORTED("c10d::reduce_scatter_", "reduce_scatter"),
    UNSUPPORTED("c10d::scatter_", "scatter"),
    UNSUPPORTED("c10d::send", "send"),
    UNSUPPORTED("c10d::recv_", "recv"),
    UNSUPPORTED("c10d::recv_any_source_", "recv"),
    /* The functional collectives return new tensors: their type is inferred. */
    {"_c10d_functional::all_reduce", "all_reduce", 0, NO_ARG, LT_P, LT_R, SET_RESULT, 0, 1},
    {"_c10d_functional::all_reduce_", "all_reduce", 0, NO_ARG, LT_P, LT_R, SET_INPUT, 0, 1},
    {"_c10d_functional::all_reduce_coalesced", "all_reduce_coalesced", 0, NO_ARG, LT_P, LT_R,
     SET_RESULT, 0, 1},
    {"_c10d_functional::all_reduce_coalesced_", "all_reduce_coalesced", 0, NO_ARG, LT_P, LT_R,
     SET_INPUT, 0, 1},
    {"_c10d_functional::all_gather_into_tensor", "all_gather_into_tensor", 0, NO_ARG, LT_V, LT_R,
     SET_RESULT, 0, 0},
    {"_c10d_functional::all_gather_into_tensor_coalesced", "all_gather_into_tensor_coalesced", 0,
     NO_ARG, LT_V, LT_R, SET_RESULT, 0, 0},
    {"_c10d_functional::all_gather_into_tensor_out", "all_gather_into_tensor", 0, 3, LT_V, RI,
     CHECK, 0, 0},
    {"_c10d_functional::reduce_scatter_tensor", "reduce_scatter_tensor", 0, NO_ARG, LT_P, LT_V,
     SET_RESULT, 0, 1},
    {"_c10d_functional::reduce_scatter_tensor_coalesced", "reduce_scatter_tensor_coalesced", 0,
     NO_ARG, LT_P, LT_V, SET_RESULT, 0, 1},
    {"_c10d_functional::reduce_scatter_tensor_out", "reduce_scatter_tensor", 0, 4, LT_P, LT_V,
     CHECK, 0, 1},
    {"_c10d_functional::all_to_all_single", "all_to_all_single", 0, NO_ARG, LT_V, LT_V,
     SET_RESULT, 0, 0},
    /* Their autograd forms (funcol's *_autograd functions): the same forward;
     * their backward runs the functional ops above on the gradients. */
    {"_c10d_functional_autograd::all_gather_into_tensor", "all_gather_into_tensor", 0, NO_ARG,
     LT_V, LT_R, SET_RESULT, 0, 0},
    {"_c10d_functional_autograd::reduce_scatter_tensor", "reduce_scatter_tensor", 0, NO_ARG,
     LT_P, LT_V, SET_RESULT, 0, 1},
    {"_c10d_functional_autograd::all_to_all_single", "all_to_all_single", 0, NO_ARG, LT_V, LT_V,
     SET_RESULT, 0, 0},
    /* Waits return the tensors they are given. */
    {"_c10d_functional::wait_tensors", "wait_tensors", NO_ARG, NO_ARG, 0, 0, CSPMD_RAW_PASS, 0,
     0},
    UNSUPPORTED("_c10d_functional::broadcast", "broadcast"),
    UNSUPPORTED("_c10d_functional::broadcast_", "broadcast"),
    UNSUPPORTED("_c10d_functional::batch_p2p_ops", "batch_isend_irecv"),
    UNSUPPORTED("_c10d_functional::isend", "isend"),
    UNSUPPORTED("_c10d_functional::irecv", "irecv"),
};

/* Namespaces whose ops are torch.distributed's collectives. */
static const char *const collective_namespaces[] = {"c10d::", "_c10d_functional::",
                                                    "c10d_functional::",
                                                    "_c10d_functional_autograd::"};

int cspmd_raw_rule_count(void)
{
    return (int)(sizeof raw_rules / sizeof raw_rules[0]);
}

const cspmd_raw_rule_t *cspmd_raw_rule(int i)
{
    return i >= 0 && i < cspmd_raw_rule_count() ? &raw_rules[i] : NULL;
}

const cspmd_raw_rule_t *cspmd_raw_rule_find(const char *name)
{
    for (int i = 0; name && i < cspmd_raw_rule_count(); i++)
        if (strcmp(raw_rules[i].name, name) == 0)
            return &raw_rules[i];
    return NULL;
}

int cspmd_raw_op_is_raw(const char *name)
{
    /* Every raw rule is in one of these namespaces: most ops (aten's) are
     * answered by a few prefix compares.  Of the rest, the op table types a
     * few (wait_tensor), which stay there. */
    for (size_t i = 0; name != NULL && i < sizeof collective_namespaces /
                                                sizeof *collective_namespaces; i++)
        if (strncmp(name, collective_namespaces[i], strlen(collective_namespaces[i])) == 0)
            return cspmd_raw_rule_find(name) != NULL || cspmd_rule_find(name, "") == 0;
    return 0;
}

/* ---- reduce ops ------------------------------------------------------------ */

/* What a reduction needs of its input on the group's axis.  A sum is
 * linear: it reduces summands, those of a P tensor or each rank's V value
 * taken as one (as cspmd's and the reference's all_reduce(src=P) take V);
 * a sum of R or I values counts each one world-size times, almost always a
 * missing or doubled reduction.  A mean of P is the sum scaled, and of
 * values their mean.  The others are not linear: they take each rank's
 * value (V, R or I), and a P tensor's summand is not its value. */
typedef enum reduce_input { SUMMANDS_ONLY, ANY_INPUT, VALUES_ONLY } reduce_input_t;

static const struct {
    const char *name;
    reduce_input_t input;
} reductions[] = {
    {"sum", SUMMANDS_ONLY},   {"premul_sum", SUMMANDS_ONLY}, {"avg", ANY_INPUT},
    {"product", VALUES_ONLY}, {"min", VALUES_ONLY},          {"max", VALUES_ONLY},
    {"band", VALUES_ONLY},    {"bor", VALUES_ONLY},          {"bxor", VALUES_ONLY},
};

static int reduction_find(const char *name)
{
    for (size_t i = 0; name != NULL && i < sizeof reductions / sizeof *reductions; i++) {
        const char *a = reductions[i].name, *b = name;
        while (*a != '\0' && *a == (char)tolower((unsigned char)*b))
            a++, b++;
        if (*a == '\0' && *b == '\0')
            return (int)i;
    }
    return -1;
}

/* ---- checks --------------------------------------------------------------- */

/* Permissive mode, an in-place collective on a group the input has no type
 * for: the group's axis gets the collective's result type.  A type whose
 * axes overlap that axis cannot hold it (a type's axes are orthogonal): an
 * error rather than a type that breaks that rule or stays stale. */
static cspmd_status_t permissive_retype(const cspmd_raw_rule_t *r, cspmd_axis_t axis,
                                        cspmd_type_t in, cspmd_type_t *out)
{
    cspmd_status_t st = cspmd_type_with(in, axis, (cspmd_ltype_t)r->dst, out);
    if (st != CSPMD_ERR_SPMD_TYPE)
        return st;
    *out = in;
    char small[160];
    char *text = small;
    size_t n = cspmd_type_format(in, small, sizeof small);
    if (n >= sizeof small && (text = malloc(n + 1)) != NULL)
        cspmd_type_format(in, text, n + 1);
    else if (text == NULL)
        text = small; /* out of memory: the type's text is cut short */
    st = cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                         "%s: the tensor has no type for axis %s (permissive mode), so the "
                         "collective would make it %s there; but its type %s has an axis that "
                         "overlaps %s, and the axes of a type must be mutually orthogonal. "
                         "Annotate it on %s, or on axes orthogonal to it, before the collective.",
                         r->fn, cspmd_axis_display(axis, 0),
                         cspmd_ltype_letter((cspmd_ltype_t)r->dst), text,
                         cspmd_axis_display(axis, 0), cspmd_axis_display(axis, 0));
    if (text != small)
        free(text);
    return st;
}

cspmd_status_t cspmd_raw_refuse(const char *name)
{
    const cspmd_raw_rule_t *r = cspmd_raw_rule_find(name);
    if (r != NULL)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "cspmd: type checking for raw torch.distributed.%s is not yet "
                               "implemented; use the cspmd wrapper instead",
                               r->fn);
    return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                           "cspmd: %s is a torch.distributed op that cspmd cannot type, so it "
                           "is refused on typed tensors; use cspmd's collectives instead",
                           name != NULL ? name : "(unnamed op)");
}

/* The input type a reduction with the rule's reduce op accepts: OK, or the
 * error naming what it needs. */
static cspmd_status_t check_reduction(const cspmd_raw_rule_t *r, const char *reduce_op,
                                      cspmd_axis_t axis, cspmd_ltype_t t)
{
    int k = reduction_find(reduce_op);
    if (k < 0)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "%s: cspmd has no rule for the reduce op '%s', so it cannot type "
                               "the result; use sum, avg, product, min, max, band, bor or bxor",
                               r->fn, reduce_op != NULL ? reduce_op : "(unreadable)");
    reduce_input_t need = reductions[k].input;
    if (need == ANY_INPUT || (need == VALUES_ONLY && t != CSPMD_LT_P) ||
        (need == SUMMANDS_ONLY && (t == CSPMD_LT_P || t == CSPMD_LT_V)))
        return CSPMD_OK;
    if (need == VALUES_ONLY)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "%s: a %s reduction takes each rank's value, but the input is P "
                               "on axis %s: each rank holds a summand of the value, not the "
                               "value. Sum it first (all_reduce P -> R), then reduce with %s.",
                               r->fn, reductions[k].name, cspmd_axis_display(axis, 0),
                               reductions[k].name);
    /* The reference's text for a sum of R or I. */
    return cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "%s: expected input type %s on axis %s, got %s",
                           r->fn, cspmd_ltype_letter((cspmd_ltype_t)r->src),
                           cspmd_axis_display(axis, 0), cspmd_ltype_letter(t));
}

cspmd_status_t cspmd_raw_check_input(const cspmd_raw_rule_t *r, const char *reduce_op,
                                     cspmd_axis_t axis, cspmd_type_t in, cspmd_type_t *out)
{
    if (r == NULL || out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_raw_check_input: NULL argument");
    if (r->effect == CSPMD_RAW_UNSUPPORTED)
        return cspmd_raw_refuse(r->name);
    *out = in;
    cspmd_ltype_t t = cspmd_type_get(in, axis);
    if (cspmd_axis_size(axis) <= 1)
        return CSPMD_OK;
    if (t == CSPMD_LT_NONE) {
        if (!cspmd_checker_strict())
            return in == CSPMD_TYPE_UNTYPED || r->effect != CSPMD_RAW_SET_INPUT
                       ? CSPMD_OK
                       : permissive_retype(r, axis, in, out);
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "%s: tensor has no type for axis %s. Use assert_type() to annotate "
                               "the tensor on this axis before calling collectives.%s",
                               r->fn, cspmd_axis_display(axis, 0), cspmdi_untyped_hint(in));
    }
    cspmd_status_t st;
    if (r->reduces)
        st = check_reduction(r, reduce_op, axis, t);
    else if (t != (cspmd_ltype_t)r->src) /* gathers and all_to_all: exactly V */
        st = cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "%s: expected input type %s on axis %s, got %s",
                             r->fn, cspmd_ltype_letter((cspmd_ltype_t)r->src),
                             cspmd_axis_display(axis, 0), cspmd_ltype_letter(t));
    else
        st = CSPMD_OK;
    if (st == CSPMD_OK && (r->effect == CSPMD_RAW_SET_INPUT || r->effect == CSPMD_RAW_SET_RESULT))
        st = cspmd_type_with(in, axis, (cspmd_ltype_t)r->dst, out);
    return st;
}

cspmd_status_t cspmd_raw_check_output(const cspmd_raw_rule_t *r, cspmd_axis_t axis,
                                      cspmd_type_t out_type, int list_index)
{
    if (r == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_raw_check_output: NULL argument");
    if (r->out_arg < 0 || cspmd_axis_size(axis) <= 1)
        return CSPMD_OK;
    char what[48];
    if (list_index >= 0)
        snprintf(what, sizeof what, "output tensor_list[%d]", list_index);
    else
        snprintf(what, sizeof what, "output tensor");
    cspmd_ltype_t t = cspmd_type_get(out_type, axis);
    if (t == CSPMD_LT_NONE) {
        if (!cspmd_checker_strict())
            return CSPMD_OK;
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "%s: %s has no type for axis %s. Annotate it with assert_type() "
                               "before calling the collective.%s",
                               r->fn, what, cspmd_axis_display(axis, 0),
                               cspmdi_untyped_hint(out_type));
    }
    int ok = r->dst == RI ? (t == CSPMD_LT_R || t == CSPMD_LT_I) : t == (cspmd_ltype_t)r->dst;
    if (ok)
        return CSPMD_OK;
    if (r->dst == RI)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "%s: expected %s type %s/%s on axis %s, got %s", r->fn, what,
                               cspmd_ltype_letter(CSPMD_LT_R), cspmd_ltype_letter(CSPMD_LT_I),
                               cspmd_axis_display(axis, 0), cspmd_ltype_letter(t));
    return cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "%s: expected %s type %s on axis %s, got %s",
                           r->fn, what, cspmd_ltype_letter((cspmd_ltype_t)r->dst),
                           cspmd_axis_display(axis, 0), cspmd_ltype_letter(t));
}
