/* Allocation-heavy program for stress_no_alloc.rs. No signal handlers, no
 * stdio (output goes through snprintf and write).
 *
 * Usage: no_alloc THREADS ROUNDS LIVE
 * THREADS 0: the main thread does the work (the program never creates a
 * thread); THREADS n > 0: n worker threads do it, main only creates and
 * joins them.
 *
 * The work, per thread: one warm-up malloc/free (the thread's first
 * allocator call, when the recorder sets the thread up), then, between two
 * readings of the heap counter (heap_counter.c, when it is preloaded):
 * - LIVE mallocs held all at once (the recorder's table of live blocks
 *   grows), then freed;
 * - ROUNDS rounds of: one of malloc, calloc, posix_memalign, aligned_alloc,
 *   memalign, valloc, pvalloc in turn; a realloc of that block; its free;
 *   and every 16th round realloc(NULL) and free(NULL).
 * Every allocation is made at the end of a chain of calls that spells out
 * the allocation's index (up to 4096 distinct chains per call site), so
 * the recorder's stack table grows too.
 *
 * Prints one line per thread: "thread=K malloc=N ... free=N calls=C heap=H
 * startup=S" with the number of calls of each function the thread made
 * (warm-up included), C the calls made between the two readings of the
 * counter, H the calls that reached the C library's allocator meanwhile,
 * and S the calls that reached it during the warm-up beyond the warm-up's
 * own two (what setting the thread up cost); H and S are -1 without the
 * counter. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define MAX_THREADS 8
#define MAX_LIVE 50000

enum { MALLOC, CALLOC, POSIX_MEMALIGN, ALIGNED_ALLOC, MEMALIGN, VALLOC, PVALLOC, REALLOC, FREE, NFN };
static const char *const names[NFN] = {"malloc",  "calloc", "posix_memalign",
                                       "aligned_alloc", "memalign", "valloc",
                                       "pvalloc", "realloc", "free"};

struct work {
    int index;
    uint64_t count[NFN];
    uint64_t calls; /* between the two readings */
    int64_t heap;
    int64_t startup;
    void *blocks[MAX_LIVE];
};

static struct work works[MAX_THREADS];
static uint64_t (*heap_counter)(void);
static unsigned rounds, live;
static volatile long pad_sink;

NOINLINE void *leaf_alloc(struct work *w, int kind, size_t size) {
    void *p = NULL;
    w->count[kind]++;
    switch (kind) {
    case MALLOC:
        p = malloc(size);
        break;
    case CALLOC:
        p = calloc(1, size);
        break;
    case POSIX_MEMALIGN:
        if (posix_memalign(&p, 64, size) != 0)
            p = NULL;
        break;
    case ALIGNED_ALLOC:
        p = aligned_alloc(64, (size + 63) & ~(size_t)63);
        break;
    case MEMALIGN:
        p = memalign(32, size);
        break;
    case VALLOC:
        p = valloc(size);
        break;
    case PVALLOC:
        p = pvalloc(size);
        break;
    }
    if (!p)
        abort();
    return p;
}

NOINLINE void *chain_b(struct work *w, unsigned pattern, int depth, int kind, size_t size);

NOINLINE void *chain_a(struct work *w, unsigned pattern, int depth, int kind, size_t size) {
    volatile char pad[24];
    pad[0] = (char)depth;
    void *p = depth == 0 ? leaf_alloc(w, kind, size)
              : (pattern & 1) ? chain_a(w, pattern >> 1, depth - 1, kind, size)
                              : chain_b(w, pattern >> 1, depth - 1, kind, size);
    pad_sink += pad[0];
    return p;
}

NOINLINE void *chain_b(struct work *w, unsigned pattern, int depth, int kind, size_t size) {
    volatile char pad[136];
    pad[depth] = 1;
    void *p = depth == 0 ? leaf_alloc(w, kind, size)
              : (pattern & 1) ? chain_a(w, pattern >> 1, depth - 1, kind, size)
                              : chain_b(w, pattern >> 1, depth - 1, kind, size);
    pad_sink += pad[depth];
    return p;
}

/* The i-th allocation: through a chain of 2 + i % 11 calls spelling i. */
static void *alloc_nth(struct work *w, unsigned i, int kind, size_t size) {
    return chain_a(w, i % 4096, 2 + (int)(i % 11), kind, size);
}

static void do_free(struct work *w, void *p) {
    w->count[FREE]++;
    free(p);
}

static void *do_realloc(struct work *w, void *p, size_t size) {
    w->count[REALLOC]++;
    void *q = realloc(p, size);
    if (!q && size)
        abort();
    return q;
}

static uint64_t total(const struct work *w) {
    uint64_t n = 0;
    for (int f = 0; f < NFN; f++)
        n += w->count[f];
    return n;
}

static void *work_main(void *arg) {
    struct work *w = arg;
    /* Warm-up: the thread's first allocator call. */
    uint64_t start = heap_counter ? heap_counter() : 0;
    do_free(w, leaf_alloc(w, MALLOC, 1));
    uint64_t before_calls = total(w);
    uint64_t before = heap_counter ? heap_counter() : 0;
    w->startup = heap_counter ? (int64_t)(before - start) - (int64_t)before_calls : -1;

    for (unsigned i = 0; i < live; i++)
        w->blocks[i] = alloc_nth(w, i, MALLOC, 16 + i % 512);
    for (unsigned i = 0; i < live; i++)
        do_free(w, w->blocks[i]);

    for (unsigned i = 0; i < rounds; i++) {
        int kind = (int)(i % 7);
        void *p = alloc_nth(w, i * 7 + 3, kind, 24 + i % 1000);
        p = do_realloc(w, p, 100 + i % 3000);
        do_free(w, p);
        if (i % 16 == 0) {
            do_free(w, do_realloc(w, NULL, 40));
            do_free(w, NULL);
        }
    }

    uint64_t after = heap_counter ? heap_counter() : 0;
    w->calls = total(w) - before_calls;
    w->heap = heap_counter ? (int64_t)(after - before) : -1;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4)
        return 2;
    int threads = atoi(argv[1]);
    rounds = (unsigned)strtoul(argv[2], NULL, 0);
    live = (unsigned)strtoul(argv[3], NULL, 0);
    if (threads < 0 || threads > MAX_THREADS || live > MAX_LIVE)
        return 2;
    heap_counter = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "heap_counter_thread");

    int n = threads == 0 ? 1 : threads;
    for (int k = 0; k < n; k++)
        works[k].index = k;
    if (threads == 0) {
        work_main(&works[0]);
    } else {
        pthread_t tid[MAX_THREADS];
        for (int k = 0; k < threads; k++)
            if (pthread_create(&tid[k], NULL, work_main, &works[k]) != 0)
                return 3;
        for (int k = 0; k < threads; k++)
            pthread_join(tid[k], NULL);
    }

    for (int k = 0; k < n; k++) {
        char line[512];
        size_t len = (size_t)snprintf(line, sizeof line, "thread=%d", k);
        for (int f = 0; f < NFN; f++)
            len += (size_t)snprintf(line + len, sizeof line - len, " %s=%llu", names[f],
                                    (unsigned long long)works[k].count[f]);
        len += (size_t)snprintf(line + len, sizeof line - len, " calls=%llu heap=%lld startup=%lld\n",
                                (unsigned long long)works[k].calls, (long long)works[k].heap,
                                (long long)works[k].startup);
        if (write(1, line, len) != (ssize_t)len)
            return 4;
    }
    return 0;
}
