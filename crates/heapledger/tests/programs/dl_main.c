/* dlopens the library named by argv[1] twice; each time calls lib_alloc
 * (2 blocks, then 3 blocks) and dlcloses it. Every block is freed after the
 * dlclose except the last one, which leaks: its stack points into a library
 * that is no longer loaded when the profile is written. No stdio. */
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

typedef void (*lib_alloc_fn)(void **out, int n);

void *leaked;

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    for (int round = 0; round < 2; round++) {
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL); /* SITE:open_lib */
        if (!h)
            return 3;
        lib_alloc_fn f = (lib_alloc_fn)dlsym(h, "lib_alloc");
        if (!f)
            return 4;
        void *blocks[3];
        int n = round == 0 ? 2 : 3;
        f(blocks, n); /* SITE:call_lib */
        if (dlclose(h) != 0)
            return 5;
        for (int i = 0; i < n; i++) {
            if (round == 1 && i == n - 1)
                leaked = blocks[i];
            else
                free(blocks[i]);
        }
    }
    write(1, "dlopen: done\n", 13);
    return 0;
}
