/* fork: before the fork the process allocates 2 blocks of 111 bytes; the
 * child allocates 6 blocks of 2222 bytes (leaking one) and exits; the parent
 * waits for it, then allocates 3 blocks of 3333 bytes. Each process frees
 * the two pre-fork blocks. The parent prints "child PID" and exits 0 if the
 * child exited 0. No stdio (its buffers would add allocations). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void *leaked;

__attribute__((noinline)) void pre_fork_alloc(void **out) {
    for (int i = 0; i < 2; i++)
        out[i] = malloc(111); /* SITE:pre_fork */
}

__attribute__((noinline)) void child_alloc(void **out) {
    for (int i = 0; i < 6; i++)
        out[i] = malloc(2222); /* SITE:child */
}

__attribute__((noinline)) void parent_alloc(void **out) {
    for (int i = 0; i < 3; i++)
        out[i] = malloc(3333); /* SITE:parent */
}

int main(void) {
    void *pre[2], *blocks[6];
    pre_fork_alloc(pre);
    pid_t pid = fork();
    if (pid < 0)
        return 2;
    if (pid == 0) {
        child_alloc(blocks); /* SITE:call_child */
        for (int i = 0; i < 5; i++)
            free(blocks[i]);
        leaked = blocks[5];
        free(pre[0]);
        free(pre[1]);
        exit(0);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return 3;
    parent_alloc(blocks); /* SITE:call_parent */
    for (int i = 0; i < 3; i++)
        free(blocks[i]);
    free(pre[0]);
    free(pre[1]);
    char line[64];
    int len = snprintf(line, sizeof line, "child %d\n", (int)pid);
    write(1, line, (size_t)len);
    return 0;
}
