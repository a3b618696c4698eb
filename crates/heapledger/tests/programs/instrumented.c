/* Built with -finstrument-functions (tests/enter_exit.rs): allocations at
 * known sites, three levels deep, recursion, and a strdup; recorded with
 * --stack enter-exit and with --stack dwarf, which must agree per
 * function. The entry and exit functions come from a stub library
 * (cyg_stub.c) that heapledger's recorder takes the place of. */
#include <stdlib.h>
#include <string.h>

static void *keep[64];
static int kept;

__attribute__((noinline)) void leaf(int n) {
    for (int i = 0; i < n; i++)
        free(malloc(24 + i)); /* SITE:leaf */
}

__attribute__((noinline)) void middle(int n) {
    keep[kept++] = malloc(100); /* SITE:middle */
    leaf(n);
}

__attribute__((noinline)) int recurse(int depth) {
    if (depth == 0) {
        keep[kept++] = malloc(7); /* SITE:bottom */
        return 0;
    }
    return recurse(depth - 1) + 1;
}

__attribute__((noinline)) void copy(void) {
    keep[kept++] = strdup("instrumented"); /* SITE:copy */
}

int main(void) {
    for (int i = 0; i < 3; i++)
        middle(5);
    recurse(10);
    copy(); /* SITE:copycall */
    leaf(2);
    for (int i = 0; i < kept; i++)
        free(keep[i]);
    return 0;
}
