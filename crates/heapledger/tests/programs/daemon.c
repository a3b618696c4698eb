/* daemon: the program starts a detached process that outlives it, the way
 * `git commit` starts its maintenance run. main forks; the child starts a
 * new session and forks the daemon, then exits; the daemon sends its pid
 * up a pipe, lets main end, then allocates 4 blocks of 4444 bytes (leaking
 * one) and exits. main prints "daemon PID" and exits 0 without waiting.
 * With the argument "long" the daemon sleeps 60 s before allocating. */
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void *leaked;

__attribute__((noinline)) void daemon_alloc(void **out) {
    for (int i = 0; i < 4; i++)
        out[i] = malloc(4444); /* SITE:daemon */
}

int main(int argc, char **argv) {
    int slow = argc > 1 && strcmp(argv[1], "long") == 0;
    int fds[2];
    if (pipe(fds) != 0)
        return 2;
    pid_t mid = fork();
    if (mid < 0)
        return 2;
    if (mid == 0) {
        setsid();
        pid_t d = fork();
        if (d != 0)
            _exit(d < 0 ? 2 : 0);
        /* The daemon: away from the caller's streams, like a real one. */
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        close(fds[0]);
        pid_t me = getpid();
        write(fds[1], &me, sizeof me);
        close(fds[1]);
        usleep(slow ? 60 * 1000 * 1000 : 300 * 1000); /* main has ended */
        void *blocks[4];
        daemon_alloc(blocks); /* SITE:call_daemon */
        for (int i = 0; i < 3; i++)
            free(blocks[i]);
        leaked = blocks[3];
        exit(0);
    }
    close(fds[1]);
    pid_t daemon = 0;
    if (read(fds[0], &daemon, sizeof daemon) != sizeof daemon)
        return 3;
    waitpid(mid, NULL, 0);
    char line[64];
    int len = snprintf(line, sizeof line, "daemon %d\n", (int)daemon);
    write(1, line, (size_t)len);
    return 0;
}
