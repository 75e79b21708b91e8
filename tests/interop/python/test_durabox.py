"""Temporal's Python SDK (its own worker and client) against durabox's
embedded service, started by the SDK's test environment as its dev server
(WorkflowEnvironment.start_local with dev_server_existing_path = DBX_BIN).

Scenarios: hello (an activity), signal, query, search attributes registered
(OperatorService), upserted from workflow code and then listed / counted,
a child workflow, continue-as-new, updates (accepted and completed, the
same update id deduped, rejected by a validator, refused on a closed run,
update-with-start), sticky queues (later tasks on the worker's sticky queue,
no replay from the start; a worker without a cache replays; a second
worker takes over and replays), payload limits set small with
--dynamic-config-value (a big start refused, a big command ends the run).
Each asserts the values that come back.
Run by tests/interop/python/run.sh (scripts/setup.sh installs the pinned SDK
into .cache/pyvenv)."""

import asyncio
import json
import os
import uuid
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment  # noqa: F401

from conftest import start_local_env
from temporalio.worker import Worker

ORDER = SearchAttributeKey.for_keyword("DbxOrder")
AMOUNT = SearchAttributeKey.for_int("DbxAmount")
FLAGGED = SearchAttributeKey.for_text("DbxFlagText")  # given to the dev server as --search-attribute


@activity.defn
async def greet(name: str) -> str:
    return f"Hello, {name}!"


@workflow.defn
class HelloWorkflow:
    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(greet, name, start_to_close_timeout=timedelta(seconds=30))


@workflow.defn
class SignalQueryWorkflow:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.done = False

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: self.done)
        return self.items

    @workflow.signal
    def add(self, item: str) -> None:
        self.items.append(item)

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.query
    def count(self) -> int:
        return len(self.items)


@workflow.defn
class UpsertWorkflow:
    def __init__(self) -> None:
        self.go = False

    @workflow.run
    async def run(self) -> str:
        workflow.upsert_search_attributes([ORDER.value_set("o-2"), AMOUNT.value_set(42)])
        workflow.upsert_memo({"note": "upserted"})
        await workflow.wait_condition(lambda: self.go)
        return "ok"

    @workflow.signal
    def release(self) -> None:
        self.go = True


@workflow.defn
class ChildWorkflow:
    @workflow.run
    async def run(self, n: int) -> int:
        return n * 2


@workflow.defn
class ParentWorkflow:
    @workflow.run
    async def run(self, n: int) -> int:
        a = await workflow.execute_child_workflow(ChildWorkflow.run, n, id=f"{workflow.info().workflow_id}-child")
        return a + 1


@workflow.defn
class CountdownWorkflow:
    @workflow.run
    async def run(self, n: int, total: int) -> int:
        if n > 0:
            workflow.continue_as_new(args=[n - 1, total + n])
        return total


@pytest.fixture(scope="module")
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture(scope="module")
def env(loop):
    binary = os.environ.get("DBX_BIN")
    assert binary, "DBX_BIN must name the durabox binary"
    e = loop.run_until_complete(
        start_local_env(
            dev_server_existing_path=binary, dev_server_log_level="warn", search_attributes=[FLAGGED]
        )
    )
    yield e
    loop.run_until_complete(e.shutdown())


def worker(client: Client, tq: str) -> Worker:
    return Worker(
        client,
        task_queue=tq,
        workflows=[HelloWorkflow, SignalQueryWorkflow, UpsertWorkflow, ChildWorkflow, ParentWorkflow, CountdownWorkflow],
        activities=[greet],
    )


def tq() -> str:
    return f"py-{uuid.uuid4()}"


def test_hello(loop, env):
    async def go():
        q = tq()
        async with worker(env.client, q):
            r = await env.client.execute_workflow(HelloWorkflow.run, "durabox", id=f"hello-{q}", task_queue=q)
        assert r == "Hello, durabox!"

    loop.run_until_complete(go())


def test_signal_and_query(loop, env):
    async def go():
        q = tq()
        async with worker(env.client, q):
            h = await env.client.start_workflow(SignalQueryWorkflow.run, id=f"sq-{q}", task_queue=q)
            await h.signal(SignalQueryWorkflow.add, "a")
            await h.signal(SignalQueryWorkflow.add, "b")
            n = 0
            for _ in range(100):  # signals are delivered by workflow tasks: poll the query
                n = await h.query(SignalQueryWorkflow.count)
                if n == 2:
                    break
                await asyncio.sleep(0.1)
            assert n == 2
            await h.signal(SignalQueryWorkflow.finish)
            assert await h.result() == ["a", "b"]
            d = await h.describe()
            assert d.status == WorkflowExecutionStatus.COMPLETED

    loop.run_until_complete(go())


async def settled(get, want, secs: float = 15.0):
    """Visibility (list, count) is eventually consistent on Temporal's server
    (durabox answers from the same commit): the value of get() once it equals
    want, or its last value at the deadline."""
    got = None
    for _ in range(int(secs / 0.1)):
        got = await get()
        if got == want:
            break
        await asyncio.sleep(0.1)
    return got


