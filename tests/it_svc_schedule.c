/* Integration tests of schedules (Temporal: CreateSchedule ...
 * ListScheduleMatchingTimes) on the embedded service through real gRPC, and
 * on the real `durabox server start-dev` process for the restart:
 * - an interval schedule (ALLOW_ALL) starts workflows on its whole-second
 *   times with Temporal's ids <workflow id>-<RFC 3339 nominal time>, the
 *   search attributes TemporalScheduledById / TemporalScheduledStartTime, and
 *   Describe reports them (recent actions, running, future times 1 s apart);
 *   List shows it, Delete removes it (NOT_FOUND after, no further starts);
 * - SKIP: while the started workflow runs, the next times are counted as
 *   overlap_skipped and start nothing; once it is terminated the next time
 *   starts again;
 * - cron strings, a calendar, a fixed-offset time zone: the matching times
 *   of a week; bad specs and unknown time zones are INVALID_ARGUMENT;
 * - pause (no actions, notes), trigger (starts even while paused),
 *   unpause, the limit of remaining actions;
 * - overlap BUFFER_ONE / BUFFER_ALL / TERMINATE_OTHER / CANCEL_OTHER;
 *   backfill of a past range; UpdateSchedule with its conflict token; List
 *   paging; jitter (deterministic, within bounds); leap day, Sunday as 7;
 * - IANA time zones from the system's database: offsets across DST
 *   changes, a skipped and a repeated clock time, the zone's rule after its
 *   listed transitions; bounds on what a spec may hold;
 * - every allocation of a create (with a triggered start) failed in turn:
 *   a refused call leaves nothing, a successful one all;
 * - catch-up: the times that passed while the service process was killed
 *   are taken after it restarts on the same LMDB store, and those older
 *   than the catch-up window are counted missed instead. */
#include "tests/svc_client.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "temporal/api/schedule/v1/message.pb-c.h"
#include "temporal/api/workflowservice/v1/request_response_schedule.pb-c.h"

#define P(x) Temporal__Api__Schedule__V1__##x
#define W(x) Temporal__Api__Workflowservice__V1__##x
#define PI(x) TEMPORAL__API__SCHEDULE__V1__##x
#define WI(x) TEMPORAL__API__WORKFLOWSERVICE__V1__##x
#define OV(x) TEMPORAL__API__ENUMS__V1__SCHEDULE_OVERLAP_POLICY__SCHEDULE_OVERLAP_POLICY_##x
#define TQ "it-sched"

typedef dbx_svct_fixture fixture;

static int group_setup(void **state) {
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.no_sync = 1;
  return dbx_svct_fixture_start(&o, (dbx_svct_fixture **)state);
}

