/* Calls in a fixed pattern whose length divides 64, for the test that each
 * allocation function's time is sampled (exact_call_times.rs): malloc and
 * free alternate, then malloc, calloc, realloc, aligned_alloc and four
 * frees take turns. A recorder that times every 64th call of a thread
 * times one position of each pattern only. */
#include <stdlib.h>

int main(void) {
    for (int i = 0; i < 100000; i++) {
        void *p = malloc(32);
        free(p);
    }
    for (int i = 0; i < 100000; i++) {
        void *p = malloc(32);
        void *q = calloc(4, 8);
        q = realloc(q, 64);
        void *r = aligned_alloc(64, 64);
        free(p);
        free(q);
        free(r);
        free(NULL);
    }
    return 0;
}
