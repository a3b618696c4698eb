/* Blocks freed by a thread-specific key's destructor, which glibc runs as
 * each thread ends (after heapledger's own key destructor), for
 * exact_threads.rs: `key_destructor [N [linger|fork]]` starts N threads (3
 * if not given), one after another, each allocating one block of 777 bytes
 * and handing it to the key; the destructor frees it.
 *
 * linger: one more thread is started first, whose destructor waits, before
 * its free, until the N others have come and gone.
 * fork: the process forks first; in the child, the main thread (the one
 * that forked) hands its own block to the key and leaves by pthread_exit,
 * its destructor waiting until a helper thread has started and joined the
 * N others; the helper then joins it and the child exits 0. The parent
 * waits for the child. (A thread that leaves by pthread_exit first, in the
 * parent, has glibc load its unwinder there, so that main's pthread_exit in
 * the child allocates nothing more.)
 *
 * Prints "done" and exits 0. No stdio. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_key_t key;
static int gate[2] = {-1, -1};
static __thread int lingers;
static int n;
static pthread_t main_thread;

static void release(void *p) {
    char c;
    if (lingers)
        while (read(gate[0], &c, 1) < 0)
            ;
    free(p);
}

__attribute__((noinline)) void *worker(void *arg) {
    lingers = arg == gate;
    pthread_setspecific(key, malloc(777)); /* SITE:keyed */
    return arg;
}

static void run_workers(void) {
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, NULL) != 0)
            _exit(2);
        pthread_join(t, NULL);
    }
}

static void *leave(void *arg) {
    pthread_exit(arg);
}

/* In the forked child: starts the others, lets main's destructor go on,
 * waits for main to be gone, and ends the child. */
static void *helper(void *arg) {
    run_workers();
    if (write(gate[1], "x", 1) != 1)
        _exit(2);
    pthread_join(main_thread, NULL);
    write(1, "child done\n", 11);
    exit(0);
    return arg;
}

int main(int argc, char **argv) {
    n = argc > 1 ? atoi(argv[1]) : 3;
    const char *mode = argc > 2 ? argv[2] : "";
    if (pthread_key_create(&key, release) != 0 || pipe(gate) != 0)
        return 2;
    if (strcmp(mode, "fork") == 0) {
        pthread_t t;
        if (pthread_create(&t, NULL, leave, NULL) != 0 || pthread_join(t, NULL) != 0)
            return 2;
        pid_t pid = fork();
        if (pid < 0)
            return 2;
        if (pid == 0) {
            pthread_t h;
            main_thread = pthread_self();
            worker(gate); /* main's own block, freed as it leaves */
            if (pthread_create(&h, NULL, helper, NULL) != 0)
                _exit(2);
            pthread_exit(NULL);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            return 3;
        write(1, "done\n", 5);
        return 0;
    }
    pthread_t lingerer;
    int linger = strcmp(mode, "linger") == 0;
    if (linger && pthread_create(&lingerer, NULL, worker, gate) != 0)
        return 2;
    run_workers();
    if (linger) {
        if (write(gate[1], "x", 1) != 1)
            return 2;
        pthread_join(lingerer, NULL);
    }
    write(1, "done\n", 5);
    return 0;
}
