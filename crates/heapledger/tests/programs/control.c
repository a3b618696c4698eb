/* Seed 002's best practice, steered from inside the program through
 * heapledger.h: stacks off while it starts (run with --backtrace off),
 * switched on when the statistics show blocks piling up, the leak report
 * read, a snapshot; stacks off again, the counters reset, the leak fixed
 * and the fixed code run, verified by the statistics; a second snapshot.
 * What heapledger says goes to stderr; the program's own output (stdout)
 * is the same with and without heapledger. */
#include <stdio.h>
#include <stdlib.h>
#include "heapledger.h"

static void *early[10];
static void *late[5];

__attribute__((noinline)) void leak_early(void) {
    for (int i = 0; i < 10; i++)
        early[i] = malloc(100); /* SITE:early */
}

__attribute__((noinline)) void leak_late(void) {
    for (int i = 0; i < 5; i++)
        late[i] = malloc(200); /* SITE:late */
}

__attribute__((noinline)) void fix_late(void) {
    for (int i = 0; i < 5; i++)
        free(late[i]);
}

/* The same work, fixed: what it allocates it frees. */
__attribute__((noinline)) void work_fixed(void) {
    void *p[5];
    for (int i = 0; i < 5; i++)
        p[i] = malloc(200); /* SITE:fixed */
    for (int i = 0; i < 5; i++)
        free(p[i]);
}

static void stats(const char *phase, const struct heapledger_stats *before) {
    struct heapledger_stats s;
    int r = heapledger_get_stats(&s);
    fprintf(stderr, "stats %s %d blocks=%lld bytes=%lld allocations=%llu allocated=%llu frees=%llu freed=%llu backtrace=%d\n",
            phase, r,
            (long long)(s.blocks_alive - before->blocks_alive),
            (long long)(s.bytes_alive - before->bytes_alive),
            (unsigned long long)(s.allocations - before->allocations),
            (unsigned long long)(s.allocated_bytes - before->allocated_bytes),
            (unsigned long long)(s.frees - before->frees),
            (unsigned long long)(s.freed_bytes - before->freed_bytes),
            heapledger_is_backtrace_enabled());
    fprintf(stderr, "older %s %llu %llu\n", phase,
            (unsigned long long)(s.older_frees - before->older_frees),
            (unsigned long long)(s.older_freed_bytes - before->older_freed_bytes));
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    setvbuf(stderr, NULL, _IONBF, 0);
    struct heapledger_stats start;
    heapledger_get_stats(&start);
    fprintf(stderr, "running %d backtrace %d\n", heapledger_is_running(), heapledger_is_backtrace_enabled());

    /* Phase 1: cheap, no stacks. */
    leak_early();
    stats("early", &start);
    printf("phase 1 done\n");

    /* Blocks pile up: stacks on. */
    struct heapledger_stats mid;
    heapledger_get_stats(&mid);
    fprintf(stderr, "switch %d\n", heapledger_set_backtrace_enabled(1));
    leak_late();
    stats("late", &mid);
    for (int i = 0; i < 5; i++)
        fprintf(stderr, "late %p\n", late[i]);
    for (int i = 0; i < 10; i++)
        fprintf(stderr, "early %p\n", early[i]);
    char *report = heapledger_get_leak_report();
    fprintf(stderr, "%s=== end of report ===\n", report);
    heapledger_free_leak_report(report);
    fprintf(stderr, "snapshot %d\n", heapledger_snapshot("with-stacks"));
    printf("phase 2 done\n");

    /* Stacks off, counters reset, the leak fixed and the fixed code run:
     * verified when nothing is left alive since the reset. */
    fprintf(stderr, "switch %d\n", heapledger_set_backtrace_enabled(0));
    fprintf(stderr, "reset %d\n", heapledger_reset_stats());
    struct heapledger_stats zero = {0};
    fix_late();
    work_fixed();
    stats("fixed", &zero);
    fprintf(stderr, "snapshot %d\n", heapledger_snapshot("fixed"));
    printf("phase 3 done\n");
    return 0;
}
