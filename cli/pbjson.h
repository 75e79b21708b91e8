/* Protobuf-c messages as JSON and back (cJSON), Temporal's JSON mapping.
 *
 * dbx_pb_to_json, for --output json: field names in lowerCamelCase as
 * Temporal's JSON uses, enums by name, bytes as base64, 64-bit integers as
 * strings (as protobuf's JSON mapping does), Timestamp as RFC 3339 and
 * Duration as "1.5s". json/plain payloads are decoded into their JSON value
 * (other encodings stay base64). Unset fields are left out. Returns a new
 * cJSON tree (free with cJSON_Delete), NULL on OOM. Any thread. */
#ifndef DBX_CLI_PBJSON_H
#define DBX_CLI_PBJSON_H

#include <stddef.h>

#include <cjson/cJSON.h>
#include <protobuf-c/protobuf-c.h>

#include "base/err.h"
#include "protos/pb.h"

cJSON *dbx_pb_to_json(const ProtobufCMessage *m);

/* Temporal's JSON history document {"events": [...]} of events[0..n) (the
 * form `temporal workflow show --output json` prints and the SDKs' replayers
 * read): as dbx_pb_to_json, with map fields as JSON objects; raw_payloads 1
 * writes every payload as {"metadata": {...}, "data": base64}, 0 writes
 * json/plain payloads in Temporal's shorthand (the JSON value itself).
 * New tree (cJSON_Delete), NULL on OOM. Any thread. */
cJSON *dbx_pb_history_to_json(HistoryEvent *const *events, size_t n, int raw_payloads);

/* The message of type d that JSON value j describes (Temporal's JSON mapping:
 * camelCase or proto field names, enums by full or short name or number,
 * 64-bit integers as strings or numbers, bytes base64, payloads in either
 * form; unknown fields and nulls are skipped). NULL on bad input, with
 * "path: problem" in err[0..cap) (e.g. "events[2].eventId: expected a 64-bit
 * integer"); free the result with protobuf_c_message_free_unpacked(m, NULL).
 * Any thread; nesting deeper than 48 messages is refused. */
ProtobufCMessage *dbx_pb_from_json(const ProtobufCMessageDescriptor *d, const cJSON *j, char *err, size_t cap);

/* Import a JSON history text[0..len) (exported by `durabox workflow show
 * --output json` or Temporal's CLI): *out the events (n_out of them, free
 * with dbx_pb_history_free), ids 1..n in order, the first
 * WorkflowExecutionStarted, each with the attributes of its type. DBX_OK;
 * DBX_EINVAL with *err (malloc'd) naming the problem and where; DBX_ENOMEM.
 * Never crashes on any input. Any thread. */
dbx_err dbx_pb_history_from_json(const char *text, size_t len, HistoryEvent ***out, size_t *n_out, char **err);
void dbx_pb_history_free(HistoryEvent **events, size_t n);

#endif
