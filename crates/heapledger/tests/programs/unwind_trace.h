/* Shared by unwind_main.c and unwind_lib.c: take libgcc's backtrace, then
 * malloc, from the same function.
 *
 * TRACE_THEN_MALLOC(t, size) expands in the function that is to call
 * malloc: it calls _Unwind_Backtrace there, recording _Unwind_GetIP of every
 * frame into *t, and calls malloc(size) right after. libgcc's first frame is
 * then the return address of the _Unwind_Backtrace call in that function,
 * the next ones the return addresses into its callers. */
#ifndef UNWIND_TRACE_H
#define UNWIND_TRACE_H

#include <stdint.h>
#include <stdlib.h>
#include <unwind.h>

#define MAX_IPS 128

struct trace {
    size_t size;
    int n;
    uintptr_t ip[MAX_IPS];
};

static _Unwind_Reason_Code trace_frame(struct _Unwind_Context *ctx, void *arg) {
    struct trace *t = arg;
    if (t->n == MAX_IPS)
        return _URC_END_OF_STACK;
    t->ip[t->n++] = _Unwind_GetIP(ctx);
    return _URC_NO_REASON;
}

#define TRACE_THEN_MALLOC(t, sz)                                                                   \
    ((t)->size = (sz), (t)->n = 0, _Unwind_Backtrace(trace_frame, (t)), malloc(sz))

typedef void *(*site_fn)(struct trace *t, size_t size);

/* unwind_lib.c */
void *lib_entry(struct trace *t, size_t size);
void *lib_call_back(site_fn f, struct trace *t, size_t size);

#endif
