/* Helpers for the service integration tests (tests/it_svc_*.c): typed
 * WorkflowService calls over rpc/, a fake workflow worker's moves, history
 * reads, and spawned `durabox server start-dev` processes.
 *
 * Every helper that "expects" something fails the current cmocka test
 * (fail_msg / assert_*) when it does not happen; the ones that return a gRPC
 * status leave the judging to the caller. Namespace is always "default".
 * Returned protobuf messages are unpacked replies: free with
 * protobuf_c_message_free_unpacked(&m->base, NULL). Single-threaded use. */
#ifndef DBX_TESTS_SVC_CLIENT_H
#define DBX_TESTS_SVC_CLIENT_H

#include "tests/testutil.h"

#include <sys/types.h>

#include "rpc/rpc.h"
#include "protos/pb.h"
#include "service/service.h"

/* ------------------------------------------------------------ in-process service */

/* A test group's embedded service, started in this process, and a channel
 * to it. */
typedef struct {
  dbx_service *svc;
  dbx_rpc_channel *ch;
} dbx_svct_fixture;

/* For a cmocka group setup: dbx_rpc_global_init, dbx_service_start with o
 * (borrowed) and dbx_svct_connect. Returns 0 with *out (release with
 * dbx_svct_fixture_stop), or -1 after printing why on stderr. */
int dbx_svct_fixture_start(const dbx_service_opts *o, dbx_svct_fixture **out);
/* Channel, service, the struct, then dbx_rpc_global_shutdown. Accepts NULL. */
void dbx_svct_fixture_stop(dbx_svct_fixture *f);

/* ------------------------------------------------------------ calls */

/* Channel to 127.0.0.1:port; waits (wait_for_ready, up to 15 s) until
 * GetSystemInfo answers OK. Free with dbx_rpc_channel_destroy. */
dbx_rpc_channel *dbx_svct_connect(int port);

/* Pack req, call method, and when the status is OK unpack the reply with
 * resp_d into *resp (may be NULL to drop it). raw: when not NULL receives the
 * whole result (zero it first; release with dbx_rpc_result_cleanup).
 * Returns the gRPC status. Fails the test on a transport error or a reply
 * that does not decode. */
int dbx_svct_call(dbx_rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                  const ProtobufCMessageDescriptor *resp_d, int64_t timeout_ms, void **resp,
                  dbx_rpc_result *raw);

/* Type URL of the first Any in the result's grpc-status-details-bin
 * (google.rpc.Status), malloc'd; NULL when there are no details or they do
 * not decode. */
char *dbx_svct_detail_type_url(const dbx_rpc_result *r);
/* 1 when s ends with suffix. */
int dbx_svct_ends_with(const char *s, const char *suffix);

/* ------------------------------------------------------------ workflows */

/* StartWorkflowExecution of type "it.Workflow"; expects OK. Returns the run
 * id, malloc'd. */
char *dbx_svct_workflow_start(dbx_rpc_channel *ch, const char *workflow_id, const char *task_queue);
/* CountWorkflowExecutions with an empty query; expects OK. */
int64_t dbx_svct_workflow_count(dbx_rpc_channel *ch);
/* DescribeWorkflowExecution; expects OK. Returns the status (WS(...)). */
int dbx_svct_workflow_status(dbx_rpc_channel *ch, const char *workflow_id, const char *run_id);

/* ------------------------------------------------------------ worker moves */

/* PollWorkflowTaskQueue / PollActivityTaskQueue with a client deadline of
 * timeout_ms; expects OK. The reply has an empty task_token when no task
 * came. */
PollWorkflowTaskQueueResponse *dbx_svct_wft_poll(dbx_rpc_channel *ch, const char *task_queue,
                                                 int64_t timeout_ms);
PollActivityTaskQueueResponse *dbx_svct_activity_poll(dbx_rpc_channel *ch, const char *task_queue,
                                                      int64_t timeout_ms);

/* RespondWorkflowTaskCompleted with one command; each expects OK. */
/* ScheduleActivityTask "it.Activity" on task_queue, start_to_close_s
 * seconds, no schedule_to_start / heartbeat timeout; max_attempts 0 = the
 * default retry policy. */
void dbx_svct_wft_schedule_activity(dbx_rpc_channel *ch, ProtobufCBinaryData token,
                                    const char *activity_id, const char *task_queue,
                                    int64_t start_to_close_s, int max_attempts);
