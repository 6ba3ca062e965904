"""The `tl` command (SPEC 9): run, check, show, cost, repl, prove, bench, cache.

Exit codes: 0 ok, 1 program error (a `TLError`, printed with its location and caret, never a
traceback), 2 usage error (argparse).  Set TL_DEBUG=1 to see the traceback of an internal
error.
"""
from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import time
import traceback
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tensorlang.syntax.errors import ResourceError, TLError, diagnostic, printable
from tensorlang.syntax import limits

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf|nan)",
                    re.IGNORECASE)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_SIZE = 2**63 - 1  # as api.MAX_SIZE (not imported here: the API is loaded lazily)
STAGE_CHOICES = ("parsed", "letlift", "pairelim", "genpush", "ssa", "derive", "simplified",
                 "source")
CODE_STAGES = ("numba", "cuda", "jax")   # `tl show --stage numba`: the generated source
BACKEND_CHOICES = ("interp", "numba", "cuda", "jax")


# ---------------------------------------------------------------------------------------------
# Output formatting shared with the REPL


def format_value(value: Any) -> str:
    """Scalars in full (shortest round-trip repr), arrays with numpy's summary printing."""
    if isinstance(value, tuple):
        return "(" + ", ".join(format_value(v) for v in value) + ")"
    if isinstance(value, np.ndarray):
        return np.array2string(value, separator=" ") if value.size else f"[] (shape {value.shape})"
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    return str(value)


def format_result(value: Any, names: Sequence[str] = ()) -> str:
    """A `tl run` result: a tuple prints one component per line, labelled by its name
    (`names`, see `result_names`) or else by its projection (`result.1.0`)."""
    if not isinstance(value, tuple):
        return format_value(value)
    lines = []
    for label, leaf in result_leaves(value, names):
        text = format_value(leaf)
        sep = "\n" if "\n" in text else " "
        lines.append(f"{label} ={sep}{text}")
    return "\n".join(lines)


def result_leaves(value: Any, names: Sequence[str] = ()) -> list[tuple[str, Any]]:
    """The components of a result with their labels: the names when there is one per
    component of the top-level tuple (a nested component gets `name.0`, ...)."""
    if not isinstance(value, tuple):
        return [(names[0] if len(names) == 1 else "result", value)]
    flat = _flatten_tuple(value)
    if len(names) != len(flat) or len(set(names)) != len(names):
        return _leaves(value, "result")
    out: list[tuple[str, Any]] = []
    for name, part in zip(names, flat):
        out.extend(_leaves(part, name))
    return out


def _flatten_tuple(value: tuple) -> list[Any]:
    """An n-tuple nests to the right, `(a, (b, c))`: its n components."""
    out: list[Any] = []
    while isinstance(value, tuple) and len(value) == 2:
        out.append(value[0])
        value = value[1]
    out.append(value)
    return out


def result_names(fn: Any) -> list[str]:
    """Names for the components of `fn`'s result: a derived function's `y`, `d_y`, `d_x`...
    (SPEC 2.5), a def's returned variables (`return (a, b)`); [] when there are none."""
    from tensorlang.ir import ast

    kind = getattr(fn, "kind", None) if fn.is_derived else None
    wrt = list(getattr(fn, "wrt", ()) or ())
    if kind is not None and not wrt:
        base_names = {p.name for p in fn.base.params}
        wrt = [p.name for p in fn.base.params if p.name in base_names
               and not isinstance(p.type, (ast.TSize, ast.TRel))]
    if kind == "jvp":
        return ["y", "d_y"]
    if kind == "vjp":
        return ["y", *(f"d_{x}" for x in wrt)]
    if kind == "grad":
        return [f"d_{x}" for x in wrt]
    if kind is not None:
        return []
    body = getattr(fn.source, "body", None)
    while isinstance(body, ast.Let):
        body = body.body
    names: list[str] = []
    while isinstance(body, ast.Pair) and isinstance(body.a, ast.Var):
        names.append(body.a.name)
        body = body.b
    if isinstance(body, ast.Var) and names:
        return names + [body.name]
    return []