def test_search_attributes_upserted_then_listed(loop, env):
    async def go():
        await env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace="default",
                search_attributes={
                    "DbxOrder": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
                    "DbxAmount": IndexedValueType.INDEXED_VALUE_TYPE_INT,
                },
            )
        )
        listed = await env.client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace="default"))
        assert listed.custom_attributes["DbxOrder"] == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
        assert listed.custom_attributes["DbxAmount"] == IndexedValueType.INDEXED_VALUE_TYPE_INT
        assert listed.custom_attributes["DbxFlagText"] == IndexedValueType.INDEXED_VALUE_TYPE_TEXT
        q = tq()
        wid = f"sa-{q}"
        undefined = SearchAttributeKey.for_keyword("DbxNeverAdded")
        with pytest.raises(RPCError) as err:
            await env.client.start_workflow(
                UpsertWorkflow.run,
                id=f"{wid}-undefined",
                task_queue=q,
                search_attributes=TypedSearchAttributes([SearchAttributePair(undefined, "x")]),
            )
        assert err.value.status == RPCStatusCode.INVALID_ARGUMENT
        # the same code, each server's own text (docs/compatibility.md); on
        # Temporal's server (tests/interop/on-temporal.sh) its text
        if os.environ.get("DBX_TEMPORAL_BIN") and os.environ.get("DBX_TEMPORAL_BIN") == os.environ.get("DBX_BIN"):
            want = "Namespace default has no mapping defined for search attribute DbxNeverAdded"
        else:
            want = "search attribute DbxNeverAdded is not defined"
        assert want in err.value.message
        async with worker(env.client, q):
            h = await env.client.start_workflow(
                UpsertWorkflow.run,
                id=wid,
                task_queue=q,
                search_attributes=TypedSearchAttributes(
                    [SearchAttributePair(ORDER, "o-1"), SearchAttributePair(FLAGGED, "from the flag")]
                ),
            )
            async def count(query):
                return (await env.client.count_workflows(query)).count

            async def ids(query):
                return [w.id async for w in env.client.list_workflows(query)]

            assert await settled(lambda: count(f"DbxOrder IS NOT NULL AND WorkflowId = '{wid}'"), 1) == 1
            # the upsert is in the first workflow task: wait until Describe shows it
            d = None
            for _ in range(100):
                d = await h.describe()
                if d.typed_search_attributes.get(ORDER) == "o-2":
                    break
                await asyncio.sleep(0.1)
            assert d.typed_search_attributes.get(ORDER) == "o-2"
            assert d.typed_search_attributes.get(AMOUNT) == 42
            assert await d.memo_value("note") == "upserted"
            assert await settled(lambda: ids(f"DbxOrder = 'o-2' AND WorkflowId = '{wid}'"), [wid]) == [wid]
            assert await settled(lambda: ids(f"DbxOrder = 'o-1' AND WorkflowId = '{wid}'"), []) == []
            assert await settled(lambda: count(f"DbxAmount >= 40 AND WorkflowId = '{wid}'"), 1) == 1
            assert d.typed_search_attributes.get(FLAGGED) == "from the flag"  # kept through the upsert
            assert await settled(lambda: count(f"DbxFlagText = 'from the flag' AND WorkflowId = '{wid}'"), 1) == 1
            await h.signal(UpsertWorkflow.release)
            assert await h.result() == "ok"

    loop.run_until_complete(go())


def test_child_workflow(loop, env):
    async def go():
        q = tq()
        async with worker(env.client, q):
            r = await env.client.execute_workflow(ParentWorkflow.run, 20, id=f"parent-{q}", task_queue=q)
            assert r == 41
            child = env.client.get_workflow_handle(f"parent-{q}-child")
            d = await child.describe()
            assert d.status == WorkflowExecutionStatus.COMPLETED
            assert d.parent_id == f"parent-{q}"

    loop.run_until_complete(go())


def test_continue_as_new(loop, env):
    async def go():
        q = tq()
        async with worker(env.client, q):
            h = await env.client.start_workflow(CountdownWorkflow.run, args=[3, 0], id=f"can-{q}", task_queue=q)
            assert await h.result() == 6  # 3 + 2 + 1, over four runs
            async def shape():
                runs = [w async for w in env.client.list_workflows(f"WorkflowId = 'can-{q}'")]
                return len(runs), sum(1 for w in runs if w.status == WorkflowExecutionStatus.CONTINUED_AS_NEW)

            assert await settled(shape, (4, 3)) == (4, 3)  # four runs, three continued as new

    loop.run_until_complete(go())


@workflow.defn
class UpdateWorkflow:
    """A total changed by the update `add` (its validator refuses amounts
    that are not positive); the signal `finish` ends the run with it."""

    def __init__(self) -> None:
        self.total = 0
        self.done = False

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.done)
        return self.total

    @workflow.update
    async def add(self, amount: int) -> int:
        self.total += amount
        return self.total

    @add.validator
    def check_add(self, amount: int) -> None:
        if amount <= 0:
            raise ValueError(f"amount must be positive, got {amount}")

    @workflow.signal
    def finish(self) -> None:
        self.done = True


