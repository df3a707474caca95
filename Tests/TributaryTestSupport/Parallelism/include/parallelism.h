#ifndef TRIBUTARY_TEST_PARALLELISM_H
#define TRIBUTARY_TEST_PARALLELISM_H

/// The number of tests at once that the constructor set as the test process loaded, or 0 where the environment
/// already named one.
long tributary_test_parallelism_width_set(void);

#endif
