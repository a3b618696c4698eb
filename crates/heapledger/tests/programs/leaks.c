/* Known leaks for `heapledger leaks` (issue 32): prints each block it
 * leaves allocated, "POINTER SIZE", one per line, and frees the rest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *kept[8];
int n_kept;

static void keep(void *p, size_t size) {
    kept[n_kept++] = p;
    printf("%p %zu\n", p, size);
}

__attribute__((noinline)) void *make_buffer(void) {
    return malloc(100); /* SITE:buffer */
}

__attribute__((noinline)) void *make_cache(void) {
    return malloc(7); /* SITE:cache */
}

__attribute__((noinline)) void *make_table(void) {
    return calloc(5, 10); /* SITE:table */
}

int main(void) {
    for (int i = 0; i < 3; i++)
        keep(make_buffer(), 100);
    keep(make_cache(), 7);
    for (int i = 0; i < 2; i++)
        keep(make_table(), 50);
    for (int i = 0; i < 10; i++)
        free(make_buffer());
    fflush(stdout);
    return 0;
}
