/* Forks while other threads push and pop frames, intern labels and name
 * kinds of time lost (tests/timelogs.rs): the child pushes, names and
 * records too, and must not find one of those locks held by a thread it
 * did not inherit. Prints "ok" once every child has exited 0. */
#define _GNU_SOURCE
#include "heapledger.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int stop;

static void *churn(void *arg) {
    long id = (long)arg;
    char label[64], kind[32];
    for (long i = 0; !stop; i++) {
        snprintf(label, sizeof label, "worker%ld.py:%ld in f", id, i % 5000);
        snprintf(kind, sizeof kind, "k%ld", i % 40);
        heapledger_push_label(label);
        heapledger_time_lost(kind, 1);
        heapledger_traceback *tb = heapledger_traceback_snapshot();
        heapledger_pop_frame();
        heapledger_traceback_release(tb);
    }
    return 0;
}

int main(void) {
    pthread_t t[3];
    for (long i = 0; i < 3; i++)
        pthread_create(&t[i], 0, churn, (void *)i);
    int bad = 0;
    for (int n = 0; n < 100; n++) {
        pid_t p = fork();
        if (p == 0) {
            char label[64];
            snprintf(label, sizeof label, "child.py:%d in run", n);
            heapledger_push_label(label);
            heapledger_time_lost("in-child", 1);
            heapledger_pop_frame();
            _exit(0);
        }
        int status = 0;
        waitpid(p, &status, 0);
        bad += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    stop = 1;
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], 0);
    puts(bad ? "bad" : "ok");
    return bad;
}
