/* Loads libleaka.so and libleakb.so with dlopen (their paths in argv),
 * calls each one's work, and keeps blocks of its own (tests/only_lib.rs). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static void *mine[5];

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    void *a = dlopen(argv[1], RTLD_NOW);
    void *b = dlopen(argv[2], RTLD_NOW);
    if (!a || !b) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    void (*a_work)(int, size_t) = (void (*)(int, size_t))dlsym(a, "a_work");
    void (*b_work)(int, size_t) = (void (*)(int, size_t))dlsym(b, "b_work");
    for (int i = 0; i < 5; i++)
        mine[i] = malloc(16); /* SITE:mine */
    a_work(10, 32);
    b_work(20, 64);
    printf("done\n");
    return 0;
}
