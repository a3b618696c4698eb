/* Blocks freed by a thread-specific key's destructor, which glibc runs as
 * each thread ends (after memtrail's own key destructor), for
 * exact_threads.rs: `key_destructor [N [linger]]` starts N threads (3 if not
 * given), one after another, each allocating one block of 777 bytes and
 * handing it to the key; the destructor frees it. With `linger`, one more
 * thread is started first, whose destructor waits, before its free, until
 * the N others have come and gone. Prints "done" and exits 0. No stdio. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_key_t key;
static int gate[2] = {-1, -1};
static __thread int lingers;

static void release(void *p) {
    char c;
    if (lingers)
        while (read(gate[0], &c, 1) < 0)
            ;
    free(p);
}

__attribute__((noinline)) void *worker(void *arg) {
    lingers = arg == gate;
    pthread_setspecific(key, malloc(777)); /* SITE:keyed */
    return arg;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 3;
    int linger = argc > 2 && strcmp(argv[2], "linger") == 0;
    if (pthread_key_create(&key, release) != 0)
        return 2;
    pthread_t lingerer;
    if (linger) {
        if (pipe(gate) != 0 || pthread_create(&lingerer, NULL, worker, gate) != 0)
            return 2;
    }
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, NULL) != 0)
            return 2;
        pthread_join(t, NULL);
    }
    if (linger) {
        if (write(gate[1], "x", 1) != 1)
            return 2;
        pthread_join(lingerer, NULL);
    }
    write(1, "done\n", 5);
    return 0;
}
