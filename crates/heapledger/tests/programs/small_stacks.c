/* Allocations made where little stack is left (small_stacks.rs): the
 * recorder must not overflow what the program itself fits in.
 *
 *   small_stacks thread     a thread with a PTHREAD_STACK_MIN stack
 *   small_stacks coroutine  a makecontext coroutine on a 16 KiB stack
 *   small_stacks altstack   a signal handler on a 16 KiB sigaltstack
 *   small_stacks timer      SIGEV_THREAD timer notifications (glibc runs
 *                           its timer helper thread on a minimal stack)
 *   small_stacks exit       the PTHREAD_STACK_MIN thread ends the process
 *                           with exit(3), so the profile is written there
 *
 * Each allocates and frees 100 blocks of 40 bytes in leaf(), 8 KiB
 * below the top of its stack (the program's own frames take about that:
 * a deep call chain or a buffer on the stack). */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

void *volatile sink;

__attribute__((noinline)) static void leaf(void) {
    for (int i = 0; i < 100; i++) {
        sink = malloc(40); /* SITE:leaf */
        free(sink);
    }
}

/* Takes about 8 KiB of stack, then allocates (and with `end`, ends the
 * process from there). */
__attribute__((noinline)) static void busy_then(int end) {
    volatile char buf[8 * 1024];
    buf[0] = 1;
    buf[sizeof buf - 1] = 1;
    leaf();
    if (end) exit(buf[0] + 2);
    __asm__ volatile("" ::: "memory");
}

static void busy(void) { busy_then(0); }

static void *in_thread(void *arg) {
    busy_then(arg != NULL);
    return arg;
}

static ucontext_t main_ctx, co_ctx;
static char co_stack[16 * 1024] __attribute__((aligned(16)));

static void in_coroutine(void) { busy(); }

static void on_usr1(int sig) {
    (void)sig;
    busy();
}

static sem_t done;
static void on_timer(union sigval v) {
    (void)v;
    leaf();
    sem_post(&done);
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "thread") || !strcmp(what, "exit")) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        if (pthread_attr_setstacksize(&attr, PTHREAD_STACK_MIN) != 0) return 4;
        pthread_t t;
        if (pthread_create(&t, &attr, in_thread, (void *)(what[0] == 'e')) != 0) return 4;
        pthread_join(t, NULL);
    } else if (!strcmp(what, "coroutine")) {
        getcontext(&co_ctx);
        co_ctx.uc_stack.ss_sp = co_stack;
        co_ctx.uc_stack.ss_size = sizeof co_stack;
        co_ctx.uc_link = &main_ctx;
        makecontext(&co_ctx, in_coroutine, 0);
        if (swapcontext(&main_ctx, &co_ctx) != 0) return 5;
    } else if (!strcmp(what, "altstack")) {
        stack_t ss = {.ss_sp = malloc(16 * 1024), .ss_size = 16 * 1024};
        if (!ss.ss_sp || sigaltstack(&ss, NULL) != 0) return 6;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr1;
        sa.sa_flags = SA_ONSTACK;
        sigaction(SIGUSR1, &sa, NULL);
        raise(SIGUSR1);
    } else if (!strcmp(what, "timer")) {
        sem_init(&done, 0, 0);
        struct sigevent ev;
        memset(&ev, 0, sizeof ev);
        ev.sigev_notify = SIGEV_THREAD;
        ev.sigev_notify_function = on_timer;
        timer_t timer;
        if (timer_create(CLOCK_MONOTONIC, &ev, &timer) != 0) return 7;
        struct itimerspec its = {.it_value = {0, 1000000}};
        if (timer_settime(timer, 0, &its, NULL) != 0) return 8;
        while (sem_wait(&done) != 0) {
        }
        timer_delete(timer);
    } else {
        return 2;
    }
    puts("ok");
    return 0;
}
