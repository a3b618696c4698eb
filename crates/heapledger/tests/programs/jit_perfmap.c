/* A tiny JIT: copies a stub into anonymous executable memory, names it in
 * /tmp/perf-PID.map as V8 does (`--perf-basic-prof`), and calls through it
 * a function that allocates. The stub keeps a frame pointer, as JIT code
 * does, so that stacks unwind through it. Prints its pid.
 * Usage: jit_perfmap CALLS [nomap|python]: with `nomap`, no map is written;
 * with `python`, the stub is named as CPython names a module's code
 * (`py::<module>:/srv/app/view.py`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

__attribute__((noinline)) void alloc_from_jit(void) {
    void *volatile p = malloc(48); /* SITE:jit_alloc */
    free(p);
}

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 10;
    /* push rbp; mov rbp, rsp; movabs rax, IMM64; call rax; pop rbp; ret */
    unsigned char code[] = {0x55, 0x48, 0x89, 0xe5, 0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0,
                            0xff, 0xd0, 0x5d, 0xc3};
    void (*target)(void) = alloc_from_jit;
    memcpy(code + 6, &target, sizeof target);
    unsigned char *jit = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (jit == MAP_FAILED)
        return 2;
    memcpy(jit + 64, code, sizeof code);
    if (!(argc > 2 && strcmp(argv[2], "nomap") == 0)) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
        FILE *map = fopen(path, "w");
        if (!map)
            return 3;
        if (argc > 2 && strcmp(argv[2], "python") == 0)
            fprintf(map, "%lx %zx py::<module>:/srv/app/view.py\n",
                    (unsigned long)(jit + 64), sizeof code);
        else
            fprintf(map, "%lx %zx JS:*renderRows /srv/app/view.js:27:9\n",
                    (unsigned long)(jit + 64), sizeof code);
        fclose(map);
    }
    void (*stub)(void) = (void (*)(void))(jit + 64);
    for (int i = 0; i < calls; i++)
        stub(); /* SITE:jit_call */
    printf("%d\n", (int)getpid());
    return 0;
}