static int group_teardown(void **state) {
  dbx_svct_fixture_stop(*state);
  dbx_svct_server_kill_all();
  return 0;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------ calls */

typedef struct {
  const char *id, *workflow_id;
  int64_t interval_s;       /* 0 = none */
  const char *cron;         /* NULL = none */
  P(CalendarSpec) *calendar;
  const char *tz;
  int overlap;
  int paused;
  const char *notes;
  int64_t remaining;        /* > 0: limited actions */
  int64_t catchup_s;
  const char *request_id;   /* NULL = the schedule id */
} sched_args;

static int create(dbx_rpc_channel *ch, const sched_args *a, dbx_rpc_result *raw) {
  W(CreateScheduleRequest) q = WI(CREATE_SCHEDULE_REQUEST__INIT);
  P(Schedule) s = PI(SCHEDULE__INIT);
  P(ScheduleSpec) spec = PI(SCHEDULE_SPEC__INIT);
  P(IntervalSpec) iv = PI(INTERVAL_SPEC__INIT);
  P(IntervalSpec) *ivs[1] = {&iv};
  Duration every;
  char *crons[1] = {(char *)a->cron};
  P(CalendarSpec) *cals[1] = {a->calendar};
  P(ScheduleAction) act = PI(SCHEDULE_ACTION__INIT);
  Temporal__Api__Workflow__V1__NewWorkflowExecutionInfo nw = TEMPORAL__API__WORKFLOW__V1__NEW_WORKFLOW_EXECUTION_INFO__INIT;
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  P(SchedulePolicies) pol = PI(SCHEDULE_POLICIES__INIT);
  P(ScheduleState) st = PI(SCHEDULE_STATE__INIT);
  Duration cw;
  q.namespace_ = "default";
  q.schedule_id = (char *)a->id;
  q.request_id = (char *)(a->request_id ? a->request_id : a->id);
  q.schedule = &s;
  s.spec = &spec;
  if (a->interval_s) {
    dbx_pb_duration_init_ms(&every, a->interval_s * 1000);
    iv.interval = &every;
    spec.interval = ivs;
    spec.n_interval = 1;
  }
  if (a->cron) {
    spec.cron_string = crons;
    spec.n_cron_string = 1;
  }
  if (a->calendar) {
    spec.calendar = cals;
    spec.n_calendar = 1;
  }
  if (a->tz) spec.timezone_name = (char *)a->tz;
  s.action = &act;
  act.action_case = TEMPORAL__API__SCHEDULE__V1__SCHEDULE_ACTION__ACTION_START_WORKFLOW;
  act.start_workflow = &nw;
  nw.workflow_id = (char *)a->workflow_id;
  wt.name = "it.Workflow";
  nw.workflow_type = &wt;
  tq.name = TQ;
  nw.task_queue = &tq;
  s.policies = &pol;
  pol.overlap_policy = a->overlap;
  if (a->catchup_s) {
    dbx_pb_duration_init_ms(&cw, a->catchup_s * 1000);
    pol.catchup_window = &cw;
  }
  s.state = &st;
  st.paused = a->paused;
  st.notes = (char *)(a->notes ? a->notes : "");
  st.limited_actions = a->remaining > 0;
  st.remaining_actions = a->remaining;
  return dbx_svct_call(ch, "CreateSchedule", &q.base, &temporal__api__workflowservice__v1__create_schedule_response__descriptor,
                       5000, NULL, raw);
}

static W(DescribeScheduleResponse) *describe(dbx_rpc_channel *ch, const char *id, int *status) {
  W(DescribeScheduleRequest) q = WI(DESCRIBE_SCHEDULE_REQUEST__INIT);
  q.namespace_ = "default";
  q.schedule_id = (char *)id;
  void *out = NULL;
  *status = dbx_svct_call(ch, "DescribeSchedule", &q.base,
                          &temporal__api__workflowservice__v1__describe_schedule_response__descriptor, 5000, &out, NULL);
  return out;
}

static W(DescribeScheduleResponse) *describe_ok(dbx_rpc_channel *ch, const char *id) {
  int st = 0;
  W(DescribeScheduleResponse) *d = describe(ch, id, &st);
  assert_int_equal(st, DBX_GRPC_OK);
  assert_non_null(d);
  assert_non_null(d->info);
  return d;
}

/* Describe until action_count >= n (up to timeout_ms); the last reply. */
static W(DescribeScheduleResponse) *await_actions(dbx_rpc_channel *ch, const char *id, int64_t n, int64_t timeout_ms) {
  int64_t end = now_ms() + timeout_ms;
  for (;;) {
    W(DescribeScheduleResponse) *d = describe_ok(ch, id);
    if (d->info->action_count >= n) return d;
    if (now_ms() > end) fail_msg("schedule %s: %lld actions, wanted %lld", id, (long long)d->info->action_count,
                                 (long long)n);
    protobuf_c_message_free_unpacked(&d->base, NULL);
    sleep_ms(100);
  }
}

static int patch(dbx_rpc_channel *ch, const char *id, const char *pause, const char *unpause, int trigger,
                 int trigger_policy) {
  W(PatchScheduleRequest) q = WI(PATCH_SCHEDULE_REQUEST__INIT);
  P(SchedulePatch) p = PI(SCHEDULE_PATCH__INIT);
  P(TriggerImmediatelyRequest) t = PI(TRIGGER_IMMEDIATELY_REQUEST__INIT);
  q.namespace_ = "default";
  q.schedule_id = (char *)id;
  q.patch = &p;
  if (pause) p.pause = (char *)pause;
  if (unpause) p.unpause = (char *)unpause;
  if (trigger) {
    t.overlap_policy = trigger_policy;
    p.trigger_immediately = &t;
  }
  return dbx_svct_call(ch, "PatchSchedule", &q.base, &temporal__api__workflowservice__v1__patch_schedule_response__descriptor,
                       5000, NULL, NULL);
}

static int delete_schedule(dbx_rpc_channel *ch, const char *id) {
  W(DeleteScheduleRequest) q = WI(DELETE_SCHEDULE_REQUEST__INIT);
  q.namespace_ = "default";
  q.schedule_id = (char *)id;
  return dbx_svct_call(ch, "DeleteSchedule", &q.base,
                       &temporal__api__workflowservice__v1__delete_schedule_response__descriptor, 5000, NULL, NULL);
}

static int64_t ts_s(const Timestamp *t) { return t ? (int64_t)t->seconds : -1; }

static void rfc3339(int64_t t, char out[32]) {
  time_t tt = (time_t)t;
  struct tm tm;
  gmtime_r(&tt, &tm);
  strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static DescribeWorkflowExecutionResponse *describe_wf(dbx_rpc_channel *ch, const char *wfid) {
  DescribeWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  q.namespace_ = "default";
  we.workflow_id = (char *)wfid;
  q.execution = &we;
  void *out = NULL;
  int st = dbx_svct_call(ch, "DescribeWorkflowExecution", &q.base, &DescribeWorkflowExecutionResponse__D, 5000, &out,
                         NULL);
  if (st != DBX_GRPC_OK) fail_msg("DescribeWorkflowExecution %s: status %d", wfid, st);
  return out;
}

static const Payload *sa_get(const SearchAttributes *sa, const char *name) {
  for (size_t i = 0; sa && i < sa->n_indexed_fields; i++)
    if (strcmp(sa->indexed_fields[i]->key, name) == 0) return sa->indexed_fields[i]->value;
  return NULL;
}

static int terminate(dbx_rpc_channel *ch, const char *wfid) {
  TerminateWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__TERMINATE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  q.namespace_ = "default";
  we.workflow_id = (char *)wfid;
  q.workflow_execution = &we;
  q.reason = "test";
  return dbx_svct_call(ch, "TerminateWorkflowExecution", &q.base, &TerminateWorkflowExecutionResponse__D, 5000, NULL,
                       NULL);
}

/* ------------------------------------------------------------ tests */

static void test_schedule_interval_starts_workflows(void **state) {
  fixture *f = *state;
  sched_args a = {.id = "s-int", .workflow_id = "wf-int", .interval_s = 1, .overlap = OV(ALLOW_ALL)};
  assert_int_equal(create(f->ch, &a, NULL), DBX_GRPC_OK);
  W(DescribeScheduleResponse) *d = await_actions(f->ch, "s-int", 3, 10000);
  assert_true(d->info->n_recent_actions >= 3);
  for (size_t i = 0; i < d->info->n_recent_actions; i++) {
    P(ScheduleActionResult) *ar = d->info->recent_actions[i];
    int64_t t = ts_s(ar->schedule_time);
    assert_int_equal(ar->schedule_time->nanos, 0); /* whole seconds, no jitter */
    char when[32], want[64];
    rfc3339(t, when);
    snprintf(want, sizeof want, "wf-int-%s", when);
    assert_string_equal(ar->start_workflow_result->workflow_id, want);
    assert_true(strlen(ar->start_workflow_result->run_id) > 0);
    if (i > 0) assert_int_equal(t - ts_s(d->info->recent_actions[i - 1]->schedule_time), 1);
  }
  /* ALLOW_ALL: they all run at once */
  assert_true(d->info->n_running_workflows >= 3);
  assert_int_equal(d->info->overlap_skipped, 0);
  assert_int_equal(d->info->n_future_action_times, 10);
  for (size_t i = 1; i < 10; i++)
    assert_int_equal(ts_s(d->info->future_action_times[i]) - ts_s(d->info->future_action_times[i - 1]), 1);
  assert_non_null(d->schedule->spec);
  assert_int_equal(d->schedule->spec->n_interval, 1);
  assert_int_equal(d->schedule->policies->overlap_policy, OV(ALLOW_ALL));

  /* the started workflow carries Temporal's schedule search attributes */
  const char *wfid = d->info->recent_actions[0]->start_workflow_result->workflow_id;
  DescribeWorkflowExecutionResponse *wd = describe_wf(f->ch, wfid);
  assert_non_null(wd->workflow_execution_info);
  assert_string_equal(wd->workflow_execution_info->type->name, "it.Workflow");
  const Payload *by = sa_get(wd->workflow_execution_info->search_attributes, "TemporalScheduledById");
  const Payload *at = sa_get(wd->workflow_execution_info->search_attributes, "TemporalScheduledStartTime");
  assert_non_null(by);
  assert_non_null(at);
  assert_int_equal(by->data.len, strlen("\"s-int\""));
  assert_memory_equal(by->data.data, "\"s-int\"", by->data.len);
  char when[32], json[40];
  rfc3339(ts_s(d->info->recent_actions[0]->schedule_time), when);
  snprintf(json, sizeof json, "\"%s\"", when);
  assert_int_equal(at->data.len, strlen(json));
  assert_memory_equal(at->data.data, json, at->data.len);
  protobuf_c_message_free_unpacked(&wd->base, NULL);

  /* List shows it, by id and workflow type */
  W(ListSchedulesRequest) lq = WI(LIST_SCHEDULES_REQUEST__INIT);
  lq.namespace_ = "default";
  void *lo = NULL;
  assert_int_equal(dbx_svct_call(f->ch, "ListSchedules", &lq.base,
                                 &temporal__api__workflowservice__v1__list_schedules_response__descriptor, 5000, &lo,
                                 NULL),
                   DBX_GRPC_OK);
  W(ListSchedulesResponse) *l = lo;
  int found = 0;
  for (size_t i = 0; i < l->n_schedules; i++)
    if (strcmp(l->schedules[i]->schedule_id, "s-int") == 0) {
      found = 1;
      assert_string_equal(l->schedules[i]->info->workflow_type->name, "it.Workflow");
      assert_true(l->schedules[i]->info->n_recent_actions >= 3);
    }
  assert_true(found);
  protobuf_c_message_free_unpacked(&l->base, NULL);

  /* Delete: gone, and no start after it */
  assert_int_equal(delete_schedule(f->ch, "s-int"), DBX_GRPC_OK);
  int st = 0;
  W(DescribeScheduleResponse) *gone = describe(f->ch, "s-int", &st);
  assert_int_equal(st, DBX_GRPC_NOT_FOUND);
  assert_null(gone);
  assert_int_equal(delete_schedule(f->ch, "s-int"), DBX_GRPC_NOT_FOUND);
  int64_t before = dbx_svct_workflow_count(f->ch);
  sleep_ms(2200); /* two interval times pass: a deleted schedule must start nothing */
  assert_int_equal(dbx_svct_workflow_count(f->ch), before);
  protobuf_c_message_free_unpacked(&d->base, NULL);
}

static void test_schedule_create_twice_refused(void **state) {
  fixture *f = *state;
  sched_args a = {.id = "s-dup", .workflow_id = "wf-dup", .interval_s = 3600};
  assert_int_equal(create(f->ch, &a, NULL), DBX_GRPC_OK);
  assert_int_equal(create(f->ch, &a, NULL), DBX_GRPC_OK); /* the same request id: a retry */
  sched_args b = a;
  b.workflow_id = "wf-dup2";
  b.request_id = "another-request";
  dbx_rpc_result raw;
  memset(&raw, 0, sizeof raw);
  assert_int_equal(create(f->ch, &b, &raw), DBX_GRPC_ALREADY_EXISTS);
  char *url = dbx_svct_detail_type_url(&raw);
  assert_non_null(url);
  assert_true(dbx_svct_ends_with(url, "WorkflowExecutionAlreadyStartedFailure"));
  free(url);
  dbx_rpc_result_cleanup(&raw);
  /* the first one stands */
  W(DescribeScheduleResponse) *d = describe_ok(f->ch, "s-dup");
  assert_string_equal(d->schedule->action->start_workflow->workflow_id, "wf-dup");
  assert_int_equal(d->info->n_future_action_times, 10);
  assert_int_equal(ts_s(d->info->future_action_times[0]) % 3600, 0);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  assert_int_equal(delete_schedule(f->ch, "s-dup"), DBX_GRPC_OK);
}

static void test_schedule_skip_overlap(void **state) {
  fixture *f = *state;
  sched_args a = {.id = "s-skip", .workflow_id = "wf-skip", .interval_s = 1}; /* SKIP by default */
  assert_int_equal(create(f->ch, &a, NULL), DBX_GRPC_OK);
  W(DescribeScheduleResponse) *d = await_actions(f->ch, "s-skip", 1, 5000);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  /* nobody runs the workflow: the following times are skipped */
  int64_t end = now_ms() + 8000;
  for (;;) {
    d = describe_ok(f->ch, "s-skip");
    if (d->info->overlap_skipped >= 2) break;
    if (now_ms() > end) fail_msg("overlap_skipped stayed %lld", (long long)d->info->overlap_skipped);
    protobuf_c_message_free_unpacked(&d->base, NULL);
    sleep_ms(100);
  }
  assert_int_equal(d->info->action_count, 1);
  assert_int_equal(d->info->n_running_workflows, 1);
  assert_int_equal(d->schedule->policies->overlap_policy, OV(SKIP));
  char *first = strdup(d->info->running_workflows[0]->workflow_id);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  /* once it closes, the next time starts a new one */
  assert_int_equal(terminate(f->ch, first), DBX_GRPC_OK);
  d = await_actions(f->ch, "s-skip", 2, 5000);
  assert_int_equal(d->info->n_running_workflows, 1);
  assert_string_not_equal(d->info->running_workflows[0]->workflow_id, first);
  assert_int_equal(d->info->recent_actions[0]->start_workflow_status, WS(TERMINATED));
  protobuf_c_message_free_unpacked(&d->base, NULL);
  free(first);
  assert_int_equal(delete_schedule(f->ch, "s-skip"), DBX_GRPC_OK);
}

static int64_t utc(int y, int mo, int d, int h, int mi) {
  struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi};
  return (int64_t)timegm(&tm);
}

static W(ListScheduleMatchingTimesResponse) *matching(dbx_rpc_channel *ch, const char *id, int64_t from, int64_t to) {
  W(ListScheduleMatchingTimesRequest) q = WI(LIST_SCHEDULE_MATCHING_TIMES_REQUEST__INIT);
  Timestamp a, b;
  dbx_pb_timestamp_init_ns(&a, from * 1000000000LL);
  dbx_pb_timestamp_init_ns(&b, to * 1000000000LL);
  q.namespace_ = "default";
  q.schedule_id = (char *)id;
  q.start_time = &a;
  q.end_time = &b;
  void *out = NULL;
  assert_int_equal(dbx_svct_call(ch, "ListScheduleMatchingTimes", &q.base,
                                 &temporal__api__workflowservice__v1__list_schedule_matching_times_response__descriptor,
                                 5000, &out, NULL),
                   DBX_GRPC_OK);
  return out;
}

static void test_schedule_cron_and_calendar_times(void **state) {
  fixture *f = *state;
  P(CalendarSpec) cal = PI(CALENDAR_SPEC__INIT);
  cal.hour = "9";
  cal.minute = "30";
  cal.day_of_month = "1";
  sched_args a = {.id = "s-cron", .workflow_id = "wf-cron", .cron = "0 12 * * MON-FRI", .calendar = &cal,
                  .paused = 1};
  assert_int_equal(create(f->ch, &a, NULL), DBX_GRPC_OK);
  /* 2024-01-01 is a Monday */
  W(ListScheduleMatchingTimesResponse) *m = matching(f->ch, "s-cron", utc(2024, 1, 1, 0, 0), utc(2024, 1, 7, 23, 59));
  int64_t want[] = {utc(2024, 1, 1, 9, 30), utc(2024, 1, 1, 12, 0), utc(2024, 1, 2, 12, 0),
                    utc(2024, 1, 3, 12, 0), utc(2024, 1, 4, 12, 0), utc(2024, 1, 5, 12, 0)};
  assert_int_equal(m->n_start_time, 6);
  for (size_t i = 0; i < 6; i++) assert_int_equal(ts_s(m->start_time[i]), want[i]);
  protobuf_c_message_free_unpacked(&m->base, NULL);
  /* Describe shows the compiled form: structured calendars only */
  W(DescribeScheduleResponse) *d = describe_ok(f->ch, "s-cron");
  assert_int_equal(d->schedule->spec->n_cron_string, 0);
  assert_int_equal(d->schedule->spec->n_calendar, 0);
  assert_int_equal(d->schedule->spec->n_structured_calendar, 2);
  assert_int_equal(d->info->action_count, 0);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  assert_int_equal(delete_schedule(f->ch, "s-cron"), DBX_GRPC_OK);

  /* a fixed offset, with TZ= in the cron string; shorthand and @every */
  sched_args b = {.id = "s-tz", .workflow_id = "wf-tz", .cron = "TZ=+02:00 0 12 * * *", .paused = 1};
  assert_int_equal(create(f->ch, &b, NULL), DBX_GRPC_OK);
  m = matching(f->ch, "s-tz", utc(2024, 3, 1, 0, 0), utc(2024, 3, 2, 23, 0));
  assert_int_equal(m->n_start_time, 2);
  assert_int_equal(ts_s(m->start_time[0]), utc(2024, 3, 1, 10, 0));
  assert_int_equal(ts_s(m->start_time[1]), utc(2024, 3, 2, 10, 0));
  protobuf_c_message_free_unpacked(&m->base, NULL);
  d = describe_ok(f->ch, "s-tz");
  assert_string_equal(d->schedule->spec->timezone_name, "+02:00");
  protobuf_c_message_free_unpacked(&d->base, NULL);
  assert_int_equal(delete_schedule(f->ch, "s-tz"), DBX_GRPC_OK);

  sched_args e = {.id = "s-every", .workflow_id = "wf-every", .cron = "@every 90m/15m", .paused = 1};
  assert_int_equal(create(f->ch, &e, NULL), DBX_GRPC_OK);
  m = matching(f->ch, "s-every", utc(2024, 3, 1, 0, 0), utc(2024, 3, 1, 3, 59));
  /* epoch + n * 90 min + 15 min: 00:15, 01:45, 03:15 on a day whose start is a multiple of 90 min */
  assert_int_equal(m->n_start_time, 3);
  assert_int_equal(ts_s(m->start_time[0]), utc(2024, 3, 1, 0, 15));
  assert_int_equal(ts_s(m->start_time[1]), utc(2024, 3, 1, 1, 45));
  protobuf_c_message_free_unpacked(&m->base, NULL);
  assert_int_equal(delete_schedule(f->ch, "s-every"), DBX_GRPC_OK);

  sched_args h = {.id = "s-monthly", .workflow_id = "wf-m", .cron = "@monthly", .paused = 1};
  assert_int_equal(create(f->ch, &h, NULL), DBX_GRPC_OK);
  m = matching(f->ch, "s-monthly", utc(2023, 12, 15, 0, 0), utc(2024, 3, 15, 0, 0));
  assert_int_equal(m->n_start_time, 3);
  assert_int_equal(ts_s(m->start_time[0]), utc(2024, 1, 1, 0, 0));
  assert_int_equal(ts_s(m->start_time[2]), utc(2024, 3, 1, 0, 0));
  protobuf_c_message_free_unpacked(&m->base, NULL);
  assert_int_equal(delete_schedule(f->ch, "s-monthly"), DBX_GRPC_OK);

  /* refused: a bad field, too few fields, a zone this service does not know */
  sched_args bad1 = {.id = "s-bad", .workflow_id = "wf", .cron = "61 * * * *"};
  assert_int_equal(create(f->ch, &bad1, NULL), DBX_GRPC_INVALID_ARGUMENT);
  sched_args bad2 = {.id = "s-bad", .workflow_id = "wf", .cron = "* * *"};
  assert_int_equal(create(f->ch, &bad2, NULL), DBX_GRPC_INVALID_ARGUMENT);
  sched_args bad3 = {.id = "s-bad", .workflow_id = "wf", .cron = "0 12 * * *", .tz = "Mars/Olympus_Mons"};
  assert_int_equal(create(f->ch, &bad3, NULL), DBX_GRPC_INVALID_ARGUMENT);
  sched_args bad4 = {.id = "s-bad", .workflow_id = "", .interval_s = 60};
  assert_int_equal(create(f->ch, &bad4, NULL), DBX_GRPC_INVALID_ARGUMENT);
  int st = 0;
  W(DescribeScheduleResponse) *none = describe(f->ch, "s-bad", &st);
  assert_int_equal(st, DBX_GRPC_NOT_FOUND);
  assert_null(none);
}

static void test_schedule_pause_trigger_unpause(void **state) {
  fixture *f = *state;
  sched_args a = {.id = "s-pause", .workflow_id = "wf-pause", .interval_s = 1, .paused = 1, .notes = "start paused",
                  .overlap = OV(ALLOW_ALL)};
  assert_int_equal(create(f->ch, &a, NULL), DBX_GRPC_OK);
  sleep_ms(1500); /* a time passes while paused: it must start nothing */
  W(DescribeScheduleResponse) *d = describe_ok(f->ch, "s-pause");
  assert_int_equal(d->info->action_count, 0);
  assert_true(d->schedule->state->paused);
  assert_string_equal(d->schedule->state->notes, "start paused");
  protobuf_c_message_free_unpacked(&d->base, NULL);
  /* a trigger acts even while paused */
  assert_int_equal(patch(f->ch, "s-pause", NULL, NULL, 1, 0), DBX_GRPC_OK);
  d = describe_ok(f->ch, "s-pause");
  assert_int_equal(d->info->action_count, 1);
  assert_int_equal(d->info->n_recent_actions, 1);
  assert_true(d->schedule->state->paused);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  /* unpause: the times come again */
  assert_int_equal(patch(f->ch, "s-pause", NULL, "back on", 0, 0), DBX_GRPC_OK);
  d = await_actions(f->ch, "s-pause", 2, 5000);
  assert_false(d->schedule->state->paused);
  assert_string_equal(d->schedule->state->notes, "back on");
  protobuf_c_message_free_unpacked(&d->base, NULL);
  /* pause again: the count stops */
  assert_int_equal(patch(f->ch, "s-pause", "hold", NULL, 0, 0), DBX_GRPC_OK);
  d = describe_ok(f->ch, "s-pause");
  int64_t n = d->info->action_count;
  protobuf_c_message_free_unpacked(&d->base, NULL);
  sleep_ms(1500);
  d = describe_ok(f->ch, "s-pause");
  assert_int_equal(d->info->action_count, n);
  assert_string_equal(d->schedule->state->notes, "hold");
  protobuf_c_message_free_unpacked(&d->base, NULL);
  assert_int_equal(delete_schedule(f->ch, "s-pause"), DBX_GRPC_OK);
  assert_int_equal(patch(f->ch, "s-pause", "x", NULL, 0, 0), DBX_GRPC_NOT_FOUND);

  /* remaining actions: two scheduled actions, then none */
  sched_args b = {.id = "s-limit", .workflow_id = "wf-limit", .interval_s = 1, .remaining = 2,
                  .overlap = OV(ALLOW_ALL)};
  assert_int_equal(create(f->ch, &b, NULL), DBX_GRPC_OK);
  d = await_actions(f->ch, "s-limit", 2, 5000);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  sleep_ms(1500);
  d = describe_ok(f->ch, "s-limit");
  assert_int_equal(d->info->action_count, 2);
  assert_int_equal(d->schedule->state->remaining_actions, 0);
  assert_int_equal(d->info->n_future_action_times, 0);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  assert_int_equal(delete_schedule(f->ch, "s-limit"), DBX_GRPC_OK);
}

/* The schedule's workflow for nominal time t exists. */
static int started_for(dbx_rpc_channel *ch, const char *base, int64_t t) {
  char when[32], wfid[64];
  rfc3339(t, when);
  snprintf(wfid, sizeof wfid, "%s-%s", base, when);
  DescribeWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  q.namespace_ = "default";
  we.workflow_id = wfid;
  q.execution = &we;
  return dbx_svct_call(ch, "DescribeWorkflowExecution", &q.base, &DescribeWorkflowExecutionResponse__D, 5000, NULL,
                       NULL) == DBX_GRPC_OK;
}

/* Describe until pred(d) holds (up to timeout_ms); the reply. */
static W(DescribeScheduleResponse) *await_describe(dbx_rpc_channel *ch, const char *id,
                                                   int (*pred)(const W(DescribeScheduleResponse) *), int64_t timeout_ms,
                                                   const char *what) {
  int64_t end = now_ms() + timeout_ms;
  for (;;) {
    W(DescribeScheduleResponse) *d = describe_ok(ch, id);
    if (pred(d)) return d;
    if (now_ms() > end)
      fail_msg("schedule %s: %s not reached (actions %lld, skipped %lld, buffered %lld, running %zu)", id, what,
               (long long)d->info->action_count, (long long)d->info->overlap_skipped, (long long)d->info->buffer_size,
               d->info->n_running_workflows);
    protobuf_c_message_free_unpacked(&d->base, NULL);
    sleep_ms(100);
  }
}

static int buffered_one_and_skipped(const W(DescribeScheduleResponse) *d) {
  return d->info->buffer_size == 1 && d->info->overlap_skipped >= 1;
}
static int two_actions(const W(DescribeScheduleResponse) *d) { return d->info->action_count >= 2; }
static int buffered_two(const W(DescribeScheduleResponse) *d) { return d->info->buffer_size >= 2; }
static int buffered_any(const W(DescribeScheduleResponse) *d) { return d->info->buffer_size >= 1; }

static void test_schedule_buffer_one_and_all(void **state) {
  fixture *f = *state;
  sched_args a = {.id = "s-buf1", .workflow_id = "wf-buf1", .interval_s = 1, .overlap = OV(BUFFER_ONE)};
  assert_int_equal(create(f->ch, &a, NULL), DBX_GRPC_OK);
  W(DescribeScheduleResponse) *d = await_describe(f->ch, "s-buf1", buffered_one_and_skipped, 8000, "one buffered");
  assert_int_equal(d->info->action_count, 1);
  assert_int_equal(d->info->n_running_workflows, 1);
  char *first = strdup(d->info->running_workflows[0]->workflow_id);
  int64_t first_t = ts_s(d->info->recent_actions[0]->schedule_time);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  /* the first closes: the buffered start (the time right after it) runs */
  assert_int_equal(terminate(f->ch, first), DBX_GRPC_OK);
  d = await_describe(f->ch, "s-buf1", two_actions, 5000, "the buffered start");
  char when[32], want[64];
  rfc3339(first_t + 1, when);
  snprintf(want, sizeof want, "wf-buf1-%s", when);
  assert_string_equal(d->info->recent_actions[1]->start_workflow_result->workflow_id, want);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  free(first);
  assert_int_equal(delete_schedule(f->ch, "s-buf1"), DBX_GRPC_OK);

  sched_args b = {.id = "s-bufall", .workflow_id = "wf-bufall", .interval_s = 1, .overlap = OV(BUFFER_ALL)};
  assert_int_equal(create(f->ch, &b, NULL), DBX_GRPC_OK);
  d = await_describe(f->ch, "s-bufall", buffered_two, 8000, "two buffered");
  assert_int_equal(d->info->action_count, 1);
  assert_int_equal(d->info->overlap_skipped, 0);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  assert_int_equal(delete_schedule(f->ch, "s-bufall"), DBX_GRPC_OK);
}

static void test_schedule_terminate_and_cancel_other(void **state) {
  fixture *f = *state;
  sched_args a = {.id = "s-term", .workflow_id = "wf-term", .interval_s = 1, .overlap = OV(TERMINATE_OTHER)};
  assert_int_equal(create(f->ch, &a, NULL), DBX_GRPC_OK);
  W(DescribeScheduleResponse) *d = await_actions(f->ch, "s-term", 2, 6000);
  /* the second start terminated the first: one runs */
  assert_int_equal(d->info->n_running_workflows, 1);
  const char *first = d->info->recent_actions[0]->start_workflow_result->workflow_id;
  assert_int_equal(dbx_svct_workflow_status(f->ch, first, d->info->recent_actions[0]->start_workflow_result->run_id),
                   WS(TERMINATED));
  assert_int_equal(d->info->recent_actions[0]->start_workflow_status, WS(TERMINATED));
  protobuf_c_message_free_unpacked(&d->base, NULL);
  assert_int_equal(delete_schedule(f->ch, "s-term"), DBX_GRPC_OK);

  sched_args b = {.id = "s-cancel", .workflow_id = "wf-cancel", .interval_s = 1, .overlap = OV(CANCEL_OTHER)};
  assert_int_equal(create(f->ch, &b, NULL), DBX_GRPC_OK);
  d = await_describe(f->ch, "s-cancel", buffered_any, 6000, "a start waiting for the canceled one");
  assert_int_equal(d->info->action_count, 1);
  const WorkflowExecution *we = d->info->recent_actions[0]->start_workflow_result;
  /* no worker: the cancel request is in its history, the run still open */
  assert_true(dbx_svct_history_wait_for(f->ch, we->workflow_id, we->run_id, ET(WORKFLOW_EXECUTION_CANCEL_REQUESTED),
                                        5000));
  protobuf_c_message_free_unpacked(&d->base, NULL);
  assert_int_equal(delete_schedule(f->ch, "s-cancel"), DBX_GRPC_OK);
}

static void test_schedule_backfill_update_list(void **state) {
  fixture *f = *state;
  sched_args a = {.id = "s-back", .workflow_id = "wf-back", .interval_s = 3600, .paused = 1,
                  .overlap = OV(ALLOW_ALL)};
  assert_int_equal(create(f->ch, &a, NULL), DBX_GRPC_OK);
  /* backfill four hours of 2024-01-01 (end inclusive), while paused */
  W(PatchScheduleRequest) q = WI(PATCH_SCHEDULE_REQUEST__INIT);
  P(SchedulePatch) p = PI(SCHEDULE_PATCH__INIT);
  P(BackfillRequest) bf = PI(BACKFILL_REQUEST__INIT);
  P(BackfillRequest) *bfs[1] = {&bf};
  Timestamp from, to;
  dbx_pb_timestamp_init_ns(&from, utc(2024, 1, 1, 0, 0) * 1000000000LL);
  dbx_pb_timestamp_init_ns(&to, utc(2024, 1, 1, 3, 0) * 1000000000LL);
  bf.start_time = &from;
  bf.end_time = &to;
  p.backfill_request = bfs;
  p.n_backfill_request = 1;
  q.namespace_ = "default";
  q.schedule_id = "s-back";
  q.patch = &p;
  assert_int_equal(dbx_svct_call(f->ch, "PatchSchedule", &q.base,
                                 &temporal__api__workflowservice__v1__patch_schedule_response__descriptor, 5000, NULL,
                                 NULL),
                   DBX_GRPC_OK);
  for (int h = 0; h < 4; h++) assert_true(started_for(f->ch, "wf-back", utc(2024, 1, 1, h, 0)));
  assert_false(started_for(f->ch, "wf-back", utc(2024, 1, 1, 4, 0)));
  W(DescribeScheduleResponse) *d = describe_ok(f->ch, "s-back");
  assert_int_equal(d->info->action_count, 4);
  ProtobufCBinaryData tok = d->conflict_token;
  uint8_t old_tok[8];
  assert_int_equal(tok.len, 8);
  memcpy(old_tok, tok.data, 8);

  /* UpdateSchedule: a stale conflict token is refused, the right one replaces */
  W(UpdateScheduleRequest) u = WI(UPDATE_SCHEDULE_REQUEST__INIT);
  u.namespace_ = "default";
  u.schedule_id = "s-back";
  u.schedule = d->schedule;
  uint8_t bad[8] = {9, 9, 9, 9, 9, 9, 9, 9};
  u.conflict_token.data = bad;
  u.conflict_token.len = 8;
  assert_int_equal(dbx_svct_call(f->ch, "UpdateSchedule", &u.base,
                                 &temporal__api__workflowservice__v1__update_schedule_response__descriptor, 5000, NULL,
                                 NULL),
                   DBX_GRPC_FAILED_PRECONDITION);
  u.conflict_token.data = old_tok;
  d->schedule->spec->interval[0]->interval->seconds = 7200;
  d->schedule->state->notes = "updated";
  assert_int_equal(dbx_svct_call(f->ch, "UpdateSchedule", &u.base,
                                 &temporal__api__workflowservice__v1__update_schedule_response__descriptor, 5000, NULL,
                                 NULL),
                   DBX_GRPC_OK);
  d->schedule->state->notes = NULL; /* borrowed literal: not the reply's to free */
  protobuf_c_message_free_unpacked(&d->base, NULL);
  d = describe_ok(f->ch, "s-back");
  assert_int_equal(d->schedule->spec->interval[0]->interval->seconds, 7200);
  assert_string_equal(d->schedule->state->notes, "updated");
  assert_non_null(d->info->update_time);
  assert_int_equal(d->info->action_count, 4); /* info stays */
  assert_memory_not_equal(d->conflict_token.data, old_tok, 8);
  assert_int_equal(ts_s(d->info->future_action_times[0]) % 7200, 0);
  protobuf_c_message_free_unpacked(&d->base, NULL);

  /* ListSchedules pages by id */
  sched_args b = {.id = "s-back2", .workflow_id = "wf-back2", .interval_s = 3600, .paused = 1};
  assert_int_equal(create(f->ch, &b, NULL), DBX_GRPC_OK);
  W(ListSchedulesRequest) lq = WI(LIST_SCHEDULES_REQUEST__INIT);
  lq.namespace_ = "default";
  lq.maximum_page_size = 1;
  const char *seen[2] = {0};
  W(ListSchedulesResponse) *pages[3] = {0};
  size_t n = 0;
  for (int i = 0; i < 3; i++) {
    void *lo = NULL;
    assert_int_equal(dbx_svct_call(f->ch, "ListSchedules", &lq.base,
                                   &temporal__api__workflowservice__v1__list_schedules_response__descriptor, 5000,
                                   &lo, NULL),
                     DBX_GRPC_OK);
    pages[i] = lo;
    assert_true(pages[i]->n_schedules <= 1);
    if (pages[i]->n_schedules == 1 && n < 2) seen[n++] = pages[i]->schedules[0]->schedule_id;
    if (pages[i]->next_page_token.len == 0) break;
    lq.next_page_token = pages[i]->next_page_token;
  }
  assert_int_equal(n, 2);
  assert_string_equal(seen[0], "s-back");
  assert_string_equal(seen[1], "s-back2");
  for (int i = 0; i < 3; i++)
    if (pages[i]) protobuf_c_message_free_unpacked(&pages[i]->base, NULL);
  assert_int_equal(delete_schedule(f->ch, "s-back"), DBX_GRPC_OK);
  assert_int_equal(delete_schedule(f->ch, "s-back2"), DBX_GRPC_OK);
}

/* The ids ListSchedules returns for query (one page), comma-joined into out. */
static int list_ids(dbx_rpc_channel *ch, const char *query, char *out, size_t cap, dbx_rpc_result *raw) {
  W(ListSchedulesRequest) lq = WI(LIST_SCHEDULES_REQUEST__INIT);
  lq.namespace_ = "default";
  lq.query = (char *)query;
  void *lo = NULL;
  int st = dbx_svct_call(ch, "ListSchedules", &lq.base,
                         &temporal__api__workflowservice__v1__list_schedules_response__descriptor, 5000, &lo, raw);
  out[0] = '\0';
  W(ListSchedulesResponse) *l = lo;
  for (size_t i = 0; l && i < l->n_schedules; i++)
    snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? "," : "", l->schedules[i]->schedule_id);
  if (l) protobuf_c_message_free_unpacked(&l->base, NULL);
  return st;
}

