/* One allocation at the bottom of a recursion 300 calls deep: a call tree
 * deeper than a JSON reader's default nesting limit (128), for
 * tests/exports.rs. */
#include <stdlib.h>

void *kept;

__attribute__((noinline)) void down(int d) {
    if (d == 0)
        kept = malloc(4242);
    else
        down(d - 1);
    __asm__ volatile("");
}

int main(void) {
    down(300);
    return kept == 0;
}
