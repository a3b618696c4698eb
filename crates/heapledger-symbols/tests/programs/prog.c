#define _GNU_SOURCE
#include <dlfcn.h>

#include "probe.h"

NOINLINE void plain(void) {
    probe("plain", __LINE__, 0, 0);
    sink++;
}

static inline __attribute__((always_inline)) void inner(int outer_line, int outermost_line) {
    probe("inlined", __LINE__, outer_line, outermost_line);
    sink++;
}

static inline __attribute__((always_inline)) void middle(int outermost_line) {
    inner(__LINE__, outermost_line);
    sink++;
}

NOINLINE void with_inline(void) {
    middle(__LINE__);
    sink++;
}

typedef void (*lib_function_t)(void (*)(const char *, int, int, int));

int main(int argc, char **argv) {
    plain();
    with_inline();
    printf("SYM malloc %p\n", dlsym(RTLD_DEFAULT, "malloc"));
    /* Optionally exercise a function in a shared library (given as argv[1]). */
    if (argc > 1) {
        void *lib = dlopen(argv[1], RTLD_NOW);
        if (!lib) {
            fprintf(stderr, "%s\n", dlerror());
            return 1;
        }
        ((lib_function_t)dlsym(lib, "lib_function"))(probe);
    }
    print_maps();
    return 0;
}
