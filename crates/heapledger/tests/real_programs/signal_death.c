/* Dies of a signal while blocks are allocated:
 *   term       raise(SIGTERM)
 *   abort      abort()             (SIGABRT)
 *   int        raise(SIGINT), SIGINT left at its default disposition */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIVE_SIZE 7777

static void *keep[3];

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: signal_death term|abort|int\n");
        return 2;
    }
    for (int i = 0; i < 3; i++) {
        keep[i] = malloc(LIVE_SIZE);
        memset(keep[i], 1, LIVE_SIZE);
    }
    printf("about to die by %s\n", argv[1]);
    fflush(stdout);
    if (strcmp(argv[1], "term") == 0) {
        raise(SIGTERM);
    } else if (strcmp(argv[1], "abort") == 0) {
        abort();
    } else if (strcmp(argv[1], "int") == 0) {
        raise(SIGINT);
    }
    printf("still alive\n");
    return 3;
}