def update_worker(client: Client, q: str) -> Worker:
    return Worker(client, task_queue=q, workflows=[UpdateWorkflow])


def update_events(history, attr: str) -> list:
    return [e for e in history.events if e.HasField(attr)]


def test_update_accepted_and_completed(loop, env):
    from temporalio.client import WorkflowUpdateStage

    async def go():
        q = tq()
        async with update_worker(env.client, q):
            h = await env.client.start_workflow(UpdateWorkflow.run, id=f"upd-{q}", task_queue=q)
            assert await h.execute_update(UpdateWorkflow.add, 5, id="add-5") == 5
            # wait for ACCEPTED only, then the result through PollWorkflowExecutionUpdate
            uh = await h.start_update(UpdateWorkflow.add, 7, id="add-7", wait_for_stage=WorkflowUpdateStage.ACCEPTED)
            assert await uh.result() == 12
            # the same update id again: the recorded outcome, the handler does not run again
            assert await h.execute_update(UpdateWorkflow.add, 7, id="add-7") == 12
            await h.signal(UpdateWorkflow.finish)
            assert await h.result() == 12
            hist = await h.fetch_history()
        acc = update_events(hist, "workflow_execution_update_accepted_event_attributes")
        done = update_events(hist, "workflow_execution_update_completed_event_attributes")
        assert [e.workflow_execution_update_accepted_event_attributes.protocol_instance_id for e in acc] == [
            "add-5",
            "add-7",
        ]
        assert [e.workflow_execution_update_completed_event_attributes.meta.update_id for e in done] == [
            "add-5",
            "add-7",
        ]
        assert done[0].workflow_execution_update_completed_event_attributes.accepted_event_id == acc[0].event_id

    loop.run_until_complete(go())


def test_update_rejected_by_validator(loop, env):
    from temporalio.client import WorkflowUpdateFailedError

    async def go():
        q = tq()
        async with update_worker(env.client, q):
            h = await env.client.start_workflow(UpdateWorkflow.run, id=f"upd-rej-{q}", task_queue=q)
            with pytest.raises(WorkflowUpdateFailedError) as ei:
                await h.execute_update(UpdateWorkflow.add, -3)
            assert "amount must be positive, got -3" in str(ei.value.cause)
            assert await h.execute_update(UpdateWorkflow.add, 2) == 2
            await h.signal(UpdateWorkflow.finish)
            assert await h.result() == 2
            hist = await h.fetch_history()
        acc = update_events(hist, "workflow_execution_update_accepted_event_attributes")
        assert len(acc) == 1  # the rejected update left no event
        assert acc[0].workflow_execution_update_accepted_event_attributes.accepted_request.input.name == "add"

    loop.run_until_complete(go())


def test_update_of_a_closed_run_is_refused(loop, env):
    async def go():
        q = tq()
        async with update_worker(env.client, q):
            h = await env.client.start_workflow(UpdateWorkflow.run, id=f"upd-closed-{q}", task_queue=q)
            await h.signal(UpdateWorkflow.finish)
            assert await h.result() == 0
            with pytest.raises(RPCError) as ei:
                await h.execute_update(UpdateWorkflow.add, 1)
            assert ei.value.status == RPCStatusCode.NOT_FOUND
            assert "workflow execution already completed" in ei.value.message

    loop.run_until_complete(go())


def test_update_with_start(loop, env):
    from temporalio.client import WithStartWorkflowOperation
    from temporalio.common import WorkflowIDConflictPolicy

    async def go():
        q = tq()
        wid = f"upd-ws-{q}"

        def op() -> WithStartWorkflowOperation:
            return WithStartWorkflowOperation(
                UpdateWorkflow.run, id=wid, task_queue=q, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING
            )

        async with update_worker(env.client, q):
            op1 = op()
            r = await env.client.execute_update_with_start_workflow(
                UpdateWorkflow.add, 3, start_workflow_operation=op1
            )
            assert r == 3
            op2 = op()
            r = await env.client.execute_update_with_start_workflow(
                UpdateWorkflow.add, 4, start_workflow_operation=op2
            )
            assert r == 7
            h1 = await op1.workflow_handle()
            h2 = await op2.workflow_handle()
            assert h1.first_execution_run_id == h2.first_execution_run_id  # the second updated the running run
            await h2.signal(UpdateWorkflow.finish)
            assert await h2.result() == 7

    loop.run_until_complete(go())


# --- failures, timers, cancellation, local activities, versioning, long
# histories and a killed worker -------------------------------------------

from temporalio.common import RetryPolicy  # noqa: E402
from temporalio.exceptions import (  # noqa: E402
    ActivityError,
    ApplicationError,
    CancelledError,
    RetryState,
    TimeoutError as TemporalTimeoutError,
    TimeoutType,
)
from temporalio.client import WorkflowFailureError  # noqa: E402
from temporalio.worker import Replayer  # noqa: E402

FAST_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=100), backoff_coefficient=1.0, maximum_attempts=5)
# attempts seen by the in-process activities, by workflow id
ATTEMPTS: dict[str, list[int]] = {}
# set by cancellable_step when it starts and when it sees its cancel
CANCEL_SEEN: dict[str, asyncio.Event] = {}


