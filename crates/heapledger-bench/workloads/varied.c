/* A churn with thousands of blocks of varied sizes alive, for
 * heapledger-bench: the per-call cost of a profiler where the allocator does
 * real work (bins, splitting, coalescing), not the same 32-byte block over
 * and over.
 *
 *   varied [PAIRS]      (default 10000000)
 *
 * Fills a ring of 4096 slots, then makes PAIRS steps: each frees a random
 * slot and mallocs a random size of 16..4096 bytes into it (a cheap LCG
 * draws both), so that about 4096 blocks of varied sizes stay alive. Built
 * with -O2 -fomit-frame-pointer, like most distribution code. */
#include <stdio.h>
#include <stdlib.h>

#define SLOTS 4096

volatile unsigned long sink;

int main(int argc, char **argv) {
    long pairs = argc > 1 ? atol(argv[1]) : 10000000;
    if (pairs < 1) {
        fprintf(stderr, "varied: bad pair count %s\n", argv[1]);
        return 2;
    }
    static unsigned char *ring[SLOTS];
    unsigned x = 12345u;
    for (int s = 0; s < SLOTS; s++) {
        x = x * 1664525u + 1013904223u;
        size_t size = 16 + (x >> 8) % 4081; /* 16..4096 */
        ring[s] = malloc(size);
        if (!ring[s]) {
            perror("varied: malloc");
            return 1;
        }
        ring[s][0] = (unsigned char)s;
    }
    unsigned long sum = 0;
    for (long i = 0; i < pairs; i++) {
        x = x * 1664525u + 1013904223u;
        unsigned slot = x >> 20; /* top 12 bits: the LCG's best */
        size_t size = 16 + (x & 0xfffff) % 4081; /* 16..4096 */
        free(ring[slot]);
        unsigned char *p = malloc(size);
        if (!p) {
            perror("varied: malloc");
            return 1;
        }
        p[0] = (unsigned char)i;
        p[size - 1] = (unsigned char)x;
        sum += p[0];
        ring[slot] = p;
    }
    for (int s = 0; s < SLOTS; s++) free(ring[s]);
    sink += sum;
    return 0;
}
