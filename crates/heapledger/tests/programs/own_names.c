/* For exact_own_allocator.rs: a program with an allocator linked in under
 * names of its own (mimalloc's `mi_malloc`, as Rust's mimalloc crate links
 * it), whose blocks never reach malloc: heapledger says so. Exits 6. */
#include <stdio.h>
#include <stdlib.h>

static char pool[1 << 20];
static size_t used;

__attribute__((noinline)) void *mi_malloc(size_t n) {
    void *p = pool + used;
    used += (n + 15) & ~(size_t)15;
    return p;
}

int main(void) {
    void *volatile p = 0;
    for (int i = 0; i < 1000; i++)
        p = mi_malloc(64);
    printf("own_names: %d\n", p != 0);
    return 6;
}
