/* Contended waits (issue 35): a holder thread keeps a mutex for 10 ms,
 * ROUNDS times; each time the waiter blocks on it, timing its own
 * pthread_mutex_lock with CLOCK_MONOTONIC. Prints the waiter's total in
 * ns, the program's own measure that the profile's time lost is compared
 * with. `contended [ROUNDS]`. */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static sem_t held, done;
static long rounds = 20;

static long long now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *holder(void *arg) {
    (void)arg;
    struct timespec ten_ms = {0, 10 * 1000 * 1000};
    for (long r = 0; r < rounds; r++) {
        pthread_mutex_lock(&m);
        sem_post(&held);
        nanosleep(&ten_ms, 0);
        pthread_mutex_unlock(&m);
        sem_wait(&done);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1)
        rounds = atol(argv[1]);
    if (rounds <= 0) {
        fprintf(stderr, "contended: bad round count %s\n", argv[1]);
        return 2;
    }
    sem_init(&held, 0, 0);
    sem_init(&done, 0, 0);
    pthread_t t;
    pthread_create(&t, 0, holder, 0);
    long long total = 0;
    for (long r = 0; r < rounds; r++) {
        sem_wait(&held);
        long long t0 = now();
        pthread_mutex_lock(&m);
        total += now() - t0;
        pthread_mutex_unlock(&m);
        sem_post(&done);
    }
    pthread_join(t, 0);
    printf("%lld\n", total);
    return 0;
}
