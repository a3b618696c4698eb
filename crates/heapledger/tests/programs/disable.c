/* heapledger_disable/heapledger_enable (tests/control.rs): the main
 * thread switches recording off, allocates, a second thread allocates
 * meanwhile (recorded), the main thread switches it on again and
 * allocates; then it frees everything. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "heapledger.h"

static void *hidden[4], *shown[3], *other[5];

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 5; i++)
        other[i] = malloc(333); /* SITE:other */
    return NULL;
}

int main(void) {
    printf("%d", heapledger_disable());
    for (int i = 0; i < 4; i++)
        hidden[i] = malloc(111); /* SITE:hidden */
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    printf(" %d\n", heapledger_enable());
    for (int i = 0; i < 3; i++)
        shown[i] = malloc(222); /* SITE:shown */
    for (int i = 0; i < 4; i++)
        free(hidden[i]);
    for (int i = 0; i < 3; i++)
        free(shown[i]);
    for (int i = 0; i < 5; i++)
        free(other[i]);
    return 0;
}
