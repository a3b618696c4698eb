/* Programs for recorder_options.rs, chosen by argv[1]. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <errno.h>
#include <dlfcn.h>
#include <link.h>
#include <ucontext.h>
#include <malloc.h>
#include <stdint.h>

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

/* Runs as the thread ends, after heapledger's own end-of-thread handling may
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

static volatile long handled;

/* Allocates in a signal handler that interrupts the allocator calls of the
 * main loop (and heapledger's hooks) at arbitrary instructions. */
static void on_tick(int sig) {
    (void)sig;
    /* Not a size of the loop it interrupts: glibc's cache of freed blocks
     * is per size, and taking a block from it is not safe to interrupt
     * with another take of the same size. */
    free(malloc(100));
    handled++;
}

static pthread_barrier_t done;

/* Installs `handler` (or, when given, the SA_SIGINFO `action`) for `sig`,
 * with SA_RESTART. */
static void handle(int sig, void (*handler)(int), void (*action)(int, siginfo_t *, void *)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_flags = SA_RESTART;
    if (action) {
        sa.sa_sigaction = action;
        sa.sa_flags |= SA_SIGINFO;
    } else {
        sa.sa_handler = handler;
    }
    sigaction(sig, &sa, NULL);
}

/* A timer sending `sig` every `ns` nanoseconds. */
static int start_timer(int sig, long ns, timer_t *timer) {
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = sig;
    if (timer_create(CLOCK_MONOTONIC, &ev, timer) != 0) return -1;
    struct itimerspec its = {{0, ns}, {0, ns}};
    return timer_settime(*timer, 0, &its, NULL);
}

/* SIGPROF handler of "exit-in-handler": ends the process with _exit(7)
 * when it interrupts the recorder's code a second time inside one dlclose
 * (where the hook refreshes its module list), or at tick argv[2]. */
static volatile long exit_ticks, exit_at = 1;
static volatile int in_dlclose, recorder_ticks;
static uintptr_t recorder_lo, recorder_hi;
static void exit_on_tick(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)si;
    uintptr_t pc = (uintptr_t)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
    /* The second tick in the recorder within one dlclose: past the start
     * of the hook, most likely inside the refresh. */
    if (in_dlclose && pc >= recorder_lo && pc < recorder_hi && ++recorder_ticks == 2) _exit(7);
    if (++exit_ticks == exit_at) _exit(7);
}
static int find_recorder(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    if (!strstr(info->dlpi_name, "libheapledger_preload")) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            recorder_lo = info->dlpi_addr + ph->p_vaddr;
            recorder_hi = recorder_lo + ph->p_memsz;
        }
    }
    return 1;
}

/* SIGALRM handler of "fork-in-handler": forks a child that allocates and
 * leaves through _exit, and waits for it. */
static volatile long forks;
static volatile int fork_failed;
static void fork_on_alarm(int sig) {
    (void)sig;
    int saved = errno;
    pid_t c = fork();
    if (c == 0) {
        /* Larger than glibc's per-thread cache holds: the interrupted loop
         * may be in the middle of taking a block from that cache, which
         * the child inherits half-changed (a block of the loop's sizes
         * here crashed one child in four without heapledger). */
        free(malloc(2000));
        _exit(0);
    }
    int st;
    if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fork_failed = 1;
    forks++;
    errno = saved;
}

/* 100000 pairs, then (for the still-running threads) waits for good. */
static void *pairs_then(void *park) {
    for (int i = 0; i < 100000; i++) free(malloc(24 + (i & 127)));
    if (park) {
        pthread_barrier_wait(&done);
        for (;;) pause();
    }
    return NULL;
}

__attribute__((noinline)) static void *site_big(void) { return malloc(1 << 20); }
__attribute__((noinline)) static void *site_page(void) { return malloc(4096); }
__attribute__((noinline)) static void *site_small(void) { return malloc(256); }
__attribute__((noinline)) static void *site_mixed(void) { return malloc(40); }
__attribute__((noinline)) static void *site_brief(void) { return malloc(24); }