def _leaves(value: Any, label: str) -> list[tuple[str, Any]]:
    if isinstance(value, tuple):
        out: list[tuple[str, Any]] = []
        for k, v in enumerate(value):
            out.extend(_leaves(v, f"{label}.{k}"))
        return out
    return [(label, value)]


def _cost_numbers(c: Any) -> tuple[int, int, int, int]:
    if isinstance(c, Mapping):
        a, m, k = int(c["adds"]), int(c["muls"]), int(c["calls"])
        return a, m, k, int(c.get("total", a + m + k))
    if isinstance(c, (tuple, list)) and not hasattr(c, "adds"):
        a, m, k = (int(x) for x in c[:3])
        return a, m, k, int(c[3]) if len(c) > 3 else a + m + k
    a, m, k = int(c.adds), int(c.muls), int(c.calls)
    return a, m, k, int(getattr(c, "total", a + m + k))


def _per_binding(cost: Any) -> list[tuple[str, Any]]:
    pb = getattr(cost, "per_binding", None) or {}
    if isinstance(pb, Mapping):
        return [(str(k), v) for k, v in pb.items()]
    rows = []
    for item in pb:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            rows.append(item)
        else:
            rows.append((str(getattr(item, "name", "?")), item))
    return rows


def format_cost(cost: Any, title: str) -> str:
    """The totals and a per-binding table."""
    rows = [("total", cost)] + _per_binding(cost)
    width = max(len(name) for name, _ in rows) + 2
    numbers = [_cost_numbers(c) for _, c in rows]
    heads = ("adds", "muls", "calls", "total")
    # every column as wide as its widest number, and at least two spaces between columns
    cols = [max(10, len(h), *(len(f"{n[k]:,}") for n in numbers)) + 2
            for k, h in enumerate(heads)]
    lines = [title, f"{'':<{width}}" + "".join(f"{h:>{w}}" for h, w in zip(heads, cols))]
    for i, ((name, _), nums) in enumerate(zip(rows, numbers)):
        lines.append(f"{name:<{width}}" + "".join(f"{n:>{w},}" for n, w in zip(nums, cols)))
        if i == 0 and len(rows) > 1:
            lines.append("per binding:")
    return "\n".join(lines)


def format_warnings(warnings: Sequence[Any]) -> str:
    return "\n".join(_warning_text(w) for w in warnings)


def _warning_text(w: Any) -> str:
    if isinstance(w, TLError):
        return str(w)
    return diagnostic("warning", getattr(w, "message", None) or str(w), getattr(w, "loc", None))


# ---------------------------------------------------------------------------------------------
# Argument values


