/* Programs for recorder_options.rs, chosen by argv[1]. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

void *volatile sink;

__attribute__((noinline)) static void deep(int d) {
    if (d == 0) {
        for (int i = 0; i < 3; i++) free(malloc(4242));
        return;
    }
    deep(d - 1);
    __asm__ volatile("");
}

__attribute__((noinline)) static void maps(void) {
    void *m[3];
    for (int i = 0; i < 3; i++) m[i] = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(m[0], 65536);
    munmap(m[1], 65536);
    sink = m[2];
}

static pthread_key_t key;

/* Runs as the thread ends, after memtrail's own end-of-thread handling may
 * have run: allocations here must still be counted. */
static void at_thread_end(void *p) {
    free(p);
    void *q = malloc(77);
    free(q);
}

static void *keyed(void *arg) {
    pthread_setspecific(key, malloc(55));
    return arg;
}

static void *hammer(void *arg) {
    for (int i = 0; i < 200000; i++) free(malloc(16 + (i & 255)));
    return arg;
}

__attribute__((noinline)) static void *site_big(void) { return malloc(1 << 20); }
__attribute__((noinline)) static void *site_page(void) { return malloc(4096); }
__attribute__((noinline)) static void *site_small(void) { return malloc(256); }

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "deep")) {
        deep(50);
    } else if (!strcmp(what, "maps")) {
        maps();
    } else if (!strcmp(what, "thread-end")) {
        pthread_key_create(&key, at_thread_end);
        pthread_t t[3];
        for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, keyed, NULL);
        for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    } else if (!strcmp(what, "fork-under-load")) {
        pthread_t t[3];
        for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, hammer, NULL);
        for (int k = 0; k < 20; k++) {
            pid_t c = fork();
            if (c == 0) {
                for (int i = 0; i < 100; i++) free(malloc(100));
                _exit(0);
            }
            int st;
            waitpid(c, &st, 0);
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return 5;
        }
        for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    } else if (!strcmp(what, "vfork")) {
        /* The child runs on the parent's memory until it execs; this exec
         * fails and the child leaves through _exit. The parent must go on
         * being recorded and write its profile. */
        free(malloc(111));
        pid_t c = vfork();
        if (c == 0) {
            char *argv[] = {"/nonexistent/program", NULL};
            execv(argv[0], argv);
            _exit(127);
        }
        int st;
        waitpid(c, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 127) return 5;
        for (int i = 0; i < 5; i++) free(malloc(222));
    } else if (!strcmp(what, "sampling")) {
        for (int i = 0; i < 1000; i++) free(site_big());    /* 1 GiB   */
        for (int i = 0; i < 200000; i++) free(site_page()); /* 800 MiB */
        for (int i = 0; i < 400000; i++) free(site_small()); /* 100 MiB */
    } else {
        return 2;
    }
    puts("ok");
    return 0;
}
