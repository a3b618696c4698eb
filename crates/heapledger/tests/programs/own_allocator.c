/* For exact_own_allocator.rs. Built with -DOWN_ALLOCATOR, the executable
 * defines malloc, free, calloc and realloc itself, as a program with an
 * allocator linked in does (rustc's jemalloc): the dynamic linker finds
 * those definitions before any preloaded library's, so heapledger never sees
 * their calls, and says so. Without it, glibc's serve, and heapledger sees
 * the three blocks, also when built without PIE. Exits with 6; no stdio. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef OWN_ALLOCATOR
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

void *malloc(size_t n) { return __libc_malloc(n); }
void free(void *p) { __libc_free(p); }
void *calloc(size_t n, size_t m) { return __libc_calloc(n, m); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
#endif

__attribute__((noinline)) void *make(size_t n) {
    return malloc(n); /* SITE:make */
}


int main(void) {
    void *a = make(100), *b = make(200), *c = make(300);
    /* Taking malloc's address in code: in an executable built without
     * PIE, the linker gives malloc a PLT entry that stands for it
     * everywhere (node's executable has one), though calls through it
     * still go to the first definition. */
    void *(*volatile take_address)(size_t) = malloc;
    free(take_address(50));
    char *s = strdup("own");
    write(1, s, 3);
    write(1, "\n", 1);
    free(s);
    free(a);
    free(b);
    free(c);
    return 6;
}
