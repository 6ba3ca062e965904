"""tensorlang's cost-model counts, computed in a worker process with a time limit.

`Function.cost(...)` costs the program as it will run, so it runs the whole pipeline, the
egglog simplifier included; on a large derivative program that search can take minutes (and
Rust code cannot be interrupted from Python).  The suite asks a long-lived worker (one
`python` process, which keeps its loaded modules and the pipeline's memo between requests)
and kills it when an answer is late; the request is then retried at the last stage before
the simplifier, and the counts are marked with the stage they come from.

Protocol on the worker's stdin/stdout: 8-byte big-endian length + pickle, both ways.
"""
from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys
import time
from typing import Any, BinaryIO

from .tasks import ROOT

FALLBACK_STAGE = "ssa"


def _send(fh: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    fh.write(struct.pack(">Q", len(data)) + data)
    fh.flush()


def _recv(fh: BinaryIO) -> Any:
    head = fh.read(8)
    if len(head) < 8:
        raise EOFError
    (n,) = struct.unpack(">Q", head)
    return pickle.loads(fh.read(n))


def cost_dict(c: Any, stage: str) -> dict[str, Any]:
    return {"adds": int(c.adds), "muls": int(c.muls), "calls": int(c.calls),
            "total": int(c.total), "stage": stage}


def serve(allowance: int | None = None) -> None:
    """The worker's loop: requests (task name, derivative key or None, args, stage)."""
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but frames on the real stdout
    if allowance:
        from .runner import vm_data

        import resource

        data = vm_data() or 0
        resource.setrlimit(resource.RLIMIT_DATA, (data + allowance, resource.RLIM_INFINITY))
    from .systems_tensorlang import System
    from .tasks import TASKS

    system = System("interp")
    while True:
        try:
            req = _recv(sys.stdin.buffer)
        except EOFError:
            return
        name, key, args, stage = req
        try:
            task = TASKS[name]
            if key is None:
                fns = [system.function(task)]
            else:
                fns = system.parts(task, next(d for d in task.derivs if d.key == key))
            costs = [system.function_cost(f, args, stage) for f in fns]
            used = stage or fns[0].default_stage()
            total = costs[0] if len(costs) == 1 else _sum(costs)
            _send(out, ("ok", cost_dict(total, used)))
        except Exception as err:  # noqa: BLE001 -- reported to the suite, which goes on
            _send(out, ("error", f"{type(err).__name__}: {err}".splitlines()[0][:300]))


def _sum(costs: list[Any]) -> Any:
    from .systems_tensorlang import CostSum

    return CostSum(costs)


class CostWorker:
    """The parent's side: `cost(task, key, args)` -> (cost dict or None, message)."""

    def __init__(self, timeout: float = 60.0, allowance: int | None = None) -> None:
        self.timeout = timeout
        self.allowance = allowance
        self.proc: subprocess.Popen[bytes] | None = None
        # (task, key) whose default stage timed out: the simplifier works at representative
        # sizes, so it would time out again at every N; go to the fallback stage at once.
        self.slow: dict[tuple[str, str | None], str] = {}

    def _start(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            code = f"from bench.costs import serve; serve({self.allowance!r})"
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, cwd=str(ROOT),
                env={**os.environ, "PYTHONPATH": os.pathsep.join(
                    [str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)})
        return self.proc

    def _ask(self, req: tuple) -> tuple[str, Any]:
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            _send(proc.stdin, req)
        except (BrokenPipeError, OSError) as err:
            self.close()
            return "error", f"cost worker died: {err}"
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                return "timeout", f"over {self.timeout:g} s"
            ready, _, _ = select.select([proc.stdout], [], [], left)
            if ready:
                try:
                    return _recv(proc.stdout)
                except (EOFError, pickle.UnpicklingError) as err:
                    self.close()
                    return "error", f"cost worker died ({type(err).__name__})"

    def cost(self, task: str, key: str | None,
             args: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
        if (task, key) in self.slow:
            status, value = "timeout", self.slow[(task, key)]
        else:
            status, value = self._ask((task, key, args, None))
        if status == "ok":
            return value, ""
        if status != "timeout":
            return None, value
        self.slow[(task, key)] = value
        status2, value2 = self._ask((task, key, args, FALLBACK_STAGE))
        msg = f"default stage {value} (simplifier); counts at stage '{FALLBACK_STAGE}'"
        if status2 == "ok":
            return value2, msg
        return None, f"default stage {value}; stage '{FALLBACK_STAGE}': {value2}"

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for fh in (self.proc.stdin, self.proc.stdout):
                if fh is not None:
                    fh.close()
            self.proc = None
