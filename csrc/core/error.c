/*
 * error.c -- status and collective names, the per-thread error message, local type names,
 * and the interning table shared by the other core modules.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "cspmd.h"
#include "table.h"

#define ERROR_BUF 4096

static _Thread_local char tl_error[ERROR_BUF];

const char *cspmd_status_name(cspmd_status_t status)
{
    switch (status) {
#define STATUS_NAME(name, value, doc)                                                         \
    case CSPMD_##name: return "CSPMD_" #name;
        CSPMD_STATUS_LIST(STATUS_NAME)
#undef STATUS_NAME
    }
    return "CSPMD_ERR_UNKNOWN";
}

const char *cspmd_coll_name(cspmd_coll_t op)
{
    switch (op) {
#define COLL_NAME(name, text, noop)                                                           \
    case CSPMD_COLL_##name: return text;
        CSPMD_COLL_LIST(COLL_NAME)
#undef COLL_NAME
    }
    return "?";
}

const char *cspmd_last_error(void)
{
    const char *full = cspmdi_error_full_text();
    return full != NULL ? full : tl_error;
}

const char *cspmdi_error_message(void)
{
    return tl_error;
}

cspmd_status_t cspmd_error_set(cspmd_status_t status, const char *fmt, ...)
{
    /* Format into a scratch buffer first: an argument may point into the
     * current message (e.g. prefixing context to cspmd_last_error()). */
    char tmp[ERROR_BUF];
    if (fmt == NULL) {
        tmp[0] = '\0';
    } else {
        va_list ap;
        va_start(ap, fmt);
        int r = vsnprintf(tmp, sizeof tmp, fmt, ap);
        va_end(ap);
        if (r < 0)
            tmp[0] = '\0';
    }
    memcpy(tl_error, tmp, sizeof tl_error);
    tl_error[ERROR_BUF - 1] = '\0';
    cspmdi_error_context_reset();
    return status;
}

cspmd_ltype_t cspmd_ltype_dual(cspmd_ltype_t t)
{
    switch (t) {
    case CSPMD_LT_R: return CSPMD_LT_P;
    case CSPMD_LT_P: return CSPMD_LT_R;
    case CSPMD_LT_I: return CSPMD_LT_I;
    case CSPMD_LT_V: return CSPMD_LT_V;
    case CSPMD_LT_NONE: break;
    }
    return CSPMD_LT_NONE;
}

const char *cspmd_ltype_letter(cspmd_ltype_t t)
{
    switch (t) {
    case CSPMD_LT_R: return "R";
    case CSPMD_LT_I: return "I";
    case CSPMD_LT_V: return "V";
    case CSPMD_LT_P: return "P";
    case CSPMD_LT_NONE: break;
    }
    return "?";
}

/* ---- interning tables (see table.h) ---------------------------------- */

static uint32_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 16777619u;
    }
    return h;
}

cspmd_status_t cspmdi_table_intern(cspmdi_table_t *t, const void *rec,
                                   void (*init)(void *slot, uint32_t id), uint32_t *id)
{
    uint32_t h = hash_bytes(rec, t->key_size);
    pthread_mutex_lock(&t->lock);
    uint32_t slot = h & t->hash_mask;
    for (;;) {
        uint32_t e = t->hash[slot];
        if (e == 0)
            break;
        const void *r = cspmdi_table_get(t, e - 1);
        if (memcmp(r, rec, t->key_size) == 0) {
            pthread_mutex_unlock(&t->lock);
            *id = e - 1;
            return CSPMD_OK;
        }
        slot = (slot + 1) & t->hash_mask;
    }
    uint32_t n = atomic_load_explicit(&t->count, memory_order_relaxed);
    if (n >= t->cap) {
        pthread_mutex_unlock(&t->lock);
        return cspmd_error_set(CSPMD_ERR_NOMEM, "cspmd: the %s table is full (%u entries)",
                               t->what, (unsigned)t->cap);
    }
    uint32_t c = n / CSPMDI_CHUNK;
    unsigned char *chunk = atomic_load_explicit(&t->chunks[c], memory_order_relaxed);
    if (chunk == NULL) {
        chunk = calloc(CSPMDI_CHUNK, t->rec_size);
        if (chunk == NULL) {
            pthread_mutex_unlock(&t->lock);
            return cspmd_error_set(CSPMD_ERR_NOMEM, "cspmd: out of memory growing the %s table",
                                   t->what);
        }
        atomic_store_explicit(&t->chunks[c], chunk, memory_order_release);
    }
    unsigned char *dst = chunk + (size_t)(n % CSPMDI_CHUNK) * t->rec_size;
    memcpy(dst, rec, t->rec_size);
    if (init != NULL)
        init(dst, n);
    atomic_store_explicit(&t->count, n + 1, memory_order_release);
    t->hash[slot] = n + 1;
    pthread_mutex_unlock(&t->lock);
    *id = n;
    return CSPMD_OK;
}
