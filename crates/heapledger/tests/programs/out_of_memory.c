/* Runs out of address space on purpose: with RLIMIT_AS at 256 MB, allocates
 * 16-byte blocks until malloc returns NULL, frees them all, then does the
 * same with 64 KiB blocks, and prints how many blocks each round got. A
 * program that handles malloc's failure: it must exit 0 under heapledger as
 * it does alone (tests/exact_out_of_memory.rs). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#define LIMIT (256UL << 20)

/* Allocates blocks of `size` until malloc fails; frees them; returns how
 * many there were. The list of blocks is itself in the blocks: each holds
 * the previous one's address. */
static long fill(size_t size) {
    void *last = NULL;
    long n = 0;
    for (;;) {
        void **p = malloc(size);
        if (!p)
            break;
        *p = last;
        last = p;
        n++;
    }
    while (last) {
        void *prev = *(void **)last;
        free(last);
        last = prev;
    }
    return n;
}

int main(void) {
    struct rlimit r = {LIMIT, LIMIT};
    if (setrlimit(RLIMIT_AS, &r) != 0) {
        perror("setrlimit");
        return 1;
    }
    long small = fill(16);
    long large = fill(64 * 1024);
    printf("16-byte blocks: %ld\n", small);
    printf("64 KiB blocks: %ld\n", large);
    return 0;
}
