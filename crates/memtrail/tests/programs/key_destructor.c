/* Blocks freed by a thread-specific key's destructor, which glibc runs as
 * each thread ends (after memtrail's own key destructor), for
 * exact_threads.rs: 3 threads, one after another, each allocating one block
 * of 777 bytes and handing it to the key; the destructor frees it. Prints
 * "done" and exits 0. No stdio. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_key_t key;

static void release(void *p) {
    free(p);
}

__attribute__((noinline)) void *worker(void *arg) {
    pthread_setspecific(key, malloc(777)); /* SITE:keyed */
    return arg;
}

int main(void) {
    if (pthread_key_create(&key, release) != 0)
        return 2;
    for (int i = 0; i < 3; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, NULL) != 0)
            return 2;
        pthread_join(t, NULL);
    }
    write(1, "done\n", 5);
    return 0;
}
