/*
 * unchecked_code.c -- register_no_typecheck: code the user exempted from
 * checking, and what an op run there (or in the backward of one) gets.
 *
 * The keys are opaque pointers (the shim passes Python code objects, which
 * the front keeps alive); registration is for the life of the process, as
 * in the reference.  The kernel asks cspmd_unchecked_code_armed() on every
 * op: one relaxed load, 0 until the first registration, so checking costs
 * nothing extra while nothing is registered.  Lookups take no lock: the set
 * is an array that is only appended to (the count is published after the
 * key), and a full array is replaced by one twice its size; replaced arrays
 * stay on a list, since a reader may still be scanning one.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "core.h"

typedef struct code_set {
    struct code_set *replaced; /* the array this one replaced (kept) */
    int cap;
    _Atomic int n;
    const void *keys[];
} code_set_t;

static _Atomic(code_set_t *) current;
static atomic_int armed;
static pthread_mutex_t add_mutex = PTHREAD_MUTEX_INITIALIZER;

static code_set_t *set_new(int cap, code_set_t *from)
{
    code_set_t *s = malloc(sizeof *s + (size_t)cap * sizeof s->keys[0]);
    if (s == NULL)
        return NULL;
    int n = from ? atomic_load_explicit(&from->n, memory_order_relaxed) : 0;
    s->replaced = from;
    s->cap = cap;
    if (n > 0)
        memcpy(s->keys, from->keys, (size_t)n * sizeof s->keys[0]);
    atomic_init(&s->n, n);
    return s;
}

static int set_has(const code_set_t *s, const void *key)
{
    if (s == NULL)
        return 0;
    int n = atomic_load_explicit(&((code_set_t *)s)->n, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (s->keys[i] == key)
            return 1;
    return 0;
}

cspmd_status_t cspmd_unchecked_code_add(const void *code)
{
    if (code == NULL)
        return cspmd_error_set(CSPMD_ERR_MISUSE, "register_no_typecheck: no code object");
    cspmd_status_t st = CSPMD_OK;
    pthread_mutex_lock(&add_mutex);
    code_set_t *s = atomic_load_explicit(&current, memory_order_relaxed);
    if (!set_has(s, code)) {
        int n = s ? atomic_load_explicit(&s->n, memory_order_relaxed) : 0;
        if (s == NULL || n == s->cap) {
            code_set_t *grown = set_new(s ? 2 * s->cap : 8, s);
            if (grown == NULL) {
                st = cspmd_error_set(CSPMD_ERR_NOMEM,
                                     "register_no_typecheck: out of memory for %d functions",
                                     n + 1);
                goto out;
            }
            atomic_store_explicit(&current, grown, memory_order_release);
            s = grown;
        }
        s->keys[n] = code;
        atomic_store_explicit(&s->n, n + 1, memory_order_release);
        atomic_store_explicit(&armed, 1, memory_order_relaxed);
    }
out:
    pthread_mutex_unlock(&add_mutex);
    return st;
}

void cspmd_unchecked_code_clear(void)
{
    pthread_mutex_lock(&add_mutex);
    code_set_t *s = atomic_load_explicit(&current, memory_order_relaxed);
    atomic_store_explicit(&armed, 0, memory_order_relaxed);
    if (s != NULL)
        atomic_store_explicit(&s->n, 0, memory_order_release);
    pthread_mutex_unlock(&add_mutex);
}

int cspmd_unchecked_code_armed(void)
{
    return atomic_load_explicit(&armed, memory_order_relaxed);
}

int cspmd_unchecked_code_has(const void *code)
{
    return set_has(atomic_load_explicit(&current, memory_order_acquire), code);
}

int cspmd_unchecked_code_count(void)
{
    code_set_t *s = atomic_load_explicit(&current, memory_order_acquire);
    return s ? atomic_load_explicit(&s->n, memory_order_acquire) : 0;
}

cspmd_type_t cspmd_unchecked_grad_type(cspmd_type_t input)
{
    return cspmd_type_dual(input);
}