def saw_attempt() -> int:
    info = activity.info()
    ATTEMPTS.setdefault(info.workflow_id, []).append(info.attempt)
    return info.attempt


@activity.defn
async def flaky_step(x: int) -> str:
    n = saw_attempt()
    if n < 3:
        raise RuntimeError(f"flaky failure {n}")
    return f"{x} on attempt {n}"


@activity.defn
async def refusing_step() -> str:
    saw_attempt()
    raise ApplicationError("the input is wrong", "detail-1", type="BadInput", non_retryable=True)


@activity.defn
async def silent_step() -> str:
    """Attempt 1 heartbeats {progress: 7} once, then goes silent past its
    heartbeat timeout; a later attempt returns the details it inherited."""
    n = saw_attempt()
    if n == 1:
        activity.heartbeat({"progress": 7})
        await asyncio.sleep(30)  # never reached in time: the server times it out
        return "too late"
    details = activity.info().heartbeat_details
    return f"attempt {n} resumed from {details[0]['progress'] if details else None}"


@activity.defn
async def cancellable_step() -> str:
    wid = activity.info().workflow_id
    CANCEL_SEEN.setdefault(f"{wid}/started", asyncio.Event()).set()
    try:
        while True:
            activity.heartbeat()
            await asyncio.sleep(0.1)
    except asyncio.CancelledError:
        CANCEL_SEEN.setdefault(f"{wid}/cancelled", asyncio.Event()).set()
        raise


@activity.defn
async def add_one(x: int) -> int:
    return x + 1


@activity.defn
async def local_flaky(x: int) -> str:
    n = saw_attempt()
    if n < 2:
        raise RuntimeError("local failure")
    return f"local {x} on attempt {n}"


@workflow.defn
class RetryWorkflow:
    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity(
            flaky_step, 9, start_to_close_timeout=timedelta(seconds=10), retry_policy=FAST_RETRY
        )


@workflow.defn
class RefuseWorkflow:
    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity(
            refusing_step, start_to_close_timeout=timedelta(seconds=10), retry_policy=FAST_RETRY
        )


@workflow.defn
class HeartbeatWorkflow:
    """First with one attempt allowed (the workflow sees the heartbeat
    timeout), then with retries (attempt 2 succeeds)."""

    @workflow.run
    async def run(self) -> list[str]:
        out = []
        try:
            await workflow.execute_activity(
                silent_step,
                start_to_close_timeout=timedelta(seconds=60),
                heartbeat_timeout=timedelta(seconds=1),
                retry_policy=RetryPolicy(maximum_attempts=1),
            )
        except ActivityError as e:
            c = e.cause
            out.append(f"{type(c).__name__} {c.type.name if isinstance(c, TemporalTimeoutError) else ''}")
            out.append(f"retry state {e.retry_state.name if e.retry_state else None}")
        return out


@workflow.defn
class HeartbeatRetryWorkflow:
    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity(
            silent_step,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=1),
            retry_policy=FAST_RETRY,
        )


@workflow.defn
class TimerWorkflow:
    @workflow.run
    async def run(self) -> float:
        t0 = workflow.now()
        await workflow.sleep(timedelta(seconds=1))
        return (workflow.now() - t0).total_seconds()


@workflow.defn
class CancelWorkflow:
    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity(
            cancellable_step,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=1),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )


@workflow.defn
class LocalActivityWorkflow:
    @workflow.run
    async def run(self, x: int) -> list[str]:
        a = await workflow.execute_local_activity(greet, "local", start_to_close_timeout=timedelta(seconds=10))
        b = await workflow.execute_local_activity(
            local_flaky, x, start_to_close_timeout=timedelta(seconds=10), retry_policy=FAST_RETRY
        )
        return [a, b]


@workflow.defn
class ManyActivitiesWorkflow:
    """n activities in batches of 100 run side by side: about 3 events each."""

    @workflow.run
    async def run(self, n: int) -> int:
        total = 0
        for start in range(0, n, 100):
            rs = await asyncio.gather(
                *(
                    workflow.execute_activity(add_one, i, start_to_close_timeout=timedelta(seconds=30))
                    for i in range(start, min(n, start + 100))
                )
            )
            total += sum(rs)
        return total


def more_worker(client: Client, q: str, **kw) -> Worker:
    return Worker(
        client,
        task_queue=q,
        workflows=[
            RetryWorkflow,
            RefuseWorkflow,
            HeartbeatWorkflow,
            HeartbeatRetryWorkflow,
            TimerWorkflow,
            CancelWorkflow,
            LocalActivityWorkflow,
            ManyActivitiesWorkflow,
            SignalQueryWorkflow,
        ],
        activities=[greet, flaky_step, refusing_step, silent_step, cancellable_step, add_one, local_flaky],
        **kw,
    )


def events_with(history, attr: str) -> list:
    return [e for e in history.events if e.HasField(attr)]


