/* fork_ends: forks four children, one after another, each allocating one
 * block and ending its own way: exit(7), return 5 from main, _exit(9), and
 * killed by SIGTERM (raised). The parent waits for each, checks how it
 * ended, and prints "PID how" for each ("exit7", "return5", "_exit9",
 * "sigterm"); it exits 0 if all ended as they should. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void *kept;

int main(void) {
    const char *hows[] = {"exit7", "return5", "_exit9", "sigterm"};
    char out[256];
    int len = 0;
    for (int i = 0; i < 4; i++) {
        pid_t pid = fork();
        if (pid < 0)
            return 2;
        if (pid == 0) {
            kept = malloc(100 + i);
            switch (i) {
            case 0:
                exit(7);
            case 1:
                return 5;
            case 2:
                _exit(9);
            default:
                raise(SIGTERM);
                return 1;
            }
        }
        int status;
        if (waitpid(pid, &status, 0) != pid)
            return 3;
        int ok = i == 3 ? WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM
                        : WIFEXITED(status) && WEXITSTATUS(status) == (int[]){7, 5, 9}[i];
        if (!ok)
            return 4;
        len += snprintf(out + len, sizeof out - len, "%d %s\n", (int)pid, hows[i]);
    }
    write(1, out, (size_t)len);
    return 0;
}
