/* A C program (no C++ runtime of its own) that opens cxx_plugin.cpp's
 * library with RTLD_LOCAL, twice, closing it in between, for
 * cxx_allocators.rs. Prints the plugin's sums. */
#include <dlfcn.h>
#include <stdio.h>

static long once(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return -1;
    }
    long (*work)(int) = (long (*)(int))dlsym(h, "plugin_work");
    long s = work ? work(10) : -1;
    dlclose(h);
    return s;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    long a = once(argv[1]);
    long b = once(argv[1]);
    printf("cxx_plugin_host: %ld %ld\n", a, b);
    return a == 445 && b == 445 ? 0 : 1;
}
