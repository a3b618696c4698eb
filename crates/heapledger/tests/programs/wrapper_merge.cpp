// Stacks that become equal once the allocator-wrapper frames are dropped,
// for exact_cxx.rs. Built with -g -O1 -fno-builtin.
//
// One call instruction in `site` reaches the allocator three ways: through
// this program's own operator new, whose malloc (even sizes) and calloc
// (odd sizes) are two distinct recorded stacks, and through malloc itself.
// Without operator new's frame all three are the same stack, `site` called
// from `main`'s loop: one entry, three allocations, 81 bytes, all alive at
// exit (one leak entry).
#include <cstdio>
#include <cstdlib>
#include <new>

typedef void *(*alloc_fn)(std::size_t);

void *operator new(std::size_t n) {
    void *p = (n & 1) ? std::calloc(1, n) : std::malloc(n);
    if (!p)
        throw std::bad_alloc();
    return p;
}
void operator delete(void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }

void *volatile sink;

__attribute__((noinline)) void *site(alloc_fn f, std::size_t n) {
    void *p = f(n); // SITE:call
    sink = p;       // keeps the call from being a tail call
    return p;
}

int main() {
    alloc_fn fns[3] = {static_cast<alloc_fn>(&::operator new),
                       static_cast<alloc_fn>(&::operator new), &std::malloc};
    std::size_t sizes[3] = {40, 17, 24};
    void *keep[3];
    for (int i = 0; i < 3; i++)
        keep[i] = site(fns[i], sizes[i]); // SITE:loop
    std::printf("wrapper_merge: %p %p %p\n", keep[0], keep[1], keep[2]);
    return 0;
}
