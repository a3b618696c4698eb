/* Waiting for the recorder's checkpoints (checkpoint=MS in
 * HEAPLEDGER_OPTS) from inside the program, for tests/checkpoint.rs: a
 * fixed sleep (80, 250, 400 ms) was not always long enough on a busy
 * 2-core machine. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The checkpoint file's inode: each checkpoint is written beside it and
 * renamed over it, so a new inode is a new checkpoint (0: none yet). */
static ino_t checkpoint_inode(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? st.st_ino : 0;
}

/* Makes a change (a checkpoint is written only when something changed):
 * a malloc and a free of 0 bytes, which move no byte count and no peak;
 * then waits up to 30 s for the next checkpoint after `*seen`. */
static void next_checkpoint(const char *path, ino_t *seen) {
    void *volatile p = malloc(0); /* (not elided by the compiler) */
    free(p);
    for (int i = 0; i < 30000 && checkpoint_inode(path) == *seen; i++) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, 0);
    }
    *seen = checkpoint_inode(path);
}

/* Waits until a checkpoint begun after this call has been written. The
 * first new checkpoint may have begun before; the one after it began
 * after, since one thread writes them in turn. */
static void wait_for_checkpoint(void) {
    const char *dir = getenv("HEAPLEDGER_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/%d.hlraw.ckpt", dir ? dir : ".", (int)getpid());
    ino_t seen = checkpoint_inode(path);
    next_checkpoint(path, &seen);
    next_checkpoint(path, &seen);
}
