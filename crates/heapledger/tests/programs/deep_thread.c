/* A thread recurses DEPTH frames deep and allocates at the bottom
 * (tests/stack_use.rs). It prints how many bytes of its stack were in use
 * there: from the top of its stack (pthread_getattr_np) to a local of the
 * deepest frame. Built with -DALLOC_FIRST, the thread allocates before it
 * recurses, and not at the bottom (only an enter/exit stack sees how deep
 * it went). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define DEPTH 1000

static uintptr_t top;
static size_t used;
static void *block;

static __attribute__((noinline)) int recurse(int n) {
    volatile char pad[64];
    pad[0] = (char)n;
    if (n == 0) {
        used = top - (uintptr_t)&pad[0];
#ifndef ALLOC_FIRST
        block = malloc(100); /* SITE:deepest */
#endif
        return pad[0];
    }
    return recurse(n - 1) + pad[0];
}

static void *run(void *arg) {
    (void)arg;
    pthread_attr_t a;
    void *addr;
    size_t size;
    pthread_getattr_np(pthread_self(), &a);
    pthread_attr_getstack(&a, &addr, &size);
    pthread_attr_destroy(&a);
    top = (uintptr_t)addr + size;
#ifdef ALLOC_FIRST
    block = malloc(100);
#endif
    recurse(DEPTH);
    free(block);
    return 0;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, 0, run, 0);
    pthread_join(t, 0);
    printf("%zu\n", used);
    return 0;
}
