/* Known allocations at known sites, then a wait for a checkpoint begun
 * after them, then SIGKILL (or a normal exit with argument "exit"):
 * tests/checkpoint.rs. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint_wait.h"

__attribute__((noinline)) void *kept_site(size_t n) { return malloc(n); }
__attribute__((noinline)) void *freed_site(size_t n) { return malloc(n); }
__attribute__((noinline)) void *zeroed_site(size_t n) { return calloc(n, 1); }

static void *keep[64];

int main(int argc, char **argv) {
    for (int i = 0; i < 10; i++) keep[i] = kept_site(1237);
    for (int i = 0; i < 5; i++) free(freed_site(2345));
    for (int i = 0; i < 3; i++) keep[10 + i] = zeroed_site(3457);
    wait_for_checkpoint();
    if (argc > 1 && strcmp(argv[1], "exit") == 0) return 0;
    kill(getpid(), SIGKILL);
    return 1;
}
