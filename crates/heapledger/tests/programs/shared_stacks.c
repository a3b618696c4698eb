/* Threads that run the same code over many stacks, for threads_spill.rs:
 * each of THREADS threads makes ROUNDS rounds over the 2^BITS paths of a
 * call tree, main -> worker -> visit -> pick0 -> a0 or b0 -> pick1 -> ...
 * -> leaf, where bit K of the path picks aK or bK, so that every path is a
 * stack of its own, named by its functions. Path p allocates 16 + p % 61 +
 * 8 t bytes in thread t (0 to THREADS-1) in each round, and frees the
 * block at once, except in the last round where p % 7 == 0: those blocks
 * stay alive at exit. Threads wait for one another before each round, so
 * that they hold the same stacks at the same time. With the argument
 * "one", the main thread makes thread 0's rounds alone. Prints nothing;
 * exits 0. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BITS 9
#define ROUNDS 3
#define THREADS 4

volatile unsigned long sink;
/* Read at run time, so that no compiler unrolls the rounds into three
 * calls of visit (three stacks for each path). */
static volatile int rounds = ROUNDS;
static pthread_barrier_t barrier;

__attribute__((noinline)) static void *leaf(unsigned path, unsigned t) {
    size_t size = 16 + path % 61 + 8 * (size_t)t;
    unsigned char *volatile p = malloc(size);
    p[0] = (unsigned char)path;
    return p;
}

/* aK and bK call the next level's pick (not a tail call: the work after
 * it), which calls aK+1 or bK+1 by bit K+1. */
#define LEVEL(K, NEXT)                                                         \
    __attribute__((noinline)) static void *a##K(unsigned path, unsigned t) {  \
        void *r = NEXT(path, t);                                              \
        sink += K;                                                            \
        return r;                                                             \
    }                                                                         \
    __attribute__((noinline)) static void *b##K(unsigned path, unsigned t) {  \
        void *r = NEXT(path, t);                                              \
        sink ^= K;                                                            \
        return r;                                                             \
    }                                                                         \
    __attribute__((noinline)) static void *pick##K(unsigned path, unsigned t) { \
        void *r = (path >> K) & 1 ? a##K(path, t) : b##K(path, t);            \
        sink++;                                                               \
        return r;                                                             \
    }

LEVEL(8, leaf)
LEVEL(7, pick8)
LEVEL(6, pick7)
LEVEL(5, pick6)
LEVEL(4, pick5)
LEVEL(3, pick4)
LEVEL(2, pick3)
LEVEL(1, pick2)
LEVEL(0, pick1)

__attribute__((noinline)) static void visit(unsigned t, int last) {
    for (unsigned p = 0; p < (1u << BITS); p++) {
        void *b = pick0(p, t);
        if (!(last && p % 7 == 0))
            free(b);
    }
}

static void *worker(void *arg) {
    unsigned t = (unsigned)(uintptr_t)arg;
    int n = rounds;
    for (int r = 0; r < n; r++) {
        pthread_barrier_wait(&barrier);
        visit(t, r == n - 1);
    }
    return NULL;
}

int main(int argc, char **argv) {
    /* "one": the main thread makes one worker's rounds itself, and the
     * process never has a second thread. */
    if (argc > 1 && strcmp(argv[1], "one") == 0) {
        if (pthread_barrier_init(&barrier, NULL, 1) != 0)
            return 2;
        worker(0);
        return 0;
    }
    pthread_t th[THREADS];
    if (pthread_barrier_init(&barrier, NULL, THREADS) != 0)
        return 2;
    for (uintptr_t t = 0; t < THREADS; t++)
        if (pthread_create(&th[t], NULL, worker, (void *)t) != 0)
            return 2;
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    return 0;
}
