"""Catalogue entries of the derivative rules (SPEC 6, SPEC 10): one per rule of
`passes.jvp.JVP_RULES` (FWD-*) and `passes.vjp.VJP_RULES` (ADJ-*).

An instance is a Tensor-SSA program whose statement has the rule's form: one statement over
random generators I (and sums J for contract and reduce), a random predicate P (comparisons
of affine index expressions, a relation, conjunctions and disjunctions), random affine
accesses A (shifted, reversed, strided, constant: zero extension included) into random
inputs, a random coefficient; for ADJ-fanout two statements reading the same variable.
It comes with random sizes (0..3) and inputs, and a random non-empty set of differentiated
inputs.  The check of one instance (interpreter as oracle, on `tssa.to_core`):

* meaning: the derivative program returns the primal value; a jvp's tangent agrees with
  central finite differences of the primal; a vjp's cotangents pass the dot-product test
  `<vjp(dy), dx> == <dy, jvp(dx)>` (to rounding) and agree with finite differences
  (`<vjp(dy), dx> ~ <dy, (f(x + h dx) - f(x - h dx)) / 2h>`);
* cost: the rule's budget, the one that sums to the theorems over a program's statements:
  FWD-*: the tangent statements cost at most 3 C(f) (Theorem 6.1);
  ADJ-*: the vjp program costs at most 4 C(f) + size(inputs) + size(output) (Theorem 6.55);
  both plus 4 E(f) for the points E(f) a max/min reduction visits (`semantics.bounds`);
  the reported ratio is cost / budget;
* normal form: the derivative program is Tensor SSA (`normal_forms_ssa.is_tensor_ssa`).

The check first asks the rule table which rule differentiates the instance's statement: an
instance of another rule (generator drift) is a failure, never a silent pass.  The maps draw
every builtin except the derivative tower's end (`builtins.TOWER_END`: their derivative is
an expression of two calls, outside the budget; the theorems are stated without them).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.ir.ast import Affine, Cmp, Param, TPair, tensor
from tensorlang.ir.build import Builder
from tensorlang.ir.tssa import Input, Operand, Program
from tensorlang.passes.jvp import JVP_RULES, RuleTable, jvp_program
from tensorlang.passes.vjp import VJP_RULES, vjp_program
from tensorlang.semantics.builtins import INDICATOR_PARTIALS, TOWER_END
from tensorlang.syntax.ssa_printer import to_text

from tensorlang.semantics.bounds import jvp_bound, type_size, vjp_bound
from tensorlang.semantics.cost import extreme_points

from .catalogue import Rule, Verdict, register, values_close
from .normal_forms_ssa import is_tensor_ssa
from .theorems import axpy, flat, like, program_cost, run

N, M = Affine.var("N"), Affine.var("M")

PARAMS: tuple[Param, ...] = (
    Param("N", ast.TSize()), Param("M", ast.TSize()), Param("s", ast.REAL),
    Param("x", tensor([N])), Param("z", tensor([N])), Param("w", tensor([M])),
    Param("B", tensor([N, M])), Param("xp", tensor([N])), Param("E", ast.TRel((N, M))),
)
# The real inputs with their shapes; `xp` holds values in [0.5, 2] for the builtins with a
# restricted domain (read in range only, so zero extension never feeds them a 0).
SHAPES: dict[str, tuple[Affine, ...]] = {"s": (), "x": (N,), "z": (N,), "w": (M,),
                                         "B": (N, M), "xp": (N,)}
ANY_INPUTS = ("s", "x", "z", "w", "B")
POSITIVE_ONLY = frozenset({"log", "sqrt", "recip"})
MAP_FNS = tuple(sorted(set(ast.BUILTINS) - set(INDICATOR_PARTIALS) - TOWER_END))
SELECT_FNS = tuple(sorted(INDICATOR_PARTIALS))
FD_STEP, FD_TOL, DOT_TOL = 1e-6, 1e-5, 1e-9
SIZES = (2, 3, 1, 0)   # mostly non-empty (a derivative of nothing checks little), 0 too

Instance = tuple[Program, dict[str, Any], list[str]]
"""(program in Tensor-SSA normal form, its arguments, the differentiated inputs)"""


# ---------------------------------------------------------------------------------------------
# Random statements


class _Draw:
    """One instance under construction: the builder, the index scope, the inputs read."""

    def __init__(self, draw: Callable) -> None:
        self.draw = draw
        self.b = Builder(PARAMS)
        self.read: list[str] = []

    def index(self, scope: Sequence[tuple[str, Affine]], size: Affine) -> Affine:
        """An access into a dimension of `size`: mostly an index of that size, sometimes
        shifted, reversed, strided or constant (reads out of range are 0)."""
        same = [n for n, s in scope if s == size]
        k = self.draw(st.integers(0, 8)) % 7   # in range twice as often as shifted
        if not scope or k == 6:
            return Affine.lit(self.draw(st.integers(0, 1)))
        pool = same if same and k < 3 else [n for n, _ in scope]
        v = Affine.var(self.draw(st.sampled_from(pool)))
        if k == 3:
            return v + self.draw(st.sampled_from([-1, 1]))
        if k == 4 and same:
            return size - 1 - v
        if k == 5:
            return v * 2
        return v

    def affine(self, scope: Sequence[tuple[str, Affine]]) -> Affine:
        if not scope or self.draw(st.integers(0, 4)) == 0:
            return Affine.lit(self.draw(st.integers(0, 2))) + (
                Affine.var(self.draw(st.sampled_from(["N", "M"]))) if self.draw(st.booleans())
                else Affine.lit(0))
        v = Affine.var(self.draw(st.sampled_from([n for n, _ in scope])))
        return v * self.draw(st.sampled_from([1, 1, 2])) + self.draw(st.integers(-1, 1))

    def pred(self, scope: Sequence[tuple[str, Affine]], depth: int = 0) -> ast.Pred:
        k = self.draw(st.integers(0, 10 if depth == 0 else 5))
        if k <= 1 or k >= 9:
            return ast.PTrue()
        if k <= 4:
            return Cmp(self.draw(st.sampled_from(Cmp.OPS)), self.affine(scope),
                       self.affine(scope))
        if k == 5:
            return ast.RelCall("E", (self.index(scope, N), self.index(scope, M)))
        if k == 6:
            return ast.pred_and(self.pred(scope, depth + 1), self.pred(scope, depth + 1))
        if k == 7:
            return ast.pred_or(self.pred(scope, depth + 1), self.pred(scope, depth + 1))
        return Cmp("<=", self.affine(scope), self.affine(scope))

    def operand(self, scope: Sequence[tuple[str, Affine]],
                names: Sequence[str] = ANY_INPUTS) -> Operand:
        name = self.draw(st.sampled_from(list(names)))
        self.read.append(name)
        var = self.b.input(name)
        return Operand(var, tuple(self.index(scope, d) for d in SHAPES[name]))

    def coeff(self) -> float:
        return self.draw(st.sampled_from([1.0, 1.0, 2.0, -0.5]))

    def statement(self, form: str, dims: tuple[Affine, ...],
                  reads: Callable[[Sequence[tuple[str, Affine]]], Operand] | None = None) -> str:
        """A statement of `form` ("const", "index", "add", "map", "select", "contract",
        "reduce")."""
        gen = [(f"g{k}", d) for k, d in enumerate(dims)]
        sums = ([(f"h{k}", self.draw(st.sampled_from([N, M])))
                 for k in range(self.draw(st.integers(0, 2)))]
                if form in ("contract", "reduce") else [])
        scope = gen + sums
        read = reads or self.operand
        pred = self.pred(scope)
        if form == "const":
            return self.b.const(gen, self.draw(st.sampled_from([1.0, -2.5, 3.0])), pred)
        if form == "index":  # an index value (SPEC 12): no mask, no operands
            return self.b.index(gen, self.affine(gen))
        if form == "add":
            return self.b.add(gen, read(scope), read(scope), pred,
                              (self.pred(gen, 1), self.pred(gen, 1)))
        if form == "contract":
            o1 = read(scope)
            o2 = o1 if self.draw(st.integers(0, 3)) == 0 else read(scope)
            return self.b.contract(gen, sums, o1, o2, pred, self.coeff())
        if form == "reduce":
            return self.b.reduce(gen, sums, read(scope), pred, self.coeff())
        if form == "extreme":  # max/min over one index; the mask ranges over I only
            size = self.draw(st.sampled_from([N, M]))
            op = self.draw(st.sampled_from(sorted(ast.EXTREMA)))
            nonempty = ast.Cmp("<", Affine.lit(0), size)  # -inf has no finite differences
            return self.b.extreme(gen, size, op, read(gen + [("h0", size)]),
                                  ast.pred_and(self.pred(gen), nonempty), sum_name="h0")
        fn = self.draw(st.sampled_from(SELECT_FNS if form == "select" else MAP_FNS))
        nargs, nparams = ast.BUILTINS[fn]
        positive = fn in POSITIVE_ONLY or (fn == "pow" and self.draw(st.booleans()))
        params = ((self.draw(st.sampled_from([0.5, -1.0, 1.5] if positive else [2.0, 3.0])),)
                  if nparams else ())
        if positive:  # in-range reads of the positive input only
            here = next(Affine.var(n) for n, d in gen if d == N)
            args = [Operand(self.b.input("xp"), (here,))] * nargs
            self.read.append("xp")
        else:
            args = [read(scope) for _ in range(nargs)]
        return self.b.map(gen, fn, args, pred, params)


@st.composite
def _inputs(draw: Callable) -> dict[str, Any]:
    n, m = draw(st.sampled_from(SIZES)), draw(st.sampled_from(SIZES))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return {"N": n, "M": m, "s": float(rng.uniform(-1.5, 1.5)),
            "x": rng.uniform(-1.5, 1.5, n), "z": rng.uniform(-1.5, 1.5, n),
            "w": rng.uniform(-1.5, 1.5, m), "B": rng.uniform(-1.5, 1.5, (n, m)),
            "xp": rng.uniform(0.5, 2.0, n), "E": rng.random((n, m)) < 0.5}


def _wrt(draw: Callable, read: Sequence[str], always: bool = False) -> list[str]:
    """A random non-empty set of differentiated inputs, usually (`always`: surely) with the
    first input read."""
    chosen = [n for n in SHAPES if draw(st.booleans())]
    if read and (always or not chosen or draw(st.integers(0, 3)) > 0) and read[0] not in chosen:
        chosen.append(read[0])
    return chosen or ["x"]


def instances(form: str) -> st.SearchStrategy:
    """`(program, args, wrt)` whose statement has `form` ("input", "const", "index", "add", "map",
    "select", "contract", "reduce"; "fanout": two statements reading one variable)."""

    @st.composite
    def strategy(draw: Callable) -> Instance:
        g = _Draw(draw)
        if form == "input":
            name = draw(st.sampled_from(list(SHAPES)))
            g.read.append(name)
            out: tssa.Out = g.b.input(name)
            ret: ast.Type = tensor(SHAPES[name])
        elif form == "fanout":
            shared = draw(st.sampled_from(["x", "z", "B"]))
            d1 = draw(st.sampled_from([(), (N,), (M,), (N, M)]))
            v1 = g.statement(draw(st.sampled_from(["add", "contract", "reduce"])), d1,
                             lambda scope: g.operand(scope, [shared]))
            v1_shape = g.b.shapes[v1]
            first = [True]

            def second(scope: Sequence[tuple[str, Affine]]) -> Operand:
                """Reads `shared` first (a second reader), then `shared` or v1."""
                if first.pop() if first else draw(st.booleans()):
                    return g.operand(scope, [shared])
                return Operand(v1, tuple(g.index(scope, d) for d in v1_shape))

            d2 = draw(st.sampled_from([(), (N,), (M,), (N, M)]))
            v2 = g.statement(draw(st.sampled_from(["add", "contract", "reduce"])), d2, second)
            assume(v2 != v1)  # hash-consing made the two statements one
            out, ret = (v1, v2), TPair(tensor(v1_shape), tensor(g.b.shapes[v2]))
        else:
            dims = draw(st.sampled_from([(), (N,), (M,), (N, M)]))
            if form == "map" and (N not in dims):
                dims = dims + (N,)    # a gen index of size N for the positive-only reads
            out = g.statement(form, dims)
            ret = tensor(g.b.shapes[out])
        p = g.b.program(out, name="inst", ret=ret)
        assume(is_tensor_ssa(p) is None)  # the rules map Tensor SSA to Tensor SSA
        return p, draw(_inputs()), _wrt(draw, g.read, always=form == "fanout")

    return strategy()


# ---------------------------------------------------------------------------------------------
# Checking one instance


def _statement(p: Program) -> tssa.Stmt:
    """The instance's statement: the output's (the first output of a pair)."""
    out = p.output
    while not isinstance(out, str):
        out = out[0]
    return next(s for s in p.stmts if s.var == out)


def _applies(table: RuleTable, name: str, p: Program) -> str | None:
    """Why `p` is not an instance of rule `name` (None: it is)."""
    if name == "ADJ-fanout":
        reads: dict[str, int] = {}   # contributions each variable receives
        for s in p.stmts:
            if not isinstance(s.rhs, Input):
                ops = set(s.rhs.operands) if isinstance(s.rhs, tssa.ContractRhs) \
                    else s.rhs.operands
                for o in ops:
                    reads[o.var] = reads.get(o.var, 0) + 1
        return None if any(k > 1 for k in reads.values()) else "no variable is read twice"
    found = table.lookup(_statement(p).rhs).name
    return None if found == name else f"the statement is an instance of {found}, not {name}"


def _fd(p: Program, args: dict[str, Any], xs: Sequence[str], dx: dict[str, Any]) -> np.ndarray:
    plus = run(p, {**args, **{x: axpy(FD_STEP, dx[x], args[x]) for x in xs}})
    minus = run(p, {**args, **{x: axpy(-FD_STEP, dx[x], args[x]) for x in xs}})
    return (flat(plus) - flat(minus)) / (2 * FD_STEP)


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return float("inf")
    if not a.size:
        return 0.0
    return float(np.max(np.abs(a - b))) / max(1.0, float(np.max(np.abs(b))))


def _ratio(cost: int, budget: int) -> float | None:
    if budget > 0:
        return cost / budget
    return None if cost == 0 else float("inf")


def _untuple(v: Any, n: int) -> list[Any]:
    """The n components of a right-nested tuple."""
    out = []
    for _ in range(n - 1):
        out.append(v[0])
        v = v[1]
    return out + [v]


def _describe(p: Program, args: dict[str, Any], wrt: Sequence[str], what: list[str],
              derived: Program | None) -> str:
    shown = {k: (np.round(v, 3).tolist() if isinstance(v, np.ndarray) and v.dtype != bool
                 else np.asarray(v).tolist()) for k, v in args.items()}
    text = f"{'; '.join(what)}\nwrt {', '.join(wrt)}; args {shown}\n{to_text(p)}"
    return text + (f"\nderivative:\n{to_text(derived)}" if derived is not None else "")


Budget = Callable[[Program, dict[str, Any], int, Sequence[str]], int]
"""(f, args, C(f), wrt) -> the most the derivative may cost (rules_boxes.py: per-box)."""


def check_jvp(name: str, inst: Instance, budget_of: Budget | None = None) -> Verdict:
    """FWD-*: primal kept, tangent = finite differences, tangent cost <= 3 C(f), SSA."""
    p, args, wrt = inst
    why = _applies(JVP_RULES, name, p)
    if why is not None:
        return Verdict(False, False, False, None, f"not an instance: {why}\n{to_text(p)}")
    j = jvp_program(p, wrt)
    nf = is_tensor_ssa(j)
    rng = np.random.default_rng(len(wrt))
    dx = {x: like(args[x], rng) for x in wrt}
    y0 = run(p, args)
    y, ty = run(j, {**args, **{f"d_{x}": dx[x] for x in wrt}})
    err = _rel_err(flat(ty), _fd(p, args, wrt, dx))
    meaning = values_close(y, y0, 1e-12) and err <= FD_TOL
    cf, cj = program_cost(p, args), program_cost(j, args)
    budget = jvp_bound(cf, extreme_points(p, args)) - cf if budget_of is None else \
        budget_of(p, args, cf, wrt)
    cost = cj - cf <= budget
    what = ([] if values_close(y, y0, 1e-12) else ["the primal differs"])
    what += [] if err <= FD_TOL else [f"tangent vs finite differences: error {err:.2e}"]
    what += [] if cost else [f"tangent costs {cj - cf} > 3 C(f) + 4 E(f) = {budget}"
                             if budget_of is None
                             else f"tangent costs {cj - cf} > the per-box budget {budget}"]
    what += [] if nf is None else [f"not Tensor SSA: {nf}"]
    return Verdict(meaning, cost, nf is None, _ratio(cj - cf, budget),
                   _describe(p, args, wrt, what, j) if what else None)


def check_vjp(name: str, inst: Instance, budget_of: Budget | None = None) -> Verdict:
    """ADJ-*: primal kept, dot-product test against the jvp and against finite differences,
    C(vjp) <= 4 C(f) + |in| + |out|, SSA."""
    p, args, wrt = inst
    why = _applies(VJP_RULES, name, p)
    if why is not None:
        return Verdict(False, False, False, None, f"not an instance: {why}\n{to_text(p)}")
    v = vjp_program(p, wrt, cotangent_name="d_out")
    nf = is_tensor_ssa(v)
    rng = np.random.default_rng(len(wrt))
    dx = {x: like(args[x], rng) for x in wrt}
    y0 = run(p, args)
    dy = like(y0, rng)
    y, grads = run(v, {**args, "d_out": dy})
    gl = _untuple(grads, len(wrt))
    lhs = sum(float(flat(g) @ flat(dx[x])) for g, x in zip(gl, wrt))
    _, ty = run(jvp_program(p, wrt), {**args, **{f"d_{x}": dx[x] for x in wrt}})
    rhs = float(flat(dy) @ flat(ty))
    fd = _fd(p, args, wrt, dx)
    dot_err = abs(lhs - rhs) / max(1.0, abs(lhs), abs(rhs))
    fd_scale = max(1.0, float(np.abs(flat(dy)).sum()) * float(np.max(np.abs(fd), initial=0.0)))
    fd_err = abs(lhs - float(flat(dy) @ fd)) / fd_scale
    same = values_close(y, y0, 1e-12)
    meaning = same and dot_err <= DOT_TOL and fd_err <= FD_TOL
    cf, cv = program_cost(p, args), program_cost(v, args)
    sizes = {"N": int(args["N"]), "M": int(args["M"])}
    budget = vjp_bound(cf, sum(type_size(p.param_types[x], sizes) for x in wrt),
                       type_size(p.ret, sizes), extreme_points(p, args)) \
        if budget_of is None else budget_of(p, args, cf, wrt)
    cost = cv <= budget
    what = [] if same else ["the primal differs"]
    what += [] if dot_err <= DOT_TOL else [f"dot-product test vs jvp: error {dot_err:.2e}"]
    what += [] if fd_err <= FD_TOL else [f"dot-product test vs finite differences: error "
                                         f"{fd_err:.2e}"]
    what += [] if cost else [f"C(vjp) = {cv} > 4 C(f) + |in| + |out| + 4 E(f) = {budget}"
                             if budget_of is None else
                             f"C(vjp) = {cv} > the per-box budget {budget}"]
    what += [] if nf is None else [f"not Tensor SSA: {nf}"]
    return Verdict(meaning, cost, nf is None, _ratio(cv, budget),
                   _describe(p, args, wrt, what, v) if what else None)


# ---------------------------------------------------------------------------------------------
# The entries: one per rule of each registry

FORMS: dict[str, str] = {
    "FWD-input": "input", "FWD-const": "const", "FWD-add": "add", "FWD-map": "map",
    "FWD-select": "select", "FWD-contract": "contract", "FWD-reduce": "reduce",
    "FWD-extreme": "extreme", "ADJ-extreme": "extreme",
    "ADJ-input": "input", "ADJ-const": "const", "ADJ-add": "add", "ADJ-map": "map",
    "ADJ-select": "select", "ADJ-contract": "contract", "ADJ-reduce": "reduce",
    "ADJ-fanout": "fanout", "FWD-index": "index", "ADJ-index": "index",
}
# The linear-algebra boxes (SPEC 13): instances of one box statement (rules_boxes.py)
FORMS.update({f"{kind}-{box}": f"box:{box}" for kind in ("FWD", "ADJ")
              for box in sorted(ast.BOX_NAMES)})


def derivative_rule(name: str) -> Rule:
    """The catalogue entry of registry rule `name` (FWD-* or ADJ-*)."""
    fwd = name.startswith("FWD-")
    table = JVP_RULES if fwd else VJP_RULES
    if table.rules[name].form is tssa.BoxRhs:   # the linear-algebra boxes (SPEC 13)
        from .rules_boxes import box_rule
        return box_rule(name)
    check = check_jvp if fwd else check_vjp
    form = FORMS.get(name)
    # A registry rule without a form here has no instances: it shows, and fails, in the table.
    return Rule(name, table.kind, table.rules[name].schema,
                (lambda: instances(form)) if form is not None else st.nothing,
                check=lambda inst: check(name, inst))


def _register() -> None:
    for table in (JVP_RULES, VJP_RULES):
        for name in table.rules:
            register(derivative_rule(name))


_register()

__all__ = ["PARAMS", "SHAPES", "FORMS", "instances", "check_jvp", "check_vjp",
           "derivative_rule"]
