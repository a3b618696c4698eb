/* heapledger.h: steer heapledger's recorder from inside a program.
 *
 * Header only. Each call looks its function up in the running process
 * (dlsym), so a program built with this header needs no library to link
 * and runs the same without heapledger: every call is then a no-op that
 * says so (-1, 0, or a report saying it is not running under heapledger).
 * Get it with `heapledger header > heapledger.h`. On glibc before 2.34,
 * link with -ldl.
 *
 *   if (heapledger_is_running()) ...
 *   heapledger_set_backtrace_enabled(1);     stacks on, for every thread
 *   struct heapledger_stats s; heapledger_get_stats(&s);
 *   char *r = heapledger_get_leak_report(); puts(r); heapledger_free_leak_report(r);
 *   heapledger_reset_stats();                from here on only what comes after
 *   heapledger_snapshot("after-load");       read with `heapledger report P --snapshot after-load`
 *
 * None of these may be called from a signal handler. From Python:
 *   lib = ctypes.CDLL(None); lib.heapledger_set_backtrace_enabled(1)
 * (check `hasattr(lib, "heapledger_api_version")` first).
 */
#ifndef HEAPLEDGER_H
#define HEAPLEDGER_H

#ifndef _GNU_SOURCE
#define HEAPLEDGER_UNDEF_GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#ifdef HEAPLEDGER_UNDEF_GNU_SOURCE
#undef _GNU_SOURCE
#undef HEAPLEDGER_UNDEF_GNU_SOURCE
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The counters now (each thread's as of its last allocation or free).
 * Sizes are the bytes the program asked for. */
struct heapledger_stats {
    uint64_t blocks_alive;    /* allocated and not yet freed */
    uint64_t bytes_alive;
    uint64_t peak_bytes;      /* the most bytes alive at once so far */
    uint64_t allocations;     /* since the start */
    uint64_t allocated_bytes;
    uint64_t frees;
    uint64_t freed_bytes;
    uint64_t older_frees;     /* frees of blocks allocated before the last reset */
    uint64_t older_freed_bytes;
};

static inline void *heapledger__fn(const char *name) {
#ifdef RTLD_DEFAULT
    return dlsym(RTLD_DEFAULT, name);
#else
    return dlsym((void *)0, name);
#endif
}

/* 1 where the program runs under `heapledger run` and is recorded. */
static inline int heapledger_is_running(void) {
    int (*f)(void) = (int (*)(void))heapledger__fn("heapledger_api_version");
    return f ? f() > 0 : 0;
}

/* Stack capture on (1) or off (0), for every thread, from now on; blocks
 * allocated while off have no stack in reports, and everything else
 * (counts, sizes, leaks) is still recorded. 0, or -1 where stacks cannot be
 * taken (not running under heapledger, `--stack none`). */
static inline int heapledger_set_backtrace_enabled(int on) {
    int (*f)(int) = (int (*)(int))heapledger__fn("heapledger_set_backtrace_enabled");
    return f ? f(on) : -1;
}

/* 1 while allocations get their stacks, else 0. */
static inline int heapledger_is_backtrace_enabled(void) {
    int (*f)(void) = (int (*)(void))heapledger__fn("heapledger_is_backtrace_enabled");
    return f ? f() : 0;
}

/* Fills *out: 0, or -1 (*out zeroed) without heapledger. */
static inline int heapledger_get_stats(struct heapledger_stats *out) {
    int (*f)(struct heapledger_stats *) =
        (int (*)(struct heapledger_stats *))heapledger__fn("heapledger_get_stats");
    if (f)
        return f(out);
    if (out)
        memset(out, 0, sizeof *out);
    return -1;
}

/* The leak report as text (totals, then each block alive with its pointer,
 * size, library and, where it was allocated with stacks on, its frames as
 * addresses with module and offset and the dynamic symbol where there is
 * one). Release it with heapledger_free_leak_report (free() works too).
 * Null only where memory ran out. */
static inline char *heapledger_get_leak_report(void) {
    char *(*f)(void) = (char *(*)(void))heapledger__fn("heapledger_get_leak_report");
    static const char none[] = "=== Memory Leak Report ===\nnot running under heapledger\n";
    char *r;
    if (f)
        return f();
    r = (char *)malloc(sizeof none);
    if (r)
        memcpy(r, none, sizeof none);
    return r;
}

static inline void heapledger_free_leak_report(char *report) {
    void (*f)(char *) = (void (*)(char *))heapledger__fn("heapledger_free_leak_report");
    if (f)
        f(report);
    else
        free(report);
}

/* Recording off (heapledger_disable) or on again (heapledger_enable) for
 * the calling thread, as MALT's malt_disable/malt_enable: while off, its
 * allocations are neither recorded nor counted (their frees are then
 * frees of blocks not seen); its frees of recorded blocks still count.
 * 0, or -1 without heapledger. */
static inline int heapledger_disable(void) {
    int (*f)(void) = (int (*)(void))heapledger__fn("heapledger_disable");
    return f ? f() : -1;
}

static inline int heapledger_enable(void) {
    int (*f)(void) = (int (*)(void))heapledger__fn("heapledger_enable");
    return f ? f() : -1;
}

/* Resets the counters: from here on, totals and leaks cover only what is
 * allocated after the call; frees of older blocks are counted apart
 * (older_frees), never as errors. 0, or -1 without heapledger. */
static inline int heapledger_reset_stats(void) {
    int (*f)(void) = (int (*)(void))heapledger__fn("heapledger_reset_stats");
    return f ? f() : -1;
}

/* Stores a snapshot of every counter in the profile, labelled `label`:
 * its number (1, 2, ...), or -1. `heapledger report PROFILE --snapshot
 * LABEL` shows it, `heapledger diff PROFILE:A PROFILE:B` compares two. */
static inline int heapledger_snapshot(const char *label) {
    int (*f)(const char *) = (int (*)(const char *))heapledger__fn("heapledger_snapshot");
    return f ? f(label) : -1;
}

/* Time lost that the program records itself (docs/time-lost.md), beside
 * the lock waits heapledger records: charged to the caller's stack, of a
 * kind the program names ("io", "retry"...), in the thread's log of time
 * lost (each thread keeps its longest entries, regrouped by kind and
 * stack). heapledger_time_lost records `ns` at once; heapledger_wait_begin
 * and heapledger_wait_end time a wait, charged to the stack where it
 * began (a wait begun while another is open on the thread ends that one
 * first). 0, or -1 without heapledger (and for an end with no wait open). */
static inline int heapledger_time_lost(const char *kind, uint64_t ns) {
    int (*f)(const char *, uint64_t) =
        (int (*)(const char *, uint64_t))heapledger__fn("heapledger_time_lost");
    return f ? f(kind, ns) : -1;
}

static inline int heapledger_wait_begin(const char *kind) {
    int (*f)(const char *) = (int (*)(const char *))heapledger__fn("heapledger_wait_begin");
    return f ? f(kind) : -1;
}

static inline int heapledger_wait_end(void) {
    int (*f)(void) = (int (*)(void))heapledger__fn("heapledger_wait_end");
    return f ? f() : -1;
}

/* ---- Tracebacks and time logs of the program's own (timelog.md) ----
 *
 * A thread pushes and pops frames of its own: code addresses, or labels
 * ("file.py:12 in f" is read as file, line and function). While it has
 * frames pushed, its allocations and waits are charged to them (the
 * allocation's return address, then the pushed frames, innermost first).
 * A traceback is a reference on the thread's frames as they are: frames
 * are shared, read-only and reference counted, so a snapshot costs one
 * reference and snapshots share their common outer frames; it may be
 * handed to another thread and outlives the thread that took it. Release
 * each reference you take (snapshot, retain) with
 * heapledger_traceback_release.
 *
 * A time log is the calling thread's: every time-lost event of the thread
 * (its lock waits, heapledger_time_lost*) goes to each of its logs, keyed
 * by kind, its traceback and another thread's where given, regrouped, its
 * `top` entries of most time kept. Logs are used by their own thread only.
 *
 * Push and pop look their function up once per call site (cached). */
typedef struct heapledger_traceback heapledger_traceback;
typedef struct heapledger_timelog heapledger_timelog;

struct heapledger_timelog_entry {
    char kind[64];                   /* "mutex", "condition", a kind you named */
    uint64_t count;                  /* events regrouped in the entry */
    uint64_t total_ns;
    uint64_t max_ns;
    heapledger_traceback *traceback; /* the thread's then (the entry's: valid */
    heapledger_traceback *other;     /* while it is in the log; or NULL) */
};

static char heapledger__absent;

static inline void *heapledger__cached(void **slot, const char *name) {
    void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!f) {
        f = heapledger__fn(name);
        __atomic_store_n(slot, f ? f : (void *)&heapledger__absent, __ATOMIC_RELEASE);
    }
    return f == (void *)&heapledger__absent ? 0 : f;
}

