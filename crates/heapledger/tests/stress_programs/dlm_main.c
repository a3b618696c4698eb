/* For stress_stacks.rs: the first stack captured in a library that was
 * loaded behind the recorder's back (dlmopen into the base namespace: the
 * recorder hooks dlopen only) must be as complete as the next ones.
 *
 * Usage: dlm_main LIB. Mallocs 1111 bytes from before() (main's frames are
 * known), loads LIB, then calls its lib_outer -> lib_inner -> malloc twice,
 * for 3001 and 3002 bytes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

void *volatile sink;

__attribute__((noinline)) void before(void) { sink = malloc(1111); }

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    before();
    void *h = dlmopen(LM_ID_BASE, argv[1], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 3;
    }
    void (*outer)(size_t) = (void (*)(size_t))dlsym(h, "lib_outer");
    if (!outer)
        return 4;
    outer(3001);
    outer(3002);
    return 0;
}
