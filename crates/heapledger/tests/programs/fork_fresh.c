/* fork_fresh: the parent makes 1000 blocks of 100 bytes (kept) and starts
 * a thread that makes 5 blocks of 50 bytes and waits; then it forks. The
 * child makes exactly 10 blocks of 64 bytes (freeing 3 of them), frees 500
 * of the parent's blocks and one more with realloc(p, 0), and exits 0.
 * The parent waits for it, lets its thread end, frees everything and
 * prints "child PID". No stdio in the child (its buffers would allocate). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void *blocks[1000];
static int go[2];

__attribute__((noinline)) void parent_alloc(void) {
    for (int i = 0; i < 1000; i++)
        blocks[i] = malloc(100); /* SITE:parent */
}

static void *worker(void *arg) {
    void *mine[5];
    for (int i = 0; i < 5; i++)
        mine[i] = malloc(50); /* SITE:worker */
    char c;
    read(go[0], &c, 1);
    for (int i = 0; i < 5; i++)
        free(mine[i]);
    return arg;
}

__attribute__((noinline)) void child_alloc(void **out) {
    for (int i = 0; i < 10; i++)
        out[i] = malloc(64); /* SITE:child */
}

int main(void) {
    parent_alloc();
    if (pipe(go) != 0)
        return 2;
    pthread_t th;
    if (pthread_create(&th, NULL, worker, NULL) != 0)
        return 2;
    /* The worker has made its blocks when it waits on the pipe. */
    usleep(100000);
    pid_t pid = fork();
    if (pid < 0)
        return 2;
    if (pid == 0) {
        void *mine[10];
        child_alloc(mine);
        for (int i = 0; i < 3; i++)
            free(mine[i]);
        for (int i = 0; i < 500; i++)
            free(blocks[i]);
        /* realloc(p, 0) frees p: an inherited block, freed by a realloc. */
        blocks[500] = realloc(blocks[500], 0);
        exit(0);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return 3;
    write(go[1], "x", 1);
    pthread_join(th, NULL);
    for (int i = 0; i < 1000; i++)
        free(blocks[i]);
    char line[64];
    int len = snprintf(line, sizeof line, "child %d\n", (int)pid);
    write(1, line, (size_t)len);
    return 0;
}