static void test_schedule_list_query(void **state) {
  fixture *f = *state;
  sched_args a = {.id = "s-lq-paused", .workflow_id = "wf-lq1", .interval_s = 3600, .paused = 1};
  sched_args b = {.id = "s-lq-running", .workflow_id = "wf-lq2", .interval_s = 3600};
  assert_int_equal(create(f->ch, &a, NULL), DBX_GRPC_OK);
  assert_int_equal(create(f->ch, &b, NULL), DBX_GRPC_OK);
  char ids[256];
  assert_int_equal(list_ids(f->ch, "TemporalSchedulePaused = true", ids, sizeof ids, NULL), DBX_GRPC_OK);
  assert_string_equal(ids, "s-lq-paused");
  assert_int_equal(list_ids(f->ch, "TemporalSchedulePaused = false", ids, sizeof ids, NULL), DBX_GRPC_OK);
  assert_string_equal(ids, "s-lq-running");
  /* after a pause both are */
  assert_int_equal(patch(f->ch, "s-lq-running", "paused by the test", NULL, 0, 0), DBX_GRPC_OK);
  assert_int_equal(list_ids(f->ch, "TemporalSchedulePaused = true", ids, sizeof ids, NULL), DBX_GRPC_OK);
  assert_string_equal(ids, "s-lq-paused,s-lq-running");
  dbx_rpc_result raw;
  memset(&raw, 0, sizeof raw);
  assert_int_equal(list_ids(f->ch, "Nope = 1", ids, sizeof ids, &raw), DBX_GRPC_INVALID_ARGUMENT);
  assert_non_null(raw.message);
  assert_non_null(strstr(raw.message, "Nope"));
  dbx_rpc_result_cleanup(&raw);
  assert_int_equal(delete_schedule(f->ch, "s-lq-paused"), DBX_GRPC_OK);
  assert_int_equal(delete_schedule(f->ch, "s-lq-running"), DBX_GRPC_OK);
}

