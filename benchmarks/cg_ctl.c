/*
 * cg_ctl -- callgrind client requests for Python (ctypes), so that
 * bench_callgrind.py can count the instructions of one loop only:
 * start instrumentation after `import torch`, zero the counters, run the
 * loop, dump.  Outside valgrind every call is a no-op.
 */
#include <valgrind/callgrind.h>

__attribute__((visibility("default"))) void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
__attribute__((visibility("default"))) void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
__attribute__((visibility("default"))) void cg_zero(void) { CALLGRIND_ZERO_STATS; }
__attribute__((visibility("default"))) void cg_dump(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }
__attribute__((visibility("default"))) void cg_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