void dbx_svct_wft_start_timer(dbx_rpc_channel *ch, ProtobufCBinaryData token, const char *timer_id,
                              int64_t seconds);
void dbx_svct_wft_complete_workflow(dbx_rpc_channel *ch, ProtobufCBinaryData token);

/* RespondActivityTaskCompleted with a small result. Returns the status;
 * raw as in dbx_svct_call. */
int dbx_svct_activity_complete(dbx_rpc_channel *ch, ProtobufCBinaryData token, dbx_rpc_result *raw);

/* ------------------------------------------------------------ history */

typedef struct {
  HistoryEvent **events; /* borrowed from pages */
  size_t n;
  GetWorkflowExecutionHistoryResponse **pages;
  size_t n_pages;
} dbx_svct_history;

/* Whole history of a run (all pages); expects OK. Release with
 * dbx_svct_history_cleanup. */
void dbx_svct_history_get(dbx_rpc_channel *ch, const char *workflow_id, const char *run_id,
                          dbx_svct_history *h);
void dbx_svct_history_cleanup(dbx_svct_history *h);
/* Number of events of type (ET(...)). */
size_t dbx_svct_history_count(const dbx_svct_history *h, int event_type);
/* Long-polls the history (wait_new_event) until an event of type appears or
 * timeout_ms passes. Returns 1 when it appeared, 0 otherwise. */
int dbx_svct_history_wait_for(dbx_rpc_channel *ch, const char *workflow_id, const char *run_id,
                              int event_type, int64_t timeout_ms);

/* ------------------------------------------------------------ results */

struct dbx_client;
/* Long-poll the close event of (workflow_id, run_id) through the worker's
 * client, up to `polls` polls of 10 s each; expects WorkflowExecutionCompleted
 * and returns its result JSON (malloc'd), failing the test otherwise. */
char *dbx_svct_await_result(struct dbx_client *c, const char *workflow_id, const char *run_id, int polls);

/* ------------------------------------------------------------ processes */

/* A port that was free a moment ago (bind 127.0.0.1:0, read it, close). */
int dbx_svct_free_port(void);
/* Spawn `$DBX_BIN server start-dev --port port --db-filename db_dir
 * --log-level warn` with stdout and stderr to /dev/null; the child dies with
 * this process (PR_SET_PDEATHSIG). Registered for dbx_svct_server_kill_all. */
pid_t dbx_svct_server_spawn(const char *db_dir, int port);
/* SIGKILL and reap one spawned server; returns its wait status. */
int dbx_svct_server_kill(pid_t pid);
/* SIGKILL and reap every spawned server still registered (group teardown). */
void dbx_svct_server_kill_all(void);

/* Any child process of the test (durabox worker, dev, run, workflow ...).
 * argv[0] is the program's path. env: NULL-terminated overrides of this
 * process's environment, "K=V" sets K, a bare "K" removes it (may be NULL).
 * stdout/stderr go to out_path/err_path (created/truncated; NULL =
 * /dev/null). The child dies with this process (PR_SET_PDEATHSIG) and stays
 * registered until waited for or killed, so dbx_svct_proc_kill_all in a
 * teardown reaps it even after a failed assertion. */
pid_t dbx_svct_proc_spawn(char *const argv[], char *const env[], const char *out_path,
                          const char *err_path);
/* Wait up to timeout_ms for pid to exit. Returns its exit status, or 128 +
 * the signal that ended it. On timeout kills it and fails the test. */
int dbx_svct_proc_wait(pid_t pid, int64_t timeout_ms);
/* Send sig to a registered child; with SIGKILL also reap it and return its
 * wait status (else 0). */
int dbx_svct_proc_kill(pid_t pid, int sig);
/* SIGKILL and reap every registered child (teardown). */
void dbx_svct_proc_kill_all(void);
/* Run argv to completion (timeout_ms, see dbx_svct_proc_wait) and return
 * its exit status; *out and *err (either may be NULL) receive its stdout and
 * stderr, malloc'd and NUL-terminated. */
int dbx_svct_proc_run(char *const argv[], char *const env[], int64_t timeout_ms, char **out,
                      char **err);
/* Whole file as a malloc'd NUL-terminated string, NULL when unreadable. */
char *dbx_svct_file_read(const char *path);
/* Write text to path (truncating); fails the test on error. */
void dbx_svct_file_write(const char *path, const char *text);

#endif
