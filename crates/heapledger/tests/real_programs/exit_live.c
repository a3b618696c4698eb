/* Leaves through _exit(7) while blocks are still allocated: no atexit
 * handlers, no stdio flush, no destructors run. The blocks must show up in
 * the profile as leaks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LIVE_BLOCKS 5
#define LIVE_SIZE 4321

static void *live[LIVE_BLOCKS];

__attribute__((noinline)) static void make_live_blocks(void) {
    for (int i = 0; i < LIVE_BLOCKS; i++) {
        live[i] = malloc(LIVE_SIZE);
        memset(live[i], i, LIVE_SIZE);
    }
}

int main(void) {
    /* Some traffic that is freed, so the profile has more than leaks (the
     * volatile keeps the compiler from removing the pairs). */
    for (int i = 0; i < 100; i++) {
        char *volatile p = malloc(64 + i);
        p[0] = (char)i;
        free(p);
    }
    make_live_blocks();
    printf("live blocks: %d of %d bytes\n", LIVE_BLOCKS, LIVE_SIZE);
    fflush(stdout);
    _exit(7);
}
