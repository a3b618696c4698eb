/* Stacks checked against libgcc's unwinder (_Unwind_Backtrace), for
 * exact_unwind.rs. Built with -O2 -fomit-frame-pointer
 * -fasynchronous-unwind-tables (no frame pointers), linked with
 * libunwlib.so (unwind_lib.c, same flags).
 *
 * Each site calls _Unwind_Backtrace and then malloc of a unique size
 * (TRACE_THEN_MALLOC). Sites: directly from main; at the bottom of a
 * recursion of depth 3, 7 and 12 through two functions with frames of
 * different sizes; through a function pointer; from a static function in
 * the shared library; from the executable called back by a static function
 * of the library. Usage: unwind_main OUT: writes one line per site to OUT,
 * "SIZE IP IP ..." in hex, innermost first. */
#include <stdio.h>
#include <string.h>

#include "unwind_trace.h"

#define SITES 8

struct trace traces[SITES];
void *blocks[SITES];
void *volatile sink;
volatile long pad_sink;

__attribute__((noinline)) void *site_leaf(struct trace *t, size_t size) {
    void *p = TRACE_THEN_MALLOC(t, size); /* SITE:site_leaf */
    sink = p;
    return p;
}

__attribute__((noinline)) void *rec_odd(int depth, struct trace *t, size_t size);

__attribute__((noinline)) void *rec_even(int depth, struct trace *t, size_t size) {
    volatile long pad[3];
    pad[0] = depth;
    void *p = depth == 0 ? site_leaf(t, size) : rec_odd(depth - 1, t, size);
    pad_sink += pad[0];
    return p;
}

__attribute__((noinline)) void *rec_odd(int depth, struct trace *t, size_t size) {
    volatile char pad[200];
    pad[depth] = 1;
    void *p = depth == 0 ? site_leaf(t, size) : rec_even(depth - 1, t, size);
    pad_sink += pad[depth];
    return p;
}

__attribute__((noinline)) void *site_fnptr(struct trace *t, size_t size) {
    void *p = TRACE_THEN_MALLOC(t, size); /* SITE:site_fnptr */
    sink = p;
    return p;
}

site_fn volatile pointer = site_fnptr;

__attribute__((noinline)) void *through_pointer(struct trace *t, size_t size) {
    volatile char pad[300];
    pad[0] = 3;
    void *p = pointer(t, size);
    pad_sink += pad[0];
    return p;
}

static void write_trace(FILE *f, const struct trace *t) {
    fprintf(f, "%zx", t->size);
    for (int i = 0; i < t->n; i++)
        fprintf(f, " %lx", (unsigned long)t->ip[i]);
    fputc('\n', f);
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    int k = 0;
    blocks[k] = TRACE_THEN_MALLOC(&traces[k], 1001); /* SITE:main */
    k++;
    blocks[k] = rec_even(3, &traces[k], 1003);
    k++;
    blocks[k] = rec_even(7, &traces[k], 1007);
    k++;
    blocks[k] = rec_odd(12, &traces[k], 1012);
    k++;
    blocks[k] = through_pointer(&traces[k], 1020);
    k++;
    blocks[k] = lib_entry(&traces[k], 1030);
    k++;
    blocks[k] = lib_call_back(site_fnptr, &traces[k], 1040);
    k++;
    for (int i = 0; i < k; i++)
        if (!blocks[i])
            return 3;
    /* Written after every site ran: stdio's own allocations come later. */
    FILE *f = fopen(argv[1], "w");
    if (!f)
        return 4;
    for (int i = 0; i < k; i++)
        write_trace(f, &traces[i]);
    if (fclose(f) != 0)
        return 5;
    for (int i = 0; i < k; i++)
        free(blocks[i]);
    return 0;
}