/* Pushes a frame (0, or -1); pops the last one pushed (-1 where none). */
static inline int heapledger_push_frame(const void *code) {
    static void *slot;
    int (*f)(const void *) = (int (*)(const void *))heapledger__cached(&slot, "heapledger_push_frame");
    return f ? f(code) : -1;
}

static inline int heapledger_push_label(const char *label) {
    static void *slot;
    int (*f)(const char *) = (int (*)(const char *))heapledger__cached(&slot, "heapledger_push_label");
    return f ? f(label) : -1;
}

static inline int heapledger_pop_frame(void) {
    static void *slot;
    int (*f)(void) = (int (*)(void))heapledger__cached(&slot, "heapledger_pop_frame");
    return f ? f() : -1;
}

/* A reference on the calling thread's frames (NULL where none is pushed). */
static inline heapledger_traceback *heapledger_traceback_snapshot(void) {
    heapledger_traceback *(*f)(void) =
        (heapledger_traceback * (*)(void)) heapledger__fn("heapledger_traceback_snapshot");
    return f ? f() : 0;
}

static inline heapledger_traceback *heapledger_traceback_retain(heapledger_traceback *tb) {
    heapledger_traceback *(*f)(heapledger_traceback *) =
        (heapledger_traceback * (*)(heapledger_traceback *)) heapledger__fn("heapledger_traceback_retain");
    return f ? f(tb) : tb;
}

