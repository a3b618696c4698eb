/* Counts every call that reaches the C library's allocator, for
 * stress_no_alloc.rs. Preloaded after the recorder
 * (LD_PRELOAD=libheapledger_preload.so:libheapcount.so), it is what the
 * recorder's `dlsym(RTLD_NEXT, "malloc")` finds: every program call the
 * recorder forwards passes here once, and so does any call the recorder
 * itself (or a libc function it calls) makes to the allocator. It forwards
 * to glibc's __libc_* entry points, so it allocates nothing itself.
 *
 * heap_counter_thread() returns the calling thread's count. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

static __thread uint64_t calls __attribute__((tls_model("initial-exec")));

uint64_t heap_counter_thread(void) { return calls; }

void *malloc(size_t n) {
    calls++;
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m) {
    calls++;
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n) {
    calls++;
    return __libc_realloc(p, n);
}

void free(void *p) {
    calls++;
    __libc_free(p);
}

int posix_memalign(void **out, size_t align, size_t n) {
    calls++;
    void *p = __libc_memalign(align, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t n) {
    calls++;
    return __libc_memalign(align, n);
}

void *memalign(size_t align, size_t n) {
    calls++;
    return __libc_memalign(align, n);
}

void *valloc(size_t n) {
    calls++;
    return __libc_valloc(n);
}

void *pvalloc(size_t n) {
    calls++;
    return __libc_pvalloc(n);
}