def test_retry_then_success(loop, env):
    async def go():
        q = tq()
        wid = f"retry-{q}"
        async with more_worker(env.client, q):
            h = await env.client.start_workflow(RetryWorkflow.run, id=wid, task_queue=q)
            assert await h.result() == "9 on attempt 3"
            hist = await h.fetch_history()
        assert ATTEMPTS[wid] == [1, 2, 3]
        started = events_with(hist, "activity_task_started_event_attributes")
        assert [e.activity_task_started_event_attributes.attempt for e in started] == [3]
        last = started[0].activity_task_started_event_attributes.last_failure
        assert last.message == "flaky failure 2"
        assert len(events_with(hist, "activity_task_completed_event_attributes")) == 1
        assert events_with(hist, "activity_task_failed_event_attributes") == []

    loop.run_until_complete(go())


def test_non_retryable_error(loop, env):
    async def go():
        q = tq()
        wid = f"refuse-{q}"
        async with more_worker(env.client, q):
            h = await env.client.start_workflow(RefuseWorkflow.run, id=wid, task_queue=q)
            with pytest.raises(WorkflowFailureError) as ei:
                await h.result()
            hist = await h.fetch_history()
            d = await h.describe()
        assert ATTEMPTS[wid] == [1]
        act = ei.value.cause
        assert isinstance(act, ActivityError)
        assert act.retry_state == RetryState.NON_RETRYABLE_FAILURE
        app = act.cause
        assert isinstance(app, ApplicationError)
        assert (app.type, app.message, app.non_retryable, list(app.details)) == (
            "BadInput",
            "the input is wrong",
            True,
            ["detail-1"],
        )
        assert d.status == WorkflowExecutionStatus.FAILED
        failed = events_with(hist, "activity_task_failed_event_attributes")
        assert len(failed) == 1
        assert failed[0].activity_task_failed_event_attributes.failure.application_failure_info.type == "BadInput"
        started = events_with(hist, "activity_task_started_event_attributes")
        assert [e.activity_task_started_event_attributes.attempt for e in started] == [1]

    loop.run_until_complete(go())


def test_heartbeat_timeout(loop, env):
    async def go():
        q = tq()
        async with more_worker(env.client, q):
            h = await env.client.start_workflow(HeartbeatWorkflow.run, id=f"hb-{q}", task_queue=q)
            assert await h.result() == ["TimeoutError HEARTBEAT", "retry state MAXIMUM_ATTEMPTS_REACHED"]
            hist = await h.fetch_history()
            timed_out = events_with(hist, "activity_task_timed_out_event_attributes")
            assert len(timed_out) == 1
            f = timed_out[0].activity_task_timed_out_event_attributes.failure
            assert f.timeout_failure_info.timeout_type == TimeoutType.HEARTBEAT.value
            wid = f"hb-retry-{q}"
            h = await env.client.start_workflow(HeartbeatRetryWorkflow.run, id=wid, task_queue=q)
            assert await h.result() == "attempt 2 resumed from 7"
            hist = await h.fetch_history()
        assert ATTEMPTS[wid] == [1, 2]
        started = events_with(hist, "activity_task_started_event_attributes")
        last = started[0].activity_task_started_event_attributes.last_failure
        assert last.timeout_failure_info.timeout_type == TimeoutType.HEARTBEAT.value

    loop.run_until_complete(go())


def test_timer(loop, env):
    async def go():
        q = tq()
        async with more_worker(env.client, q):
            h = await env.client.start_workflow(TimerWorkflow.run, id=f"timer-{q}", task_queue=q)
            assert await h.result() >= 1.0
            hist = await h.fetch_history()
        started = events_with(hist, "timer_started_event_attributes")
        fired = events_with(hist, "timer_fired_event_attributes")
        assert len(started) == 1 and len(fired) == 1
        s = started[0].timer_started_event_attributes
        assert s.start_to_fire_timeout.ToTimedelta() == timedelta(seconds=1)
        assert fired[0].timer_fired_event_attributes.timer_id == s.timer_id
        assert fired[0].timer_fired_event_attributes.started_event_id == started[0].event_id
        assert fired[0].event_time.ToDatetime() - started[0].event_time.ToDatetime() >= timedelta(seconds=1)

    loop.run_until_complete(go())


def test_signal_with_start(loop, env):
    async def go():
        q = tq()
        wid = f"sws-{q}"
        async with more_worker(env.client, q):
            h1 = await env.client.start_workflow(
                SignalQueryWorkflow.run, id=wid, task_queue=q, start_signal="add", start_signal_args=["first"]
            )
            # the run is open: the second signal-with-start signals it, no new run
            h2 = await env.client.start_workflow(
                SignalQueryWorkflow.run, id=wid, task_queue=q, start_signal="add", start_signal_args=["second"]
            )
            assert h1.result_run_id == h2.result_run_id
            await h2.signal(SignalQueryWorkflow.finish)
            assert await h1.result() == ["first", "second"]
            hist = await h1.fetch_history()
        sig = events_with(hist, "workflow_execution_signaled_event_attributes")
        assert [e.workflow_execution_signaled_event_attributes.signal_name for e in sig] == ["add", "add", "finish"]
        assert hist.events[1].HasField("workflow_execution_signaled_event_attributes")  # right after the start
        async def n_runs():
            return len([w async for w in env.client.list_workflows(f"WorkflowId = '{wid}'")])

        assert await settled(n_runs, 1) == 1

    loop.run_until_complete(go())


