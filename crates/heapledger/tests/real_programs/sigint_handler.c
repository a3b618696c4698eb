/* Installs its own SIGINT handler, checks that it reads back as installed,
 * raises SIGINT three times (handled each time), allocates in between and
 * exits normally. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t hits;

static void on_sigint(int sig) {
    (void)sig;
    hits++;
    static const char msg[] = "handler ran\n";
    (void)!write(STDOUT_FILENO, msg, sizeof msg - 1);
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) != 0) {
        perror("sigaction");
        return 1;
    }
    struct sigaction now;
    memset(&now, 0, sizeof now);
    sigaction(SIGINT, NULL, &now);
    printf("handler reads back: %s\n", now.sa_handler == on_sigint ? "yes" : "no");
    fflush(stdout);

    char *blocks[3];
    for (int i = 0; i < 3; i++) {
        blocks[i] = malloc(1000 + i);
        memset(blocks[i], 'a' + i, 1000 + i);
        raise(SIGINT);
    }
    for (int i = 0; i < 3; i++) free(blocks[i]);

    /* The old-style API too. */
    void (*prev)(int) = signal(SIGINT, on_sigint);
    printf("signal() returned the handler: %s\n", prev == on_sigint ? "yes" : "no");
    printf("hits: %d\n", (int)hits);
    return hits == 3 ? 0 : 1;
}
