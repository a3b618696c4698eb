/* Compiled by gcc under heapledger. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int square(int x) { return x * x; }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    char *buf = malloc(64);
    int sum = 0;
    for (int i = 1; i <= n; i++) sum += square(i);
    snprintf(buf, 64, "sum of squares to %d: %d", n, sum);
    puts(buf);
    free(buf);
    return 0;
}
