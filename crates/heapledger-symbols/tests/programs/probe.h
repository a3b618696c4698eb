/* Shared by the test programs: reports return addresses and mappings on
 * stdout so that the Rust test can symbolize them after the process exited.
 *
 *   RA <tag> <return address> <line>... (innermost first, 0 = none)
 *   SYM <name> <address>
 *   MAP <start> <end> <file offset> <path>
 */
#ifndef PROBE_H
#define PROBE_H

#include <stdio.h>

#if defined(__GNUC__) && !defined(__clang__)
/* noipa: keep GCC from cloning/specializing (foo.constprop.0, ...). */
#define NOINLINE __attribute__((noinline, noipa))
#else
#define NOINLINE __attribute__((noinline))
#endif

#ifdef __cplusplus
extern "C" {
#endif

extern volatile int sink;

/* Prints the address its caller will return to, i.e. the instruction after
 * the call to probe(): minus one, that is the call site. The lines are the
 * expected source lines of that address, from the innermost inlined frame
 * to the containing function. */
NOINLINE void probe(const char *tag, int line, int outer_line, int outermost_line);

void print_maps(void);

#ifdef __cplusplus
}
#endif

#endif
