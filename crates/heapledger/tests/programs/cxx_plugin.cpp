// A C++ plugin for cxx_plugin_host.c, which opens it into a scope of its
// own: its libstdc++ is not in the program's global scope, so heapledger's
// operator new finds the definition it forwards to there (cxx_allocators.rs).
#include <string>
#include <vector>

extern "C" long plugin_work(int n) {
    std::vector<std::string *> v;
    v.reserve(n);
    for (int i = 0; i < n; i++)
        v.push_back(new std::string(40 + i, 'y')); // SITE:plugin_new
    long s = 0;
    for (auto *p : v) {
        s += p->size();
        delete p;
    }
    return s;
}
