/* worker/wft.h: internal to worker/ and its tests. The task paths without
 * the network: a polled workflow task and its full history in, the request
 * that answers it out; an activity outcome in, its report out. worker.c's process_wft records the history,
 * takes the run from its cache, calls this and sends what it built; the
 * tests (tests/test_worker_oom.c) call it directly.
 *
 * Thread safety: one thread per run (as replay.h); type is only read. */
#ifndef DBX_WORKER_WFT_H
#define DBX_WORKER_WFT_H

#include <stddef.h>

#include "base/err.h"
#include "protos/pb.h"
#include "worker/api.h"
#include "worker/replay.h"

typedef struct {
  int failed;           /* 0: send `completed`; 1: send `failed_rq` */
  int nondeterministic; /* failed_rq's cause is NON_DETERMINISTIC_ERROR */
  RespondWorkflowTaskCompletedRequest completed; /* Temporal: RespondWorkflowTaskCompleted */
  RespondWorkflowTaskFailedRequest failed_rq;    /* Temporal: RespondWorkflowTaskFailed */
  /* owned by the answer: */
  Failure failure_;
  ApplicationFailureInfo info_;
  Command **cmds_;
  size_t ncmds_;
  ProtocolMessage **msgs_; /* update acceptances, rejections, responses */
  size_t nmsgs_;
  void *qres_;
  size_t nqres_;
  char *msg_;
} dbx_wft_answer_;

/* Replay t's history (evs, borrowed; every page, oldest first) through *run
 * (a cached run, or NULL for a fresh one; on return the run used, or NULL)
 * and build the answer: the commands and query results to complete the
 * task with, or the failure (type not registered, non-determinism, a replay
 * error). Strings in *out are borrowed from t, ns, identity and *run: keep
 * them until out is cleaned up. Cache *run afterwards only when the answer
 * is a completion that the service accepted; otherwise destroy it.
 * Returns DBX_OK (*out filled); DBX_ENOMEM or another error from creating
 * the run, listing its commands or answering queries: no answer at all (the
 * task times out and is retried), *out needs no cleanup but accepts it. */
dbx_err dbx_wft_answer_build_(const dbx_workflow_type *type, const PollWorkflowTaskQueueResponse *t,
                              HistoryEvent *const *evs, size_t n, const char *ns,
                              const char *identity, dbx_wf_run **run, dbx_wft_answer_ *out);
void dbx_wft_answer_cleanup_(dbx_wft_answer_ *a); /* accepts a zeroed or built answer */

/* The report of an activity attempt's outcome, as worker.c's report()
 * sends it. kind: 0 completed (res->result_json, NULL = null), 1 failed
 * (res's failure), 2 canceled (res unused). */
typedef struct {
  ProtobufCMessage *req;                 /* one of the requests below */
  const char *method;                    /* "RespondActivityTaskCompleted" ... */
  const ProtobufCMessageDescriptor *resp; /* its response type */
  RespondActivityTaskCompletedRequest completed_;
  RespondActivityTaskFailedRequest failed_;
  RespondActivityTaskCanceledRequest canceled_;
  Failure failure_;
  ApplicationFailureInfo info_;
  Payloads *result_; /* owned */
} dbx_act_report_;

/* task_token, ns, identity and res's strings are borrowed until cleanup.
 * Returns DBX_OK, DBX_ENOMEM (no report; *out needs no cleanup). */
dbx_err dbx_act_report_build_(ProtobufCBinaryData task_token, const char *ns, const char *identity,
                              int kind, const dbx_act_result *res, dbx_act_report_ *out);
void dbx_act_report_cleanup_(dbx_act_report_ *r); /* accepts a zeroed or built report */

#endif
