// Time lost in C++ (tests/waits.rs): std::mutex held 100 ms three times
// while the main thread waits for it (lock_it), then a condition
// variable the main thread waits on three times for 100 ms (wait_turn).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

static std::mutex m;
static std::condition_variable cv;
static int turn = 0;
static std::atomic<int> held{0};

__attribute__((noinline)) void lock_it() {
    std::lock_guard<std::mutex> g(m);
}

__attribute__((noinline)) void wait_turn(int want) {
    std::unique_lock<std::mutex> g(m);
    cv.wait(g, [want] { return turn >= want; });
}

int main() {
    std::thread t([] {
        for (int i = 0; i < 3; i++) {
            {
                std::lock_guard<std::mutex> g(m);
                held = i + 1;
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
            while (held != 0)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        for (int i = 1; i <= 3; i++) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            {
                std::lock_guard<std::mutex> g(m);
                turn = i;
            }
            cv.notify_one();
        }
    });
    for (int i = 0; i < 3; i++) {
        while (held != i + 1)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        lock_it(); /* SITE:lock */
        held = 0;
    }
    for (int i = 1; i <= 3; i++)
        wait_turn(i); /* SITE:cv */
    t.join();
    std::puts("done");
}