static void test_schedule_jitter_and_exclusions(void **state) {
  fixture *f = *state;
  /* jitter 30 s on an hourly schedule: every time within [hour, hour + 30 s), the same on every call */
  sched_args a = {.id = "s-jit", .workflow_id = "wf-jit", .interval_s = 3600, .paused = 1};
  assert_int_equal(create(f->ch, &a, NULL), DBX_GRPC_OK);
  W(DescribeScheduleResponse) *d = describe_ok(f->ch, "s-jit");
  W(UpdateScheduleRequest) u = WI(UPDATE_SCHEDULE_REQUEST__INIT);
  Duration jit;
  dbx_pb_duration_init_ms(&jit, 30000);
  d->schedule->spec->jitter = &jit;
  u.namespace_ = "default";
  u.schedule_id = "s-jit";
  u.schedule = d->schedule;
  assert_int_equal(dbx_svct_call(f->ch, "UpdateSchedule", &u.base,
                                 &temporal__api__workflowservice__v1__update_schedule_response__descriptor, 5000, NULL,
                                 NULL),
                   DBX_GRPC_OK);
  d->schedule->spec->jitter = NULL;
  protobuf_c_message_free_unpacked(&d->base, NULL);
  W(ListScheduleMatchingTimesResponse) *m1 = matching(f->ch, "s-jit", utc(2024, 5, 1, 0, 0), utc(2024, 5, 2, 0, 0));
  W(ListScheduleMatchingTimesResponse) *m2 = matching(f->ch, "s-jit", utc(2024, 5, 1, 0, 0), utc(2024, 5, 2, 0, 0));
  assert_true(m1->n_start_time >= 24);
  assert_int_equal(m1->n_start_time, m2->n_start_time);
  int moved = 0;
  for (size_t i = 0; i < m1->n_start_time; i++) {
    int64_t t = ts_s(m1->start_time[i]);
    assert_true(t % 3600 < 30);
    if (t % 3600 != 0 || m1->start_time[i]->nanos != 0) moved++;
    assert_int_equal(t, ts_s(m2->start_time[i]));
    assert_int_equal(m1->start_time[i]->nanos, m2->start_time[i]->nanos);
  }
  assert_true(moved > 0);
  protobuf_c_message_free_unpacked(&m1->base, NULL);
  protobuf_c_message_free_unpacked(&m2->base, NULL);
  assert_int_equal(delete_schedule(f->ch, "s-jit"), DBX_GRPC_OK);

  /* Sundays as day 7, a stepped range, leap day */
  sched_args b = {.id = "s-cal", .workflow_id = "wf-cal", .cron = "0 6-18/6 29 2 *", .paused = 1};
  assert_int_equal(create(f->ch, &b, NULL), DBX_GRPC_OK);
  W(ListScheduleMatchingTimesResponse) *m = matching(f->ch, "s-cal", utc(2023, 1, 1, 0, 0), utc(2025, 1, 1, 0, 0));
  assert_int_equal(m->n_start_time, 3); /* 2024-02-29 at 06, 12, 18 */
  assert_int_equal(ts_s(m->start_time[0]), utc(2024, 2, 29, 6, 0));
  assert_int_equal(ts_s(m->start_time[2]), utc(2024, 2, 29, 18, 0));
  protobuf_c_message_free_unpacked(&m->base, NULL);
  assert_int_equal(delete_schedule(f->ch, "s-cal"), DBX_GRPC_OK);
  sched_args c = {.id = "s-sun", .workflow_id = "wf-sun", .cron = "30 8 * * 7", .paused = 1};
  assert_int_equal(create(f->ch, &c, NULL), DBX_GRPC_OK);
  m = matching(f->ch, "s-sun", utc(2024, 1, 1, 0, 0), utc(2024, 1, 31, 0, 0));
  assert_int_equal(m->n_start_time, 4); /* the Sundays of January 2024: 7, 14, 21, 28 */
  assert_int_equal(ts_s(m->start_time[0]), utc(2024, 1, 7, 8, 30));
  assert_int_equal(ts_s(m->start_time[3]), utc(2024, 1, 28, 8, 30));
  protobuf_c_message_free_unpacked(&m->base, NULL);
  assert_int_equal(delete_schedule(f->ch, "s-sun"), DBX_GRPC_OK);
}

