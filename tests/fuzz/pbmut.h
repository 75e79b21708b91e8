/* Structure-aware mutation of protobuf-c messages for the libFuzzer
 * harnesses (tests/fuzz/). dbx_fuzz_pb_mutate unpacks data as message type
 * d, changes one field somewhere in the tree (a scalar to a boundary or
 * random value, a string to one of the service's meaningful values or to
 * bad UTF-8, an unset submessage or oneof member created, a repeated field
 * grown or shrunk), and packs the result back into data. Returns the new
 * size, or 0 when data does not unpack as d or the result would exceed max
 * (the caller then mutates the bytes instead). Deterministic in seed.
 * Single-threaded (libFuzzer's mutator thread). */
#ifndef DBX_TESTS_FUZZ_PBMUT_H
#define DBX_TESTS_FUZZ_PBMUT_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

size_t dbx_fuzz_pb_mutate(const ProtobufCMessageDescriptor *d, uint8_t *data, size_t size, size_t max,
                          unsigned seed);

#endif
