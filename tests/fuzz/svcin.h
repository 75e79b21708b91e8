/* The input format of the service harness (fuzz_service.c), shared with its
 * seed generator (seeds.c): a sequence of up to DBX_FUZZ_SVC_MAX_CALLS
 * calls, each [method index, 1 byte][length, 2 bytes big-endian][request
 * bytes]. A short final record takes the bytes that are left. Method index
 * modulo the table's length picks a WorkflowService method (and two names
 * that are none). Task tokens of exactly one byte are placeholders the
 * harness replaces before the call: "W" = the last workflow task token a
 * poll of this input handed out, "A" = the last activity task token. */
#ifndef DBX_TESTS_FUZZ_SVCIN_H
#define DBX_TESTS_FUZZ_SVCIN_H

#include <stddef.h>

#include "protos/pb.h"

#define DBX_FUZZ_SVC_MAX_CALLS 8

typedef struct {
  const char *method;
  const ProtobufCMessageDescriptor *req, *resp;
} dbx_fuzz_svc_method;

#define DBX_FUZZ_M(name) {#name, &name##Request__D, &name##Response__D}
static const dbx_fuzz_svc_method dbx_fuzz_svc_methods[] = {
    DBX_FUZZ_M(GetSystemInfo),
    DBX_FUZZ_M(DescribeNamespace),
    DBX_FUZZ_M(ListNamespaces),
    DBX_FUZZ_M(StartWorkflowExecution),
    DBX_FUZZ_M(PollWorkflowTaskQueue),
    DBX_FUZZ_M(RespondWorkflowTaskCompleted),
    DBX_FUZZ_M(RespondWorkflowTaskFailed),
    DBX_FUZZ_M(PollActivityTaskQueue),
    DBX_FUZZ_M(RecordActivityTaskHeartbeat),
    DBX_FUZZ_M(RespondActivityTaskCompleted),
    DBX_FUZZ_M(RespondActivityTaskFailed),
    DBX_FUZZ_M(RespondActivityTaskCanceled),
    DBX_FUZZ_M(GetWorkflowExecutionHistory),
    DBX_FUZZ_M(GetWorkflowExecutionHistoryReverse),
    DBX_FUZZ_M(DescribeWorkflowExecution),
    DBX_FUZZ_M(ListWorkflowExecutions),
    DBX_FUZZ_M(CountWorkflowExecutions),
    DBX_FUZZ_M(SignalWorkflowExecution),
    DBX_FUZZ_M(SignalWithStartWorkflowExecution),
    DBX_FUZZ_M(RequestCancelWorkflowExecution),
    DBX_FUZZ_M(TerminateWorkflowExecution),
    DBX_FUZZ_M(ResetWorkflowExecution),
    DBX_FUZZ_M(QueryWorkflow),
    DBX_FUZZ_M(RespondQueryTaskCompleted),
    DBX_FUZZ_M(ShutdownWorker),
    DBX_FUZZ_M(ResetStickyTaskQueue),
    {"NoSuchMethod", &GetSystemInfoRequest__D, &GetSystemInfoResponse__D},
};
#define DBX_FUZZ_SVC_NMETHODS (sizeof dbx_fuzz_svc_methods / sizeof dbx_fuzz_svc_methods[0])

/* Index of method name in the table, or -1. */
static inline int dbx_fuzz_svc_method_index(const char *name) {
  for (size_t i = 0; i < DBX_FUZZ_SVC_NMETHODS; i++)
    if (__builtin_strcmp(dbx_fuzz_svc_methods[i].method, name) == 0) return (int)i;
  return -1;
}

#endif
