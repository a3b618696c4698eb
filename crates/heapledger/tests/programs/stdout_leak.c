/* One leak of the program's own (77 bytes), and stdout's buffer, which the
 * C library allocates at the first printf and never frees: the runtime's
 * block, not the program's leak. For malt_export.rs. */
#include <stdio.h>
#include <stdlib.h>

void *kept;

__attribute__((noinline)) void leak_it(void) { kept = malloc(77); /* SITE:leak_it */ }

int main(void) {
    leak_it();
    printf("stdout_leak: done\n");
    return 0;
}
