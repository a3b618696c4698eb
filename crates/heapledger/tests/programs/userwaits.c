/* Time lost the program records itself through heapledger.h
 * (tests/waits.rs). Without an argument: an "io" wait of 50 ms, then two
 * "retry" waits, the second begun while the first is open (which ends it
 * first: 20 ms, then 30 ms). With "storm": 1 000 losses of 1 ms of "gc" at
 * one stack, then one of 500 ms at another. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "heapledger.h"

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

__attribute__((noinline)) void read_input(void) {
    heapledger_wait_begin("io"); /* SITE:io */
    sleep_ms(50);
    heapledger_wait_end();
}

__attribute__((noinline)) void retry_twice(void) {
    heapledger_wait_begin("retry"); /* SITE:first */
    sleep_ms(20);
    heapledger_wait_begin("retry"); /* SITE:second */
    sleep_ms(30);
    heapledger_wait_end();
}

__attribute__((noinline)) void small_pauses(void) {
    for (int i = 0; i < 1000; i++)
        heapledger_time_lost("gc", 1000000); /* SITE:small */
}

__attribute__((noinline)) void one_long_pause(void) {
    heapledger_time_lost("gc", 500000000); /* SITE:long */
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "storm") == 0) {
        small_pauses();
        one_long_pause();
    } else {
        read_input();
        retry_twice();
        printf("%d\n", heapledger_wait_end()); /* nothing open: -1 */
    }
    return 0;
}
