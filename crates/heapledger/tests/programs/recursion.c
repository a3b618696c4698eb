/* Direct recursion (r), mutual recursion (a <-> b), one allocation per
 * call of leaf(): the call trees of heapledger tree are known exactly. */
#include <stdlib.h>

void *keep[64];
int nk;

__attribute__((noinline)) void leaf(int n) { keep[nk++ % 64] = malloc(n); /* SITE:leaf */ }

__attribute__((noinline)) void r(int d) {
    leaf(100);          /* SITE:r_leaf */
    if (d > 0) r(d - 1); /* SITE:r_rec */
    __asm__ volatile("");
}

__attribute__((noinline)) void b(int d);

__attribute__((noinline)) void a(int d) {
    leaf(10);
    if (d > 0) b(d - 1);
    __asm__ volatile("");
}

__attribute__((noinline)) void b(int d) {
    if (d > 0) a(d - 1);
    __asm__ volatile("");
}

int main(void) {
    r(3);
    a(4);
    return 0;
}
