/* Randomized call patterns for stress_stacks.rs: every allocation's stack
 * as the recorder saw it is checked against libgcc's unwinder.
 *
 * Usage: stress SEED ALLOCS_PER_THREAD THREADS OUT
 *
 * The main thread and THREADS-1 more each walk random call trees driven by
 * their own seeded PRNG until they have made ALLOCS_PER_THREAD allocations:
 * - eight noinline functions (frames of different sizes, one with alloca,
 *   direct and mutual recursion) call each other down to a random depth,
 *   sometimes return part-way and call again to another depth (same stack
 *   pointer, different callers: what stack reuse must not get wrong);
 * - `with_try` and `with_jmp` set up a catch or a setjmp target; any frame
 *   below may escape to any of them (throw through frames, longjmp out of a
 *   deep recursion), after which the walk goes on from there;
 * - raise(SIGUSR1) from any depth; the handler walks a tree of its own;
 * - some walks run with the x86 trap flag set, so that a SIGTRAP interrupts
 *   every instruction of the walk's own code (prologues, epilogues, between
 *   any two instructions); the handler allocates at some of them, through a
 *   walk of its own. Handlers nest (SIGTRAP inside the SIGUSR1 handler).
 *
 * Every allocation is `TRACE_MALLOC`, expanded in the function that calls
 * malloc: it takes libgcc's backtrace (`_Unwind_Backtrace`, recording
 * `_Unwind_GetIPInfo` and whether the IP is the interrupted instruction
 * itself, as after a signal frame) and then mallocs a size unique in the
 * run: 2^20 + slot * 2^17 + k for the k-th allocation of thread `slot`.
 * Traces go to static per-thread buffers and are written to OUT at the end:
 * one line per allocation, "SIZE TAG IP IP ...", hex, innermost first, an
 * IP followed by '*' when libgcc marks it as not a return address. TAG: 1
 * inside the SIGUSR1 handler, 2 inside the SIGTRAP handler.
 *
 * The trap flag is cleared around everything that is not the walk's own
 * code (malloc, free, the unwinder, raise, throw, longjmp): `crit` counts
 * those regions, and the SIGTRAP handler allocates only outside them, so
 * that it never interrupts malloc or libgcc. The SIGUSR1 handler runs
 * inside raise(), where allocating is safe, and clears `crit` for its own
 * walk. Prints "stress: k=v ..." counters on stdout. */
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unwind.h>

#define NOINLINE __attribute__((noinline))
#define INLINE static inline __attribute__((always_inline))

enum {
    MAX_SLOTS = 8,
    MAXF = 200,               /* frames kept per trace */
    LOG_WORDS = 1 << 20,      /* per thread */
    MAXH = 12,                /* catch/setjmp targets per walk */
    MAXD = 90,                /* deepest recursion */
    TAG_TRUNCATED = 1 << 8,   /* libgcc had more than MAXF frames */
};
/* Single-stepping costs a signal per instruction: traced walks are cut
 * after WALK_TRAPS traps, and a thread stops tracing after THREAD_TRAPS. */
#ifndef TRAP_ALLOC_EVERY
#define TRAP_ALLOC_EVERY 16 /* the trap handler allocates at ~1 trap in this */
#endif
#ifndef TRACE_WALK_EVERY
#define TRACE_WALK_EVERY 6 /* ~1 top-level walk in this runs traced */
#endif
#ifndef WALK_TRAPS
#define WALK_TRAPS 400
#endif
#ifndef THREAD_TRAPS
#define THREAD_TRAPS 4000
#endif
static const size_t BASE = (size_t)1 << 20;
static const uint32_t KMAX = 1 << 17;

struct Thr {
    uint64_t *buf;
    size_t pos;
    uint32_t slot, k;
    uint64_t trap_rng, seed, hseq, walk_traps;
    int overflow;
    /* counters */
    uint64_t allocs, usr1_allocs, trap_allocs, raises, throws, catches, longjmps, landings, traps,
        traced_walks, walks, alloca_calls;
};

static uint64_t logs[MAX_SLOTS][LOG_WORDS];
static Thr thrs[MAX_SLOTS];
static void *volatile sink;
static volatile long pad_sink;