/* One cron schedule in zone tz: its matching times in [from, to]. */
static W(ListScheduleMatchingTimesResponse) *zone_times(dbx_rpc_channel *ch, const char *cron, const char *tz,
                                                        int64_t from, int64_t to) {
  sched_args a = {.id = "s-zone", .workflow_id = "wf-zone", .cron = cron, .tz = tz, .paused = 1};
  assert_int_equal(create(ch, &a, NULL), DBX_GRPC_OK);
  W(ListScheduleMatchingTimesResponse) *m = matching(ch, "s-zone", from, to);
  assert_int_equal(delete_schedule(ch, "s-zone"), DBX_GRPC_OK);
  return m;
}

static void test_schedule_named_time_zones(void **state) {
  fixture *f = *state;
  /* noon in New York: EST (-5) before 2024-03-10, EDT (-4) from then */
  W(ListScheduleMatchingTimesResponse) *m =
      zone_times(f->ch, "0 12 * * *", "America/New_York", utc(2024, 3, 9, 0, 0), utc(2024, 3, 10, 23, 0));
  assert_int_equal(m->n_start_time, 2);
  assert_int_equal(ts_s(m->start_time[0]), utc(2024, 3, 9, 17, 0));
  assert_int_equal(ts_s(m->start_time[1]), utc(2024, 3, 10, 16, 0));
  protobuf_c_message_free_unpacked(&m->base, NULL);
  /* 02:30 does not exist on 2024-03-10: skipped */
  m = zone_times(f->ch, "30 2 * * *", "America/New_York", utc(2024, 3, 9, 0, 0), utc(2024, 3, 11, 23, 0));
  assert_int_equal(m->n_start_time, 2);
  assert_int_equal(ts_s(m->start_time[0]), utc(2024, 3, 9, 7, 30));
  assert_int_equal(ts_s(m->start_time[1]), utc(2024, 3, 11, 6, 30));
  protobuf_c_message_free_unpacked(&m->base, NULL);
  /* 01:30 happens twice on 2024-11-03: both match */
  m = zone_times(f->ch, "30 1 * * *", "America/New_York", utc(2024, 11, 3, 0, 0), utc(2024, 11, 3, 12, 0));
  assert_int_equal(m->n_start_time, 2);
  assert_int_equal(ts_s(m->start_time[0]), utc(2024, 11, 3, 5, 30));
  assert_int_equal(ts_s(m->start_time[1]), utc(2024, 11, 3, 6, 30));
  protobuf_c_message_free_unpacked(&m->base, NULL);
  /* past the database's listed transitions, its rule: summer 2040 in New York,
   * January 2045 in Sydney (daylight time across the new year) */
  m = zone_times(f->ch, "0 12 1 7 *", "America/New_York", utc(2040, 1, 1, 0, 0), utc(2040, 12, 31, 0, 0));
  assert_int_equal(m->n_start_time, 1);
  assert_int_equal(ts_s(m->start_time[0]), utc(2040, 7, 1, 16, 0));
  protobuf_c_message_free_unpacked(&m->base, NULL);
  m = zone_times(f->ch, "0 12 15 1,7 *", "Australia/Sydney", utc(2045, 1, 1, 0, 0), utc(2045, 12, 31, 0, 0));
  assert_int_equal(m->n_start_time, 2);
  assert_int_equal(ts_s(m->start_time[0]), utc(2045, 1, 15, 1, 0));
  assert_int_equal(ts_s(m->start_time[1]), utc(2045, 7, 15, 2, 0));
  protobuf_c_message_free_unpacked(&m->base, NULL);
  /* CRON_TZ= names a zone too; a fixed zone without DST */
  m = zone_times(f->ch, "CRON_TZ=Asia/Tokyo 0 9 * * *", NULL, utc(2024, 6, 1, 0, 0), utc(2024, 6, 1, 23, 0));
  assert_int_equal(m->n_start_time, 1);
  assert_int_equal(ts_s(m->start_time[0]), utc(2024, 6, 1, 0, 0));
  protobuf_c_message_free_unpacked(&m->base, NULL);
}

