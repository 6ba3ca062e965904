"""Access to examples/ and their numpy references for the tests."""
from __future__ import annotations

import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _load_refs():
    spec = importlib.util.spec_from_file_location("numpy_ref", EXAMPLES / "numpy_ref.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["numpy_ref"] = mod   # dataclasses look their module up while the file runs
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


numpy_ref = _load_refs()
WORKLOADS = numpy_ref.WORKLOADS
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.tl"))
