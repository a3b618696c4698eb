/* threads_alive N: N threads alive at once, started one after another (each
 * allocates a block of 64 bytes, then waits for all the others), for
 * exact_threads.rs (what the recorder keeps per running thread). Prints
 * "done" and exits 0. */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_barrier_t all;
static sem_t started;

static void *worker(void *arg) {
    void *volatile p = malloc(64);
    sem_post(&started);
    pthread_barrier_wait(&all);
    free(p);
    return arg;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    pthread_t *t = calloc(n, sizeof *t);
    if (!t || sem_init(&started, 0, 0) != 0 || pthread_barrier_init(&all, NULL, n + 1) != 0)
        return 2;
    for (int i = 0; i < n; i++) {
        if (pthread_create(&t[i], NULL, worker, NULL) != 0)
            return 2;
        sem_wait(&started);
    }
    pthread_barrier_wait(&all);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    free(t);
    puts("done");
    return 0;
}
