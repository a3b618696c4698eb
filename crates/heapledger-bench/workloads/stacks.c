/* Many distinct allocation stacks, for heapledger-bench: a profile at the
 * scale of a real program.
 *
 *   stacks [ALLOCS [STACKS [PAUSE_MS [THREADS]]]]  (default 1000000 500000 0 1)
 *
 * Makes ALLOCS allocations from STACKS distinct call stacks (at most 2^19),
 * each about 21 frames deep: main calls level 0, and each of 19 levels calls
 * the next from one of two call sites, picked by one bit of the path; the last
 * level calls the allocating leaf. Allocation i takes path (i mod STACKS),
 * scrambled by an odd multiplier so that consecutive allocations do not share
 * long prefixes, so every stack is used ALLOCS/STACKS times. Sizes are 16..271
 * bytes, drawn from the path. Half the blocks are freed at once, most of the
 * others a while later (a ring of 4096), and one in 128 is kept until exit
 * (not freed: a leak, as real programs have). With PAUSE_MS, it then sleeps
 * that long before it exits, every stack known (heapledger's
 * checkpoint_memory test: a checkpoint of them all). With THREADS, that
 * many threads each make ALLOCS allocations over the same STACKS, as the
 * threads of a server run the same code (the recorder's memory per stack
 * and thread).
 *
 * The two call sites of a level differ by the empty asm statements around
 * them (distinct text), so that no compiler merges them into one call: each
 * path is a distinct sequence of return addresses. Built with -O2
 * -fomit-frame-pointer, like most distribution code. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BITS 19
#define RING 4096

volatile unsigned long sink;

__attribute__((noinline)) static void *leaf(unsigned long path) {
    size_t size = 16 + (size_t)((path * 2654435761u) >> 7) % 256;
    unsigned char *p = malloc(size);
    if (!p) {
        perror("stacks: malloc");
        exit(1);
    }
    p[0] = (unsigned char)path;
    p[size - 1] = (unsigned char)(path >> 8);
    return p;
}

/* Level K calls level NEXT from one of two call sites, by bit K of the path;
 * not a tail call (the work after it), so every level keeps its frame. */
#define LEVEL(K, NEXT)                                                         \
    __attribute__((noinline)) static void *level##K(unsigned long path) {      \
        void *r;                                                               \
        if (path & (1ul << K)) {                                               \
            __asm__ volatile("# stacks: level " #K " site a" ::: "memory");    \
            r = NEXT(path);                                                    \
            __asm__ volatile("# stacks: level " #K " after a" ::: "memory");   \
            sink += K;                                                         \
        } else {                                                               \
            __asm__ volatile("# stacks: level " #K " site b" ::: "memory");    \
            r = NEXT(path);                                                    \
            __asm__ volatile("# stacks: level " #K " after b" ::: "memory");   \
            sink ^= K;                                                         \
        }                                                                      \
        return r;                                                              \
    }

LEVEL(18, leaf)
LEVEL(17, level18)
LEVEL(16, level17)
LEVEL(15, level16)
LEVEL(14, level15)
LEVEL(13, level14)
LEVEL(12, level13)
LEVEL(11, level12)
LEVEL(10, level11)
LEVEL(9, level10)
LEVEL(8, level9)
LEVEL(7, level8)
LEVEL(6, level7)
LEVEL(5, level6)
LEVEL(4, level5)
LEVEL(3, level4)
LEVEL(2, level3)
LEVEL(1, level2)
LEVEL(0, level1)

/* One thread's allocations (see the top). */
struct run {
    long allocs, stacks;
    int failed;
};

static void *run(void *arg) {
    struct run *r = arg;
    long allocs = r->allocs, stacks = r->stacks;
    void **ring = calloc(RING, sizeof *ring);
    void **kept = calloc((size_t)allocs / 64 + 1, sizeof *kept);
    if (!ring || !kept) {
        perror("stacks: calloc");
        r->failed = 1;
        return 0;
    }
    const unsigned long mask = (1ul << BITS) - 1;
    long nkept = 0;
    unsigned long sum = 0;
    for (long i = 0; i < allocs; i++) {
        /* An odd multiplier is a bijection modulo 2^BITS: STACKS distinct
         * values of i mod STACKS give STACKS distinct paths. */
        unsigned long path = ((unsigned long)(i % stacks) * 0x9E3779B1ul) & mask;
        unsigned char *p = level0(path);
        sum += p[0];
        if (i % 2 == 1) {
            free(p);
        } else if (i % 128 == 0) {
            kept[nkept++] = p;
        } else {
            long slot = (i / 2) % RING;
            free(ring[slot]);
            ring[slot] = p;
        }
    }
    for (long s = 0; s < RING; s++) free(ring[s]);
    free(ring);
    sink += sum + (unsigned long)nkept;
    /* kept[] stays allocated: blocks alive at exit. */
    return 0;
}

int main(int argc, char **argv) {
    long allocs = argc > 1 ? atol(argv[1]) : 1000000;
    long stacks = argc > 2 ? atol(argv[2]) : 500000;
    long pause_ms = argc > 3 ? atol(argv[3]) : 0;
    long threads = argc > 4 ? atol(argv[4]) : 1;
    if (allocs < 1 || stacks < 1 || stacks > (1l << BITS) || threads < 1 || threads > 64) {
        fprintf(stderr, "stacks: usage: stacks [ALLOCS [STACKS (1..%ld) [PAUSE_MS [THREADS (1..64)]]]]\n",
                1l << BITS);
        return 2;
    }
    struct run r = {allocs, stacks, 0};
    if (threads == 1) {
        run(&r);
    } else {
        /* Each thread makes ALLOCS allocations over the same STACKS. */
        pthread_t t[64];
        struct run each[64];
        for (long k = 0; k < threads; k++) {
            each[k] = r;
            if (pthread_create(&t[k], 0, run, &each[k]) != 0) {
                fprintf(stderr, "stacks: cannot start thread %ld\n", k);
                return 1;
            }
        }
        for (long k = 0; k < threads; k++) {
            pthread_join(t[k], 0);
            r.failed |= each[k].failed;
        }
    }
    if (r.failed)
        return 1;
    if (pause_ms > 0) {
        struct timespec t = {pause_ms / 1000, (pause_ms % 1000) * 1000000};
        nanosleep(&t, 0);
    }
    return 0;
}
