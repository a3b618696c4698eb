/* Blocks allocated while the process has one thread, then freed by a thread
 * created after them (young_blocks.rs). The recorder keeps the blocks a
 * single-threaded process allocated last outside its shared table; a second
 * thread must still find them.
 *
 *   young handoff   a pthread frees them
 *   young timer     the thread glibc starts for a SIGEV_THREAD timer does
 *   young fork      a child forked by a threaded parent (single-threaded
 *                   again) allocates, frees some, and leaves the rest
 *
 * Each leaves exactly two blocks: 5000 bytes from the other thread (or the
 * child) and 6000 from the main thread at the end. */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N 24

static void *blocks[N];
void *volatile sink_a, *volatile sink_b;
static sem_t done;

static void allocate(void) {
    for (int i = 0; i < N; i++) blocks[i] = malloc(100 + i);
}

static void free_them(void) {
    for (int i = 0; i < N; i++) free(blocks[i]);
    sink_a = malloc(5000);
}

static void *by_thread(void *arg) {
    free_them();
    return arg;
}

static void by_timer(union sigval v) {
    (void)v;
    free_them();
    sem_post(&done);
}

static void *nothing(void *arg) { return arg; }

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "handoff")) {
        allocate();
        pthread_t t;
        if (pthread_create(&t, NULL, by_thread, NULL) != 0) return 3;
        pthread_join(t, NULL);
    } else if (!strcmp(what, "timer")) {
        sem_init(&done, 0, 0);
        allocate();
        struct sigevent ev;
        memset(&ev, 0, sizeof ev);
        ev.sigev_notify = SIGEV_THREAD;
        ev.sigev_notify_function = by_timer;
        timer_t timer;
        if (timer_create(CLOCK_MONOTONIC, &ev, &timer) != 0) return 4;
        struct itimerspec its = {.it_value = {0, 1000000}};
        if (timer_settime(timer, 0, &its, NULL) != 0) return 5;
        while (sem_wait(&done) != 0) {
        }
        timer_delete(timer);
    } else if (!strcmp(what, "fork")) {
        pthread_t t;
        if (pthread_create(&t, NULL, nothing, NULL) != 0) return 3;
        pthread_join(t, NULL);
        pid_t pid = fork();
        if (pid == 0) {
            allocate();
            free_them();
            for (int i = 0; i < N; i++) blocks[i] = malloc(300 + i);
            for (int i = 0; i < N; i += 2) free(blocks[i]);
            exit(0);
        }
        int status;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0) return 6;
        sink_a = malloc(5000);
    } else {
        return 2;
    }
    sink_b = malloc(6000);
    puts("ok");
    return 0;
}
