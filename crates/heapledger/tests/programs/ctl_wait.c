/* Steered from outside by `heapledger ctl` (tests/control.rs): prints its
 * pid, then for each line on stdin allocates at one of three sites and
 * says so, so that the test switches stacks and takes snapshots between
 * them. It uses SIGUSR1 and SIGUSR2 itself: each handler must run exactly
 * once, as it would without heapledger. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t usr1, usr2;
static void on_usr1(int s) { (void)s; usr1++; }
static void on_usr2(int s) { (void)s; usr2++; }

static void *kept[16];

__attribute__((noinline)) void site_a(void) {
    for (int i = 0; i < 3; i++)
        kept[i] = malloc(64); /* SITE:a */
}

__attribute__((noinline)) void site_b(void) {
    for (int i = 0; i < 4; i++)
        kept[3 + i] = malloc(128); /* SITE:b */
}

__attribute__((noinline)) void site_c(void) {
    for (int i = 0; i < 2; i++)
        kept[7 + i] = malloc(256); /* SITE:c */
}

int main(void) {
    signal(SIGUSR1, on_usr1);
    signal(SIGUSR2, on_usr2);
    setvbuf(stdout, NULL, _IONBF, 0);
    printf("pid %d\n", (int)getpid());
    char line[64];
    int step = 0;
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "end", 3) == 0)
            break;
        switch (step++) {
        case 0: site_a(); break;
        case 1: site_b(); raise(SIGUSR1); break;
        case 2: site_c(); raise(SIGUSR2); break;
        }
        printf("step %d done\n", step);
    }
    printf("usr1 %d usr2 %d\n", (int)usr1, (int)usr2);
    return 0;
}
