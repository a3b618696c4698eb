/* A small program with known allocations, for a first look at heapledger:
 * a temporary buffer per line, a growing array, and one leak. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct item { char name[24]; int value; };

__attribute__((noinline)) static char *format_line(int i) {
    char *buf = malloc(64);                 /* freed by the caller */
    snprintf(buf, 64, "item-%d", i);
    return buf;
}

__attribute__((noinline)) static struct item *grow(struct item *items, int n) {
    return realloc(items, (size_t)n * sizeof *items);
}

char *remembered;

__attribute__((noinline)) static void remember(const char *s) {
    remembered = strdup(s);                 /* never freed: a leak */
}

int main(void) {
    struct item *items = NULL;
    for (int i = 0; i < 1000; i++) {
        items = grow(items, i + 1);
        char *line = format_line(i);        /* temporary: freed before the next allocation */
        snprintf(items[i].name, sizeof items[i].name, "%s", line);
        items[i].value = i;
        free(line);
    }
    remember(items[999].name);
    printf("%d items, last %s\n", 1000, remembered);
    free(items);
    return 0;
}
