/* Threads canceled while they block in the waits heapledger times
 * (tests/waits.rs): a condition wait, a timed one, a semaphore, a join.
 * pthread_cancel unwinds them through heapledger's entries, which must let
 * it (its library aborts on an unwinding through its Rust code). */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static sem_t s;
static pthread_t forever;

static void unlock(void *arg) { pthread_mutex_unlock(arg); }

static void *cond_waiter(void *arg) {
    int timed = arg != NULL;
    pthread_mutex_lock(&m);
    pthread_cleanup_push(unlock, &m);
    for (;;) {
        if (timed) {
            struct timespec at;
            clock_gettime(CLOCK_REALTIME, &at);
            at.tv_sec += 60;
            pthread_cond_timedwait(&c, &m, &at);
        } else {
            pthread_cond_wait(&c, &m);
        }
    }
    pthread_cleanup_pop(1);
    return NULL;
}

static void *sem_waiter(void *arg) {
    (void)arg;
    for (;;)
        sem_wait(&s);
    return NULL;
}

static void *sleeper(void *arg) {
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

static void *joiner(void *arg) {
    (void)arg;
    pthread_join(forever, NULL);
    return NULL;
}

int main(void) {
    sem_init(&s, 0, 0);
    pthread_create(&forever, NULL, sleeper, NULL);
    void *(*fns[])(void *) = {cond_waiter, cond_waiter, sem_waiter, joiner};
    void *args[] = {NULL, (void *)1, NULL, NULL};
    const char *names[] = {"cond", "timedwait", "sem", "join"};
    for (int i = 0; i < 4; i++) {
        pthread_t t;
        pthread_create(&t, NULL, fns[i], args[i]);
        usleep(50000);
        pthread_cancel(t);
        void *r;
        pthread_join(t, &r);
        printf("%s %s\n", names[i], r == PTHREAD_CANCELED ? "canceled" : "not canceled");
    }
    pthread_cancel(forever);
    pthread_join(forever, NULL);
    return 0;
}
