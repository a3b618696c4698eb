/* Threads allocating and freeing while checkpoints are written: each of
 * THREADS threads makes ROUNDS malloc/free pairs of 3001 + its number
 * bytes, pausing 1 ms every 512 pairs (about 40 ms in all, so that
 * checkpoints every 5 ms fall in the middle of the work). Then the main
 * thread waits for a checkpoint begun after the joins, and exits, or
 * (argument "kill") kills itself with SIGKILL: tests/checkpoint.rs. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define THREADS 4
#define ROUNDS 20000

static void *work(void *arg) {
    size_t size = 3001 + (size_t)arg;
    for (int i = 0; i < ROUNDS; i++) {
        void *p = malloc(size);
        *(volatile char *)p = 1;
        free(p);
        if (i % 512 == 0) {
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, 0);
        }
    }
    return 0;
}

/* The checkpoint file's inode: each checkpoint is written beside it and
 * renamed over it, so a new inode is a new checkpoint (0: none yet). */
static ino_t checkpoint_inode(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? st.st_ino : 0;
}

/* Makes a change (a checkpoint is written only when something changed),
 * then waits up to 30 s for the next checkpoint after `*seen`. */
static void next_checkpoint(const char *path, ino_t *seen) {
    void *p = malloc(77);
    *(volatile char *)p = 1;
    free(p);
    for (int i = 0; i < 30000 && checkpoint_inode(path) == *seen; i++) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, 0);
    }
    *seen = checkpoint_inode(path);
}

int main(int argc, char **argv) {
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], 0, work, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], 0);
    /* A fixed wait here (80, then 250 ms) was not always long enough on
     * a busy 2-core machine. The first new checkpoint may have begun
     * before the joins; the one after it began after them, since one
     * thread writes them in turn. */
    const char *dir = getenv("HEAPLEDGER_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/%d.hlraw.ckpt", dir ? dir : ".", (int)getpid());
    ino_t seen = checkpoint_inode(path);
    next_checkpoint(path, &seen);
    next_checkpoint(path, &seen);
    if (argc > 1 && strcmp(argv[1], "kill") == 0) kill(getpid(), SIGKILL);
    return 0;
}
