/* Allocates at two known sites, one step at a time: after each step it
 * says "stepN" on stdout and waits for a line on stdin, so that a test can
 * read the recorder's stack table while the program is alive (live_stacks.rs). */
#include <stdio.h>
#include <stdlib.h>

static void *kept[2];

__attribute__((noinline)) void first_site(void) {
    kept[0] = malloc(100); /* FIRST_LINE */
}

__attribute__((noinline)) void second_site(void) {
    kept[1] = malloc(200); /* SECOND_LINE */
}

static void step(const char *name) {
    char line[16];
    printf("%s\n", name);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        exit(3);
}

int main(void) {
    first_site();
    step("step1");
    second_site();
    step("step2");
    free(kept[0]);
    free(kept[1]);
    return 0;
}