def test_cancellation(loop, env):
    async def go():
        q = tq()
        wid = f"cancel-{q}"
        started = CANCEL_SEEN.setdefault(f"{wid}/started", asyncio.Event())
        cancelled = CANCEL_SEEN.setdefault(f"{wid}/cancelled", asyncio.Event())
        async with more_worker(env.client, q):
            h = await env.client.start_workflow(CancelWorkflow.run, id=wid, task_queue=q)
            await asyncio.wait_for(started.wait(), 20)
            await h.cancel()
            with pytest.raises(WorkflowFailureError) as ei:
                await h.result()
            assert cancelled.is_set()  # the activity saw the cancel through its heartbeat
            d = await h.describe()
            hist = await h.fetch_history()
        assert isinstance(ei.value.cause, CancelledError)
        assert d.status == WorkflowExecutionStatus.CANCELED
        assert len(events_with(hist, "workflow_execution_cancel_requested_event_attributes")) == 1
        assert len(events_with(hist, "activity_task_cancel_requested_event_attributes")) == 1
        assert len(events_with(hist, "activity_task_canceled_event_attributes")) == 1
        assert hist.events[-1].HasField("workflow_execution_canceled_event_attributes")

    loop.run_until_complete(go())


def test_local_activity(loop, env):
    async def go():
        q = tq()
        wid = f"local-{q}"
        async with more_worker(env.client, q):
            h = await env.client.start_workflow(LocalActivityWorkflow.run, 4, id=wid, task_queue=q)
            assert await h.result() == ["Hello, local!", "local 4 on attempt 2"]
            hist = await h.fetch_history()
        assert ATTEMPTS[wid] == [1, 2]
        markers = events_with(hist, "marker_recorded_event_attributes")
        assert [e.marker_recorded_event_attributes.marker_name for e in markers] == [
            "core_local_activity",
            "core_local_activity",
        ]
        assert events_with(hist, "activity_task_scheduled_event_attributes") == []

    loop.run_until_complete(go())


@activity.defn
async def greet_v2(name: str) -> str:
    return f"Hi {name}, from v2"


@workflow.defn(name="PatchDemo")
class PatchDemoV1:
    def __init__(self) -> None:
        self.go = False

    @workflow.run
    async def run(self) -> str:
        a = await workflow.execute_activity(greet, "v1", start_to_close_timeout=timedelta(seconds=10))
        await workflow.wait_condition(lambda: self.go)
        return a

    @workflow.signal
    def release(self) -> None:
        self.go = True


@workflow.defn(name="PatchDemo")
class PatchDemoV2(PatchDemoV1):
    @workflow.run
    async def run(self) -> str:
        if workflow.patched("greet-v2"):
            a = await workflow.execute_activity(greet_v2, "v2", start_to_close_timeout=timedelta(seconds=10))
        else:
            a = await workflow.execute_activity(greet, "v1", start_to_close_timeout=timedelta(seconds=10))
        await workflow.wait_condition(lambda: self.go)
        return a


@workflow.defn(name="PatchDemo")
class PatchDemoUnguarded(PatchDemoV1):
    """The new code without workflow.patched: replaying an old run fails."""

    @workflow.run
    async def run(self) -> str:
        a = await workflow.execute_activity(greet_v2, "v2", start_to_close_timeout=timedelta(seconds=10))
        await workflow.wait_condition(lambda: self.go)
        return a


def test_patched(loop, env):
    from temporalio.workflow import NondeterminismError

    async def go():
        q = tq()
        # a run started on the old code (no cache: the next worker replays it)
        async with Worker(env.client, task_queue=q, workflows=[PatchDemoV1], activities=[greet], max_cached_workflows=0):
            old = await env.client.start_workflow(PatchDemoV1.run, id=f"patch-old-{q}", task_queue=q)
            for _ in range(200):  # until its activity completed
                hist = await old.fetch_history()
                if events_with(hist, "activity_task_completed_event_attributes"):
                    break
                await asyncio.sleep(0.05)
            assert events_with(hist, "activity_task_completed_event_attributes")
        async with Worker(env.client, task_queue=q, workflows=[PatchDemoV2], activities=[greet, greet_v2]):
            await old.signal(PatchDemoV1.release)
            assert await asyncio.wait_for(old.result(), 30) == "Hello, v1!"  # the old branch, replayed on the patched code
            new = await env.client.start_workflow(PatchDemoV2.run, id=f"patch-new-{q}", task_queue=q)
            await new.signal(PatchDemoV1.release)
            assert await asyncio.wait_for(new.result(), 30) == "Hi v2, from v2"
            old_hist = await old.fetch_history()
            new_hist = await new.fetch_history()
            new_d = await new.describe()
        # the SDK upserted the patch id into TemporalChangeVersion; Describe shows it
        tcv = new_d.raw_description.workflow_execution_info.search_attributes.indexed_fields["TemporalChangeVersion"]
        assert json.loads(tcv.data) == ["greet-v2"]
        assert events_with(old_hist, "marker_recorded_event_attributes") == []
        markers = events_with(new_hist, "marker_recorded_event_attributes")
        assert [m.marker_recorded_event_attributes.marker_name for m in markers] == ["core_patch"]
        r = await Replayer(workflows=[PatchDemoV2]).replay_workflow(old_hist)
        assert r.replay_failure is None
        r = await Replayer(workflows=[PatchDemoV2]).replay_workflow(new_hist)
        assert r.replay_failure is None
        r = await Replayer(workflows=[PatchDemoUnguarded]).replay_workflow(old_hist, raise_on_replay_failure=False)
        assert isinstance(r.replay_failure, NondeterminismError)

    loop.run_until_complete(go())


