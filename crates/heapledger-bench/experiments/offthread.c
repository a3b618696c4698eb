/* An experiment, not part of heapledger (docs/speed.md, "Bookkeeping on
 * another core"): what the least exact bookkeeping of `--stack none`
 * costs (a table of live blocks, address -> size; the level and its
 * peak; a histogram of sizes), done in the hook itself (EXP_MODE=1) or
 * handed to a thread of its own through a ring (EXP_MODE=2); EXP_MODE=0
 * only forwards. BURN adds that many empty loop turns to each event's
 * bookkeeping, as heavier bookkeeping would. One-threaded programs only.
 *
 *   gcc -O2 -DBURN=0 -shared -fPIC -o offthread.so offthread.c -ldl -lpthread
 *   cc -O2 -o varied ../workloads/varied.c
 *   time env EXP_MODE=1 LD_PRELOAD=./offthread.so ./varied 5000000
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <x86intrin.h>

static void *(*real_malloc)(size_t);
static void (*real_free)(void *);
static int mode; /* 0 forward, 1 inline, 2 ring */

/* live table: open addressing, linear probing, tombstones */
#define TBITS 15
static uint64_t *keys; static uint64_t *vals;
static int64_t level, peak; static uint64_t hist[64]; static uint64_t nalloc, nfree;
static inline uint64_t h(uint64_t a) { return (a >> 4) * 0x9E3779B97F4A7C15ull >> (64 - TBITS); }
static inline void burn(void){ for (volatile int k = 0; k < BURN; k++); }
static void book_alloc(uint64_t p, uint64_t n, uint64_t t) {
  burn();
  uint64_t i = h(p), m = (1ull << TBITS) - 1;
  while (keys[i]) i = (i + 1) & m;
  keys[i] = p; vals[i] = n | (t << 32);
  level += n; if (level > peak) peak = level;
  hist[63 - __builtin_clzll(n | 1)]++; nalloc++;
}
static void book_free(uint64_t p) {
  burn();
  uint64_t i = h(p), m = (1ull << TBITS) - 1;
  while (keys[i] != 0) {
    if (keys[i] == p) {
      level -= (uint32_t)vals[i]; nfree++;
      /* backward-shift deletion */
      uint64_t j = i;
      for (;;) {
        j = (j + 1) & m;
        if (!keys[j]) break;
        uint64_t k = h(keys[j]);
        if (((j - k) & m) >= ((j - i) & m)) { keys[i] = keys[j]; vals[i] = vals[j]; i = j; }
      }
      keys[i] = 0; return;
    }
    i = (i + 1) & m;
  }
}
/* ring */
#define RBITS 16
struct ev { uint64_t p, n; };
static struct ev *ring; static _Atomic uint64_t head; static _Atomic uint64_t tail;
static uint64_t my_head, cached_tail;
static _Atomic int stop;
static void *consumer(void *x) {
  (void)x; uint64_t t = 0;
  for (;;) {
    uint64_t hd = atomic_load_explicit(&head, memory_order_acquire);
    if (hd == t) { if (atomic_load(&stop)) break; _mm_pause(); continue; }
    while (t != hd) {
      struct ev e = ring[t & ((1 << RBITS) - 1)];
      if (e.n) book_alloc(e.p, e.n - 1, 0); else book_free(e.p);
      t++;
    }
    atomic_store_explicit(&tail, t, memory_order_release);
  }
  return 0;
}
static inline void push(uint64_t p, uint64_t n) {
  if (my_head - cached_tail >= (1 << RBITS)) {
    while (my_head - (cached_tail = atomic_load_explicit(&tail, memory_order_acquire)) >= (1 << RBITS)) _mm_pause();
  }
  ring[my_head & ((1 << RBITS) - 1)] = (struct ev){p, n};
  my_head++;
  if ((my_head & 63) == 0) atomic_store_explicit(&head, my_head, memory_order_release);
}
static pthread_t th;
__attribute__((constructor)) static void init(void) {
  real_malloc = dlsym(RTLD_NEXT, "malloc"); real_free = dlsym(RTLD_NEXT, "free");
  const char *m = getenv("EXP_MODE"); mode = m ? atoi(m) : 0;
  keys = mmap(0, 8ull << TBITS, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
  vals = mmap(0, 8ull << TBITS, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
  ring = mmap(0, sizeof(struct ev) << RBITS, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
  if (mode == 2) pthread_create(&th, 0, consumer, 0);
}
__attribute__((destructor)) static void fini(void) {
  if (mode == 2) { atomic_store_explicit(&head, my_head, memory_order_release); atomic_store(&stop, 1); pthread_join(th, 0); }
  fprintf(stderr, "exp mode %d: allocs %lu frees %lu level %ld peak %ld\n", mode, nalloc, nfree, level, peak);
}
void *malloc(size_t n) {
  void *p = real_malloc(n);
  if (p) { if (mode == 1) book_alloc((uint64_t)p, n, 0); else if (mode == 2) push((uint64_t)p, n + 1); }
  return p;
}
void free(void *p) {
  if (p) { if (mode == 1) book_free((uint64_t)p); else if (mode == 2) push((uint64_t)p, 0); }
  real_free(p);
}
