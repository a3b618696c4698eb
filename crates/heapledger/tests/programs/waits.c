/* Time lost at a known stack (tests/waits.rs): a thread holds a mutex
 * for 200 ms five times (in hold_lock); each time, once it holds it, the
 * main thread asks for it (in wait_for_lock) and waits about 200 ms: about 1 s
 * lost at the waiter's stack, the holder's stack known. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static atomic_int held, round_done;

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

__attribute__((noinline)) void hold_lock(void) {
    pthread_mutex_lock(&m); /* SITE:hold */
    atomic_store(&held, 1);
    sleep_ms(200);
    pthread_mutex_unlock(&m);
}

__attribute__((noinline)) void wait_for_lock(void) {
    pthread_mutex_lock(&m); /* SITE:wait */
    pthread_mutex_unlock(&m);
}

static void *holder(void *arg) {
    (void)arg;
    for (int i = 0; i < 5; i++) {
        hold_lock();
        while (atomic_load(&round_done) <= i)
            sleep_ms(1);
    }
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, holder, NULL);
    for (int i = 0; i < 5; i++) {
        while (!atomic_load(&held))
            sleep_ms(1);
        atomic_store(&held, 0);
        wait_for_lock();
        atomic_store(&round_done, i + 1);
    }
    pthread_join(t, NULL);
    puts("done");
    return 0;
}
