/* For stress_stacks.rs: the same stack must come out the same, cut at
 * --max-depth, whatever the thread captured before.
 *
 * Usage: max_depth SEED_DEPTH
 * Recurses through rec() to depth 40 and mallocs 2000 bytes there. With
 * SEED_DEPTH >= 0 it first mallocs 1000 bytes on the way down, at that
 * depth, from the same frames: the recorder then holds a record whose outer
 * part the deep capture can reuse. Built with frame pointers, for --stack
 * fp too. */
#include <stdlib.h>

void *volatile sink;
volatile int pad_sink;

__attribute__((noinline)) void rec(int d, int seed_depth, int target) {
    volatile char pad[32];
    pad[0] = (char)d;
    if (d == seed_depth)
        sink = malloc(1000);
    if (d == target) {
        sink = malloc(2000);
        return;
    }
    rec(d + 1, seed_depth, target);
    pad_sink += pad[0];
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    rec(0, atoi(argv[1]), 40);
    return 0;
}
