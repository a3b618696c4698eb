/* A thread whose first allocation happens inside pthread_getattr_np, for
 * exact_threads.rs. glibc holds the thread's descriptor lock while that
 * call allocates; a recorder that asked for the same thread's attributes
 * when it first saw the thread waited for that lock forever (rustc, whose
 * jemalloc maps memory there, hung under heapledger).
 *
 * Built with -DOWN_REALLOC, the executable defines realloc itself, as a
 * program with its own allocator does: glibc's realloc inside
 * pthread_getattr_np then goes to it, and the thread's first recorded event
 * is the mmap it makes. Exits with 5; no stdio. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef OWN_REALLOC
extern void *__libc_realloc(void *, size_t);

void *realloc(void *p, size_t n) {
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED)
        munmap(m, 4096);
    return __libc_realloc(p, n);
}
#endif

__attribute__((noinline)) void *worker(void *arg) {
    (void)arg;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) != 0)
        return NULL;
    pthread_attr_destroy(&attr);
    void *volatile p = malloc(4242); /* SITE:worker_block */
    free(p);
    return (void *)1;
}

int main(void) {
    pthread_t t;
    void *r = NULL;
    if (pthread_create(&t, NULL, worker, NULL) != 0)
        return 2;
    pthread_join(t, &r); /* SITE:main_join */
    write(1, r ? "done\n" : "no attr\n", r ? 5 : 8);
    return 5;
}
