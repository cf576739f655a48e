"""Slice programs run side by side: a local process pool (the default), or a Dask cluster when
a scheduler address is given — as sweeps do. The instance goes to each worker once; each
worker keeps the slice programs it built, so that later rounds only change their prices.

A task is ``(kind, state id, arguments)``; `run_tasks` returns the results in the tasks'
order. A result depends on its task alone — not on which worker ran it, nor on what that
worker ran before (a kept program forgets its last basis and incumbent; the work is counted in
branch-and-bound nodes) — so the same tasks give the same results on 1, 2 or 40 workers. A
task's ``until`` is the wall-clock cap (epoch seconds, shared by every machine of a cluster):
a task started after it returns no result.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from optimizer.base.errors import ScenarioError
from optimizer.solve.slices import SliceProgram, SliceResult

MIN_SECONDS = 0.5  # a slice program given less is not started

_WORKER: dict = {}


def _init(inst) -> None:
    _WORKER.clear()
    _WORKER["inst"] = inst
    _WORKER["programs"] = {}


def run_slice(task) -> SliceResult:
    """One slice program solved (built on first use in this process)."""
    kind, sid, args = task
    if args["until"] - time.time() < MIN_SECONDS:
        return SliceResult(sid, None, -np.inf, None, 0.0)
    inst, programs = _WORKER["inst"], _WORKER["programs"]
    commitment = args.get("commitment_key")
    kept = programs.get((kind, sid))
    if kept is None or kept[0] != commitment:  # a fixed program is rebuilt for a new commitment
        if kind == "bound":
            program = SliceProgram(inst, sid, committed_usd=args["committed_usd"],
                                   ondemand_extra_usd=args["ondemand_extra_usd"])
        else:
            program = SliceProgram(inst, sid, committed=args["committed"])
        programs[(kind, sid)] = kept = (commitment, program)
    program = kept[1]
    program.forget()
    if kind == "bound":
        program.price(args["committed_usd"], args["ondemand_extra_usd"])
    if args.get("start") is not None:
        program.start_from(args["start"])
    return program.solve(args["nodes"], args["gap"], args["until"] - time.time())


def check_scheduler(address: str, seconds: float = 10.0) -> None:
    """Refuse, before any work, a Dask scheduler that does not answer at ``address``."""
    from dask.distributed import Client

    try:
        Client(address, timeout=seconds).close()
    except (OSError, TimeoutError) as exc:
        raise ScenarioError(f"no Dask scheduler answers at {address} within {seconds:g} s ({exc.__class__.__name__}); "
                            "start one (dask scheduler) or leave --scheduler out", field="--scheduler") from None


class SliceRunner:
    """Where slice programs run: ``workers`` local processes, or the Dask cluster at
    ``scheduler``."""

    def __init__(self, inst, workers: int | None = None, scheduler: str | None = None):
        self.inst = inst
        self.workers = max(1, workers or min(os.cpu_count() or 1, 8))
        self.scheduler = scheduler
        self._pool = None
        self._client = None

    def __enter__(self):
        if self.scheduler:
            from dask.distributed import Client

            self._client = Client(self.scheduler)
            self._client.run(_init, self.inst)
        elif self.workers > 1:
            self._pool = ProcessPoolExecutor(self.workers, initializer=_init, initargs=(self.inst,))
        else:
            _init(self.inst)
        return self

    def __exit__(self, *exc):
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
        if self._client is not None:
            self._client.close()

    def run_tasks(self, tasks) -> list[SliceResult]:
        """The results of ``tasks``, in their order."""
        if self._client is not None:
            return self._client.gather(self._client.map(run_slice, tasks, pure=False))
        if self._pool is not None:
            return list(self._pool.map(run_slice, tasks))
        return [run_slice(task) for task in tasks]
