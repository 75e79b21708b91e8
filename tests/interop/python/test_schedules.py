"""Schedules through Temporal's Python SDK (client.create_schedule and the
schedule handle) against the server binary in DBX_BIN, started as the SDK's
dev server: create with an interval spec, a calendar and a cron string,
describe (spec as the server compiled it, action, policies, state), trigger
a start that the SDK's own worker runs to completion (its workflow id is
Temporal's <workflow id>-<nominal time> and it carries the
TemporalScheduledById search attribute), pause and unpause with notes,
list, delete (describe is then refused).
Run by tests/interop/python/run.sh, on durabox and on Temporal's dev server."""

import asyncio
import os
import re
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from temporalio import workflow
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleCalendarSpec,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleRange,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment  # noqa: F401

from conftest import start_local_env
from temporalio.worker import Worker

SCHEDULED_BY = SearchAttributeKey.for_keyword("TemporalScheduledById")


@workflow.defn
class ScheduledWorkflow:
    @workflow.run
    async def run(self, name: str) -> str:
        return f"scheduled {name}"


@pytest.fixture(scope="module")
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture(scope="module")
def env(loop):
    binary = os.environ.get("DBX_BIN")
    assert binary, "DBX_BIN must name the server binary"
    e = loop.run_until_complete(start_local_env(dev_server_existing_path=binary, dev_server_log_level="warn"))
    yield e
    loop.run_until_complete(e.shutdown())


async def until(pred, timeout_s: float = 20.0):
    """Poll pred (async) until it returns a truthy value or the deadline passes."""
    end = asyncio.get_running_loop().time() + timeout_s
    while True:
        v = await pred()
        if v:
            return v
        if asyncio.get_running_loop().time() > end:
            raise AssertionError("condition not reached before the deadline")
        await asyncio.sleep(0.2)


def test_schedule_create_describe_trigger_list_delete(loop, env):
    async def go():
        client: Client = env.client
        q = f"py-sched-{uuid.uuid4()}"
        sid = f"sched-{q}"
        await client.create_schedule(
            sid,
            Schedule(
                action=ScheduleActionStartWorkflow(ScheduledWorkflow.run, "py", id=f"wf-{q}", task_queue=q),
                spec=ScheduleSpec(
                    intervals=[ScheduleIntervalSpec(every=timedelta(hours=1), offset=timedelta(minutes=5))],
                    calendars=[ScheduleCalendarSpec(hour=[ScheduleRange(9)], minute=[ScheduleRange(30)])],
                    cron_expressions=["0 12 * * MON-FRI"],
                ),
                policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.ALLOW_ALL, catchup_window=timedelta(minutes=5)),
                state=ScheduleState(note="made by the python suite"),
            ),
        )
        h = client.get_schedule_handle(sid)
        d = await h.describe()
        assert d.id == sid
        assert isinstance(d.schedule.action, ScheduleActionStartWorkflow)
        assert d.schedule.action.workflow == "ScheduledWorkflow"
        assert d.schedule.action.id == f"wf-{q}"
        assert d.schedule.action.task_queue == q
        assert d.schedule.policy.overlap == ScheduleOverlapPolicy.ALLOW_ALL
        assert d.schedule.policy.catchup_window == timedelta(minutes=5)
        assert d.schedule.state.note == "made by the python suite"
        assert not d.schedule.state.paused
        # the server compiles calendar and cron into structured calendars
        assert d.schedule.spec.intervals == [ScheduleIntervalSpec(every=timedelta(hours=1), offset=timedelta(minutes=5))]
        assert len(d.schedule.spec.calendars) == 2
        assert d.schedule.spec.cron_expressions == []
        hours = sorted(r.start for c in d.schedule.spec.calendars for r in c.hour)
        assert hours == [9, 12]
        assert len(d.info.next_action_times) == 10
        times = d.info.next_action_times
        assert times == sorted(times)
        assert all(t > datetime.now(timezone.utc) - timedelta(seconds=5) for t in times)
        assert d.info.num_actions == 0

        # trigger: a start, run by the SDK's worker
        async with Worker(client, task_queue=q, workflows=[ScheduledWorkflow]):
            await h.trigger()

            async def one_action():
                x = await h.describe()
                return x if x.info.num_actions == 1 and x.info.recent_actions else None

            d = await until(one_action)
            act = d.info.recent_actions[0]
            wfid = act.action.workflow_id
            assert re.fullmatch(rf"wf-{re.escape(q)}-\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ", wfid), wfid
            result = await client.get_workflow_handle(wfid, run_id=act.action.first_execution_run_id).result()
            assert result == "scheduled py"
            wd = await client.get_workflow_handle(wfid).describe()
            assert wd.typed_search_attributes.get(SCHEDULED_BY) == sid

        await h.pause(note="paused by the suite")
        d = await h.describe()
        assert d.schedule.state.paused
        assert d.schedule.state.note == "paused by the suite"
        await h.unpause(note="unpaused by the suite")
        d = await h.describe()
        assert not d.schedule.state.paused
        assert d.schedule.state.note == "unpaused by the suite"

        async def listed():
            ids = [s.id async for s in await client.list_schedules()]
            return sid in ids

        await until(listed)
        await h.delete()
        with pytest.raises(RPCError):
            await h.describe()

    loop.run_until_complete(go())
