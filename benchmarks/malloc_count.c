/*
 * malloc_count -- an LD_PRELOAD heap-call counter for bench_alloc.py.
 *
 * Wraps malloc, calloc, realloc, free, posix_memalign, aligned_alloc,
 * memalign and valloc (C++'s operator new/delete call these), forwarding
 * to glibc's __libc_* entry points (no dlsym: it would allocate), and
 * counts calls per thread.  Python reads the counters through ctypes
 * (mc_allocs(), mc_frees()); mc_reset() zeroes this thread's counters.
 */
#pragma GCC visibility push(default)
#include <stddef.h>
#include <stdint.h>
#include <errno.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);

static _Thread_local uint64_t n_alloc, n_free;

__attribute__((visibility("default"))) uint64_t mc_allocs(void) { return n_alloc; }
__attribute__((visibility("default"))) uint64_t mc_frees(void) { return n_free; }
__attribute__((visibility("default"))) void mc_reset(void) { n_alloc = n_free = 0; }

void *malloc(size_t n) { n_alloc++; return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { n_alloc++; return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { n_alloc++; return __libc_realloc(p, n); }
void free(void *p) { if (p) n_free++; __libc_free(p); }
void *memalign(size_t al, size_t n) { n_alloc++; return __libc_memalign(al, n); }
void *aligned_alloc(size_t al, size_t n) { n_alloc++; return __libc_memalign(al, n); }
void *valloc(size_t n) { n_alloc++; return __libc_valloc(n); }
int posix_memalign(void **out, size_t al, size_t n)
{
    n_alloc++;
    void *p = __libc_memalign(al, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}
