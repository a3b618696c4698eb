/* Makes 40 MiB resident (malloc, then touch every page), then frees it: the
 * profile's peak of resident memory is at least that (malt_export.rs). */
#include <stdlib.h>
#include <string.h>

int main(void) {
    size_t n = (size_t)40 << 20;
    char *p = malloc(n);
    if (!p) return 1;
    memset(p, 1, n);
    int sum = p[n / 2];
    free(p);
    return sum == 1 ? 0 : 2;
}
