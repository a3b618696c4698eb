/* Known allocations at known call sites, for exact_c_alloc.rs.
 *
 * Built with -g -O1 -fno-builtin -fno-omit-frame-pointer: -fno-builtin keeps
 * gcc from removing malloc/free pairs it can see through. Every allocation
 * call is on a line marked SITE:name; the test finds the line by the marker.
 * The program uses no stdio (its buffers would add allocations), checks what
 * it can itself (zeroed calloc, realloc contents, alignment) and exits 0 when
 * everything holds, non-zero otherwise. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Leaked blocks stay reachable here (a leak is a block never freed). */
void *leaked[3];

static void fail(int code, const char *what) {
    write(2, what, strlen(what));
    write(2, "\n", 1);
    exit(code);
}

__attribute__((noinline)) void alloc_small(void **out, int n) {
    for (int i = 0; i < n; i++)
        out[i] = malloc(24); /* SITE:small */
}

__attribute__((noinline)) void alloc_calloc(void **out, int n) {
    for (int i = 0; i < n; i++)
        out[i] = calloc(3, 40); /* SITE:calloc */
}

__attribute__((noinline)) char *realloc_start(void) {
    char *p = malloc(100); /* SITE:realloc_start */
    if (!p)
        fail(10, "malloc failed");
    memset(p, 'a', 100);
    return p;
}

__attribute__((noinline)) char *realloc_grow(char *p) {
    char *q = realloc(p, 300); /* SITE:grow */
    if (!q)
        fail(10, "realloc failed");
    for (int i = 0; i < 100; i++)
        if (q[i] != 'a')
            fail(11, "realloc lost the contents");
    return q;
}

__attribute__((noinline)) char *realloc_shrink(char *p) {
    char *q = realloc(p, 50); /* SITE:shrink */
    if (!q)
        fail(10, "realloc failed");
    if (q[49] != 'a')
        fail(11, "realloc lost the contents");
    return q;
}

__attribute__((noinline)) void alloc_aligned(void **out) {
    if (posix_memalign(&out[0], 64, 96) != 0) /* SITE:posix_memalign */
        fail(12, "posix_memalign failed");
    out[1] = aligned_alloc(128, 256); /* SITE:aligned_alloc */
    out[2] = memalign(256, 320);      /* SITE:memalign */
    out[3] = valloc(5000);            /* SITE:valloc */
    out[4] = pvalloc(6000);           /* SITE:pvalloc */
}

__attribute__((noinline)) void alloc_zero(void **out, int n) {
    for (int i = 0; i < n; i++)
        out[i] = malloc(0); /* SITE:zero */
}

__attribute__((noinline)) void free_null(int n) {
    for (int i = 0; i < n; i++)
        free(NULL); /* SITE:free_null */
}

__attribute__((noinline)) void leak_a(void) {
    for (int i = 0; i < 2; i++)
        leaked[i] = malloc(1000); /* SITE:leak_a */
}

__attribute__((noinline)) void *leak_b(void) {
    void *p = malloc(3333); /* SITE:leak_b */
    if (!p)
        fail(10, "malloc failed");
    return p;
}

__attribute__((noinline)) void leak_outer(void) {
    leaked[2] = leak_b(); /* SITE:leak_outer */
}

static void check_aligned(void *p, uintptr_t align) {
    if (!p || (uintptr_t)p % align != 0)
        fail(13, "misaligned block");
}

int main(void) {
    void *blocks[8];

    alloc_small(blocks, 7); /* SITE:call_small */
    for (int i = 0; i < 7; i++)
        free(blocks[i]);

    alloc_calloc(blocks, 5); /* SITE:call_calloc */
    for (int i = 0; i < 5; i++) {
        for (int j = 0; j < 120; j++)
            if (((char *)blocks[i])[j] != 0)
                fail(14, "calloc block not zeroed");
        free(blocks[i]);
    }

    for (int round = 0; round < 2; round++) {
        char *p = realloc_start();
        p = realloc_grow(p);
        p = realloc_shrink(p);
        free(p);
    }

    alloc_aligned(blocks); /* SITE:call_aligned */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    check_aligned(blocks[0], 64);
    check_aligned(blocks[1], 128);
    check_aligned(blocks[2], 256);
    check_aligned(blocks[3], page);
    check_aligned(blocks[4], page);
    for (int i = 0; i < 5; i++)
        free(blocks[i]);

    alloc_zero(blocks, 3);
    for (int i = 0; i < 3; i++) {
        if (!blocks[i])
            fail(15, "malloc(0) returned NULL");
        free(blocks[i]);
    }

    free_null(5);

    leak_a(); /* SITE:call_leak_a */
    leak_outer(); /* SITE:call_leak_outer */

    write(1, "basic: all checks passed\n", 25);
    return 0;
}