static void test_schedule_bad_input_refused(void **state) {
  fixture *f = *state;
  W(CreateScheduleRequest) q = WI(CREATE_SCHEDULE_REQUEST__INIT);
  P(Schedule) s = PI(SCHEDULE__INIT);
  P(ScheduleSpec) spec = PI(SCHEDULE_SPEC__INIT);
  P(ScheduleAction) act = PI(SCHEDULE_ACTION__INIT);
  Temporal__Api__Workflow__V1__NewWorkflowExecutionInfo nw = TEMPORAL__API__WORKFLOW__V1__NEW_WORKFLOW_EXECUTION_INFO__INIT;
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  q.namespace_ = "default";
  q.schedule_id = "s-badin";
  q.schedule = &s;
  s.spec = &spec;
  s.action = &act;
  act.action_case = TEMPORAL__API__SCHEDULE__V1__SCHEDULE_ACTION__ACTION_START_WORKFLOW;
  act.start_workflow = &nw;
  nw.workflow_id = "wf-badin";
  wt.name = "it.Workflow";
  nw.workflow_type = &wt;
  tq.name = TQ;
  nw.task_queue = &tq;
  const ProtobufCMessageDescriptor *rd = &temporal__api__workflowservice__v1__create_schedule_response__descriptor;
  /* too many cron strings */
  char *crons[101];
  for (int i = 0; i < 101; i++) crons[i] = "0 * * * *";
  spec.cron_string = crons;
  spec.n_cron_string = 101;
  assert_int_equal(dbx_svct_call(f->ch, "CreateSchedule", &q.base, rd, 5000, NULL, NULL), DBX_GRPC_INVALID_ARGUMENT);
  spec.n_cron_string = 0;
  /* a structured range out of bounds, a negative step */
  P(StructuredCalendarSpec) sc = PI(STRUCTURED_CALENDAR_SPEC__INIT);
  P(StructuredCalendarSpec) *scs[1] = {&sc};
  P(Range) r = PI(RANGE__INIT);
  P(Range) *rs[1] = {&r};
  r.start = 24;
  sc.hour = rs;
  sc.n_hour = 1;
  spec.structured_calendar = scs;
  spec.n_structured_calendar = 1;
  assert_int_equal(dbx_svct_call(f->ch, "CreateSchedule", &q.base, rd, 5000, NULL, NULL), DBX_GRPC_INVALID_ARGUMENT);
  r.start = 1;
  r.step = -1;
  assert_int_equal(dbx_svct_call(f->ch, "CreateSchedule", &q.base, rd, 5000, NULL, NULL), DBX_GRPC_INVALID_ARGUMENT);
  spec.n_structured_calendar = 0;
  /* a zero interval, a jitter over a year, a 1001-value field */
  P(IntervalSpec) iv = PI(INTERVAL_SPEC__INIT);
  P(IntervalSpec) *ivs[1] = {&iv};
  Duration zero, big;
  dbx_pb_duration_init_ms(&zero, 0);
  iv.interval = &zero;
  spec.interval = ivs;
  spec.n_interval = 1;
  assert_int_equal(dbx_svct_call(f->ch, "CreateSchedule", &q.base, rd, 5000, NULL, NULL), DBX_GRPC_INVALID_ARGUMENT);
  dbx_pb_duration_init_ms(&zero, 60000);
  dbx_pb_duration_init_ms(&big, 400LL * 24 * 3600 * 1000);
  spec.jitter = &big;
  assert_int_equal(dbx_svct_call(f->ch, "CreateSchedule", &q.base, rd, 5000, NULL, NULL), DBX_GRPC_INVALID_ARGUMENT);
  spec.jitter = NULL;
  spec.n_interval = 0;
  static char many[4096];
  size_t k = 0;
  for (int i = 0; i < 1001; i++) k += (size_t)snprintf(many + k, sizeof many - k, "%s%d", i ? "," : "", i % 60);
  char *crons2[1] = {many};
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s * * * *", many);
  crons2[0] = tmp;
  spec.cron_string = crons2;
  spec.n_cron_string = 1;
  assert_int_equal(dbx_svct_call(f->ch, "CreateSchedule", &q.base, rd, 5000, NULL, NULL), DBX_GRPC_INVALID_ARGUMENT);
  spec.n_cron_string = 0;
  /* no action */
  s.action = NULL;
  spec.interval = ivs;
  spec.n_interval = 1;
  assert_int_equal(dbx_svct_call(f->ch, "CreateSchedule", &q.base, rd, 5000, NULL, NULL), DBX_GRPC_INVALID_ARGUMENT);
  s.action = &act;
  /* a start far in the future and a huge catch-up window are fine: no times before 2255 */
  Timestamp far;
  dbx_pb_timestamp_init_ns(&far, 4000000000LL * 1000000000LL); /* 2096 */
  spec.start_time = &far;
  P(SchedulePolicies) pol = PI(SCHEDULE_POLICIES__INIT);
  Duration huge;
  dbx_pb_duration_init_ms(&huge, INT64_MAX / 2);
  pol.catchup_window = &huge;
  s.policies = &pol;
  assert_int_equal(dbx_svct_call(f->ch, "CreateSchedule", &q.base, rd, 5000, NULL, NULL), DBX_GRPC_OK);
  W(DescribeScheduleResponse) *d = describe_ok(f->ch, "s-badin");
  assert_int_equal(d->info->n_future_action_times, 10);
  assert_true(ts_s(d->info->future_action_times[0]) >= 4000000000LL);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  W(ListScheduleMatchingTimesResponse) *m = matching(f->ch, "s-badin", -4000000000LL, 9200000000LL);
  assert_int_equal(m->n_start_time, 1000); /* the cap */
  assert_true(ts_s(m->start_time[0]) >= 4000000000LL);
  protobuf_c_message_free_unpacked(&m->base, NULL);
  assert_int_equal(delete_schedule(f->ch, "s-badin"), DBX_GRPC_OK);
}

