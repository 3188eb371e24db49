/*
 * table.h -- internal: fixed-capacity interning tables (not installed).
 *
 * A table stores fixed-size records in chunks of CSPMDI_CHUNK records and
 * hands out dense ids.  Lookup by id is lock-free and allocation-free: the
 * record count is published with release semantics after the record (and
 * its chunk pointer) are written, and readers load it with acquire.
 * Interning (find-or-insert by the record's first key_size bytes, compared
 * with memcmp, so callers zero padding and unused slots) takes the table's
 * mutex.  Records are never moved or freed.
 *
 * Ids below `reserved` exist from the start (static chunk 0) and are never
 * found by interning: callers special-case them.
 */
#ifndef CSPMD_TABLE_H
#define CSPMD_TABLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cspmd.h"

#if defined(__GNUC__)
#define CSPMDI_HIDDEN __attribute__((visibility("hidden")))
#else
#define CSPMDI_HIDDEN
#endif

#define CSPMDI_CHUNK 256u

typedef struct cspmdi_table {
    const char *what;                  /* for NOMEM messages: "axis", "type" */
    size_t rec_size, key_size;
    uint32_t cap;                      /* max ids, a multiple of CSPMDI_CHUNK */
    uint32_t reserved;                 /* ids [0, reserved) pre-exist        */
    uint32_t hash_mask;                /* hash has hash_mask + 1 slots       */
    uint32_t *hash;                    /* id + 1, 0 = empty; under lock      */
    _Atomic(unsigned char *) *chunks;  /* cap / CSPMDI_CHUNK; [0] static     */
    _Atomic uint32_t count;            /* published ids                      */
    pthread_mutex_t lock;
} cspmdi_table_t;

/* Static definition helper: NAME_chunks, NAME_hash and NAME itself.
 * CHUNK0 is a static array of CSPMDI_CHUNK records (chunk 0). */
#define CSPMDI_TABLE_DEFINE(NAME, WHAT, REC, KEYSIZE, CAP, RESERVED, CHUNK0)              \
    static _Atomic(unsigned char *) NAME##_chunks[(CAP) / CSPMDI_CHUNK] = {                \
        (unsigned char *)(CHUNK0)};                                                        \
    static uint32_t NAME##_hash[2u * (CAP)];                                               \
    static cspmdi_table_t NAME = {(WHAT), sizeof(REC), (KEYSIZE), (CAP), (RESERVED),      \
                                  2u * (CAP) - 1u, NAME##_hash, NAME##_chunks, (RESERVED), \
                                  PTHREAD_MUTEX_INITIALIZER}

/* The record of id, or NULL when id was never handed out.  Lock-free. */
static inline void *cspmdi_table_get(cspmdi_table_t *t, uint32_t id)
{
    uint32_t n = atomic_load_explicit(&t->count, memory_order_acquire);
    if (id >= n)
        return NULL;
    unsigned char *chunk =
        atomic_load_explicit(&t->chunks[id / CSPMDI_CHUNK], memory_order_acquire);
    return chunk + (size_t)(id % CSPMDI_CHUNK) * t->rec_size;
}

/* Find or insert rec (rec_size bytes; identity = the first key_size bytes).
 * init (may be NULL) runs on a new slot, under the lock, before the id is
 * published.  Errors: NOMEM (table full or chunk allocation failed). */
CSPMDI_HIDDEN cspmd_status_t cspmdi_table_intern(cspmdi_table_t *t, const void *rec,
                                                 void (*init)(void *slot, uint32_t id),
                                                 uint32_t *id);

#endif /* CSPMD_TABLE_H */
