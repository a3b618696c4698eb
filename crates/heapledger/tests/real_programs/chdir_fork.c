/* Changes its working directory to /, then forks a child that allocates
 * and ends: its raw data must still reach the run's directory when that
 * was named by a relative $TMPDIR. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    void *volatile p = malloc(77);
    if (chdir("/") != 0)
        return 2;
    pid_t child = fork();
    if (child == 0) {
        void *volatile q = malloc(5);
        (void)q;
        return 0;
    }
    waitpid(child, NULL, 0);
    (void)p;
    return 3;
}
