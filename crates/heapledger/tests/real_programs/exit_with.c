/* For bad_input.rs, built statically: prints a line and exits with the
 * code given as its argument; with "kill", sends itself SIGKILL; with
 * "blocked-segv", faults with SIGSEGV blocked, which the kernel then
 * delivers with its default action, past any handler. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    char *line = malloc(32);
    strcpy(line, "ran");
    puts(line);
    free(line);
    fflush(stdout);
    if (argc > 1 && strcmp(argv[1], "kill") == 0)
        raise(SIGKILL);
    if (argc > 1 && strcmp(argv[1], "blocked-segv") == 0) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGSEGV);
        sigprocmask(SIG_BLOCK, &set, NULL);
        *(volatile int *)0 = 1;
    }
    return argc > 1 ? atoi(argv[1]) : 0;
}
