// How many tests the testing library runs at once, set as the test process loads.
//
// Swift Testing starts every test at once unless told otherwise. Synchronous tests hold one of the Swift
// concurrency pool's threads (as many as the machine has cores) until they end, and every asynchronous test's next
// step waits behind them: on a machine of 2 cores, hundreds of quick synchronous tests queued ahead stalled the sync
// tests' connections for minutes, past their time bounds. With at most three tests per core running, the suite
// takes about as long, and every test advances.
//
// The testing library reads SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH when it starts, after this runs. A value
// already in the environment is kept.
#include "parallelism.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long width_set = 0;

__attribute__((constructor)) static void tributary_limit_test_parallelism(void) {
    if (getenv("SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH") != NULL) return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    long width = cores * 3;
    if (width < 4) width = 4;
    char value[32];
    snprintf(value, sizeof value, "%ld", width);
    if (setenv("SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH", value, 0) == 0) width_set = width;
}

long tributary_test_parallelism_width_set(void) { return width_set; }
