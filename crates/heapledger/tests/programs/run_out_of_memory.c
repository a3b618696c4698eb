/* For tests/exact_out_of_memory.rs: heapledger itself runs out of memory.
 *
 *   run_out_of_memory GO_FILE BLOCKS
 *
 * Waits until GO_FILE exists (the test has limited heapledger's address
 * space by then), then allocates BLOCKS blocks of 24 bytes at one site and
 * keeps them (leaks: heapledger has one record of each to convert), and
 * exits with 3. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) static void *block(void) {
    return malloc(24); /* SITE:block */
}

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    for (int i = 0; i < 60000 && access(argv[1], F_OK) != 0; i++) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, 0);
    }
    long n = atol(argv[2]);
    void **kept = malloc(sizeof *kept * (size_t)n);
    if (!kept)
        return 1;
    for (long i = 0; i < n; i++) {
        kept[i] = block();
        if (!kept[i])
            return 1;
    }
    printf("allocated %ld\n", n);
    return 3;
}
