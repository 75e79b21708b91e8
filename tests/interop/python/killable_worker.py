"""A Python SDK worker in a process of its own, for the kill -9 scenario of
test_durabox.py: `python killable_worker.py ADDRESS TASK_QUEUE`. Its
activity `slow_step(marker_dir)` writes `attempt-N` (holding the worker's
pid) into marker_dir when it starts; attempt 1 then heartbeats until the
process is killed, later attempts return at once."""

import asyncio
import os
import sys
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import Worker


@activity.defn
async def slow_step(marker_dir: str) -> str:
    n = activity.info().attempt
    with open(os.path.join(marker_dir, f"attempt-{n}"), "w") as f:
        f.write(str(os.getpid()))
    if n == 1:
        while True:  # until kill -9
            activity.heartbeat()
            await asyncio.sleep(0.2)
    return f"attempt {n} in {os.getpid()}"


@workflow.defn
class KillableWorkflow:
    @workflow.run
    async def run(self, marker_dir: str) -> str:
        return await workflow.execute_activity(
            slow_step,
            marker_dir,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=2),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=3),
        )


async def main(address: str, task_queue: str) -> None:
    client = await Client.connect(address)
    async with Worker(client, task_queue=task_queue, workflows=[KillableWorkflow], activities=[slow_step]):
        print("worker running", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
