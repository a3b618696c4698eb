/* Allocation churn for heapledger-bench.
 *
 *   churn [PAIRS] [--threads T]
 *
 * Runs PAIRS malloc+free pairs (default 5000000) of sizes 16..4096 bytes (the
 * nine powers of two, drawn by a small LCG), with at most LIVE blocks alive at a
 * time, in a loop called DEPTH frames of (non-tail) recursion deep. Power-of-two
 * classes keep the plain program fast (mostly glibc's tcache), so the time a
 * profiler adds stands out from the noise; uniformly random sizes would spend
 * ~70 ns per pair in glibc's bins. With --threads T, T threads each
 * run the same churn with PAIRS/T pairs, so the total work stays constant.
 * Built with -O2 -fomit-frame-pointer, like most distribution code. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEPTH 20
#define LIVE 8

volatile unsigned long sink;

__attribute__((noinline)) static void churn_loop(long pairs, unsigned seed) {
    void *live[LIVE] = {0};
    unsigned x = seed;
    unsigned long sum = 0;
    for (long i = 0; i < pairs; i++) {
        x = x * 1664525u + 1013904223u;
        size_t size = (size_t)16 << ((x >> 8) % 9); /* 16..4096 */
        unsigned slot = x >> 29; /* top bits: the LCG's best */
        free(live[slot]);
        unsigned char *p = malloc(size);
        if (!p) {
            perror("churn: malloc");
            exit(1);
        }
        p[0] = (unsigned char)i;
        p[size - 1] = (unsigned char)x;
        sum += p[0];
        live[slot] = p;
    }
    for (int i = 0; i < LIVE; i++) free(live[i]);
    sink += sum;
}

/* Not a tail call (the store after it), so every level keeps its frame. */
__attribute__((noinline)) static unsigned long recurse(int depth, long pairs, unsigned seed) {
    if (depth <= 1) {
        churn_loop(pairs, seed);
        return 1;
    }
    unsigned long r = recurse(depth - 1, pairs, seed);
    sink += r;
    return r + 1;
}

struct job {
    long pairs;
    unsigned seed;
};

static void *worker(void *arg) {
    struct job *j = arg;
    recurse(DEPTH, j->pairs, j->seed);
    return NULL;
}

int main(int argc, char **argv) {
    long pairs = 5000000;
    long threads = 0; /* 0: run in the main thread */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads = atol(argv[++i]);
            if (threads < 1 || threads > 1024) {
                fprintf(stderr, "churn: bad thread count %s\n", argv[i]);
                return 2;
            }
        } else {
            pairs = atol(argv[i]);
            if (pairs < 1) {
                fprintf(stderr, "churn: bad pair count %s\n", argv[i]);
                return 2;
            }
        }
    }
    if (threads == 0) {
        recurse(DEPTH, pairs, 12345u);
        return 0;
    }
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    struct job *jobs = calloc((size_t)threads, sizeof *jobs);
    if (!tids || !jobs) {
        perror("churn: calloc");
        return 1;
    }
    for (long t = 0; t < threads; t++) {
        jobs[t].pairs = pairs / threads + (t < pairs % threads ? 1 : 0);
        jobs[t].seed = 12345u + (unsigned)t * 7919u;
        if (pthread_create(&tids[t], NULL, worker, &jobs[t]) != 0) {
            fprintf(stderr, "churn: cannot create thread %ld\n", t);
            return 1;
        }
    }
    for (long t = 0; t < threads; t++) pthread_join(tids[t], NULL);
    free(jobs);
    free(tids);
    return 0;
}
