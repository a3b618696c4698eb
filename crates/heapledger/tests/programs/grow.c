/* For tests/exports.rs (diff): `grow N [gone]` makes N blocks of 100 bytes
 * at grown() and frees them, 10 of 50 bytes at steady() whatever N, and 5
 * of 30 bytes at gone() unless told "gone". */
#include <stdlib.h>
__attribute__((noinline)) void *grown(void) { return malloc(100); }
__attribute__((noinline)) void *steady(void) { return malloc(50); }
__attribute__((noinline)) void *gone(void) { return malloc(30); }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    void *keep[1000];
    for (int i = 0; i < n; i++) keep[i] = grown();
    for (int i = 0; i < n; i++) free(keep[i]);
    for (int i = 0; i < 10; i++) free(steady());
    if (argc <= 2)
        for (int i = 0; i < 5; i++) free(gone());
    return 0;
}
