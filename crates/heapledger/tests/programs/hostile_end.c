/* A program that ends in a state hostile to writing its profile, for
 * exact_passthrough.rs. Usage: hostile_end MODE [DIR]
 *
 *   clearenv  clears its whole environment (as daemons and sandboxes do,
 *             and Python's os.environ.clear()), then forks a child that
 *             allocates 77 bytes;
 *   fdleak    opens /dev/null until its descriptor limit is reached;
 *   fdlimit   sets its soft and hard descriptor limits to 3, then opens
 *             /dev/null until that fails;
 *   dup2all   puts a copy of stderr on every descriptor from 3 to 1023 (as a
 *             careless "close every fd" might), then forks a child that
 *             allocates 77 bytes;
 *   dropuid   run as root, becomes user and group 65534 (nobody), as
 *             daemons drop privileges; prints "not root" otherwise;
 *   chroot    enters DIR as its root directory; prints "no chroot" where it
 *             is not allowed to (not root).
 *
 * Then it allocates 123 bytes that it never frees, and exits 0. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* Forks a child that allocates 77 bytes and exits 0; waits for it. */
static int fork_a_child(void) {
    pid_t pid = fork();
    if (pid == 0) {
        void *volatile c = malloc(77);
        (void)c;
        exit(0);
    }
    int status = 0;
    return pid > 0 && waitpid(pid, &status, 0) == pid && status == 0;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 100;
    if (strcmp(argv[1], "clearenv") == 0) {
        clearenv();
        if (!fork_a_child())
            return 101;
    } else if (strcmp(argv[1], "fdleak") == 0) {
        int n = 0;
        while (open("/dev/null", O_RDONLY) >= 0)
            n++;
        if (n == 0)
            return 102;
    } else if (strcmp(argv[1], "fdlimit") == 0) {
        struct rlimit r = {3, 3};
        if (setrlimit(RLIMIT_NOFILE, &r) != 0)
            return 103;
        if (open("/dev/null", O_RDONLY) >= 0)
            return 104;
    } else if (strcmp(argv[1], "dup2all") == 0) {
        for (int fd = 3; fd < 1024; fd++)
            if (dup2(2, fd) != fd)
                return 105;
        if (!fork_a_child())
            return 101;
    } else if (strcmp(argv[1], "dropuid") == 0) {
        if (geteuid() != 0)
            printf("not root\n");
        else if (setgid(65534) != 0 || setuid(65534) != 0)
            return 107;
    } else if (strcmp(argv[1], "chroot") == 0 && argc > 2) {
        if (chdir(argv[2]) != 0)
            return 106;
        if (chroot(".") != 0)
            printf("no chroot\n");
    } else {
        return 100;
    }
    void *volatile p = malloc(123);
    (void)p;
    return 0;
}
