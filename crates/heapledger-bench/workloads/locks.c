/* Uncontended pthread_mutex_lock + unlock pairs (issue 35): what recording
 * lock waits costs a lock that is never waited for. `locks N`. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static volatile long counter;

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20000000;
    if (n <= 0) {
        fprintf(stderr, "locks: bad pair count %s\n", argv[1]);
        return 2;
    }
    for (long i = 0; i < n; i++) {
        pthread_mutex_lock(&m);
        counter++;
        pthread_mutex_unlock(&m);
    }
    return counter == n ? 0 : 1;
}
