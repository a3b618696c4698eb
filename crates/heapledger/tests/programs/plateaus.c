/* Memory over time with a known shape (tests/timeline.rs): 10 MB held
 * from 0.2 s to 0.5 s, 50 MB from 0.7 s to 0.8 s, and a 5 ms spike of
 * 20 MB at 2.5 s; the run ends at 3.0 s. Each block is written, so that
 * resident memory follows it. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double t0;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void until(double t) {
    while (now() - t0 < t) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, 0);
    }
}

static __attribute__((noinline)) char *hold(size_t mb) {
    char *p = malloc(mb << 20); /* SITE:hold */
    memset(p, 1, mb << 20);
    return p;
}

int main(void) {
    t0 = now();
    until(0.2);
    char *a = hold(10);
    until(0.5);
    free(a);
    until(0.7);
    char *b = hold(50);
    until(0.8);
    free(b);
    until(2.5);
    char *c = hold(20);
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, 0);
    free(c);
    until(3.0);
    return 0;
}
