"""Long admin tasks (model imports, benchmarks) as jobs the page polls for progress.

A job's work runs in a thread (imports and the load generator block); it reports through
`Job.update`, which only stores plain values under a lock, so polling never waits on it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from omlx.errors import OmlxError
from omlx.schemas.admin import JobStatus

log = logging.getLogger(__name__)

MAX_JOBS = 50  # finished jobs beyond this are forgotten, oldest first


class Job:
    def __init__(self, kind: str, title: str) -> None:
        self.id = secrets.token_hex(8)
        self._lock = threading.Lock()
        self._status = JobStatus(id=self.id, kind=kind, title=title, started=time.time())

    def update(self, *, progress: float | None = None, message: str | None = None,
               detail: dict[str, Any] | None = None) -> None:  # fmt: skip
        with self._lock:
            if progress is not None:
                self._status.progress = max(0.0, min(1.0, progress))
            if message is not None:
                self._status.message = message
            if detail is not None:
                self._status.detail = {**self._status.detail, **detail}

    def finish(self, result: Any = None, error: str | None = None) -> None:
        with self._lock:
            self._status.state = "failed" if error else "done"
            self._status.error = error
            self._status.result = result
            self._status.finished = time.time()
            if not error:
                self._status.progress = 1.0

    def status(self) -> JobStatus:
        with self._lock:
            s = self._status
            return JobStatus(**{f: getattr(s, f) for f in s.__struct_fields__})


class Jobs:
    def __init__(self) -> None:
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, kind: str, title: str, work: Callable[[Job], Any]) -> Job:
        """Run `work(job)` in a thread; its return value is the job's result."""
        job = Job(kind, title)
        self._jobs[job.id] = job
        while len(self._jobs) > MAX_JOBS:
            oldest = next(iter(self._jobs))
            if self._jobs[oldest].status().state == "running":
                break
            del self._jobs[oldest]

        async def run() -> None:
            try:
                result = await asyncio.to_thread(work, job)
            except OmlxError as e:
                job.finish(error=e.message)
            except Exception as e:
                log.exception("%s job %r failed", kind, title)
                job.finish(error=f"{type(e).__name__}: {e}")
            else:
                job.finish(result)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def list(self, kind: str | None = None) -> list[JobStatus]:
        return [j.status() for j in reversed(self._jobs.values())
                if kind is None or j.status().kind == kind]  # fmt: skip

    async def settled(self) -> None:
        """Wait until every started job has finished (tests; a caller that must not leave
        work behind)."""
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def running(self, kind: str) -> bool:
        return any(s.state == "running" for s in self.list(kind))
