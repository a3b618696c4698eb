#include "probe.h"

volatile int lib_sink;

NOINLINE void lib_function(void (*callback)(const char *, int, int, int)) {
    callback("lib", __LINE__, 0, 0);
    lib_sink++;
}
