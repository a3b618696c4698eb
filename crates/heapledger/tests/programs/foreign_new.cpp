// An allocator that defines its own operator new and delete, reaching its
// memory without a call of malloc (glibc's __libc_ functions here), as
// jemalloc's, tcmalloc's and mimalloc's do, for cxx_allocators.rs. Its
// malloc family is the same memory. Preloaded after heapledger.
#include <cstddef>
#include <new>

extern "C" {
void *__libc_malloc(size_t);
void __libc_free(void *);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);

void *malloc(size_t n) noexcept { return __libc_malloc(n); }
void free(void *p) noexcept { __libc_free(p); }
void *calloc(size_t n, size_t m) noexcept { return __libc_calloc(n, m); }
void *realloc(void *p, size_t n) noexcept { return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) noexcept { return __libc_memalign(a, n); }
}

static void *get(size_t n) {
    void *p = __libc_malloc(n);
    if (!p)
        throw std::bad_alloc();
    return p;
}

static void *get_aligned(size_t n, std::align_val_t a) {
    void *p = __libc_memalign(static_cast<size_t>(a), n);
    if (!p)
        throw std::bad_alloc();
    return p;
}

void *operator new(size_t n) { return get(n); }
void *operator new[](size_t n) { return get(n); }
void *operator new(size_t n, const std::nothrow_t &) noexcept { return __libc_malloc(n); }
void *operator new[](size_t n, const std::nothrow_t &) noexcept { return __libc_malloc(n); }
void *operator new(size_t n, std::align_val_t a) { return get_aligned(n, a); }
void *operator new[](size_t n, std::align_val_t a) { return get_aligned(n, a); }
void operator delete(void *p) noexcept { __libc_free(p); }
void operator delete[](void *p) noexcept { __libc_free(p); }
void operator delete(void *p, size_t) noexcept { __libc_free(p); }
void operator delete[](void *p, size_t) noexcept { __libc_free(p); }
void operator delete(void *p, std::align_val_t) noexcept { __libc_free(p); }
void operator delete[](void *p, std::align_val_t) noexcept { __libc_free(p); }
void operator delete(void *p, size_t, std::align_val_t) noexcept { __libc_free(p); }
void operator delete[](void *p, size_t, std::align_val_t) noexcept { __libc_free(p); }
