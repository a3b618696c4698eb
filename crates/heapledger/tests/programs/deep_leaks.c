/* 2^DEPTH leaked blocks, each from a stack of its own about DEPTH + CHAIN
 * frames deep (a binary tree of calls under a chain of CHAIN calls), as a
 * large program's leaks at exit are: many stacks, deep ones.
 * Usage: deep_leaks DEPTH CHAIN. */
#include <stdlib.h>

__attribute__((noinline)) static void leaf(void) {
    void *volatile p = malloc(24); /* SITE:deep_leak */
    (void)p;
}

__attribute__((noinline)) static void walk(int depth) {
    if (depth == 0) {
        leaf();
        return;
    }
    walk(depth - 1);
    __asm__ volatile("" ::: "memory");
    walk(depth - 1);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void chain(int links, int depth) {
    if (links == 0)
        walk(depth);
    else
        chain(links - 1, depth);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    chain(argc > 2 ? atoi(argv[2]) : 40, argc > 1 ? atoi(argv[1]) : 13);
    return 0;
}
