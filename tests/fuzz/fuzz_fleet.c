/* libFuzzer harness: the Fleet input check (workflows/fleet.h,
 * dbx_fleet_validate), what `durabox fleet` and the Fleet workflow check
 * before any child starts: the items, their keys, the template (a Script
 * input). fuzz_script.c with the Fleet check in place of the Script one:
 * the same verdict rules. */
#define DBX_FUZZ_FLEET 1
#include "tests/fuzz/fuzz_script.c"
