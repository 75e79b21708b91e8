/* Any protobuf-c message as JSON (cJSON), for --output json: field names in
 * lowerCamelCase as Temporal's JSON uses, enums by name, bytes as base64,
 * 64-bit integers as strings (as protobuf's JSON mapping does), Timestamp as
 * RFC 3339 and Duration as "1.5s". json/plain payloads are decoded into their
 * JSON value (other encodings stay base64). Unset fields are left out.
 * Returns a new cJSON tree (free with cJSON_Delete), NULL on OOM. Any thread. */
#ifndef DBX_CLI_PBJSON_H
#define DBX_CLI_PBJSON_H

#include <cjson/cJSON.h>
#include <protobuf-c/protobuf-c.h>

cJSON *dbx_pb_to_json(const ProtobufCMessage *m);

#endif
