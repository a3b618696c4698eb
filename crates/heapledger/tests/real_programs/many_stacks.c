/* 2^DEPTH distinct allocation stacks: each level calls the next from two
 * call sites, so every path down the binary tree is a stack of its own.
 * Usage: many_stacks DEPTH. Gives a large profile, for the tests that
 * interrupt heapledger while it writes one. */
#include <stdlib.h>

__attribute__((noinline)) static void *leaf(void) { return malloc(16); }

__attribute__((noinline)) static void walk(int depth) {
    if (depth == 0) {
        free(leaf());
        return;
    }
    walk(depth - 1);
    __asm__ volatile("" ::: "memory");
    walk(depth - 1);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    walk(argc > 1 ? atoi(argv[1]) : 10);
    return 0;
}
