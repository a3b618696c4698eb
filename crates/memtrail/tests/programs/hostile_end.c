/* A program that ends in a state hostile to writing its profile, for
 * exact_passthrough.rs. Usage: hostile_end clearenv|fdleak
 *
 *   clearenv  clears its whole environment (as daemons and sandboxes do,
 *             and Python's os.environ.clear()), then forks a child that
 *             allocates 77 bytes;
 *   fdleak    opens /dev/null until its descriptor limit is reached.
 *
 * Either way it then allocates 123 bytes that it never frees, and exits 0. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2)
        return 100;
    if (strcmp(argv[1], "clearenv") == 0) {
        clearenv();
        pid_t pid = fork();
        if (pid == 0) {
            void *volatile c = malloc(77);
            (void)c;
            exit(0);
        }
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0)
            return 101;
    } else if (strcmp(argv[1], "fdleak") == 0) {
        int n = 0;
        while (open("/dev/null", O_RDONLY) >= 0)
            n++;
        if (n == 0)
            return 102;
    } else {
        return 100;
    }
    void *volatile p = malloc(123);
    (void)p;
    return 0;
}