/* Every allocation of a CreateSchedule (with a trigger in its initial patch,
 * so a workflow starts in the same batch) failed in turn: the call answers
 * RESOURCE_EXHAUSTED or INTERNAL and leaves no schedule behind, or succeeds
 * whole; never a crash, never half a schedule. */
static void test_schedule_create_allocation_failures(void **state) {
  fixture *f = *state;
  W(CreateScheduleRequest) q = WI(CREATE_SCHEDULE_REQUEST__INIT);
  P(Schedule) s = PI(SCHEDULE__INIT);
  P(ScheduleSpec) spec = PI(SCHEDULE_SPEC__INIT);
  P(IntervalSpec) iv = PI(INTERVAL_SPEC__INIT);
  P(IntervalSpec) *ivs[1] = {&iv};
  char *crons[1] = {"TZ=Europe/Paris 0 9 * * MON-FRI"};
  P(ScheduleAction) act = PI(SCHEDULE_ACTION__INIT);
  Temporal__Api__Workflow__V1__NewWorkflowExecutionInfo nw = TEMPORAL__API__WORKFLOW__V1__NEW_WORKFLOW_EXECUTION_INFO__INIT;
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  P(SchedulePatch) ip = PI(SCHEDULE_PATCH__INIT);
  P(TriggerImmediatelyRequest) trig = PI(TRIGGER_IMMEDIATELY_REQUEST__INIT);
  Duration every;
  dbx_pb_duration_init_ms(&every, 3600 * 1000);
  iv.interval = &every;
  spec.interval = ivs;
  spec.n_interval = 1;
  spec.cron_string = crons;
  spec.n_cron_string = 1;
  s.spec = &spec;
  s.action = &act;
  act.action_case = TEMPORAL__API__SCHEDULE__V1__SCHEDULE_ACTION__ACTION_START_WORKFLOW;
  act.start_workflow = &nw;
  nw.workflow_id = "wf-oom";
  wt.name = "it.Workflow";
  nw.workflow_type = &wt;
  tq.name = TQ;
  nw.task_queue = &tq;
  ip.trigger_immediately = &trig;
  q.namespace_ = "default";
  q.schedule_id = "s-oom";
  q.schedule = &s;
  q.initial_patch = &ip;
  int failures = 0, done = 0;
  for (long n = 1; n < 5000 && !done; n++) {
    dbx_service_test_alloc_fail_at(f->svc, n);
    dbx_rpc_result raw;
    memset(&raw, 0, sizeof raw);
    int st = dbx_svct_call(f->ch, "CreateSchedule", &q.base,
                           &temporal__api__workflowservice__v1__create_schedule_response__descriptor, 20000, NULL, &raw);
    int hit = dbx_service_test_alloc_result(f->svc);
    dbx_rpc_result_cleanup(&raw);
    int dst = 0;
    W(DescribeScheduleResponse) *d = describe(f->ch, "s-oom", &dst);
    if (st != DBX_GRPC_OK) {
      if (!hit) fail_msg("N=%ld: status %d without an allocation failure", n, st);
      if (st != DBX_GRPC_RESOURCE_EXHAUSTED && st != DBX_GRPC_INTERNAL) fail_msg("N=%ld: status %d", n, st);
      if (dst != DBX_GRPC_NOT_FOUND) fail_msg("N=%ld: a failed create left a schedule (describe %d)", n, dst);
      failures++;
      continue;
    }
    /* it succeeded: the whole schedule, its triggered start included */
    assert_int_equal(dst, DBX_GRPC_OK);
    assert_int_equal(d->info->action_count, 1);
    assert_int_equal(d->schedule->spec->n_structured_calendar, 1);
    assert_string_equal(d->schedule->spec->timezone_name, "Europe/Paris");
    assert_int_equal(terminate(f->ch, d->info->recent_actions[0]->start_workflow_result->workflow_id), DBX_GRPC_OK);
    protobuf_c_message_free_unpacked(&d->base, NULL);
    assert_int_equal(delete_schedule(f->ch, "s-oom"), DBX_GRPC_OK);
    if (!hit) done = 1;
  }
  assert_true(done);
  assert_true(failures > 20); /* the walk went through the schedule code */

  /* the same for a PatchSchedule that triggers a start and pauses */
  sched_args a = {.id = "s-oomp", .workflow_id = "wf-oomp", .interval_s = 3600, .overlap = OV(ALLOW_ALL)};
  assert_int_equal(create(f->ch, &a, NULL), DBX_GRPC_OK);
  W(PatchScheduleRequest) pq = WI(PATCH_SCHEDULE_REQUEST__INIT);
  P(SchedulePatch) pp = PI(SCHEDULE_PATCH__INIT);
  pp.trigger_immediately = &trig;
  pp.pause = "held";
  pq.namespace_ = "default";
  pq.schedule_id = "s-oomp";
  pq.patch = &pp;
  failures = 0;
  done = 0;
  for (long n = 1; n < 5000 && !done; n++) {
    dbx_service_test_alloc_fail_at(f->svc, n);
    dbx_rpc_result raw;
    memset(&raw, 0, sizeof raw);
    int st = dbx_svct_call(f->ch, "PatchSchedule", &pq.base,
                           &temporal__api__workflowservice__v1__patch_schedule_response__descriptor, 20000, NULL, &raw);
    int hit = dbx_service_test_alloc_result(f->svc);
    dbx_rpc_result_cleanup(&raw);
    W(DescribeScheduleResponse) *d = describe_ok(f->ch, "s-oomp");
    if (st != DBX_GRPC_OK) {
      if (!hit) fail_msg("patch N=%ld: status %d without an allocation failure", n, st);
      if (d->info->action_count != 0 || d->schedule->state->paused)
        fail_msg("patch N=%ld: a failed patch changed the schedule", n);
      protobuf_c_message_free_unpacked(&d->base, NULL);
      failures++;
      continue;
    }
    assert_int_equal(d->info->action_count, 1);
    assert_true(d->schedule->state->paused);
    assert_string_equal(d->schedule->state->notes, "held");
    assert_int_equal(terminate(f->ch, d->info->recent_actions[0]->start_workflow_result->workflow_id), DBX_GRPC_OK);
    protobuf_c_message_free_unpacked(&d->base, NULL);
    if (!hit) done = 1;
    else { /* an allocation failed and was survived: start over from a clean schedule */
      assert_int_equal(delete_schedule(f->ch, "s-oomp"), DBX_GRPC_OK);
      assert_int_equal(create(f->ch, &a, NULL), DBX_GRPC_OK);
    }
  }
  assert_true(done);
  assert_true(failures > 10);
  assert_int_equal(delete_schedule(f->ch, "s-oomp"), DBX_GRPC_OK);
}

