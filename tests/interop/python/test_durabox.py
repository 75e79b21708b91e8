"""Temporal's Python SDK (its own worker and client) against durabox's
embedded service, started by the SDK's test environment as its dev server
(WorkflowEnvironment.start_local with dev_server_existing_path = DBX_BIN).

Scenarios: hello (an activity), signal, query, search attributes registered
(OperatorService), upserted from workflow code and then listed / counted,
a child workflow, continue-as-new, updates (accepted and completed, the
same update id deduped, rejected by a validator, refused on a closed run,
update-with-start).
Each asserts the values that come back.
Run by tests/interop/python/run.sh (scripts/setup.sh installs the pinned SDK
into .cache/pyvenv)."""

import asyncio
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
from temporalio.testing import WorkflowEnvironment
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
        WorkflowEnvironment.start_local(
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
            assert (await env.client.count_workflows(f"DbxOrder IS NOT NULL AND WorkflowId = '{wid}'")).count == 1
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
            listed = [w.id async for w in env.client.list_workflows(f"DbxOrder = 'o-2' AND WorkflowId = '{wid}'")]
            assert listed == [wid]
            assert [w.id async for w in env.client.list_workflows(f"DbxOrder = 'o-1' AND WorkflowId = '{wid}'")] == []
            c = await env.client.count_workflows(f"DbxAmount >= 40 AND WorkflowId = '{wid}'")
            assert c.count == 1
            assert d.typed_search_attributes.get(FLAGGED) == "from the flag"  # kept through the upsert
            c = await env.client.count_workflows(f"DbxFlagText = 'from the flag' AND WorkflowId = '{wid}'")
            assert c.count == 1
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
            runs = [w async for w in env.client.list_workflows(f"WorkflowId = 'can-{q}'")]
            assert len(runs) == 4
            assert sum(1 for w in runs if w.status == WorkflowExecutionStatus.CONTINUED_AS_NEW) == 3

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
