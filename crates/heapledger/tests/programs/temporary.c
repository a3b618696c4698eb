/* Temporary allocations (issue 31): blocks freed by the thread that made
 * them before it allocated anything else (heaptrack's definition). With
 * "threads", two threads make pairs at once, and another thread frees
 * blocks the main thread made. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define N 1000

static void use(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

/* All temporary. */
__attribute__((noinline)) static void pairs(int n) {
    for (int i = 0; i < n; i++) {
        char *p = malloc(32); /* SITE:pairs */
        use(p);
        free(p);
    }
}

/* None: b is made before a is freed, and a's free ends b's chance. */
__attribute__((noinline)) static void interleaved(int n) {
    for (int i = 0; i < n; i++) {
        char *a = malloc(16); /* SITE:first */
        char *b = malloc(24); /* SITE:second */
        use(a);
        use(b);
        free(a);
        free(b);
    }
}

/* Both: realloc releases the block made last, and its own is freed next. */
__attribute__((noinline)) static void grown(int n) {
    for (int i = 0; i < n; i++) {
        char *p = malloc(8);  /* SITE:grown_first */
        use(p);
        p = realloc(p, 4096); /* SITE:grown_realloc */
        use(p);
        free(p);
    }
}

/* Kept until all are made: only the last one made is temporary. */
__attribute__((noinline)) static void kept(int n) {
    char *k[N];
    for (int i = 0; i < n; i++)
        k[i] = malloc(40); /* SITE:kept */
    for (int i = n - 1; i >= 0; i--)
        free(k[i]);
}

static void *pairs_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < N; i++) {
        char *p = malloc(56); /* SITE:thread_pairs */
        use(p);
        free(p);
    }
    return NULL;
}

__attribute__((noinline)) static char *made_for_other(void) {
    return malloc(72); /* SITE:handed_over */
}

static void *free_it(void *p) {
    free(p);
    return NULL;
}

int main(int argc, char **argv) {
    pairs(N);
    interleaved(N);
    grown(N);
    kept(N);
    if (argc > 1 && strcmp(argv[1], "threads") == 0) {
        pthread_t t[2];
        for (int i = 0; i < 2; i++)
            pthread_create(&t[i], NULL, pairs_thread, NULL);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        for (int i = 0; i < 10; i++) {
            pthread_t other;
            char *p = made_for_other();
            pthread_create(&other, NULL, free_it, p);
            pthread_join(other, NULL);
        }
    }
    return 0;
}
