/* Allocations made on stacks that are not the thread's own, for
 * exact_foreign_stacks.rs:
 *
 *   - a coroutine (makecontext/swapcontext) on a stack from malloc:
 *     co_leaf mallocs 111 bytes 5 times, from co_body, each time switching
 *     back to main between two;
 *   - a coroutine on a stack from mmap, 1 MiB, whose co_deep recurses 150
 *     frames of about 1 KiB each before mallocing 222 bytes (the stack
 *     words the unwinder needs lie far from the allocation);
 *   - a signal handler on an alternate signal stack (sigaltstack): raiser
 *     sends itself SIGUSR1, whose handler on_usr1 mallocs 333 bytes.
 *
 * Every block is freed. Each call is on a line marked SITE:name. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>

static ucontext_t main_ctx, co_ctx;

__attribute__((noinline)) static void co_leaf(int i) {
    void *volatile p = malloc(111); /* SITE:co_leaf */
    free(p);
    if (i < 4)
        swapcontext(&co_ctx, &main_ctx);
}

__attribute__((noinline)) static void co_body(void) {
    for (int i = 0; i < 5; i++)
        co_leaf(i); /* SITE:co_body */
}

__attribute__((noinline)) static int co_deep(int depth) {
    volatile char pad[1000];
    pad[0] = (char)depth;
    if (depth == 0) {
        void *volatile p = malloc(222); /* SITE:co_deep_leaf */
        free(p);
        return pad[0];
    }
    return co_deep(depth - 1) + pad[0]; /* SITE:co_deep */
}

__attribute__((noinline)) static void co_deep_start(void) {
    co_deep(150); /* SITE:co_deep_start */
}

__attribute__((noinline)) static void on_usr1(int sig) {
    (void)sig;
    void *volatile p = malloc(333); /* SITE:on_usr1 */
    free(p);
}

__attribute__((noinline)) static void raiser(void) {
    raise(SIGUSR1); /* SITE:raiser */
}

int main(void) {
    /* A coroutine on a malloc'ed stack, entered 5 times. */
    size_t size = 64 * 1024;
    char *stack = malloc(size);
    if (!stack || getcontext(&co_ctx) != 0)
        return 1;
    co_ctx.uc_stack.ss_sp = stack;
    co_ctx.uc_stack.ss_size = size;
    co_ctx.uc_link = &main_ctx;
    makecontext(&co_ctx, co_body, 0);
    for (int i = 0; i < 5; i++)
        if (swapcontext(&main_ctx, &co_ctx) != 0)
            return 2;
    free(stack);

    /* A deep coroutine on an mmap'ed stack. */
    size_t big = 1 << 20;
    char *deep = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (deep == MAP_FAILED || getcontext(&co_ctx) != 0)
        return 3;
    co_ctx.uc_stack.ss_sp = deep;
    co_ctx.uc_stack.ss_size = big;
    co_ctx.uc_link = &main_ctx;
    makecontext(&co_ctx, co_deep_start, 0);
    if (swapcontext(&main_ctx, &co_ctx) != 0)
        return 4;
    munmap(deep, big);

    /* A handler on an alternate signal stack. */
    stack_t ss = {.ss_sp = malloc(SIGSTKSZ * 4), .ss_size = SIGSTKSZ * 4, .ss_flags = 0};
    if (!ss.ss_sp || sigaltstack(&ss, NULL) != 0)
        return 5;
    struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_ONSTACK};
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0)
        return 6;
    raiser();
    stack_t off = {.ss_flags = SS_DISABLE};
    sigaltstack(&off, NULL);
    free(ss.ss_sp);
    return 0;
}
