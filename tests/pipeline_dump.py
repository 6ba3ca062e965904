"""Print every stage (with the simplifier's report) and the Numba kernel source of every
example function, derived ones included: `python tests/pipeline_dump.py [--reverse]
[FILE.tl ...]` (`--reverse`: the files in the opposite order, so that nothing may depend on
what the process did before; `FILE.tl ...`: only these files of examples/, default all).
`test_determinism.py` runs it in subprocesses under different `PYTHONHASHSEED`s and compares
the sections byte for byte (SPEC 15)."""
from __future__ import annotations

import pathlib
import sys

import tensorlang as tl
from tensorlang import pipeline
from tensorlang.syntax.errors import NotYetSupported

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def dump(out=sys.stdout, reverse: bool = False, only: tuple[str, ...] = ()) -> None:
    paths = sorted(EXAMPLES.glob("*.tl"))
    if only:
        missing = set(only) - {p.name for p in paths}
        if missing:
            raise SystemExit(f"no such example: {', '.join(sorted(missing))}")
        paths = [p for p in paths if p.name in only]
    for path in reversed(paths) if reverse else paths:
        module = tl.load(str(path))
        for fn in module.functions:
            for stage in pipeline.STAGE_NAMES:
                out.write(f"==== {path.name} {fn.name} {stage}\n")
                try:
                    out.write(fn.show(stage) + "\n")
                    report = pipeline.report(fn.program(), stage)
                    if report is not None:
                        out.write(report.text() + "\n")
                except NotYetSupported as err:
                    out.write(f"not yet supported: {err}\n")
                    break
            else:
                out.write(f"==== {path.name} {fn.name} numba\n")
                out.write(fn.generated_source("numba") + "\n")
            out.flush()


if __name__ == "__main__":
    argv = sys.argv[1:]
    dump(reverse="--reverse" in argv, only=tuple(a for a in argv if a != "--reverse"))
