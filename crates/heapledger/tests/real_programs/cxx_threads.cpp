// std::thread x4 and exceptions: each worker throws and catches exceptions of
// its own, and the last exception of each worker crosses to the main thread
// through std::exception_ptr and is rethrown there. Output is printed by main
// only, after joining, so it is deterministic.
#include <exception>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <cstdio>

struct WorkerError : std::runtime_error {
    int id;
    WorkerError(int id, const std::string &what) : std::runtime_error(what), id(id) {}
};

static long work(int id, int rounds) {
    long caught = 0;
    for (int r = 0; r < rounds; r++) {
        try {
            std::vector<std::string> v;
            for (int i = 0; i < 50; i++) v.push_back(std::to_string(id * 1000 + i));
            if (r % 3 == 0) throw WorkerError(id, "round " + std::to_string(r));
            if (r % 3 == 1) throw std::out_of_range(v.at(0));
            (void)v.at(1000);  // throws std::out_of_range
        } catch (const WorkerError &e) {
            caught += e.id;
        } catch (const std::out_of_range &) {
            caught += 1;
        }
    }
    return caught;
}

int main() {
    const int n = 4;
    std::vector<long> results(n);
    std::vector<std::exception_ptr> errors(n);
    std::vector<std::thread> threads;
    for (int t = 0; t < n; t++) {
        threads.emplace_back([t, &results, &errors] {
            results[t] = work(t, 300);
            try {
                auto m = std::make_unique<std::map<int, std::string>>();
                (*m)[t] = "worker " + std::to_string(t);
                throw WorkerError(t, (*m)[t] + " finished");
            } catch (...) {
                errors[t] = std::current_exception();
            }
        });
    }
    for (auto &th : threads) th.join();
    for (int t = 0; t < n; t++) {
        try {
            std::rethrow_exception(errors[t]);
        } catch (const WorkerError &e) {
            std::printf("thread %d: caught %ld, then \"%s\" (id %d)\n", t, results[t], e.what(), e.id);
        }
    }
    try {
        throw std::logic_error("main thread");
    } catch (const std::exception &e) {
        std::printf("main: %s\n", e.what());
    }
    return 0;
}