def test_history_over_2000_events(loop, env):
    async def go():
        q = tq()
        n = 700
        async with more_worker(env.client, q, max_concurrent_activities=100):
            h = await env.client.start_workflow(ManyActivitiesWorkflow.run, n, id=f"many-{q}", task_queue=q)
            assert await asyncio.wait_for(h.result(), 60) == sum(range(1, n + 1))
            hist = await h.fetch_history()
            d = await h.describe()
        assert len(hist.events) > 2000
        assert [e.event_id for e in hist.events] == list(range(1, len(hist.events) + 1))
        assert d.history_length == len(hist.events)
        assert len(events_with(hist, "activity_task_completed_event_attributes")) == n
        r = await Replayer(workflows=[ManyActivitiesWorkflow]).replay_workflow(hist)
        assert r.replay_failure is None

    loop.run_until_complete(go())


def test_worker_kill_9_and_restart(loop, env, tmp_path):
    import signal
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    target = env.client.service_client.config.target_host

    def spawn(q: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, os.path.join(here, "killable_worker.py"), target, q],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    async def wait_for(path, deadline_s: float) -> None:
        for _ in range(int(deadline_s / 0.05)):
            if path.exists() and path.read_text():
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{path} never appeared")

    async def go():
        q = tq()
        first = spawn(q)
        second = None
        try:
            h = await env.client.start_workflow(
                "KillableWorkflow", str(tmp_path), id=f"kill-{q}", task_queue=q, result_type=str
            )
            await wait_for(tmp_path / "attempt-1", 30)
            assert int((tmp_path / "attempt-1").read_text()) == first.pid
            first.send_signal(signal.SIGKILL)
            assert first.wait(10) == -signal.SIGKILL
            second = spawn(q)
            r = await asyncio.wait_for(h.result(), 45)
            assert r == f"attempt 2 in {second.pid}"
            assert not (tmp_path / "attempt-3").exists()
            d = await h.describe()
            assert d.status == WorkflowExecutionStatus.COMPLETED
        finally:
            for p in (first, second):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait(10)

    loop.run_until_complete(go())


# ---- sticky execution: later workflow tasks go to the worker's sticky queue
# with only the new events, so the cached workflow goes on without replaying
# from the start. Every step of StepsWorkflow records, in this process,
# whether the SDK ran it as a replay (workflow.unsafe.is_replaying); the
# workflow is not sandboxed so all its runs share the record.

_steps: dict = {}


@workflow.defn(sandboxed=False)
class StepsWorkflow:
    def __init__(self) -> None:
        self.go = False

    @workflow.run
    async def run(self, key: str, n: int, wait_at: int) -> int:
        for i in range(n):
            _steps.setdefault(key, []).append((i, workflow.unsafe.is_replaying()))
            if i == wait_at:
                await workflow.wait_condition(lambda: self.go)
            else:
                await workflow.sleep(0.05)
        return n

    @workflow.signal
    def proceed(self) -> None:
        self.go = True


STICKY = 2  # temporal.api.enums.v1.TaskQueueKind.TASK_QUEUE_KIND_STICKY


def scheduled_queues(hist) -> list:
    return [
        e.workflow_task_scheduled_event_attributes.task_queue
        for e in events_with(hist, "workflow_task_scheduled_event_attributes")
    ]


def test_sticky_tasks_do_not_replay_from_the_start(loop, env):
    async def go():
        q = tq()
        key = f"steps-{q}"
        async with Worker(env.client, task_queue=q, workflows=[StepsWorkflow]):
            h = await env.client.start_workflow(StepsWorkflow.run, args=[key, 6, -1], id=key, task_queue=q)
            assert await asyncio.wait_for(h.result(), 30) == 6
            hist = await h.fetch_history()
        # each step ran once, none of them as a replay
        assert _steps[key] == [(i, False) for i in range(6)]
        queues = scheduled_queues(hist)
        assert len(queues) == 7
        assert queues[0].name == q and queues[0].kind != STICKY
        # every later task went to the worker's sticky queue
        assert all(t.kind == STICKY and t.normal_name == q and t.name != q for t in queues[1:])

    loop.run_until_complete(go())


