/* 2^16 distinct stacks (argv[1] of them, at most 65536), then a pause of
 * argv[2] ms with all of them known, so that a checkpoint is written with
 * every stack: for checkpoint_memory.rs. Each of 16 levels calls the next
 * from one of two call sites, by one bit of the path (as the benchmark's
 * stacks.c); the leaf allocates and frees a block of 32 bytes. */
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

__attribute__((noinline)) static void leaf(unsigned long path) {
    void *p = malloc(32);
    sink += (unsigned long)p + path;
    free(p);
}

#define LEVEL(K, NEXT)                                                         \
    __attribute__((noinline)) static void level##K(unsigned long path) {       \
        if (path & (1ul << K)) {                                               \
            __asm__ volatile("# level " #K " site a" ::: "memory");            \
            NEXT(path);                                                        \
            sink += K;                                                         \
        } else {                                                               \
            __asm__ volatile("# level " #K " site b" ::: "memory");            \
            NEXT(path);                                                        \
            sink ^= K;                                                         \
        }                                                                      \
    }

LEVEL(15, leaf)
LEVEL(14, level15)
LEVEL(13, level14)
LEVEL(12, level13)
LEVEL(11, level12)
LEVEL(10, level11)
LEVEL(9, level10)
LEVEL(8, level9)
LEVEL(7, level8)
LEVEL(6, level7)
LEVEL(5, level6)
LEVEL(4, level5)
LEVEL(3, level4)
LEVEL(2, level3)
LEVEL(1, level2)
LEVEL(0, level1)

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 65536;
    long ms = argc > 2 ? atol(argv[2]) : 0;
    for (long i = 0; i < n && i < 65536; i++)
        level0((unsigned long)i);
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&t, 0);
    return 0;
}
