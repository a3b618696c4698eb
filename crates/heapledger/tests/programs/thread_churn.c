/* thread_churn N: N threads one after another, each allocating one block of
 * 64 bytes and freeing it, for exact_threads.rs (what the recorder keeps of
 * a thread once it has ended). Prints "done" and exits 0. No stdio before. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static void *worker(void *arg) {
    void *volatile p = malloc(64);
    free(p);
    return arg;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, NULL) != 0)
            return 2;
        pthread_join(t, NULL);
    }
    puts("done");
    return 0;
}