static __thread Thr *thr;
static __thread volatile int crit;
static __thread int tf_want;
static __thread int handler_tag;

/* Set and clear the trap flag. Functions of their own, with CFI for every
 * instruction: a trap can land between pushfq and popfq, and inline asm
 * that moves the stack pointer would leave the caller's CFI wrong there. */
extern "C" void trace_on(void);
extern "C" void trace_off(void);
asm(".text\n"
    ".globl trace_on\n"
    ".type trace_on, @function\n"
    "trace_on:\n"
    ".cfi_startproc\n"
    "pushfq\n"
    ".cfi_adjust_cfa_offset 8\n"
    "orq $0x100, (%rsp)\n"
    "popfq\n"
    ".cfi_adjust_cfa_offset -8\n"
    "ret\n"
    ".cfi_endproc\n"
    ".size trace_on, .-trace_on\n"
    ".globl trace_off\n"
    ".type trace_off, @function\n"
    "trace_off:\n"
    ".cfi_startproc\n"
    "pushfq\n"
    ".cfi_adjust_cfa_offset 8\n"
    "andq $~0x100, (%rsp)\n"
    "popfq\n"
    ".cfi_adjust_cfa_offset -8\n"
    "ret\n"
    ".cfi_endproc\n"
    ".size trace_off, .-trace_off\n");

