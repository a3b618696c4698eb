/* Global and thread-local variables of known sizes and lines
 * (tests/globals.rs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char big_table[40000];                /* SITE:big_table */
static long counters[300];            /* SITE:counters */
__thread char tls_buffer[4096];       /* SITE:tls_buffer */
__thread int tls_depth = 7;           /* SITE:tls_depth */

int main(int argc, char **argv) {
    (void)argv;
    big_table[argc] = 1;
    counters[argc] = 2;
    tls_buffer[argc] = 3;
    char *p = malloc(10);
    memset(p, tls_depth, 10);
    printf("%d\n", big_table[1] + (int)counters[1] + tls_buffer[1] + p[0]);
    free(p);
    return 0;
}
