/* thread_storm S N: S spawner threads, each starting N short threads one
 * after another (each allocates 48 bytes, frees them, and hands one block of
 * 777 bytes to a key whose destructor frees it as the thread ends), so that
 * threads end and start at once on every core; for exact_threads.rs (the
 * states of ended threads summed and reused while others are made). Prints
 * "done" and exits 0. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_key_t key;

static void release(void *p) {
    free(p);
}

static void *leaf(void *arg) {
    void *volatile p = malloc(48);
    free(p);
    pthread_setspecific(key, malloc(777));
    return arg;
}

static void *spawner(void *arg) {
    long n = (long)arg;
    for (long i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, leaf, NULL) != 0)
            abort();
        pthread_join(t, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int s = argc > 1 ? atoi(argv[1]) : 4;
    long n = argc > 2 ? atol(argv[2]) : 100;
    if (pthread_key_create(&key, release) != 0)
        return 2;
    pthread_t *t = calloc(s, sizeof *t);
    if (!t)
        return 2;
    for (int i = 0; i < s; i++)
        if (pthread_create(&t[i], NULL, spawner, (void *)n) != 0)
            return 2;
    for (int i = 0; i < s; i++)
        pthread_join(t[i], NULL);
    free(t);
    puts("done");
    return 0;
}
