/* The peak with threads, for exact_peak.rs.
 *
 * `peak_threads barrier`: main holds 8192 bytes (main_buffer) from start to
 * end; four workers each churn small blocks (churn), then hold 4 blocks of
 * 1024*(k+1) bytes (worker_hold) until all four and main have met at a
 * barrier, then free them. The peak is the moment all hold theirs: not
 * raced, so DHAT's t-gmax is the same moment. Once the workers have freed
 * theirs, and before they end, main allocates 2000 bytes (late_block): a
 * recorder that keeps the workers' frees to themselves takes that for a
 * new peak.
 *
 * `peak_threads race`: four workers allocate and free blocks of varied
 * sizes at three sites (race_a, race_b, race_c) at the same time, keeping
 * a few alive each: the peak is raced, and only the sum rule can check it. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 4

static pthread_barrier_t barrier;

__attribute__((noinline)) void *main_buffer(void) { return malloc(8192); }
__attribute__((noinline)) void *churn(size_t n) { return malloc(n); }
__attribute__((noinline)) void *worker_hold(size_t n) { return malloc(n); }
__attribute__((noinline)) void *late_block(void) { return malloc(2000); }
__attribute__((noinline)) void *race_a(size_t n) { return malloc(n); }
__attribute__((noinline)) void *race_b(size_t n) { return malloc(n); }
__attribute__((noinline)) void *race_c(size_t n) { return malloc(n); }

static void *barrier_worker(void *arg) {
    int k = (int)(intptr_t)arg;
    for (int i = 0; i < 1000; i++) free(churn(16 + (size_t)(i % 64)));
    void *held[4];
    for (int i = 0; i < 4; i++) held[i] = worker_hold(1024 * (size_t)(k + 1));
    pthread_barrier_wait(&barrier);
    pthread_barrier_wait(&barrier);
    for (int i = 0; i < 4; i++) free(held[i]);
    pthread_barrier_wait(&barrier); /* all freed */
    pthread_barrier_wait(&barrier); /* main has allocated late_block */
    return NULL;
}

static void *race_worker(void *arg) {
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)((intptr_t)arg + 1);
    void *slot[8] = {0};
    for (int i = 0; i < 20000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int s = (int)(x >> 61);
        free(slot[s]);
        size_t n = 16 + (size_t)((x >> 20) % 2000);
        switch ((x >> 40) % 3) {
        case 0: slot[s] = race_a(n); break;
        case 1: slot[s] = race_b(n); break;
        default: slot[s] = race_c(n); break;
        }
    }
    for (int s = 0; s < 8; s++) free(slot[s]);
    return NULL;
}

int main(int argc, char **argv) {
    int race = argc > 1 && strcmp(argv[1], "race") == 0;
    void *buffer = main_buffer();
    pthread_t t[THREADS];
    if (!race) pthread_barrier_init(&barrier, NULL, THREADS + 1);
    for (int k = 0; k < THREADS; k++)
        if (pthread_create(&t[k], NULL, race ? race_worker : barrier_worker,
                           (void *)(intptr_t)k) != 0)
            return 2;
    void *late = NULL;
    if (!race) {
        pthread_barrier_wait(&barrier); /* every worker holds its blocks */
        pthread_barrier_wait(&barrier);
        pthread_barrier_wait(&barrier); /* every worker has freed them */
        late = late_block();
        pthread_barrier_wait(&barrier);
    }
    for (int k = 0; k < THREADS; k++) pthread_join(t[k], NULL);
    if (!race) pthread_barrier_destroy(&barrier);
    free(late);
    free(buffer);
    return 0;
}
