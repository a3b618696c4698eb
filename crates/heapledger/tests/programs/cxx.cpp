// C++: operator new, new[], delete, and a thrown and caught exception, for
// exact_cxx.rs. Built with -g -O1 -fno-builtin. No iostream.
#include <cstdio>
#include <unistd.h>

struct Widget {
    long a[6]; // 48 bytes
};

struct Boom {
    long code[8]; // 64 bytes
};

Widget *leaked;

__attribute__((noinline)) void make_widgets(Widget **out, int n) {
    for (int i = 0; i < n; i++)
        out[i] = new Widget(); // SITE:new
}

__attribute__((noinline)) void make_arrays(int **out, int n) {
    for (int i = 0; i < n; i++)
        out[i] = new int[25]; // SITE:new_array
}

__attribute__((noinline)) void thrower(int i) {
    if (i >= 0)
        throw Boom{{i + 1}}; // SITE:throw
}

__attribute__((noinline)) long catcher(int i) {
    try {
        thrower(i); // SITE:catch_call
    } catch (const Boom &b) {
        return b.code[0];
    }
    return -1;
}

int main() {
    Widget *w[5];
    make_widgets(w, 5); // SITE:call_new
    for (int i = 0; i < 4; i++)
        delete w[i];
    leaked = w[4];

    int *a[2];
    make_arrays(a, 2); // SITE:call_new_array
    for (int i = 0; i < 2; i++)
        delete[] a[i];

    long sum = 0;
    for (int i = 0; i < 3; i++)
        sum += catcher(i);
    if (sum != 6)
        return 2;
    write(1, "cxx: done\n", 10);
    return 0;
}
