/* bump_malloc: a small allocator of its own, preloaded after heapledger:
 * malloc, calloc, realloc and free forward to glibc's __libc_* functions,
 * each counting its calls. heapledger's calls of the real malloc land here,
 * and the profile's run.allocator names this library. */
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

unsigned long bump_calls;

void *malloc(size_t n) {
    bump_calls++;
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m) {
    bump_calls++;
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n) {
    bump_calls++;
    return __libc_realloc(p, n);
}

void free(void *p) {
    bump_calls++;
    __libc_free(p);
}
