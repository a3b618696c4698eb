/* The floors of interposing the allocator, for heapledger-bench.
 *
 * Built plain, a preload whose malloc, calloc, realloc and free only jump to
 * glibc's own: what any LD_PRELOAD profiler pays before it records anything.
 *
 * Built with -DCOUNT, a preload whose malloc and free also do, in C, the
 * least that byte sampling needs and what heapledger's lean paths
 * (`--sample-every`, crates/heapledger-preload/src/hooks.rs) do on a call
 * that is not sampled: malloc counts the bytes left to the next sample
 * point in a per-thread block, free looks its block's page up in a table
 * of pages that hold sampled blocks, and both count the call. Nothing is
 * ever sampled here (the table stays empty, a sample point only resets the
 * count), so it measures that bookkeeping and nothing else. */
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

#ifdef COUNT
/* As heapledger's thread block: the gate bytes, then the counters, in one
 * line; initial-exec TLS, as heapledger's. */
struct block {
    unsigned char lean, in_hook;
    long left, malloc_calls, free_calls;
} __attribute__((aligned(64)));
__thread struct block count_block
    __attribute__((tls_model("initial-exec"))) = {1, 0, 512 * 1024, 1024, 1024};
/* As heapledger's filter: one byte per page, 2^20 of them. */
volatile unsigned char count_pages[1 << 20];
/* Where a sample or a timed call would go; never zero-cost to the compiler. */
volatile long count_rare;

void *malloc(size_t n) {
    struct block *b = &count_block;
    if (__builtin_expect(b->lean == 1 && !b->in_hook && n, 1)) {
        b->left -= n;
        if (__builtin_expect(b->left <= 0, 0)) {
            b->left += 512 * 1024;
            count_rare++;
        }
        if (__builtin_expect(--b->malloc_calls <= 0, 0)) {
            b->malloc_calls = 1024;
            count_rare++;
        }
    } else {
        count_rare++;
    }
    return __libc_malloc(n);
}

void free(void *p) {
    struct block *b = &count_block;
    if (__builtin_expect(b->lean == 1 && !b->in_hook && p, 1)) {
        if (count_pages[((unsigned long)p >> 12) & ((1 << 20) - 1)])
            count_rare++;
        if (__builtin_expect(--b->free_calls <= 0, 0)) {
            b->free_calls = 1024;
            count_rare++;
        }
    } else {
        count_rare++;
    }
    __libc_free(p);
}
#else
void *malloc(size_t n) { return __libc_malloc(n); }
void free(void *p) { __libc_free(p); }
#endif

void *calloc(size_t n, size_t m) { return __libc_calloc(n, m); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