def _assignment(text: str) -> tuple[str, str]:
    """argparse type of NAME=VALUE."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not _NAME.fullmatch(name) or not value.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value.strip()


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _size_assignment(text: str) -> tuple[str, int]:
    name, value = _assignment(text)
    if not _INT.fullmatch(value) or not 0 <= int(value) <= MAX_SIZE:
        raise argparse.ArgumentTypeError(f"expected SIZE=INT with 0 <= INT <= {MAX_SIZE}, "
                                         f"got {text!r}")
    return name, int(value)


RAND = object()  # marker: fill this input with random values


def parse_value(name: str, text: str) -> Any:
    """An argument value from the command line: int, float, '@rand' or a .npy/.npz path."""
    if text == "@rand":
        return RAND
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    if text.endswith((".npy", ".npz")):
        return load_array(name, text)
    raise TLError(f"value of {name}: {text!r} is not a number, '@rand' or a .npy/.npz file")


def load_array(name: str, path: str) -> Any:
    """An array from a .npy file, or the entry `name` (or the only entry) of a .npz file."""
    try:
        data = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise TLError(f"value of {name}: no such file {path}") from None
    except (OSError, ValueError) as err:
        raise TLError(f"value of {name}: cannot read {path}: {err}") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        return _checked_array(name, path, data)
    with data:
        keys = list(data.keys())
        if name in keys:
            key = name
        elif len(keys) == 1:
            key = keys[0]
        else:
            raise TLError(f"value of {name}: {path} has no array named {name} "
                          f"(it has {', '.join(keys) or 'none'})")
        try:
            return _checked_array(name, f"{path}[{key}]", data[key])
        except (OSError, ValueError) as err:   # object arrays need pickle: never loaded
            raise TLError(f"value of {name}: cannot read {path}[{key}]: {err}") from None


def _checked_array(name: str, where: str, arr: Any) -> Any:
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "biuf":
        what = arr.dtype if isinstance(arr, np.ndarray) else type(arr).__name__
        raise TLError(f"value of {name}: {where} holds {what} values, not real numbers or "
                      f"booleans")
    return arr


def random_value(t: Any, sizes: Mapping[str, int], rng: np.random.Generator) -> Any:
    """Random input of type `t`: standard normal reals, sparse (10%) boolean relations."""
    from tensorlang.ir import ast

    if isinstance(t, ast.TIndex):  # an index array: entries uniform in its range
        shape = tuple(int(a.evaluate(sizes)) for a in t.sizes)
        return rng.integers(0, max(shape[-1], 1), size=shape[:-1])
    if isinstance(t, ast.TRel):
        shape = tuple(int(a.evaluate(sizes)) for a in t.sizes)
        return rng.random(shape) < 0.1
    return _random_real(t, (), sizes, rng)


def _random_real(t: Any, outer: tuple[int, ...], sizes: Mapping[str, int],
                 rng: np.random.Generator) -> Any:
    from tensorlang.ir import ast

    dims = list(outer)
    while isinstance(t, ast.TArr):
        dims.append(int(t.size.evaluate(sizes)))
        t = t.elem
    if isinstance(t, ast.TPair):
        return (_random_real(t.a, tuple(dims), sizes, rng),
                _random_real(t.b, tuple(dims), sizes, rng))
    return float(rng.standard_normal()) if not dims else rng.standard_normal(tuple(dims))


def build_args(fn: Any, given: Mapping[str, Any], random_sizes: Mapping[str, int],
               seed: int, backend: str = "numba") -> dict[str, Any]:
    """Complete keyword arguments for `fn`: given values, sizes, and random inputs (refused
    before they are made when the run on `backend` would exceed the memory limit)."""
    from tensorlang import api
    from tensorlang.ir import ast

    params = {p.name: p for p in fn.params}
    for name in list(given) + list(random_sizes):
        if name not in params:
            raise TLError(f"{fn.name} has no parameter '{name}' "
                          f"(parameters: {', '.join(params)})")
    for name in random_sizes:
        if not isinstance(params[name].type, ast.TSize):
            raise TLError(f"--random {name}=...: {name} is not a size of {fn.name}")
    fixed = {k: v for k, v in given.items() if v is not RAND}
    fixed.update(random_sizes)
    wanted = [p for p in fn.params if not isinstance(p.type, ast.TSize)
              and (p.name not in fixed)]
    if not wanted:
        return fixed
    missing = [p.name for p in wanted if given.get(p.name) is not RAND]
    if missing and not random_sizes:
        raise TLError(f"missing argument{'s' if len(missing) > 1 else ''} "
                      f"{', '.join(missing)} of {fn.name}: give --arg NAME=VALUE "
                      f"(or NAME=@rand), or --random SIZE=INT to fill every input")
    sizes = api.infer_sizes(fn.name, fn.params, fixed, fn.param_locs())
    unknown = [p.name for p in fn.params if isinstance(p.type, ast.TSize) and p.name not in sizes]
    if unknown:
        raise TLError(f"random inputs need every size: give --random "
                      f"{' '.join(n + '=INT' for n in unknown)}")
    from tensorlang.semantics import memory

    # before making the random inputs; the estimate a call of the API makes on `backend`
    # (`api.Compiled.estimate`: on Numba the arrays its kernels allocate)
    est = fn.compile(backend).estimate({**fixed, **sizes}) if backend == "numba" else \
        memory.estimate(api.memory_program(fn, backend), {**fixed, **sizes},
                        compiled=backend != "interp")
    memory.check_estimate(est, fn.name)
    rng = np.random.default_rng(seed)
    values = _random_args(fn, sizes, rng)
    out = dict(fixed)
    out.update(sizes)
    for p in wanted:
        out[p.name] = values[p.name] if p.name in values else random_value(p.type, sizes, rng)
    return out


def _random_args(fn: Any, sizes: Mapping[str, int], rng: np.random.Generator) -> dict:
    """`testing.random_args` where it exists (it knows well-conditioned inputs)."""
    if fn.is_derived:
        return {}
    try:
        from tensorlang import testing
    except ImportError:
        return {}
    make = getattr(testing, "random_args", None)
    return dict(make(fn.source, dict(sizes), rng)) if make is not None else {}


# ---------------------------------------------------------------------------------------------
# Subcommands


def _load_function(path: str, name: str | None) -> Any:
    """Function `name` (default: the last) of the file, after printing the warnings about it
    (not those about the other functions of the file)."""
    from tensorlang import api

    module = api.load(path)
    fn = _function(module, name)
    mine = [w for w in module.warnings if _warning_in(w, fn)]
    if mine:
        print(format_warnings(mine), file=sys.stderr)
    return fn


def _warning_in(w: Any, fn: Any) -> bool:
    """Whether warning `w` lies in `fn`'s definition (or the def it derives from): between
    its `def` line and the next def of the file."""
    while fn.is_derived:
        fn = fn.base
    loc, start = getattr(w, "loc", None), getattr(fn.source, "loc", None)
    if loc is None or start is None:
        return True
    later = [f.source.loc.line for f in fn.module.functions
             if getattr(f.source, "loc", None) is not None and f.source.loc.line > start.line]
    return start.line <= loc.line < min(later, default=loc.line + 1)


def _function(module: Any, name: str | None) -> Any:
    if name is None:
        return module.last
    try:
        return module[name]
    except KeyError as err:
        raise TLError(err.args[0]) from None


def cmd_run(ns: argparse.Namespace) -> int:
    from tensorlang.semantics import memory

    if ns.max_memory is not None:
        memory.set_limit(memory.parse_amount(ns.max_memory))
    t0 = time.perf_counter()
    fn = _load_function(ns.file, ns.func)
    t1 = time.perf_counter()
    if ns.devices is None:
        compiled = fn.compile(ns.backend)
    elif ns.backend != "jax":
        raise TLError("--devices needs --backend jax")
    else:
        from tensorlang.backends import jax_backend

        jax_backend.request_host_devices(ns.devices)
    t2 = time.perf_counter()
    for why in getattr(compiled, "warnings", ()) if ns.devices is None else ():
        print(f"warning: {fn.name}: the simplifier failed ({why}); `tl show {ns.file} "
              f"{fn.name} --stage simplified` shows its report", file=sys.stderr)
    given = {name: parse_value(name, text) for name, text in ns.arg}
    args = build_args(fn, given, dict(ns.random), ns.seed, ns.backend)
    if ns.devices is not None:   # rows of every tensor and relation over a mesh of N devices
        sizes = fn.bind(**args)
        compiled = fn.compile("jax", mesh=jax_backend.data_mesh(ns.devices),
                              shard=jax_backend.row_shard(fn.params, sizes, ns.devices))
    t3 = time.perf_counter()
    result = compiled(**args)
    if ns.devices is not None:
        result = jax_backend.to_host(result)
    t4 = time.perf_counter()
    names = result_names(fn)
    print(format_result(result, names), flush=True)
    drew = bool(ns.random) or any(v is RAND for v in given.values())
    warning = nan_warning(fn, args, result, random_inputs=drew)
    if warning:
        print(warning, file=sys.stderr)
    if ns.out:
        save_result(ns.out, result, names)
    if ns.time:
        print(f"time: load+check {t1 - t0:.4f} s, compile {t2 - t1:.4f} s, "
              f"inputs {t3 - t2:.4f} s, run ({ns.backend}) {t4 - t3:.4f} s", file=sys.stderr)
    return 0


def nan_warning(fn: Any, args: Mapping[str, Any], result: Any,
                random_inputs: bool = True) -> str:
    """A warning when the result holds NaN but the inputs do not: where the first NaN
    appears (the first statement of the program as written whose value has one, found by
    running the interpreter statement by statement) and, for random inputs, the hint that
    they take negative values (log, sqrt and division meet negatives and zeros)."""
    if not _has_nan(result) or any(_has_nan(v) for v in args.values()):
        return ""
    from tensorlang.semantics import interp
    from tensorlang.semantics.memory import own_loc, statement_loc
    from tensorlang.ir import ast

    where = ""
    try:
        core = fn.core()
        env = interp.bind_args(core, args)
        body = core.body
        while isinstance(body, ast.Let):
            value = interp.eval_expr(body.value, env)
            if _has_nan(value):
                loc = own_loc(body.value.loc, core) or statement_loc(core, body.name)
                at = f" at {loc}" if loc is not None else ""
                where = f": the first NaN appears in statement {body.name}{at}"
                break
            env = env.bind_value(body.name, _as_interp_value(value))
            body = body.body
        else:
            loc = own_loc(body.loc, core) or statement_loc(core, "return")
            at = f" at {loc}" if loc is not None else ""
            where = f": the first NaN appears in the returned expression{at}"
    except (TLError, MemoryError):
        where = ""
    hint = (" (random inputs lie in [-1, 1] (standard normal where no generator knows the "
            "type): log, sqrt and division of negatives or zeros give NaN; give such inputs "
            "with --arg NAME=FILE.npy)") if random_inputs else ""
    return f"warning: the result of {fn.name} contains NaN{where}{hint}"


def _as_interp_value(value: Any) -> Any:
    """A user value as the interpreter binds it: pairs as tuples, the rest float64 arrays."""
    if isinstance(value, tuple):
        return tuple(_as_interp_value(v) for v in value)
    return np.asarray(value, dtype=np.float64)


def _has_nan(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return any(_has_nan(v) for v in value)
    if isinstance(value, (float, np.floating, np.ndarray)) and \
            np.asarray(value).dtype.kind == "f":
        return bool(np.isnan(value).any())
    return False


def save_result(path: str, result: Any, names: Sequence[str] = ()) -> None:
    try:
        if path.endswith(".npz"):
            np.savez(path, **dict(result_leaves(result, names)))
        elif path.endswith(".npy"):
            if isinstance(result, tuple):
                raise TLError(f"the result is a tuple: save it with --out FILE.npz, not {path}")
            np.save(path, np.asarray(result))
        else:
            raise TLError(f"--out {path}: the file name must end in .npy or .npz")
    except OSError as err:
        raise TLError(f"cannot write {path}: {err.strerror or err}") from None


def cmd_check(ns: argparse.Namespace) -> int:
    from tensorlang import api
    from tensorlang.check import contracts

    text = api.read_source(ns.file)
    try:
        module = api.parse(text, ns.file)
    except TLError as first:
        errors = _all_errors(text, ns.file) or [first]
        print("\n".join(str(e) for e in errors), file=sys.stderr)
        n = len(errors)
        print(f"{printable(ns.file)}: {n} error{'s' if n > 1 else ''}", file=sys.stderr)
        return 1
    if module.warnings:
        print(format_warnings(module.warnings), file=sys.stderr)
    for fn in module.functions:
        extra = f" = {fn.describe()}" if fn.is_derived else ""
        print(f"  {fn.signature()}{extra}")
    results = contracts.check_module(module)
    for res in results:
        print(f"  contract {res.describe()}")
    broken = [res.error for res in results if res.error is not None]
    if broken:
        print("\n".join(str(e) for e in broken), file=sys.stderr)
        n = len(broken)
        print(f"{ns.file}: {n} contract{'s' if n > 1 else ''} broken", file=sys.stderr)
        return 1
    nw = len(module.warnings)
    print(f"{printable(ns.file)}: ok, {len(module)} function{'s' if len(module) != 1 else ''}, "
          f"{nw} warning{'s' if nw != 1 else ''}")
    return 0


def _all_errors(text: str, filename: str) -> list[TLError]:
    """Every definition's first error: check the defs one by one, leaving out failed ones and
    the defs that use them (whose errors would only repeat); a parse error stops everything,
    so it is the only one."""
    from tensorlang import pipeline
    from tensorlang.ir import ast
    from tensorlang.syntax import parser
    from tensorlang.check import typecheck

    try:
        defs = parser.parse_module(text, filename)
    except TLError as err:
        return [err]
    ok: list[Any] = []
    failed: set[str] = set()
    errors: list[TLError] = []
    for d in defs:
        uses = {d.fn} if isinstance(d, ast.DerivedDef) else \
            {n.name for n in ast.walk(d.body) if isinstance(n, ast.DefCall)}
        if uses & failed:
            failed.add(d.name)
            continue
        try:
            typecheck.check_module(ok + [d], filename, derive=pipeline.derived_core)
        except TLError as err:
            errors.append(err)
            failed.add(d.name)
        else:
            ok.append(d)
    return errors


UNICODE_HEADER = ("# Unicode notation, for reading: not .tl source (tl show without --unicode "
                  "prints source)")


def cmd_show(ns: argparse.Namespace) -> int:
    fn = _load_function(ns.file, ns.func)
    if ns.stage in CODE_STAGES:
        print(fn.generated_source(ns.stage))
        return 0
    if ns.unicode:
        print(UNICODE_HEADER)
    print(fn.show(ns.stage, unicode=ns.unicode))
    from tensorlang import pipeline
    report = pipeline.report(fn.program(), ns.stage)
    if report is not None:      # the simplifier's: what it did, or why it did nothing
        print(report.text())
    return 0


def cmd_cost(ns: argparse.Namespace) -> int:
    fn = _load_function(ns.file, ns.func)
    if ns.symbolic:
        print(format_cost_formula(fn, ns.stage))
        if ns.assign:  # the formula at the sizes given, beside the counted cost
            args = {name: parse_value(name, text) for name, text in ns.assign}
            formula = fn.cost_formula(stage=ns.stage)
            where = ", ".join(f"{k}={v}" for k, v in args.items())
            outside = "" if formula.holds_at(**args) else \
                f" (outside the formula's domain {formula.domain_text()})"
            print(f"at {where}: formula {formula.evaluate(**args).total}, counted "
                  f"{fn.cost(stage=ns.stage, **args).total}{outside}")
        return 0
    args = {name: parse_value(name, text) for name, text in ns.assign}
    if any(v is RAND for v in args.values()):
        raise TLError("tl cost takes sizes (and relation files), not '@rand'")
    if ns.machine:
        print(format_machine_cost(fn, args))
        return 0
    stage = ns.stage or fn.default_stage()
    cost = fn.cost(args, stage=stage)
    sizes = ", ".join(f"{k}={v}" for k, v in args.items() if isinstance(v, int))
    print(format_cost(cost, f"cost of {fn.name} at stage {stage}"
                            f"{' with ' + sizes if sizes else ''}"))
    if fn.is_derived:
        # the derivative differentiates the original as compiled, and no pass raises a cost:
        # at every stage the bound is the one from the original as compiled
        base_cost, bound, formula = fn.cost_bound(args)
        ratio = f"{cost.total / base_cost:.3f}" if base_cost else "n/a"
        print(f"original {fn.base.name} as compiled ({fn.base.default_stage()}): total "
              f"{base_cost}; ratio {ratio}")
        if bound is None:
            print(f"bound: {formula}")
        else:
            verdict = "ok" if cost.total <= bound else "VIOLATED"
            print(f"bound: {formula} = {bound} ({verdict})")
    return 0


def format_machine_cost(fn: Any, args: dict[str, Any]) -> str:
    """`tl cost --machine`: the SPEC 16 estimate of the program the Numba CPU backend
    compiles (backends/common/machine_model.py)."""
    from tensorlang.backends.common import machine_model

    program = fn.run_to(fn.default_stage())
    est = machine_model.estimate(program, args)
    sizes = ", ".join(f"{k}={v}" for k, v in args.items() if isinstance(v, int))
    return est.text(f"machine estimate of {fn.name} (numba CPU, one core)"
                    f"{' with ' + sizes if sizes else ''}")


def format_cost_formula(fn: Any, stage: str | None) -> str:
    """`tl cost --symbolic`: the formulas, the leading term and, for a derived function, the
    ratio to the original as a formula."""
    formula = fn.cost_formula(stage=stage)
    lines = [formula.describe()]
    if fn.is_derived:
        base = fn.base.cost_formula(stage=stage)
        lines.append(f"original {fn.base.name}: {base} (for {base.domain_text()}), "
                     f"leading term {base.leading_term()}")
        lines.append(f"ratio: ({formula}) / ({base})")
        lead, base_lead = formula.leading_term(), base.leading_term()
        c = lead.constant_ratio(base_lead)
        if c is not None:
            lines.append(f"ratio as sizes grow: {c}")
        else:
            lines.append(f"ratio of leading terms: ({lead}) / ({base_lead})")
    return "\n".join(lines)


def cmd_repl(ns: argparse.Namespace) -> int:
    from tensorlang import repl

    return repl.run(ns.file, seed=ns.seed)


def cmd_prove(ns: argparse.Namespace) -> int:
    """The rule catalogue (every rule of every registry), the whole passes and the derivative
    theorems; exit 1 on any failed check, any rule, pass or theorem row with no instance
    checked, any theorem violation."""
    try:
        from tensorlang.proofs import catalogue
    except ModuleNotFoundError as err:  # a dependency of the package removed after install
        raise TLError(f"tl prove needs {err.name} (a dependency of tensorlang): "
                      f"install it with pip") from err
    reports = catalogue.check_all(ns.examples)
    print(catalogue.format_table(reports))
    passes = catalogue.check_passes(ns.examples)   # whole passes on random programs (SPEC 10)
    print()
    print(catalogue.format_pass_table(passes))
    try:
        theorems = catalogue.check_theorems(ns.examples)
    except FileNotFoundError as err:
        raise TLError(f"tl prove checks the theorems on every example: {err} (run it from a "
                      f"source checkout)") from err
    print()
    print(catalogue.format_theorem_table(theorems))
    failed = [r.name for r in [*reports, *passes] if not r.ok]
    failed += [f"{r.name} ({r.level}) on {r.programs}" for r in theorems if not r.ok]
    if failed:
        print(f"{len(failed)} check{'s' if len(failed) > 1 else ''} failed: "
              f"{', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def cmd_bench(ns: argparse.Namespace) -> int:
    # bench/ is part of the source checkout (it compares against numpy, JAX and PyTorch and is
    # not installed with the package).
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isfile(os.path.join(root, "bench", "__init__.py")):
        raise TLError("tl bench runs from a source checkout of tensorlang (bench/ not found)")
    if root not in sys.path:
        sys.path.insert(0, root)
    return int(importlib.import_module("bench").main(list(ns.names)) or 0)


def cmd_cache(ns: argparse.Namespace) -> int:
    from tensorlang import cache

    if ns.action == "clear":
        freed = cache.clear()
        print(f"cleared {cache.root()} ({freed / 2**20:.1f} MiB freed)")
    else:
        print(cache.info().describe())
    return 0


def _show_warning(message: Any, category: type, filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """Warnings (a refused cache folder, a damaged entry) as one line, no source excerpt."""
    print(f"tl: warning: {message}", file=sys.stderr if file is None else file)


# ---------------------------------------------------------------------------------------------
# Argument parsing and the entry point


def build_parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="tl", description="tensorlang: a purely functional tensor language.")
    sub = top.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser("run", help="run a function")
    run.add_argument("file", metavar="FILE.tl")
    run.add_argument("func", metavar="FUNC", nargs="?", help="default: the last def")
    run.add_argument("--arg", action="append", type=_assignment, default=[],
                     metavar="NAME=VALUE",
                     help="VALUE: integer (size), float, .npy/.npz path, or @rand")
    run.add_argument("--random", action="append", type=_size_assignment, default=[],
                     metavar="SIZE=INT", help="set a size and fill every other input randomly")
    run.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    run.add_argument("--backend", choices=BACKEND_CHOICES, default="numba")
    run.add_argument("--devices", type=int, default=None, metavar="N",
                     help="jax: shard the rows of every tensor over N devices (on CPU: N "
                          "host devices)")
    run.add_argument("--out", metavar="RESULT.npy|.npz", help="save the result")
    run.add_argument("--time", action="store_true", help="print elapsed times")
    run.add_argument("--max-memory", metavar="BYTES", default=None,
                     help="refuse runs estimated to need more (e.g. 512M, 8G; default: "
                          "$TENSORLANG_MAX_MEMORY, else 80%% of the physical memory)")
    run.set_defaults(handler=cmd_run)

    check = sub.add_parser("check", help="parse and type-check a file")
    check.add_argument("file", metavar="FILE.tl")
    check.set_defaults(handler=cmd_check)

    show = sub.add_parser("show", help="print a function at a pipeline stage")
    show.add_argument("file", metavar="FILE.tl")
    show.add_argument("func", metavar="FUNC")
    show.add_argument("--stage", choices=STAGE_CHOICES + CODE_STAGES, default="parsed")
    show.add_argument("--unicode", action="store_true", help="mathematical notation")
    show.set_defaults(handler=cmd_show)

    cost = sub.add_parser("cost", help="exact operation counts (SPEC 3)")
    cost.add_argument("file", metavar="FILE.tl")
    cost.add_argument("func", metavar="FUNC")
    cost.add_argument("assign", metavar="SIZE=INT", nargs="*", type=_assignment,
                      help="sizes (and relations as .npy files)")
    cost.add_argument("--stage", choices=STAGE_CHOICES, default=None,
                      help="default: the program as it will run (last stage available)")
    cost.add_argument("--symbolic", action="store_true",
                      help="exact formulas in the sizes instead of counts (no sizes needed)")
    cost.add_argument("--machine", action="store_true",
                      help="per statement: flops, bytes moved, BLAS or loops, estimated "
                           "time (SPEC 16)")
    cost.set_defaults(handler=cmd_cost)

    repl = sub.add_parser("repl", help="interactive session")
    repl.add_argument("file", metavar="FILE.tl", nargs="?")
    repl.add_argument("--seed", type=int, default=None,
                      help="seed of rand (default: different in every session)")
    repl.set_defaults(handler=cmd_repl)

    prove = sub.add_parser("prove", help="check the rule catalogue, the passes and the theorems")
    prove.add_argument("--examples", type=_positive, default=20, metavar="K",
                       help="random instances per rule, programs per pass and per theorem "
                            "(default 20)")
    prove.set_defaults(handler=cmd_prove)

    # every word after `bench` (workload names and options) goes to the suite's own parser
    bench = sub.add_parser("bench", help="run the benchmark workloads (tl bench --help)",
                           add_help=False, prefix_chars="\0")
    bench.add_argument("names", metavar="ARGS", nargs="*")
    bench.set_defaults(handler=cmd_bench)

    cache_cmd = sub.add_parser("cache", help="the on-disk cache: where, how big, clear it")
    cache_cmd.add_argument("action", choices=("info", "clear"), nargs="?", default="info")
    cache_cmd.set_defaults(handler=cmd_cache)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)  # usage errors exit with 2
    handler: Callable[[argparse.Namespace], int] = ns.handler
    import warnings

    warnings.showwarning = _show_warning
    try:
        if handler in (cmd_repl, cmd_bench):  # the REPL's terminal and the benchmark's
            return handler(ns)               # timers need the main thread (their work runs deep)
        return limits.run(handler, ns)  # a large stack for deep programs (syntax/limits.py)
    except TLError as err:
        print(str(err), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except MemoryError as err:   # an allocation the estimate did not foresee (numpy's message)
        print(str(ResourceError(f"out of memory: {err or 'an allocation failed'} (lower the "
                                f"sizes; `tl run --max-memory` refuses such runs before "
                                f"they start)")), file=sys.stderr)
        return 1
    except Exception as err:  # noqa: BLE001 -- the one place internal errors are reported
        if os.environ.get("TL_DEBUG"):
            traceback.print_exc()
        print(f"tl: internal error: {type(err).__name__}: {err} (a bug in tensorlang; "
              f"rerun with TL_DEBUG=1 to see where)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
