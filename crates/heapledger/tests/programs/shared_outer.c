/* 256 distinct stacks under one recursion DEPTH deep (argv[1]): each leaf
 * function allocates from the bottom of the same outer frames, so each
 * new stack's outer DEPTH + 2 frames are the stack's before it. For
 * shared_frames.rs: the recorder's memory must not grow with DEPTH. */
#include <stdlib.h>

volatile unsigned long sink;

#define LEAF(N)                                                                \
    __attribute__((noinline)) static void leaf##N(void) {                     \
        void *p = malloc(16 + N);                                              \
        sink += (unsigned long)p;                                              \
        free(p);                                                               \
    }
#define L4(N) LEAF(N##0) LEAF(N##1) LEAF(N##2) LEAF(N##3)
#define L16(N) L4(N##0) L4(N##1) L4(N##2) L4(N##3)
L16(10) L16(11) L16(12) L16(13)
L16(20) L16(21) L16(22) L16(23)
L16(30) L16(31) L16(32) L16(33)
L16(40) L16(41) L16(42) L16(43)

#define C4(N) leaf##N##0(); leaf##N##1(); leaf##N##2(); leaf##N##3();
#define C16(N) C4(N##0) C4(N##1) C4(N##2) C4(N##3)

__attribute__((noinline)) static void bottom(void) {
    C16(10) C16(11) C16(12) C16(13)
    C16(20) C16(21) C16(22) C16(23)
    C16(30) C16(31) C16(32) C16(33)
    C16(40) C16(41) C16(42) C16(43)
}

__attribute__((noinline)) static void down(int d) {
    if (d > 0)
        down(d - 1);
    else
        bottom();
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    down(argc > 1 ? atoi(argv[1]) : 10);
    return 0;
}
