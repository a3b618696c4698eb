/* heapledger.h's tracebacks and time logs (tests/timelogs.rs), the edge
 * cases of timelog.md: prefix sharing, the frame count back to its
 * baseline, a traceback that outlives its thread, regrouping and eviction
 * in logs of the program's own; and allocations charged to pushed frames.
 * Each check prints one line. */
#define _GNU_SOURCE
#include "heapledger.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MS 1000000ull

static const char *label_of(const heapledger_traceback *tb) {
    static char buf[8][64];
    static int i;
    char *b = buf[i++ % 8];
    const void *code = 0;
    int k = heapledger_traceback_frame(tb, &code, b, 64);
    if (k == 0)
        snprintf(b, 64, "%p", code);
    else if (k < 0)
        snprintf(b, 64, "-");
    return b;
}

/* The frames of tb, innermost first, space separated. */
static void print_frames(const char *what, const heapledger_traceback *tb) {
    printf("%s", what);
    for (; tb; tb = heapledger_traceback_parent(tb))
        printf(" %s", label_of(tb));
    printf("\n");
}

static heapledger_traceback *from_worker;

static void *worker(void *arg) {
    (void)arg;
    heapledger_push_label("worker.c:10 in hold");
    from_worker = heapledger_traceback_snapshot();
    heapledger_pop_frame();
    return 0;
}

static void print_entries(const char *what, heapledger_timelog *log) {
    struct heapledger_timelog_entry e[8];
    long n = heapledger_timelog_entries(log, e, 8);
    printf("%s %ld", what, n);
    for (long i = 0; i < n && i < 8; i++)
        printf(" [%s %s %llu %llu %s]", e[i].kind, label_of(e[i].traceback),
               (unsigned long long)e[i].count, (unsigned long long)(e[i].total_ns / MS),
               label_of(e[i].other));
    printf("\n");
}

static __attribute__((noinline)) void *build_items(void) {
    void *p = 0;
    heapledger_push_label("interp.py:7 in build");
    for (int i = 0; i < 3; i++) {
        free(p);
        p = malloc(100);
    }
    heapledger_pop_frame();
    return p;
}

int main(void) {
    uint64_t base = heapledger_traceback_frames_alive();

    /* Prefix sharing: push a, push b, snapshot; pop; push c, snapshot. */
    heapledger_push_label("a");
    heapledger_push_label("b");
    heapledger_traceback *s1 = heapledger_traceback_snapshot();
    heapledger_pop_frame();
    heapledger_push_label("c");
    heapledger_traceback *s2 = heapledger_traceback_snapshot();
    printf("shared %d\n", heapledger_traceback_parent(s1) == heapledger_traceback_parent(s2));
    print_frames("s1", s1);
    print_frames("s2", s2);
    printf("alive %llu\n", (unsigned long long)(heapledger_traceback_frames_alive() - base));
    heapledger_pop_frame();
    heapledger_pop_frame();
    printf("pop-empty %d\n", heapledger_pop_frame());
    printf("alive-held %llu\n", (unsigned long long)(heapledger_traceback_frames_alive() - base));
    heapledger_traceback_release(s1);
    heapledger_traceback_release(s2);
    printf("alive-released %llu\n", (unsigned long long)(heapledger_traceback_frames_alive() - base));

    /* A code address frame. */
    heapledger_push_frame((const void *)build_items);
    heapledger_traceback *code = heapledger_traceback_snapshot();
    const void *addr = 0;
    int kind = heapledger_traceback_frame(code, &addr, 0, 0);
    printf("code %d %d\n", kind, addr == (const void *)build_items);
    heapledger_traceback_release(code);
    heapledger_pop_frame();

    /* Regrouping before the top: 1000 x 1 ms at K, then 500 ms at J, N = 1. */
    heapledger_timelog *one = heapledger_timelog_create(1);
    heapledger_push_label("K");
    for (int i = 0; i < 1000; i++)
        heapledger_time_lost_at("gc", 1 * MS, 0);
    heapledger_pop_frame();
    heapledger_push_label("J");
    heapledger_time_lost_at("gc", 500 * MS, 0);
    heapledger_pop_frame();
    print_entries("regrouped", one);

    /* Eviction: 5 1 4 2 3 with N = 3 keeps 5 4 3. */
    heapledger_timelog *three = heapledger_timelog_create(3);
    const char *names[] = {"five", "one", "four", "two", "three"};
    unsigned ms[] = {5, 1, 4, 2, 3};
    for (int i = 0; i < 5; i++) {
        heapledger_push_label(names[i]);
        heapledger_time_lost_at("retry", ms[i] * MS, 0);
        heapledger_pop_frame();
    }
    print_entries("evicted", three);

    /* Another thread's traceback, kept past that thread's end. */
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    pthread_join(t, 0);
    heapledger_timelog *cross = heapledger_timelog_create(4);
    heapledger_push_label("main.c:99 in wait_for_worker");
    heapledger_time_lost_at("contention", 7 * MS, from_worker);
    heapledger_pop_frame();
    heapledger_traceback_release(from_worker);
    print_entries("cross", cross);

    /* Enumerate, clear, destroy. */
    heapledger_timelog *logs[8];
    printf("logs %ld\n", heapledger_timelogs(logs, 8));
    heapledger_timelog_clear(one);
    print_entries("cleared", one);
    heapledger_timelog_destroy(one);
    heapledger_timelog_destroy(three);
    printf("logs %ld\n", heapledger_timelogs(logs, 8));
    printf("destroy-twice %d\n", heapledger_timelog_destroy(one));
    heapledger_timelog_destroy(cross);
    printf("alive-end %llu\n", (unsigned long long)(heapledger_traceback_frames_alive() - base));

    /* Allocations charged to pushed frames. */
    free(build_items());
    return 0;
}