def test_without_a_cache_every_task_replays(loop, env):
    # the check above can fail: a worker without a cache replays the steps
    async def go():
        q = tq()
        key = f"steps-nocache-{q}"
        async with Worker(env.client, task_queue=q, workflows=[StepsWorkflow], max_cached_workflows=0):
            h = await env.client.start_workflow(StepsWorkflow.run, args=[key, 4, -1], id=key, task_queue=q)
            assert await asyncio.wait_for(h.result(), 30) == 4
            hist = await h.fetch_history()
        assert [s for s in _steps[key] if not s[1]] == [(i, False) for i in range(4)]
        assert (0, True) in _steps[key]
        assert all(t.kind != STICKY for t in scheduled_queues(hist))

    loop.run_until_complete(go())


def test_sticky_worker_gone_then_another_replays(loop, env):
    # the first worker ends while the run waits for a signal; the run's next
    # task reaches a second worker (after the sticky queue's worker is known
    # gone, or its schedule-to-start timeout), which replays from the start
    async def go():
        q = tq()
        key = f"steps-handover-{q}"
        async with Worker(env.client, task_queue=q, workflows=[StepsWorkflow]):
            h = await env.client.start_workflow(StepsWorkflow.run, args=[key, 4, 1], id=key, task_queue=q)
            for _ in range(200):
                if len(_steps.get(key, [])) >= 2:
                    break
                await asyncio.sleep(0.05)
            assert _steps[key] == [(0, False), (1, False)]
        async with Worker(env.client, task_queue=q, workflows=[StepsWorkflow]):
            await h.signal(StepsWorkflow.proceed)
            assert await asyncio.wait_for(h.result(), 40) == 4
            hist = await h.fetch_history()
        # the second worker replayed steps 0 and 1, then ran 2 and 3 live
        assert _steps[key] == [(0, False), (1, False), (0, True), (1, True), (2, False), (3, False)]
        assert len(events_with(hist, "workflow_execution_signaled_event_attributes")) == 1

    loop.run_until_complete(go())


# ---- payload limits, configured small through Temporal's dynamic-config keys
# (`--dynamic-config-value limit.blobSize.error=N`), on a server of their own.

BLOB_LIMIT = 20000


@workflow.defn
class BigActivityInputWorkflow:
    @workflow.run
    async def run(self, size: int) -> str:
        return await workflow.execute_activity(greet, "x" * size, start_to_close_timeout=timedelta(seconds=30))


@pytest.fixture(scope="module")
def small_limits_env(loop):
    e = loop.run_until_complete(
        start_local_env(
            dev_server_existing_path=os.environ["DBX_BIN"],
            dev_server_log_level="error",
            # Temporal applies the error limit only past the warning one: both are set
            dev_server_extra_args=[
                "--dynamic-config-value",
                f"limit.blobSize.error={BLOB_LIMIT}",
                "--dynamic-config-value",
                f"limit.blobSize.warn={BLOB_LIMIT // 2}",
            ],
        )
    )
    yield e
    loop.run_until_complete(e.shutdown())


def test_blob_limit_refuses_a_big_start(loop, small_limits_env):
    async def go():
        q = tq()
        with pytest.raises(RPCError) as err:
            await small_limits_env.client.start_workflow(
                HelloWorkflow.run, "y" * (BLOB_LIMIT + 100), id=f"big-{q}", task_queue=q
            )
        assert err.value.status == RPCStatusCode.INVALID_ARGUMENT
        assert "Blob data size exceeds limit" in err.value.message
        # under the limit: started
        h = await small_limits_env.client.start_workflow(HelloWorkflow.run, "y" * 100, id=f"small-{q}", task_queue=q)
        await h.terminate()

    loop.run_until_complete(go())


def test_blob_limit_big_command_fails_the_task_and_ends_the_run(loop, small_limits_env):
    async def go():
        q = tq()
        async with Worker(
            small_limits_env.client, task_queue=q, workflows=[BigActivityInputWorkflow], activities=[greet]
        ):
            h = await small_limits_env.client.start_workflow(
                BigActivityInputWorkflow.run, BLOB_LIMIT + 100, id=f"bigcmd-{q}", task_queue=q
            )
            # the server fails the task and terminates the run
            d = None
            for _ in range(600):
                d = await h.describe()
                if d.status != WorkflowExecutionStatus.RUNNING:
                    break
                await asyncio.sleep(0.05)
            hist = await h.fetch_history()
        assert d.status == WorkflowExecutionStatus.TERMINATED
        failed = events_with(hist, "workflow_task_failed_event_attributes")
        assert len(failed) == 1
        a = failed[0].workflow_task_failed_event_attributes
        assert a.cause == 2  # WORKFLOW_TASK_FAILED_CAUSE_BAD_SCHEDULE_ACTIVITY_ATTRIBUTES
        msg = "BadScheduleActivityAttributes: ScheduleActivityTaskCommandAttributes.Input exceeds size limit."
        assert a.failure.message == msg
        term = events_with(hist, "workflow_execution_terminated_event_attributes")
        assert len(term) == 1 and term[0].workflow_execution_terminated_event_attributes.reason == msg
        assert not events_with(hist, "activity_task_scheduled_event_attributes")

    loop.run_until_complete(go())
