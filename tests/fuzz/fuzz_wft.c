/* libFuzzer harness: payload and failure decoding in the worker. The input
 * is a packed PollWorkflowTaskQueueResponse (Temporal: the reply to
 * PollWorkflowTaskQueue), its history and queries from the fuzzer; it goes
 * through the worker's task path without the network,
 * dbx_wft_answer_build_ (worker/wft.h), as worker.c's process_wft calls it,
 * for the built-in workflow type it names (durabox.Script when it names none
 * known: the payload, failure and JSON decoding of the workflow code is what
 * is under test; an unknown name is also tried once per input, the
 * not-registered path). The task must be answered (a completion) or failed
 * (a RespondWorkflowTaskFailed with a message), the answer must pack, and
 * nothing may crash; DBX_ENOMEM is the one error without an answer.
 * Structure-aware: LLVMFuzzerCustomMutator changes fields of the unpacked
 * task (pbmut.h) half the time, so valid histories from the seed corpus
 * (tests/fuzz/seeds.c) stay valid while their payloads and failures change. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "protos/pb.h"
#include "tests/fuzz/pbmut.h"
#include "worker/wft.h"
#include "workflows/builtin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max, unsigned seed);
int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  dbx_log_set_level(DBX_LOG_OFF);
  return 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max, unsigned seed) {
  if (seed % 2) {
    size_t n = dbx_fuzz_pb_mutate(&PollWorkflowTaskQueueResponse__D, data, size, max, seed);
    if (n) return n;
  }
  return LLVMFuzzerMutate(data, size, max);
}

static void answer_one(const dbx_workflow_type *type, const PollWorkflowTaskQueueResponse *t) {
  HistoryEvent *const *evs = t->history ? t->history->events : NULL;
  size_t n = t->history ? t->history->n_events : 0;
  dbx_wf_run *run = NULL;
  dbx_wft_answer_ a;
  dbx_err rc = dbx_wft_answer_build_(type, t, evs, n, "default", "fuzz-worker", &run, &a);
  if (rc == DBX_OK) {
    if (a.failed && (a.failed_rq.failure == NULL || a.failed_rq.failure->message == NULL)) abort();
    size_t len = 0;
    uint8_t *packed = dbx_pb_pack(a.failed ? &a.failed_rq.base : &a.completed.base, &len);
    free(packed);
    if (!a.failed && run) {
      /* the cached path: the same task again through the run it left */
      dbx_wft_answer_ b;
      if (dbx_wft_answer_build_(type, t, evs, n, "default", "fuzz-worker", &run, &b) == DBX_OK) {
        packed = dbx_pb_pack(b.failed ? &b.failed_rq.base : &b.completed.base, &len);
        free(packed);
      }
      dbx_wft_answer_cleanup_(&b);
    }
  } else if (rc != DBX_ENOMEM) {
    abort(); /* no answer: the task would time out and be retried forever */
  }
  dbx_wft_answer_cleanup_(&a);
  dbx_wf_run_destroy(run);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  PollWorkflowTaskQueueResponse *t =
      (PollWorkflowTaskQueueResponse *)protobuf_c_message_unpack(&PollWorkflowTaskQueueResponse__D, NULL, size, data);
  if (!t) return 0;
  const dbx_workflow_type *type =
      dbx_workflows_builtin_find(t->workflow_type ? t->workflow_type->name : NULL);
  answer_one(type ? type : dbx_workflows_builtin[0], t);
  if (!type && size % 8 == 0) answer_one(NULL, t);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  return 0;
}
