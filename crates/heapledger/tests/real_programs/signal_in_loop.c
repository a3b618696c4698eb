/* Allocates and frees in a loop until a signal with its default action
 * ends it, so that the signal mostly arrives while the thread is inside
 * heapledger's recorder:
 *   alarm      an interval timer's SIGALRM after 30 ms
 *   wait       prints "ready", then loops until killed from outside */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

__attribute__((noinline)) void churn(void) {
    for (;;) {
        void *volatile p = malloc(48);
        free(p);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: signal_in_loop alarm|wait\n");
        return 2;
    }
    if (strcmp(argv[1], "alarm") == 0) {
        struct itimerval t = {{0, 30000}, {0, 30000}};
        setitimer(ITIMER_REAL, &t, NULL);
    } else {
        puts("ready");
        fflush(stdout);
    }
    churn();
}
