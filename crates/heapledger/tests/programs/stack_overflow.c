/* stack_overflow MODE: a program that overflows its stack.
 *
 *   main    recurses in the main thread, one malloc(100) per level (kept,
 *           never freed), until the stack overflows: dies of SIGSEGV.
 *   thread  the same in a second thread with a 1 MiB stack, after the main
 *           thread allocated 3 x 300 (kept): dies of SIGSEGV.
 *   own     asks sigaltstack for the thread's alternate stack and prints
 *           what it says, gives itself one and a SIGSEGV handler with
 *           SA_ONSTACK that jumps back out (siglongjmp), overflows, prints
 *           "recovered" and what sigaltstack says now, allocates
 *           4 x 400, frees them, and exits 0.
 *
 * Each level's block is stored in a global before recursing, so that the
 * compiler can remove neither. Nothing is printed once the recursion starts
 * (stdio's buffer is allocated by the first printf, before it). */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *volatile sink;

__attribute__((noinline)) void *down(int n) {
    char *p = malloc(100); /* SITE:down */
    sink = p;
    char pad[256];
    memset(pad, n, sizeof pad);
    sink = pad;
    return down(n + 1 + (pad[n & 255] & 0)); /* SITE:recurse */
}

static void *thread_main(void *arg) {
    (void)arg;
    down(0);
    return NULL;
}

static void say_altstack(const char *when) {
    stack_t cur;
    if (sigaltstack(NULL, &cur) != 0) {
        printf("%s: error\n", when);
    } else if (cur.ss_flags & SS_DISABLE) {
        printf("%s: none\n", when);
    } else {
        printf("%s: %zu bytes\n", when, cur.ss_size);
    }
}

static sigjmp_buf back;

static void on_segv(int sig) {
    (void)sig;
    siglongjmp(back, 1);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "main";
    printf("%s\n", mode);
    fflush(stdout);
    if (strcmp(mode, "main") == 0) {
        down(0);
    } else if (strcmp(mode, "thread") == 0) {
        for (int i = 0; i < 3; i++)
            sink = malloc(300); /* SITE:before_thread */
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 1 << 20);
        pthread_t t;
        pthread_create(&t, &attr, thread_main, NULL);
        pthread_join(t, NULL);
    } else if (strcmp(mode, "own") == 0) {
        say_altstack("before");
        static char stack[256 << 10];
        stack_t ss = {.ss_sp = stack, .ss_size = sizeof stack, .ss_flags = 0};
        if (sigaltstack(&ss, NULL) != 0)
            return 2;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_segv;
        sa.sa_flags = SA_ONSTACK | SA_NODEFER;
        sigaction(SIGSEGV, &sa, NULL);
        if (sigsetjmp(back, 1) == 0)
            down(0);
        printf("recovered\n");
        say_altstack("after");
        void *blocks[4];
        for (int i = 0; i < 4; i++)
            blocks[i] = malloc(400); /* SITE:after */
        for (int i = 0; i < 4; i++)
            free(blocks[i]);
        return 0;
    }
    return 3;
}
