/* Checks on annotations as the user wrote them, before their axes are
 * resolved to a mesh: the merge of several partial types (merge_types) and
 * a local type given with a partition spec (SpmdType).
 *
 * An annotation names an axis by a MeshAxis (its axis id) or by a name that
 * only a current mesh resolves.  Both are keys here: an axis id as it is, a
 * name as a negative key interned below, so that keys written alike compare
 * equal and messages show the key as written. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* The interned names, in order of first use: key -1 - i is names[i].  A
 * program writes a handful of axis names, so a linear search is enough;
 * names are kept for the life of the process (keys stay valid). */
static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;
static char **names;
static int64_t n_names, cap_names;

cspmd_status_t cspmd_axis_key_of_name(const char *name, cspmd_axis_key_t *out)
{
    if (name == NULL || out == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_axis_key_of_name: NULL argument");
    if (name[0] == '\0')
        return cspmd_error_set(CSPMD_ERR_VALUE, "cspmd: an axis name must not be empty");
    cspmd_status_t st = CSPMD_OK;
    pthread_mutex_lock(&names_lock);
    int64_t i = 0;
    while (i < n_names && strcmp(names[i], name) != 0)
        i++;
    if (i == n_names) {
        char *copy = strdup(name);
        if (copy != NULL && n_names == cap_names) {
            int64_t cap = cap_names ? 2 * cap_names : 16;
            char **grown = realloc(names, (size_t)cap * sizeof *grown);
            if (grown != NULL) {
                names = grown;
                cap_names = cap;
            }
        }
        if (copy == NULL || n_names == cap_names) {
            free(copy);
            st = cspmd_error_set(CSPMD_ERR_NOMEM, "cspmd_axis_key_of_name: out of memory");
        } else {
            names[n_names++] = copy;
        }
    }
    pthread_mutex_unlock(&names_lock);
    if (st == CSPMD_OK)
        *out = -1 - i;
    return st;
}

const char *cspmdi_axis_key_text(cspmd_axis_key_t key, int debug, const char **quote)
{
    *quote = "";
    if (key >= 0)
        return key <= UINT32_MAX ? cspmd_axis_display((cspmd_axis_t)key, debug)
                                 : "MeshAxis(<unknown id>)";
    const char *name = NULL;
    pthread_mutex_lock(&names_lock);
    if (-1 - key < n_names)
        name = names[-1 - key]; /* never freed */
    pthread_mutex_unlock(&names_lock);
    if (name == NULL)
        return "<unknown axis name key>";
    *quote = strchr(name, '\'') != NULL && strchr(name, '"') == NULL ? "\"" : "'";
    return name;
}

static cspmd_status_t check_entries(const char *fn, const cspmd_ltype_t *ltypes, int n)
{
    if (n < 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "%s: negative count", fn);
    for (int i = 0; i < n; i++)
        if (ltypes[i] != CSPMD_LT_R && ltypes[i] != CSPMD_LT_I && ltypes[i] != CSPMD_LT_V &&
            ltypes[i] != CSPMD_LT_P)
            return cspmd_error_set(CSPMD_ERR_MISUSE, "%s: bad local type code %d", fn,
                                   (int)ltypes[i]);
    return CSPMD_OK;
}

cspmd_status_t cspmd_annotation_merge_check(const cspmd_axis_key_t *keys,
                                            const cspmd_ltype_t *ltypes,
                                            const int32_t *shard_dims, int n)
{
    cspmd_status_t st = check_entries("cspmd_annotation_merge_check", ltypes, n);
    if (st != CSPMD_OK)
        return st;
    for (int j = 1; j < n; j++)
        for (int i = 0; i < j; i++) {
            if (keys[i] != keys[j])
                continue;
            int32_t di = ltypes[i] == CSPMD_LT_V && shard_dims[i] >= 0 ? shard_dims[i] : -1;
            int32_t dj = ltypes[j] == CSPMD_LT_V && shard_dims[j] >= 0 ? shard_dims[j] : -1;
            if (ltypes[i] == ltypes[j] && di == dj)
                break; /* agrees with the first entry of this key */
            const char *q, *k = cspmdi_axis_key_text(keys[j], 0, &q);
            cspmd_ctype_t a = {ltypes[i], shard_dims[i]}, b = {ltypes[j], shard_dims[j]};
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "Conflicting types on axis %s%s%s: %s and %s", q, k, q,
                                   cspmdi_ctype_text(a).s, cspmdi_ctype_text(b).s);
        }
    return CSPMD_OK;
}

/* The entry of the local type that a spec axis names: the same key, else
 * (both resolved) the same axis; -1 if none. */
