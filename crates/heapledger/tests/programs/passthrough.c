/* Standard streams, arguments and exit status, for exact_passthrough.rs.
 * Usage: passthrough CODE [ARGS...]: echoes its arguments and stdin (stdio,
 * buffered, flushed at exit), writes a line to stderr, exits with CODE; with
 * CODE "abort" it dies of SIGABRT after flushing. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 2)
        return 100;
    for (int i = 1; i < argc; i++)
        printf("arg %d: [%s]\n", i, argv[i]);
    char line[256];
    while (fgets(line, sizeof line, stdin))
        printf("stdin: %s", line);
    char *p = malloc(40);
    strcpy(p, "allocated and freed");
    printf("%s\n", p);
    free(p);
    fprintf(stderr, "to stderr\n");
    if (strcmp(argv[1], "abort") == 0) {
        fflush(stdout);
        abort();
    }
    return atoi(argv[1]);
}