static inline void heapledger_traceback_release(heapledger_traceback *tb) {
    void (*f)(heapledger_traceback *) =
        (void (*)(heapledger_traceback *))heapledger__fn("heapledger_traceback_release");
    if (f)
        f(tb);
}

/* The traceback under tb's frame, borrowed from tb (NULL at the outermost). */
static inline heapledger_traceback *heapledger_traceback_parent(const heapledger_traceback *tb) {
    heapledger_traceback *(*f)(const heapledger_traceback *) =
        (heapledger_traceback * (*)(const heapledger_traceback *)) heapledger__fn("heapledger_traceback_parent");
    return f ? f(tb) : 0;
}

/* tb's own frame: 0 for a code address (*code), 1 for a label (copied into
 * label, len bytes at most with its NUL), -1 for none. */
static inline int heapledger_traceback_frame(const heapledger_traceback *tb, const void **code,
                                             char *label, size_t len) {
    int (*f)(const heapledger_traceback *, const void **, char *, size_t) =
        (int (*)(const heapledger_traceback *, const void **, char *, size_t))heapledger__fn(
            "heapledger_traceback_frame");
    return f ? f(tb, code, label, len) : -1;
}

/* Frames alive in the process (pushed, or held by a snapshot or a log). */
static inline uint64_t heapledger_traceback_frames_alive(void) {
    uint64_t (*f)(void) = (uint64_t(*)(void))heapledger__fn("heapledger_traceback_frames_alive");
    return f ? f() : 0;
}

/* A log of the calling thread keeping its `top` entries (1 to 64; 0: run's
 * --waits-top); NULL without heapledger. */
static inline heapledger_timelog *heapledger_timelog_create(unsigned top) {
    heapledger_timelog *(*f)(unsigned) =
        (heapledger_timelog * (*)(unsigned)) heapledger__fn("heapledger_timelog_create");
    return f ? f(top) : 0;
}

static inline int heapledger_timelog_clear(heapledger_timelog *log) {
    int (*f)(heapledger_timelog *) = (int (*)(heapledger_timelog *))heapledger__fn("heapledger_timelog_clear");
    return f ? f(log) : -1;
}

static inline int heapledger_timelog_destroy(heapledger_timelog *log) {
    int (*f)(heapledger_timelog *) = (int (*)(heapledger_timelog *))heapledger__fn("heapledger_timelog_destroy");
    return f ? f(log) : -1;
}

/* The calling thread's logs, up to max into out: how many it has (-1
 * without heapledger). */
static inline long heapledger_timelogs(heapledger_timelog **out, size_t max) {
    long (*f)(heapledger_timelog **, size_t) =
        (long (*)(heapledger_timelog **, size_t))heapledger__fn("heapledger_timelogs");
    return f ? f(out, max) : -1;
}

/* The log's entries, most time first, up to max into out: how many it
 * holds (-1: not a log of this thread's, or no heapledger). */
static inline long heapledger_timelog_entries(heapledger_timelog *log, struct heapledger_timelog_entry *out,
                                              size_t max) {
    long (*f)(heapledger_timelog *, struct heapledger_timelog_entry *, size_t) =
        (long (*)(heapledger_timelog *, struct heapledger_timelog_entry *, size_t))heapledger__fn(
            "heapledger_timelog_entries");
    return f ? f(log, out, max) : -1;
}

/* heapledger_time_lost, with another thread's traceback (NULL: none): the
 * thread's logs keep a reference on it, the profile its frames as the
 * holder's stack. */
static inline int heapledger_time_lost_at(const char *kind, uint64_t ns, const heapledger_traceback *other) {
    int (*f)(const char *, uint64_t, const heapledger_traceback *) =
        (int (*)(const char *, uint64_t, const heapledger_traceback *))heapledger__fn("heapledger_time_lost_at");
    return f ? f(kind, ns, other) : -1;
}

#ifdef __cplusplus
}
#endif

#endif /* HEAPLEDGER_H */
