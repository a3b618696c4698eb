/* Three phases of allocation 600 ms apart, so that checkpoints (every
 * 100 ms) fall between them; then SIGKILL with argument "kill":
 * tests/time_range.rs. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) void *first_phase(size_t n) { return malloc(n); }
__attribute__((noinline)) void *second_phase(size_t n) { return malloc(n); }
__attribute__((noinline)) void *third_phase(size_t n) { return malloc(n); }

static void *keep[200];

static void pause_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, 0);
}

int main(int argc, char **argv) {
    for (int i = 0; i < 100; i++) keep[i] = first_phase(1000);
    pause_ms(600);
    for (int i = 0; i < 40; i++) keep[100 + i] = second_phase(5000);
    for (int i = 0; i < 20; i++) free(keep[100 + i]);
    pause_ms(600);
    for (int i = 0; i < 7; i++) free(third_phase(333));
    pause_ms(600);
    if (argc > 1 && strcmp(argv[1], "kill") == 0) kill(getpid(), SIGKILL);
    return 0;
}
