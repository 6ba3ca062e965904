"""SPEC 14 on several devices: the jax backend with the data sharded by rows over a mesh of 4
host devices gives the unsharded result, and leaves the result sharded.

XLA reads `--xla_force_host_platform_device_count` when jax starts, so the checks run in a
fresh interpreter with XLA_FLAGS set (`_SCRIPT`); the test asserts on its report.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")

from examples_util import ROOT  # noqa: E402

_SCRIPT = r"""
import json, sys
import numpy as np
import jax
sys.path.insert(0, "tests")
import tensorlang as tl
from examples_util import EXAMPLES, WORKLOADS
from tensorlang.backends import jax_backend

report = {"devices": len(jax.devices())}
mesh = jax_backend.data_mesh(4)

def run(name, deriv, n, shard):
    w = WORKLOADS[name]
    args = w.inputs(w.sizes(n), np.random.default_rng(3))
    fn = tl.load(str(EXAMPLES / w.file))[deriv]
    plain = fn.compile("jax")(**args)
    sharded = fn.compile("jax", mesh=mesh, shard=shard)(**args)
    interp = fn.interpret(**args)
    return {
        "err_vs_unsharded": float(np.max(np.abs(np.asarray(sharded) - plain))),
        "err_vs_interp": float(np.max(np.abs(np.asarray(sharded) - interp))),
        "scale": float(np.max(np.abs(interp))),
        "type": type(sharded).__name__,
        "spec": [a if a is None else str(a) for a in getattr(sharded.sharding, "spec", ())],
        "replicated": bool(sharded.sharding.is_fully_replicated),
        "devices": len(sharded.sharding.device_set),
        "shards": sorted({tuple(s.data.shape) for s in sharded.addressable_shards}),
        "shape": list(np.shape(sharded)),
    }

rows = ("data", None)
report["matfac"] = run("matfac", "matfac_grad", 12,
                       {"T": rows, "Om": rows, "U": rows})
report["logreg"] = run("logreg", "logreg_grad", 10, {"X": rows, "y": ("data",)})
report["logreg_hess"] = run("logreg", "logreg_hess", 10, {"X": rows, "y": ("data",)})
print(json.dumps(report))
"""


def test_gradients_sharded_by_rows_over_four_devices():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["devices"] == 4
    for name in ("matfac", "logreg", "logreg_hess"):
        r = report[name]
        assert r["type"] == "ArrayImpl", r              # a jax.Array left on the devices
        assert r["err_vs_unsharded"] <= 1e-9 * max(1.0, r["scale"]), r
        assert r["err_vs_interp"] <= 1e-9 * max(1.0, r["scale"]), r
        assert r["devices"] == 4, r
    # matfac's gradient in U (N x K) keeps U's row sharding: 4 shards of 3 rows each
    m = report["matfac"]
    assert not m["replicated"] and m["spec"][:1] == ["data"], m
    assert m["shards"] == [[3, 5]] and m["shape"] == [12, 5], m
