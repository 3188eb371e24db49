/*
 * raw_dist_rules.c -- typing of raw torch.distributed collectives reached inside a
 * checked region: c10d's in-place ops (dist.all_reduce, ...) and
 * the _c10d_functional ops, and the registry that maps a process group's
 * name to its mesh axis.
 */
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

static const cspmd_raw_rule_t raw_rules[] = {
    /* name, fn (for messages), in arg, out arg, src, dst, effect, outputs are a list */
    {"c10d::allreduce_", "all_reduce", 0, NO_ARG, CSPMD_LT_P, CSPMD_LT_R, CSPMD_RAW_SET_INPUT, 0},
    {"c10d::_allgather_base_", "all_gather_into_tensor", 1, 0, CSPMD_LT_V, RI, CSPMD_RAW_CHECK, 0},
    {"c10d::allgather_into_tensor_coalesced_", "all_gather_into_tensor", 1, 0, CSPMD_LT_V, RI,
     CSPMD_RAW_CHECK, 1},
    {"c10d::allgather_", "all_gather", 1, 0, CSPMD_LT_V, RI, CSPMD_RAW_CHECK, 1},
    {"c10d::_reduce_scatter_base_", "reduce_scatter_tensor", 1, 0, CSPMD_LT_P, CSPMD_LT_V,
     CSPMD_RAW_CHECK, 0},
    {"c10d::reduce_scatter_tensor_coalesced_", "reduce_scatter_tensor", 1, 0, CSPMD_LT_P,
     CSPMD_LT_V, CSPMD_RAW_CHECK, 1},
    {"c10d::alltoall_base_", "all_to_all_single", 1, 0, CSPMD_LT_V, CSPMD_LT_V, CSPMD_RAW_CHECK, 0},
    {"c10d::barrier", "barrier", NO_ARG, NO_ARG, 0, 0, CSPMD_RAW_PASS, 0},
    {"c10d::monitored_barrier_", "monitored_barrier", NO_ARG, NO_ARG, 0, 0, CSPMD_RAW_PASS, 0},
    {"c10d::allgather_coalesced_", "all_gather_coalesced", 0, 0, 0, 0, CSPMD_RAW_UNSUPPORTED, 0},
    {"c10d::allreduce_coalesced_", "all_reduce_coalesced", 0, 0, 0, 0, CSPMD_RAW_UNSUPPORTED, 0},
    {"c10d::alltoall_", "all_to_all", 0, 0, 0, 0, CSPMD_RAW_UNSUPPORTED, 0},
    {"c10d::broadcast_", "broadcast", 0, 0, 0, 0, CSPMD_RAW_UNSUPPORTED, 0},
    {"c10d::gather_", "gather", 0, 0, 0, 0, CSPMD_RAW_UNSUPPORTED, 0},
    {"c10d::reduce_", "reduce", 0, 0, 0, 0, CSPMD_RAW_UNSUPPORTED, 0},
    {"c10d::reduce_scatter_", "reduce_scatter", 0, 0, 0, 0, CSPMD_RAW_UNSUPPORTED, 0},
    {"c10d::scatter_", "scatter", 0, 0, 0, 0, CSPMD_RAW_UNSUPPORTED, 0},
    {"c10d::send", "send", 0, 0, 0, 0, CSPMD_RAW_UNSUPPORTED, 0},
    {"c10d::recv_", "recv", 0, 0, 0, 0, CSPMD_RAW_UNSUPPORTED, 0},
    {"c10d::recv_any_source_", "recv", 0, 0, 0, 0, CSPMD_RAW_UNSUPPORTED, 0},
    /* The functional collectives return new tensors: their type is inferred. */
    {"_c10d_functional::all_reduce", "all_reduce", 0, NO_ARG, CSPMD_LT_P, CSPMD_LT_R,
     CSPMD_RAW_SET_RESULT, 0},
    {"_c10d_functional::all_reduce_", "all_reduce", 0, NO_ARG, CSPMD_LT_P, CSPMD_LT_R,
     CSPMD_RAW_SET_INPUT, 0},
    {"_c10d_functional::all_gather_into_tensor", "all_gather_into_tensor", 0, NO_ARG, CSPMD_LT_V,
     CSPMD_LT_R, CSPMD_RAW_SET_RESULT, 0},
    {"_c10d_functional::reduce_scatter_tensor", "reduce_scatter_tensor", 0, NO_ARG, CSPMD_LT_P,
     CSPMD_LT_V, CSPMD_RAW_SET_RESULT, 0},
    {"_c10d_functional::all_to_all_single", "all_to_all_single", 0, NO_ARG, CSPMD_LT_V,
     CSPMD_LT_V, CSPMD_RAW_SET_RESULT, 0},
};

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

cspmd_status_t cspmd_raw_check_input(const cspmd_raw_rule_t *r, cspmd_axis_t axis,
                                     cspmd_type_t in, cspmd_type_t *out)
{
    if (r == NULL || out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_raw_check_input: NULL argument");
    if (r->effect == CSPMD_RAW_UNSUPPORTED)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "cspmd: type checking for raw torch.distributed.%s is not yet "
                               "implemented; use the cspmd wrapper instead",
                               r->fn);
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
    /* Exactly the declared input type: V into all_reduce or reduce_scatter raises
     * (as the reference's raw-collective checks do); convert V to P first. */
    if (t != (cspmd_ltype_t)r->src)
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "%s: expected input type %s on axis %s, got %s",
                               r->fn, cspmd_ltype_letter((cspmd_ltype_t)r->src), cspmd_axis_display(axis, 0),
                               cspmd_ltype_letter(t));
    if (r->effect == CSPMD_RAW_SET_INPUT || r->effect == CSPMD_RAW_SET_RESULT)
        return cspmd_type_with(in, axis, (cspmd_ltype_t)r->dst, out);
    return CSPMD_OK;
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
