/* A sandboxed program, for sandboxed.rs: it installs a seccomp filter that
 * refuses (EPERM) every system call but a few a C program needs, getpid,
 * gettid and open among the refused, as a tight sandbox's may; then 4
 * threads and the main thread each make 100000 blocks of 16..515 bytes, and
 * it exits 6. Before the recorder took a refused getpid for what it is, it
 * took the process for a vfork child and wrote no profile. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ALLOW(n)                                                               \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (n), 0, 1),                            \
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

static void *work(void *arg) {
    for (int i = 0; i < 100000; i++) {
        void *volatile p = malloc(16 + i % 500); /* SITE:work */
        free(p);
    }
    return arg;
}

int main(void) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        ALLOW(SYS_read),
        ALLOW(SYS_write),
        ALLOW(SYS_exit),
        ALLOW(SYS_exit_group),
        ALLOW(SYS_brk),
        ALLOW(SYS_mmap),
        ALLOW(SYS_munmap),
        ALLOW(SYS_mprotect),
        ALLOW(SYS_madvise),
        ALLOW(SYS_futex),
        ALLOW(SYS_rt_sigreturn),
        ALLOW(SYS_rt_sigprocmask),
        ALLOW(SYS_clone),
        ALLOW(SYS_clone3),
        ALLOW(SYS_set_robust_list),
        ALLOW(SYS_rseq),
        ALLOW(SYS_getrandom),
        ALLOW(SYS_fstat),
        ALLOW(SYS_newfstatat),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("seccomp_filter: seccomp");
        return 9;
    }
    if (getpid() != -1) /* -EPERM: glibc takes getpid for one that cannot fail */
        return 8;
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        if (pthread_create(&t[i], 0, work, 0))
            return 7;
    work(0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], 0);
    printf("seccomp_filter: done\n");
    return 6;
}
