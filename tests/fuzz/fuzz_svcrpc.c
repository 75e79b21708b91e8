/* libFuzzer harness: fuzz_service.c end to end, each call over loopback
 * through rpc/ and gRPC as a client's is (the server loop and gRPC's framing
 * fuzzed too), where fuzz_service hands the calls to the service
 * in-process. Same inputs (corpus/svcrpc holds a share of
 * corpus/service's seeds), same checks. */
#define DBX_FUZZ_SVC_RPC 1
#include "tests/fuzz/fuzz_service.c"