static double mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

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
    } else if (!strcmp(what, "fork-in-handler")) {
        /* A 5 ms timer whose handler forks interrupts a single-threaded
         * allocation loop (the recorder's hooks, with their locks held, at
         * arbitrary instructions) until at least argv[2] children have
         * ended; prints how many (a slow handler runs again as it returns,
         * before the loop looks at the count). glibc takes no allocator
         * lock to fork a single-threaded process, so this works without
         * the recorder. (A fork and its child's life took 1.3 to 2 ms
         * under the recorder's debug build on a busy 2-core machine: with
         * a 2 ms timer the handler ran again and again, and the loop never
         * looked at the count.) */
        long n = argc > 2 ? atol(argv[2]) : 0;
        /* Each size of the loop once, before the timer: the loop then
         * only takes blocks from glibc's cache and gives them back. */
        for (int i = 0; i < 256; i++) free(malloc(24 + i));
        handle(SIGALRM, fork_on_alarm, NULL);
        timer_t timer;
        if (start_timer(SIGALRM, 5000000, &timer) != 0) return 23;
        for (long i = 0; forks < n; i++) free(malloc(24 + (i & 255)));
        timer_delete(timer);
        if (fork_failed) return 6;
        printf("forks=%ld\n", forks);
    } else if (!strcmp(what, "exit-in-handler")) {
        /* A 20 us timer whose handler leaves through _exit interrupts a
         * loop that loads and unloads a library (the recorder's module
         * refresh, with its locks held) and allocates; the process must
         * end with the handler's code. Prints nothing. */
        exit_at = argc > 2 ? atol(argv[2]) : 1;
        dl_iterate_phdr(find_recorder, NULL);
        handle(SIGPROF, NULL, exit_on_tick);
        timer_t timer;
        if (start_timer(SIGPROF, 20000, &timer) != 0) return 23;
        for (;;) {
            void *h = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
            if (!h) return 24;
            free(malloc(100));
            recorder_ticks = 0;
            in_dlclose = 1;
            dlclose(h);
            in_dlclose = 0;
        }
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
    } else if (!strcmp(what, "errno")) {
        /* What the allocator tells the program must not change. Each check
         * that fails exits with its own code. */
        errno = 0;
        if (malloc(SIZE_MAX / 2) != NULL || errno != ENOMEM) return 10;
        errno = 0;
        if (calloc(SIZE_MAX / 2, 4) != NULL || errno != ENOMEM) return 11;
        void *p = malloc(10);
        errno = 42;
        free(p);
        if (errno != 42) return 12;
        errno = 43;
        free(NULL);
        if (errno != 43) return 13;
        void *q = NULL;
        if (posix_memalign(&q, 3, 16) != EINVAL) return 14;
        if (posix_memalign(&q, 4096, 100) != 0 || ((uintptr_t)q & 4095) != 0) return 15;
        free(q);
        p = malloc(100);
        errno = 0;
        if (realloc(p, SIZE_MAX / 2) != NULL || errno != ENOMEM) return 16;
        free(p); /* the failed realloc left it alive */
        p = malloc(0);
        if (p == NULL) return 17;
        free(p);
        errno = 0;
        if (reallocarray(NULL, SIZE_MAX / 2, 4) != NULL || errno != ENOMEM) return 18;
        void *a = aligned_alloc(64, 128);
        if (a == NULL || ((uintptr_t)a & 63) != 0) return 19;
        free(a);
        void *m = memalign(256, 10);
        if (m == NULL || ((uintptr_t)m & 255) != 0) return 20;
        free(m);
        void *v = valloc(10);
        if (v == NULL || ((uintptr_t)v & 4095) != 0) return 21;
        free(v);
        errno = 0;
        if (munmap((void *)1, 4096) != -1 || errno != EINVAL) return 22;
    } else if (!strcmp(what, "sampled-threads")) {
        /* Two threads end before exit, two are still running at exit. */
        pthread_barrier_init(&done, NULL, 3);
        pthread_t t[4];
        for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, pairs_then, i < 2 ? NULL : (void *)1);
        pthread_join(t[0], NULL);
        pthread_join(t[1], NULL);
        pthread_barrier_wait(&done);
        puts("ok");
        fflush(stdout);
        exit(0);
    } else if (!strcmp(what, "signal-counts")) {
        /* argv[2] pairs under a 20 us timer whose handler allocates; prints
         * how many times the handler ran. */
        long n = argc > 2 ? atol(argv[2]) : 0;
        /* The first malloc of a thread sets up glibc's cache under the
         * arena's lock: a tick there whose handler allocates waits for
         * that lock forever, with or without heapledger. */
        free(malloc(24));
        handle(SIGPROF, on_tick, NULL);
        timer_t timer;
        if (start_timer(SIGPROF, 20000, &timer) != 0) return 23;
        for (long i = 0; i < n; i++) free(malloc(24 + (i & 7)));
        timer_delete(timer);
        signal(SIGPROF, SIG_IGN);
        printf("handled=%ld\n", handled);
        fflush(stdout);
    } else if (!strcmp(what, "lifetimes")) {
        /* site_mixed: its first 64 blocks die at once, the next 1600 live
         * across a 100 ms sleep; prints the mean lifetime of its blocks in
         * ns as the program sees it. site_brief: 20000 blocks that die at
         * once. */
        enum { HEAD = 64, TAIL = 1600 };
        static void *held[TAIL];
        static double born[TAIL];
        double total = 0;
        /* One call site: one stack. */
        for (int i = 0; i < HEAD + TAIL; i++) {
            void *p = site_mixed();
            double t = mono_ns();
            if (i < HEAD) {
                total += mono_ns() - t;
                free(p);
            } else {
                held[i - HEAD] = p;
                born[i - HEAD] = t;
            }
        }
        struct timespec nap = {0, 100 * 1000 * 1000};
        while (nanosleep(&nap, &nap) != 0) {}
        for (int i = 0; i < TAIL; i++) {
            total += mono_ns() - born[i];
            free(held[i]);
        }
        for (int i = 0; i < 20000; i++) free(site_brief());
        printf("mean_ns=%.0f\n", total / (HEAD + TAIL));
        fflush(stdout);
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
