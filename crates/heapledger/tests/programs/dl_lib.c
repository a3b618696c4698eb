/* A library that the test program dlopens; it allocates 777-byte blocks. */
#include <stdlib.h>

__attribute__((noinline)) void lib_alloc(void **out, int n) {
    for (int i = 0; i < n; i++)
        out[i] = malloc(777); /* SITE:lib_alloc */
}
