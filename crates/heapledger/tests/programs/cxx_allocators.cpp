// C++'s every form of operator new and delete, for cxx_allocators.rs, run
// alone and with an allocator that defines its own operator new (jemalloc,
// tcmalloc, mimalloc, foreign_new.cpp) preloaded: each site's blocks must be
// recorded the same. Built with -g -O1 -fno-builtin -std=c++17.
//
//   cxx_allocators [huge]   (huge: also a new that cannot be met, caught)
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <unistd.h>

struct Widget {
    long a[6]; // 48 bytes
};

struct alignas(64) Line {
    char b[128];
};

Widget *kept;

__attribute__((noinline)) void widgets(Widget **out, int n) {
    for (int i = 0; i < n; i++)
        out[i] = new Widget(); // SITE:new
}

__attribute__((noinline)) void arrays(int **out, int n) {
    for (int i = 0; i < n; i++)
        out[i] = new int[25]; // SITE:new_array
}

__attribute__((noinline)) void lines(Line **out, int n) {
    for (int i = 0; i < n; i++)
        out[i] = new Line(); // SITE:new_aligned
}

__attribute__((noinline)) void quiet(Widget **out, int n) {
    for (int i = 0; i < n; i++)
        out[i] = new (std::nothrow) Widget(); // SITE:new_nothrow
}

__attribute__((noinline)) size_t text(int n) {
    std::string s(n, 'x'); // SITE:string
    return s.size();
}

char *volatile sink;

__attribute__((noinline)) int huge(size_t n) {
    try {
        sink = new char[n]; // SITE:huge
        return 0;
    } catch (const std::bad_alloc &) {
        return 1;
    }
}

int main(int argc, char **argv) {
    Widget *w[5];
    widgets(w, 5); // SITE:call_new
    for (int i = 0; i < 4; i++)
        delete w[i];
    kept = w[4];

    int *a[2];
    arrays(a, 2);
    for (int i = 0; i < 2; i++)
        delete[] a[i];

    Line *l[3];
    lines(l, 3);
    for (int i = 0; i < 3; i++) {
        if ((reinterpret_cast<unsigned long>(l[i]) & 63) != 0)
            return 3;
        delete l[i];
    }

    Widget *q[2];
    quiet(q, 2);
    for (int i = 0; i < 2; i++)
        delete q[i];

    if (text(100) != 100)
        return 4;

    if (argc > 1 && strcmp(argv[1], "huge") == 0 && huge((size_t)argc << 61) != 1)
        return 5;
    write(1, "cxx_allocators: done\n", 21);
    return 0;
}
