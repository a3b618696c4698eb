/* main leaves through pthread_exit while a worker goes on, for
 * exact_threads.rs: the process lives on without its main thread, and the
 * worker's return ends it. main allocates 99 bytes (kept); the worker, once
 * main has gone, allocates 100 blocks of 50 bytes (freed) and 1234 bytes
 * (kept), and prints "worker done". No stdio before that. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void *volatile kept[2];

__attribute__((noinline)) void *worker(void *arg) {
    usleep(100000); /* main has left */
    for (int i = 0; i < 100; i++) {
        void *volatile p = malloc(50); /* SITE:churn */
        free(p);
    }
    kept[1] = malloc(1234); /* SITE:kept */
    write(1, "worker done\n", 12);
    return arg;
}

int main(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0)
        return 2;
    kept[0] = malloc(99); /* SITE:main */
    pthread_exit(NULL);
}
