/* The shared-library half of unwind_main.c, built with the same flags (no
 * frame pointers): a static function allocates, and a static function calls
 * back into the executable through a function pointer. */
#include "unwind_trace.h"

void *volatile lib_sink;
volatile long lib_pad_sink;

static __attribute__((noinline, noclone)) void *lib_static_site(struct trace *t, size_t size) {
    void *p = TRACE_THEN_MALLOC(t, size); /* SITE:lib_static_site */
    lib_sink = p;
    return p;
}

__attribute__((noinline)) void *lib_entry(struct trace *t, size_t size) {
    volatile char pad[100];
    pad[0] = 1;
    void *p = lib_static_site(t, size);
    lib_pad_sink = pad[0];
    return p;
}

static __attribute__((noinline, noclone)) void *lib_static_caller(site_fn f, struct trace *t,
                                                                  size_t size) {
    volatile long pad[7];
    pad[0] = 2;
    void *p = f(t, size);
    lib_pad_sink = pad[0];
    return p;
}

__attribute__((noinline)) void *lib_call_back(site_fn f, struct trace *t, size_t size) {
    void *p = lib_static_caller(f, t, size);
    lib_sink = p;
    return p;
}