static int find_entry(cspmd_axis_key_t key, cspmd_axis_key_t resolved,
                      const cspmd_axis_key_t *keys, const cspmd_axis_key_t *keys_resolved, int n)
{
    for (int i = 0; i < n; i++)
        if (keys[i] == key)
            return i;
    if (resolved < 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (keys_resolved[i] == resolved)
            return i;
    return -1;
}

cspmd_status_t cspmd_annotation_check_spec(int has_spec, const cspmd_axis_key_t *keys,
                                           const cspmd_axis_key_t *keys_resolved,
                                           const cspmd_ltype_t *ltypes,
                                           const int32_t *shard_dims, int n,
                                           const cspmd_axis_key_t *spec_keys,
                                           const cspmd_axis_key_t *spec_resolved, int nspec)
{
    cspmd_status_t st = check_entries("cspmd_annotation_check_spec", ltypes, n);
    if (st != CSPMD_OK)
        return st;
    if (nspec < 0)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_annotation_check_spec: negative count");
    if (!has_spec)
        return CSPMD_OK;
    for (int i = 0; i < n; i++)
        if (ltypes[i] == CSPMD_LT_V && shard_dims[i] >= 0)
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                                   "SpmdType: S(i) entries in local_type cannot be combined "
                                   "with an explicit partition_spec");
    for (int j = 0; j < nspec; j++) {
        int i = find_entry(spec_keys[j], spec_resolved[j], keys, keys_resolved, n);
        if (i < 0 || ltypes[i] == CSPMD_LT_V)
            continue;
        const char *q, *k = cspmdi_axis_key_text(spec_keys[j], 0, &q);
        return cspmd_error_set(CSPMD_ERR_SPMD_TYPE,
                               "SpmdType: axis %s%s%s appears in the partition_spec but its "
                               "local type is %s, not V",
                               q, k, q, cspmd_ltype_letter(ltypes[i]));
    }
    return CSPMD_OK;
}

/* The end of the spec that starts at enc[p] ([ndim, n0, keys..., n1,
 * ...]), or -1 when it overruns n or a count is negative. */
static int64_t spec_end(const cspmd_axis_key_t *enc, int64_t p, int64_t n)
{
    if (p >= n || enc[p] < 0 || enc[p] > INT32_MAX)
        return -1;
    int64_t ndim = enc[p++];
    for (int64_t d = 0; d < ndim; d++) {
        if (p >= n || enc[p] < 0 || enc[p] > n - p - 1)
            return -1;
        p += 1 + enc[p];
    }
    return p;
}

/* Spec a (resolved[a..]) and spec b name the same axes on every dim, trivial
 * axes left out.  *unresolved: an axis compared names no axis (-1). */
static int specs_same_axes(const cspmd_axis_key_t *r, int64_t a, int64_t b, int *unresolved)
{
    if (r[a] != r[b])
        return 0;
    int64_t ndim = r[a++];
    b++;
    for (int64_t d = 0; d < ndim; d++) {
        int64_t na = r[a++], nb = r[b++], i = 0, j = 0;
        for (;;) {
            while (i < na && r[a + i] == (cspmd_axis_key_t)CSPMD_AXIS_TRIVIAL)
                i++;
            while (j < nb && r[b + j] == (cspmd_axis_key_t)CSPMD_AXIS_TRIVIAL)
                j++;
            if (i == na || j == nb)
                break;
            if (r[a + i] < 0 || r[b + j] < 0) {
                *unresolved = 1;
                return 0;
            }
            if (r[a + i] != r[b + j])
                return 0;
            i++;
            j++;
        }
        if (i != na || j != nb)
            return 0;
        a += na;
        b += nb;
    }
    return 1;
}

cspmd_status_t cspmd_annotation_specs_check(const cspmd_axis_key_t *written,
                                            const cspmd_axis_key_t *resolved, int n,
                                            const char *texts)
{
    if (n < 0 || (n > 0 && (written == NULL || resolved == NULL)) || texts == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "cspmd_annotation_specs_check: bad arguments");
    for (int64_t p = 0; p < n;) {
        int64_t e = spec_end(written, p, n);
        if (e < 0 || spec_end(resolved, p, n) != e || memcmp(written + p, resolved + p, sizeof *written) != 0)
            return cspmd_error_set(CSPMD_ERR_MISUSE,
                                   "cspmd_annotation_specs_check: bad spec encoding at %lld",
                                   (long long)p);
        p = e;
    }
    if (n == 0)
        return CSPMD_OK;
    int64_t first_end = spec_end(written, 0, n);
    int unresolved = 0;
    for (int64_t p = first_end; p < n;) {
        int64_t e = spec_end(written, p, n);
        int same_written = e - p == first_end &&
                           memcmp(written + p, written, (size_t)first_end * sizeof *written) == 0;
        if (!same_written && !specs_same_axes(resolved, 0, p, &unresolved))
            return cspmd_error_set(CSPMD_ERR_SPMD_TYPE, "Conflicting PartitionSpecs: %s%s", texts,
                                   unresolved ? " (an axis name that the current mesh does not "
                                                "resolve cannot be compared)"
                                              : "");
        p = e;
    }
    return CSPMD_OK;
}
