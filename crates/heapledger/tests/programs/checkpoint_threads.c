/* Threads allocating and freeing while checkpoints are written: each of
 * THREADS threads makes ROUNDS malloc/free pairs of 3001 + its number
 * bytes, pausing 1 ms every 512 pairs (about 40 ms in all, so that
 * checkpoints every 5 ms fall in the middle of the work). Then the main
 * thread waits for a checkpoint begun after the joins, and exits, or
 * (argument "kill") kills itself with SIGKILL: tests/checkpoint.rs. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint_wait.h"

#define THREADS 4
#define ROUNDS 20000

static void *work(void *arg) {
    size_t size = 3001 + (size_t)arg;
    for (int i = 0; i < ROUNDS; i++) {
        void *p = malloc(size);
        *(volatile char *)p = 1;
        free(p);
        if (i % 512 == 0) {
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, 0);
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], 0, work, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], 0);
    wait_for_checkpoint();
    if (argc > 1 && strcmp(argv[1], "kill") == 0) kill(getpid(), SIGKILL);
    return 0;
}
