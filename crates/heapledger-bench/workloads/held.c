/* Millions of small blocks alive at once, for heapledger-bench: the table of
 * live blocks under load. Allocates BLOCKS blocks of 24 bytes (a heap
 * packed with 32-byte chunks), keeps them all, then frees them in order.
 *
 *   held [BLOCKS]      (default 4000000) */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 4000000;
    if (n < 1) {
        fprintf(stderr, "held: bad block count %s\n", argv[1]);
        return 2;
    }
    void **blocks = malloc((size_t)n * sizeof *blocks);
    if (!blocks)
        return 1;
    for (long i = 0; i < n; i++)
        blocks[i] = malloc(24);
    for (long i = 0; i < n; i++)
        free(blocks[i]);
    free(blocks);
    return 0;
}
