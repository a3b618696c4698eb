# Four threads doing allocation-heavy work; the result is deterministic.
import threading

def work(n, out, i):
    d = {}
    for k in range(5000 * n):
        d[str(k * n)] = [k] * (k % 7)
    out[i] = sum(len(v) for v in d.values()) + len(d)

results = [None] * 4
threads = [threading.Thread(target=work, args=(n + 1, results, n)) for n in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("results:", results)
print("total:", sum(results))
