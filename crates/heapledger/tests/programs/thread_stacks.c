/* Threads that come and go on stacks of different sizes, for
 * exact_threads.rs: 20 rounds of 16 threads, stack sizes 4 to 28 MiB, so
 * that glibc's stack cache both reuses stacks and unmaps them. Odd threads
 * allocate one block of 100 + k bytes and free it; even ones allocate
 * nothing (their first allocator call is glibc's own free(NULL) as the
 * thread ends). Prints "done" and exits 0. No stdio. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) void *worker(void *arg) {
    intptr_t k = (intptr_t)arg;
    if (k % 2) {
        void *volatile p = malloc(100 + (size_t)k); /* SITE:worker */
        free(p);
    }
    return NULL;
}

int main(void) {
    for (int r = 0; r < 20; r++) {
        pthread_t t[16];
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setstacksize(&at, (size_t)(1 + r % 7) * 4 * 1024 * 1024);
        for (intptr_t k = 0; k < 16; k++)
            if (pthread_create(&t[k], &at, worker, (void *)k) != 0)
                return 2;
        for (int k = 0; k < 16; k++)
            pthread_join(t[k], NULL);
        pthread_attr_destroy(&at);
    }
    write(1, "done\n", 5);
    return 0;
}