static void test_schedule_catchup_after_restart(void **state) {
  (void)state;
  char *db = dbx_test_tmpdir("dbx-it-sched");
  int port = dbx_svct_free_port();
  pid_t pid = dbx_svct_server_spawn(db, port);
  dbx_rpc_channel *ch = dbx_svct_connect(port);
  sched_args a = {.id = "s-catch", .workflow_id = "wf-catch", .interval_s = 1, .overlap = OV(ALLOW_ALL),
                  .catchup_s = 60};
  assert_int_equal(create(ch, &a, NULL), DBX_GRPC_OK);
  /* the same, with Temporal's shortest catch-up window (10 s) */
  sched_args m = {.id = "s-miss", .workflow_id = "wf-miss", .interval_s = 1, .overlap = OV(ALLOW_ALL),
                  .catchup_s = 10};
  assert_int_equal(create(ch, &m, NULL), DBX_GRPC_OK);
  W(DescribeScheduleResponse) *d = await_actions(ch, "s-catch", 1, 5000);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  d = await_actions(ch, "s-miss", 1, 5000);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  dbx_rpc_channel_destroy(ch);
  int wst = dbx_svct_server_kill(pid);
  assert_true(WIFSIGNALED(wst));
  int64_t down_from = (int64_t)time(NULL) + 1;
  sleep_ms(13000); /* the outage: longer than s-miss's catch-up window */
  int64_t down_to = (int64_t)time(NULL) - 1;
  port = dbx_svct_free_port();
  pid = dbx_svct_server_spawn(db, port);
  ch = dbx_svct_connect(port);
  /* every time of the outage gets its workflow after the restart */
  int64_t end = now_ms() + 10000;
  for (int64_t t = down_from; t <= down_to; t++) {
    while (!started_for(ch, "wf-catch", t)) {
      if (now_ms() > end) fail_msg("no workflow for %lld, a time of the outage", (long long)t);
      sleep_ms(100);
    }
  }
  d = describe_ok(ch, "s-catch");
  assert_true(d->info->action_count >= 1 + (down_to - down_from + 1));
  assert_int_equal(d->info->missed_catchup_window, 0);
  assert_int_equal(d->schedule->policies->overlap_policy, OV(ALLOW_ALL));
  assert_int_equal(dbx_pb_duration_ms(d->schedule->policies->catchup_window), 60000);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  /* s-miss: the recent times of the outage ran, the older ones are counted missed */
  while (!started_for(ch, "wf-miss", down_to)) {
    if (now_ms() > end) fail_msg("no s-miss workflow for %lld, within the window", (long long)down_to);
    sleep_ms(100);
  }
  assert_false(started_for(ch, "wf-miss", down_from));
  assert_false(started_for(ch, "wf-miss", down_from + 1));
  d = describe_ok(ch, "s-miss");
  assert_true(d->info->missed_catchup_window >= 2);
  assert_true(d->info->missed_catchup_window <= down_to - down_from + 1);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  assert_int_equal(delete_schedule(ch, "s-miss"), DBX_GRPC_OK);
  assert_int_equal(delete_schedule(ch, "s-catch"), DBX_GRPC_OK);
  dbx_rpc_channel_destroy(ch);
  dbx_svct_server_kill(pid);
  dbx_test_rmrf(db);
  free(db);
}

int main(void) {
  const struct CMUnitTest t[] = {
      cmocka_unit_test(test_schedule_interval_starts_workflows),
      cmocka_unit_test(test_schedule_create_twice_refused),
      cmocka_unit_test(test_schedule_skip_overlap),
      cmocka_unit_test(test_schedule_cron_and_calendar_times),
      cmocka_unit_test(test_schedule_pause_trigger_unpause),
      cmocka_unit_test(test_schedule_buffer_one_and_all),
      cmocka_unit_test(test_schedule_terminate_and_cancel_other),
      cmocka_unit_test(test_schedule_backfill_update_list),
      cmocka_unit_test(test_schedule_list_query),
      cmocka_unit_test(test_schedule_jitter_and_exclusions),
      cmocka_unit_test(test_schedule_bad_input_refused),
      cmocka_unit_test(test_schedule_named_time_zones),
      cmocka_unit_test(test_schedule_create_allocation_failures),
      cmocka_unit_test(test_schedule_catchup_after_restart),
  };
  return cmocka_run_group_tests(t, group_setup, group_teardown);
}
