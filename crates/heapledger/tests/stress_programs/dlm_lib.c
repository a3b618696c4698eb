/* For stress_stacks.rs (dlm_main.c): two frames of a library loaded with
 * dlmopen, which the recorder's dlopen hook does not see. No frame
 * pointers. */
#include <stdlib.h>

void *volatile lib_sink;
volatile int lib_pad;

__attribute__((noinline)) void lib_inner(size_t n) {
    volatile char pad[40];
    pad[0] = 1;
    lib_sink = malloc(n);
    lib_pad += pad[0];
}

__attribute__((noinline)) void lib_outer(size_t n) {
    volatile char pad[24];
    pad[0] = 1;
    lib_inner(n);
    lib_pad += pad[0];
}
