/* Four threads, each allocating a known number of blocks of its own size at
 * one call site, for exact_threads.rs. Thread k (0..3) allocates 10*(k+1)
 * blocks of 1000+8*k bytes, waits on a barrier until all four hold their
 * blocks, then frees them. No stdio. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define THREADS 4

static pthread_barrier_t barrier;

__attribute__((noinline)) void thread_alloc(void **out, int n, size_t size) {
    for (int i = 0; i < n; i++)
        out[i] = malloc(size); /* SITE:thread_alloc */
}

__attribute__((noinline)) void *thread_main(void *arg) {
    int k = (int)(intptr_t)arg;
    int n = 10 * (k + 1);
    void *blocks[40];
    thread_alloc(blocks, n, 1000 + 8 * k); /* SITE:thread_main */
    pthread_barrier_wait(&barrier);
    for (int i = 0; i < n; i++)
        free(blocks[i]);
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    pthread_barrier_init(&barrier, NULL, THREADS);
    for (int k = 0; k < THREADS; k++)
        if (pthread_create(&t[k], NULL, thread_main, (void *)(intptr_t)k) != 0)
            return 2;
    for (int k = 0; k < THREADS; k++)
        pthread_join(t[k], NULL);
    pthread_barrier_destroy(&barrier);
    write(1, "threads: done\n", 14);
    return 0;
}
