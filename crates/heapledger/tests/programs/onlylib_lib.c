/* One of two libraries that both leak (tests/only_lib.rs), built twice:
 * as libleaka.so with -DNAME=a and as libleakb.so with -DNAME=b. Each
 * keeps N blocks of SIZE bytes, makes and frees N more, and keeps two
 * strdup copies (allocated by the C library for it). */
#include <stdlib.h>
#include <string.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

static void *kept[1000];
static char *copies[2];

__attribute__((noinline)) void CAT(NAME, _work)(int n, size_t size) {
    for (int i = 0; i < n; i++)
        kept[i] = malloc(size); /* SITE:kept */
    for (int i = 0; i < n; i++)
        free(malloc(size + 16)); /* SITE:freed */
    for (int i = 0; i < 2; i++)
        copies[i] = strdup("a copy of a string"); /* SITE:copy */
}
