/* For stress_stacks.rs: two stacks whose frames have the same return
 * addresses and stack pointers up to the same function, g, but a different
 * frame pointer there, and different callers beyond.
 *
 * g has an alloca, so its CFA is rbp-based and its frame size varies. main
 * calls g through caller_big (1 KiB frame) and then through caller_small,
 * both from the same call sites (call_via, main's loop). The second time g sizes its
 * alloca so that its stack pointer at the call to leaf is the same as the
 * first time: the frames below (leaf) are at the same addresses with the
 * same return addresses, only rbp differs, and every stack word the first
 * unwinding read (g's saved rbp and return address, now inside the
 * untouched alloca area, the return addresses into call_via and main)
 * still holds its value. Only rbp tells the two stacks apart.
 *
 * Built with -DLEAF_SAVES_RBP, leaf uses rbp as an ordinary register, so it
 * saves g's rbp on its stack and restores it: then leaf's incoming rbp does
 * not matter, and the saved copy, a stack word, is what tells the two
 * stacks apart.
 *
 * leaf mallocs 4001 bytes the first time, 4002 the second, then 4003 and
 * 4004 in a second round of the same two calls. Prints
 * "same_sp: sp1=X sp2=Y fp1=Z fp2=W" (hex). */
#include <alloca.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

void *volatile sink;
volatile int pad_sink;
static uintptr_t target, sps[4], fps[4];
static int calls;

__attribute__((noinline)) void leaf(size_t size) {
#ifdef LEAF_SAVES_RBP
    __asm__ volatile("xor %%ebp, %%ebp" : : : "rbp");
#endif
    sink = malloc(size);
    pad_sink++;
}

__attribute__((noinline)) void g(size_t size) {
    uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
    size_t n = target ? fp - target : 64;
    if (!target)
        target = fp - 64;
    char *p = alloca(n); /* never written */
    __asm__ volatile("" : : "r"(p) : "memory");
    sps[calls] = (uintptr_t)p;
    fps[calls] = fp;
    calls++;
    leaf(size);
    pad_sink += (int)n;
}

__attribute__((noinline)) void caller_big(size_t size) {
    volatile char pad[1024];
    pad[0] = 1;
    g(size);
    pad_sink += pad[0];
}

__attribute__((noinline)) void caller_small(size_t size) {
    volatile char pad[16];
    pad[0] = 1;
    g(size);
    pad_sink += pad[0];
}

__attribute__((noinline)) void call_via(void (*f)(size_t), size_t size) {
    f(size);
    pad_sink++;
}

static void (*volatile callers[2])(size_t) = {caller_big, caller_small};
/* Twice over: the second pair runs on records built from steps whose
 * bp-dependence came from the recorder's per-address cache. */
static volatile int rounds = 4;

int main(void) {
    /* One call site for both: a loop the compiler cannot unroll. */
    for (int i = 0; i < rounds; i++)
        call_via(callers[i & 1], 4001 + (size_t)i);
    printf("same_sp: sp1=%lx sp2=%lx fp1=%lx fp2=%lx\n", (unsigned long)sps[0],
           (unsigned long)sps[1], (unsigned long)fps[0], (unsigned long)fps[1]);
    return 0;
}