INLINE void enter_critical(void) {
    if (crit++ == 0)
        trace_off();
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

INLINE void leave_critical(void) {
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (--crit == 0 && tf_want)
        trace_on();
}

struct Cap {
    uint64_t *out;
    int n;
    int truncated;
};

static _Unwind_Reason_Code capture_frame(struct _Unwind_Context *ctx, void *arg) {
    Cap *c = (Cap *)arg;
    if (c->n == MAXF) {
        c->truncated = 1;
        return _URC_END_OF_STACK;
    }
    int before = 0;
    uint64_t ip = _Unwind_GetIPInfo(ctx, &before);
    c->out[c->n++] = ip | ((uint64_t)(before != 0) << 63);
    return _URC_NO_REASON;
}

/* Expanded in the function that calls malloc: libgcc's trace, then malloc
 * right after, so that both start in this function. */
#define TRACE_MALLOC()                                                                             \
    do {                                                                                           \
        enter_critical();                                                                          \
        Thr *t_ = thr;                                                                             \
        if (t_->pos + 3 + MAXF <= LOG_WORDS && t_->k < KMAX) {                                    \
            uint64_t *rec_ = t_->buf + t_->pos;                                                    \
            size_t size_ = BASE + ((size_t)t_->slot << 17) + t_->k++;                              \
            Cap cap_ = {rec_ + 3, 0, 0};                                                           \
            _Unwind_Backtrace(capture_frame, &cap_);                                               \
            void *p_ = malloc(size_);                                                              \
            sink = p_;                                                                             \
            rec_[0] = size_;                                                                       \
            rec_[1] = (uint64_t)handler_tag | (cap_.truncated ? TAG_TRUNCATED : 0);                \
            rec_[2] = (uint64_t)cap_.n;                                                            \
            t_->pos += 3 + (size_t)cap_.n;                                                         \
            t_->allocs++;                                                                          \
            t_->usr1_allocs += (handler_tag & 1) != 0;                                             \
            t_->trap_allocs += (handler_tag & 2) != 0;                                             \
            free(p_);                                                                              \
        } else {                                                                                   \
            t_->overflow = 1;                                                                      \
        }                                                                                          \
        leave_critical();                                                                          \
    } while (0)

enum { TRY = 1, JMP = 2 };

struct Ctx {
    uint64_t rng;
    int nh;
    int allow_raise;
    struct {
        int kind;
        jmp_buf jb;
    } h[MAXH];
};

INLINE uint32_t rnd(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return (uint32_t)((x * 0x2545F4914F6CDD1DULL) >> 32);
}

INLINE void ctx_init(Ctx *c, uint64_t seed, int allow_raise) {
    c->rng = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    if (c->rng == 0)
        c->rng = 1;
    for (int i = 0; i < 4; i++)
        rnd(&c->rng);
    c->nh = 0;
    c->allow_raise = allow_raise;
}

NOINLINE void f0(Ctx *c, int d, int target);
NOINLINE void f1(Ctx *c, int d, int target);
NOINLINE void f2(Ctx *c, int d, int target);
NOINLINE void f3(Ctx *c, int d, int target);
NOINLINE void f4(Ctx *c, int d, int target);
NOINLINE void f5(Ctx *c, int d, int target);
NOINLINE void with_try(Ctx *c, int d, int target);
NOINLINE void with_jmp(Ctx *c, int d, int target);
NOINLINE void alloc_helper(Ctx *c);

/* One call one level down, to a random function. */
INLINE void descend(Ctx *c, int d, int target) {
    if (d >= MAXD)
        return;
    switch (rnd(&c->rng) % 10) {
    case 0:
    case 1:
        f0(c, d + 1, target);
        break;
    case 2:
        f1(c, d + 1, target);
        break;
    case 3:
        f2(c, d + 1, target);
        break;
    case 4:
        f3(c, d + 1, target);
        break;
    case 5:
        f4(c, d + 1, target);
        break;
    case 6:
    case 7:
        f5(c, d + 1, target);
        break;
    case 8:
        with_try(c, d + 1, target);
        break;
    default:
        with_jmp(c, d + 1, target);
        break;
    }
}

/* To handler i (and drop the ones inside it): throw or longjmp. */
INLINE void escape(Ctx *c) {
    int i = (int)(rnd(&c->rng) % (uint32_t)c->nh);
    c->nh = i + 1;
    enter_critical();
    if (c->h[i].kind == TRY) {
        thr->throws++;
        throw i;
    }
    thr->longjmps++;
    longjmp(c->h[i].jb, 1);
}

/* One random action in the current function. */
INLINE void act(Ctx *c, int d) {
    uint32_t r = rnd(&c->rng) % 32;
    if (r < 11) {
        TRACE_MALLOC();
    } else if (r < 13) {
        alloc_helper(c);
    } else if (r == 13 && c->allow_raise) {
        thr->raises++;
        enter_critical();
        raise(SIGUSR1);
        leave_critical();
    } else if (r == 14 && c->nh > 0 && (rnd(&c->rng) % 2 == 0 || d > 40)) {
        escape(c);
    }
}

/* The body every walk function shares: actions, the call one level down
 * (sometimes a second one, to another depth, after the first returned),
 * more actions. */
#define BODY(c, d, target)                                                                         \
    do {                                                                                           \
        int pre_ = (int)(rnd(&(c)->rng) % 3);                                                      \
        for (int i_ = 0; i_ < pre_; i_++)                                                          \
            act(c, d);                                                                             \
        if ((d) < (target)) {                                                                      \
            descend(c, d, target);                                                                 \
            if (rnd(&(c)->rng) % 10 == 0)                                                          \
                descend(c, d, (d) + 1 + (int)(rnd(&(c)->rng) % 8));                                \
        }                                                                                          \
        int post_ = (int)(rnd(&(c)->rng) % 2);                                                     \
        for (int i_ = 0; i_ < post_; i_++)                                                         \
            act(c, d);                                                                             \
    } while (0)

NOINLINE void alloc_helper(Ctx *c) {
    (void)c;
    TRACE_MALLOC();
}

NOINLINE void f0(Ctx *c, int d, int target) { BODY(c, d, target); }

NOINLINE void f1(Ctx *c, int d, int target) {
    volatile long pad[3];
    pad[0] = d;
    BODY(c, d, target);
    pad_sink += pad[0];
}

NOINLINE void f2(Ctx *c, int d, int target) {
    volatile char pad[200];
    pad[d % 200] = 1;
    /* Direct recursion. */
    if (d < target && rnd(&c->rng) % 3 == 0)
        f2(c, d + 1, target);
    else
        BODY(c, d, target);
    pad_sink += pad[d % 200];
}

NOINLINE void f3(Ctx *c, int d, int target) {
    volatile long pad[1];
    pad[0] = d;
    /* Mutual recursion with f4. */
    if (d < target && rnd(&c->rng) % 2 == 0)
        f4(c, d + 1, target);
    else
        BODY(c, d, target);
    pad_sink += pad[0];
}

NOINLINE void f4(Ctx *c, int d, int target) {
    volatile char pad[512];
    pad[d] = 2;
    if (d < target && rnd(&c->rng) % 2 == 0)
        f3(c, d + 1, target);
    else
        BODY(c, d, target);
    pad_sink += pad[d];
}

NOINLINE void f5(Ctx *c, int d, int target) {
    /* A frame of random size: the CFA is not at a fixed offset from sp. */
    size_t n = 16 * (rnd(&c->rng) % 40 + 1);
    volatile char *pad = (volatile char *)__builtin_alloca(n);
    pad[0] = (char)d;
    thr->alloca_calls++;
    BODY(c, d, target);
    pad_sink += pad[0];
}

NOINLINE void with_try(Ctx *c, int d, int target) {
    if (c->nh >= MAXH) {
        BODY(c, d, target);
        return;
    }
    int me = c->nh++;
    c->h[me].kind = TRY;
    bool caught = false;
    try {
        BODY(c, d, target);
    } catch (int e) {
        if (e != me)
            throw;
        caught = true;
    }
    /* After the catch block: __cxa_end_catch (a free) is behind us. */
    if (caught) {
        thr->catches++;
        leave_critical();
    }
    c->nh = me;
}

NOINLINE void with_jmp(Ctx *c, int d, int target) {
    if (c->nh >= MAXH) {
        BODY(c, d, target);
        return;
    }
    volatile int me = c->nh++;
    c->h[me].kind = JMP;
    if (setjmp(c->h[me].jb) == 0) {
        BODY(c, d, target);
    } else {
        thr->landings++;
        leave_critical();
    }
    c->nh = me;
}

static void on_usr1(int sig) {
    (void)sig;
    int saved_crit = crit, saved_tf = tf_want, saved_tag = handler_tag;
    crit = 0;
    handler_tag |= 1;
    Ctx c;
    ctx_init(&c, thr->seed ^ (++thr->hseq << 20), 0);
    tf_want = rnd(&c.rng) % 4 == 0 && thr->traps < THREAD_TRAPS;
    uint64_t saved_walk_traps = thr->walk_traps;
    thr->walk_traps = 0;
    if (tf_want)
        trace_on();
    int target = (int)(rnd(&c.rng) % 10);
    descend(&c, 0, target);
    trace_off();
    thr->walk_traps = saved_walk_traps;
    tf_want = saved_tf;
    handler_tag = saved_tag;
    crit = saved_crit;
}

static void on_trap(int sig, siginfo_t *info, void *ucv) {
    (void)sig;
    (void)info;
    ucontext_t *uc = (ucontext_t *)ucv;
    thr->traps++;
    if (++thr->walk_traps >= WALK_TRAPS || thr->traps >= THREAD_TRAPS) {
        /* Enough: stop tracing (until the next traced walk). */
        tf_want = 0;
        uc->uc_mcontext.gregs[REG_EFL] &= ~0x100LL;
    }
    if (crit) {
        uc->uc_mcontext.gregs[REG_EFL] &= ~0x100LL;
        return;
    }
    if (rnd(&thr->trap_rng) % TRAP_ALLOC_EVERY != 0)
        return;
    int saved_tf = tf_want, saved_tag = handler_tag;
    tf_want = 0;
    handler_tag |= 2;
    Ctx c;
    ctx_init(&c, thr->seed ^ (++thr->hseq << 20), 0);
    int target = (int)(rnd(&c.rng) % 6);
    descend(&c, 0, target);
    handler_tag = saved_tag;
    tf_want = saved_tf;
}

static uint32_t per_thread;
static uint64_t seed;

static _Unwind_Reason_Code count_frame(struct _Unwind_Context *ctx, void *arg) {
    (void)ctx;
    ++*(int *)arg;
    return _URC_NO_REASON;
}

NOINLINE void run_walks(Thr *t) {
    Ctx c;
    ctx_init(&c, t->seed, 1);
    while (t->k < per_thread && !t->overflow) {
        uint32_t r = rnd(&c.rng);
        int target = (int)(r % 4 == 0 ? rnd(&c.rng) % 6 : rnd(&c.rng) % 64);
        t->walks++;
        tf_want = rnd(&c.rng) % TRACE_WALK_EVERY == 0 && t->traps < THREAD_TRAPS;
        t->walk_traps = 0;
        if (tf_want) {
            t->traced_walks++;
            trace_on();
        }
        descend(&c, 0, target);
        tf_want = 0;
        trace_off();
    }
}

static void *thread_main(void *arg) {
    Thr *t = (Thr *)arg;
    thr = t;
    int n = 0;
    _Unwind_Backtrace(count_frame, &n); /* warm-up */
    run_walks(t);
    return NULL;
}

static void write_hex(FILE *f, uint64_t v) { fprintf(f, "%llx", (unsigned long long)v); }

int main(int argc, char **argv) {
    if (argc != 5)
        return 2;
    seed = strtoull(argv[1], NULL, 0);
    per_thread = (uint32_t)strtoul(argv[2], NULL, 0);
    int threads = atoi(argv[3]);
    if (threads < 1 || threads > MAX_SLOTS || per_thread >= KMAX)
        return 2;
    /* Keep the unique sizes out of mmap: one heap, no system calls. */
    mallopt(M_MMAP_THRESHOLD, 64 << 20);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0)
        return 3;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTRAP, &sa, NULL) != 0)
        return 3;

    for (int i = 0; i < threads; i++) {
        Thr *t = &thrs[i];
        t->buf = logs[i];
        t->slot = (uint32_t)i;
        t->seed = seed * 1000003ULL + (uint64_t)i * 7919ULL + 1;
        t->trap_rng = t->seed ^ 0xA5A5A5A5DEADBEEFULL;
    }
    pthread_t tid[MAX_SLOTS];
    for (int i = 1; i < threads; i++)
        if (pthread_create(&tid[i], NULL, thread_main, &thrs[i]) != 0)
            return 4;
    thread_main(&thrs[0]);
    for (int i = 1; i < threads; i++)
        pthread_join(tid[i], NULL);

    FILE *f = fopen(argv[4], "w");
    if (!f)
        return 5;
    Thr tot;
    memset(&tot, 0, sizeof tot);
    int overflow = 0;
    for (int i = 0; i < threads; i++) {
        Thr *t = &thrs[i];
        overflow |= t->overflow;
        for (size_t pos = 0; pos < t->pos;) {
            uint64_t *rec = t->buf + pos;
            write_hex(f, rec[0]);
            fputc(' ', f);
            write_hex(f, rec[1]);
            for (uint64_t j = 0; j < rec[2]; j++) {
                uint64_t ip = rec[3 + j];
                fputc(' ', f);
                write_hex(f, ip & ~(1ULL << 63));
                if (ip >> 63)
                    fputc('*', f);
            }
            fputc('\n', f);
            pos += 3 + rec[2];
        }
        tot.allocs += t->allocs;
        tot.usr1_allocs += t->usr1_allocs;
        tot.trap_allocs += t->trap_allocs;
        tot.raises += t->raises;
        tot.throws += t->throws;
        tot.catches += t->catches;
        tot.longjmps += t->longjmps;
        tot.landings += t->landings;
        tot.traps += t->traps;
        tot.walks += t->walks;
        tot.traced_walks += t->traced_walks;
        tot.alloca_calls += t->alloca_calls;
    }
    if (fclose(f) != 0)
        return 5;
    printf("stress: allocs=%llu usr1_allocs=%llu trap_allocs=%llu raises=%llu throws=%llu "
           "catches=%llu longjmps=%llu landings=%llu traps=%llu walks=%llu traced_walks=%llu "
           "alloca_calls=%llu overflow=%d\n",
           (unsigned long long)tot.allocs, (unsigned long long)tot.usr1_allocs,
           (unsigned long long)tot.trap_allocs, (unsigned long long)tot.raises,
           (unsigned long long)tot.throws, (unsigned long long)tot.catches,
           (unsigned long long)tot.longjmps, (unsigned long long)tot.landings,
           (unsigned long long)tot.traps, (unsigned long long)tot.walks,
           (unsigned long long)tot.traced_walks, (unsigned long long)tot.alloca_calls, overflow);
    return overflow ? 6 : 0;
}
