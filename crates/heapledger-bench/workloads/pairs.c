/* The simplest malloc(32)+free loop for heapledger-bench: the fixed cost per pair.
 *
 *   pairs [PAIRS]      (default 20000000)
 *
 * The volatile slot keeps the compiler from removing the pair. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    long pairs = argc > 1 ? atol(argv[1]) : 20000000;
    if (pairs < 1) {
        fprintf(stderr, "pairs: bad pair count %s\n", argv[1]);
        return 2;
    }
    for (long i = 0; i < pairs; i++) {
        void *volatile p = malloc(32);
        free(p);
    }
    return 0;
}
