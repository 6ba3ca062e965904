"""Conversion of gen-pushed core programs to Tensor SSA (SPEC 5, paper figures 11-12).

Input: the post-condition of gen push-out (SPEC 4): `let x1 = e1 ... in out`, every `ei`
is `gen I. s` with `s` scalar and gen-free, reads are full scalar accesses `x[a1..am]`
(projections only of parameters), pairs only in the output.

Each binding `gen I. s` is walked with a context: the indices in scope (I, then the
summation indices of enclosing sums) and a mask P (initially true).  A scalar expression
converts to a `Term`, the pending value `[G] * f1 * ... * fn` (factors are operands,
constants or nested products) that the consumer materialises; the cases (one function
each, rule id in `CASES`):

  SSA-read         x[A]           -> operand (a parameter through an input statement)
  SSA-const        c              -> a constant factor (0 is the structural zero)
  SSA-index        a(I)           -> an operand of the iota `gen I'. a(I')` (an index value)
  SSA-iverson      [p] * s        -> p joins the mask of every primitive emitted for s
                                     and the guard G of the term
  SSA-add          s1 + s2        -> add, with the operands' supports G1, G2
  SSA-contract     s1 * s2        -> the factor lists concatenate and the guards conjoin
                                     (an Iverson factor is hoisted into the product's mask);
                                     materialised as a contract with J empty
  SSA-map          f(s1, ..)      -> map; arguments are converted under the same mask
  SSA-sum-contract sum J. s1 * s2 -> ONE contract over the whole nest J of directly
                                     nested sums (a matrix product is one statement)
  SSA-reduce       sum J. s       -> reduce
  SSA-extreme      max j. s       -> extreme (also min): s materialised over I + j
  SSA-gen          x = gen I. s   -> the statement of s over I, or an alias when s is
                                     `u[I]` (SSA-trivial: `v = u[I]` is dropped)
and the clean-up `SSA-cse` (equal right-hand sides are one statement: hash-consing) and
`SSA-dce` (statements the output does not read are dropped).

Cost: the conversion itself (`to_ssa(d, share=False, prune=False)`) has exactly the SPEC 3
cost of its input once the structural zero `Z` covers products (`Z(e1 * e2) = Z(e1) or
Z(e2)`, the multiplication counted only when neither factor is `Z`; `Z([p] * e) = not p or
Z(e)`), which is what hoisting an Iverson factor into a product's mask needs
(`proofs.rules_ssa.cost_refined`); without that refinement it costs less, never more.
CSE and DCE then only remove statements.  See docs/ssa.md.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Sequence

from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.ir.ast import Affine, Pred, PFalse, PTrue
from tensorlang.syntax.errors import NotYetSupported
from tensorlang.ir.build import Builder
from tensorlang.ir.tssa import Operand, Program
from tensorlang.semantics.boxes import out_shape as box_shape


@dataclass(frozen=True)
class Term:
    """The value `[guard] * f1 * ... * fn` of a converted scalar expression.

    `guard` is where the source expression is not a structural zero (`Z`); the zero term
    has guard `false` and no factors.  A factor is a constant, an operand, or a nested
    product `Term` whose multiplications count where *its* region holds.  `region` is the
    set of conjuncts of (mask at creation and guard): where this product's multiplications
    are executed.  `clean` holds conjuncts outside which the product of the factors is
    already zero (the mask of the statement that computed it), so a guard made of them
    needs no masked copy.
    """

    guard: Pred
    factors: tuple
    clean: frozenset = frozenset()
    region: frozenset = frozenset()

    @property
    def is_zero(self) -> bool:
        return isinstance(self.guard, PFalse)


ZERO = Term(PFalse(), ())


@dataclass(frozen=True)
class Ctx:
    """Indices in scope (generator indices, then enclosing summation indices, with source
    names) and the mask accumulated from enclosing Iverson brackets."""

    idx: tuple[tuple[str, Affine], ...]
    mask: Pred

    def ids(self) -> tuple[Affine, ...]:
        return tuple(Affine.var(n) for n, _ in self.idx)

    def under(self, p: Pred) -> "Ctx":
        return Ctx(self.idx, ast.pred_and(self.mask, p))

    def inside(self, sums: Sequence[tuple[str, Affine]]) -> "Ctx":
        return Ctx(self.idx + tuple(sums), self.mask)

    def region(self, guard: Pred = PTrue()) -> frozenset:
        return frozenset(tssa.conjuncts(self.mask)) | frozenset(tssa.conjuncts(guard))


def _bad(msg: str, e: ast.Node) -> NotYetSupported:
    return NotYetSupported(f"to_ssa expects gen-pushed input (SPEC 4): {msg}", e.loc)


class Converter:
    """State of one conversion: the builder and the SSA variable of each binding."""

    def __init__(self, d: ast.Def, share: bool) -> None:
        self.d = d
        self.b = Builder(d.params, share=share)
        self.ptypes = {p.name: p.type for p in d.params}
        self.env: dict[str, str] = {}  # binding name -> SSA variable

    # -- helpers ---------------------------------------------------------------------------

    def conv(self, e: ast.Expr, ctx: Ctx) -> Term:
        case = DISPATCH.get(type(e))
        if case is None:
            raise _bad(f"unexpected {type(e).__name__} in a scalar expression", e)
        return case(self, e, ctx)

    def const_operand(self, c: float) -> Operand:
        """A scalar constant statement `k = c`, read as `k`."""
        return Operand(self.b.const((), c), ())

    def flatten(self, t: Term, ctx: Ctx) -> list:
        """The factors of `t` as constants and operands.  A nested product whose
        multiplications count on the same region is spliced in; one with a larger region
        (a factor of it is live where another factor of `t` is a structural zero) becomes
        its own statement, so each multiplication is counted where the source executes it."""
        out: list = []
        for f in t.factors:
            if isinstance(f, Term):
                if f.region >= t.region:
                    out += self.flatten(f, ctx)
                else:
                    out.append(Operand(self.emit_term(f, ctx), ctx.ids()))
            else:
                out.append(f)
        return out

    def emit_term(self, t: Term, ctx: Ctx, sums: Sequence[tuple[str, Affine]] = ()) -> str:
        """The statement `gen ctx. sum sums. [region] * prod(factors)` (t is over ctx+sums).

        Multiplications are kept one for one: one constant other than 0 and 1 is the
        contract's coefficient `c`; further constants (and a literal 1 or 0, which the
        source multiplies by) become scalar constant operands; more than two operands are
        multiplied pairwise first, over ctx+sums."""
        gen = ctx.idx
        inner = ctx.inside(sums)
        if t.is_zero:
            return self.b.const(gen, 0.0)
        mask = ast.pred_and(*sorted(t.region, key=tssa.node_key))
        factors = self.flatten(t, inner)
        consts = [f for f in factors if isinstance(f, float)]
        ops = [f for f in factors if isinstance(f, Operand)]
        if not ops and len(consts) == 1:
            if not sums:
                return self.b.const(gen, consts[0], mask)
            ops, consts = [self.const_operand(consts[0])], []  # sum of c: additions only
        coeff = 1.0
        for k, c in enumerate(consts):
            if c not in (0.0, 1.0):  # as a coefficient, 1 would be free and 0 a zero
                coeff = c
                consts = consts[:k] + consts[k + 1:]
                break
        ops += [self.const_operand(c) for c in consts]
        while len(ops) > 2:  # pointwise over ctx + sums, then the contraction
            w = self.b.contract(inner.idx, (), ops[0], ops[1], mask, coeff)
            ops = [Operand(w, inner.ids())] + ops[2:]
            coeff = 1.0
        if len(ops) == 2:
            return self.b.contract(gen, sums, ops[0], ops[1], mask, coeff)
        return self.b.reduce(gen, sums, ops[0], mask, coeff)

    def result(self, var: str, ctx: Ctx, extra: Pred = PTrue()) -> Term:
        """The term reading a statement just emitted over ctx (never a structural zero)."""
        return Term(PTrue(), (Operand(var, ctx.ids()),), ctx.region(extra), ctx.region())

    def with_support(self, t: Term, ctx: Ctx) -> tuple[Operand, Pred]:
        """An operand and its support, for an add (the guard becomes the support)."""
        if len(t.factors) == 1 and isinstance(t.factors[0], Operand):
            return t.factors[0], t.guard
        if len(t.factors) == 1 and isinstance(t.factors[0], float):
            return self.const_operand(t.factors[0]), t.guard
        return Operand(self.emit_term(t, ctx), ctx.ids()), t.guard

    def covered(self, t: Term, ctx: Ctx) -> bool:
        """The factors' value is already zero where the guard fails (no masked copy is
        needed): the guard's conjuncts are in the computing statement's mask, or the guard
        holds on the whole index range (e.g. gen push-out's range guards)."""
        if set(tssa.conjuncts(t.guard)) <= t.clean:
            return True
        names = set(ast.free_names(t.guard)) | {n for n, _ in ctx.idx}
        ex = next(c for c in (f"k{n}_" for n in itertools.count()) if tssa.prefix_ok(c, names))
        return isinstance(tssa.canon_pred(t.guard, dict(ctx.idx), ex), PTrue)

    def exact(self, t: Term, ctx: Ctx) -> Operand:
        """An operand equal to the term's value at every point of the mask (for a map)."""
        if t.is_zero:
            return self.const_operand(0.0)
        guard_ok = self.covered(t, ctx)
        if len(t.factors) == 1 and not isinstance(t.factors[0], Term) and guard_ok:
            f = t.factors[0]
            return f if isinstance(f, Operand) else self.const_operand(f)
        return Operand(self.emit_term(t, ctx), ctx.ids())

    # -- reads -----------------------------------------------------------------------------

    def read_var(self, base: ast.Expr, e: ast.Expr) -> tuple[str, int]:
        """The SSA variable of a read base (`x`, `x.0.1`) and its rank."""
        path: list[int] = []
        while isinstance(base, ast.Proj):
            path.append(base.k)
            base = base.e
        if not isinstance(base, ast.Var):
            raise _bad(f"read of a non-variable {type(base).__name__}", e)
        path.reverse()
        name = base.name
        if name in self.env:
            if path:
                raise _bad(f"projection of the binding {name}", e)
            var = self.env[name]
        elif name in self.ptypes:
            try:
                var = self.b.input(name, path)
            except ValueError as err:
                raise _bad(str(err), e) from None
        else:
            raise _bad(f"unbound variable {name}", e)
        return var, len(self.b.shapes[var])

    # -- bindings --------------------------------------------------------------------------

    def binding(self, e: ast.Expr) -> str:
        """SSA-gen: `gen I. s` (or a scalar s) -> its statement variable (or an alias)."""
        if isinstance(e, ast.Box):
            return self.box(e)
        if isinstance(e, (ast.Var, ast.Proj)):  # a whole variable: itself
            var, rank = self.read_var(e, e)
            if rank:
                return var
        gens: list[tuple[str, Affine]] = []
        while isinstance(e, ast.Gen):
            gens.append((e.idx, e.size))
            e = e.body
        ctx = Ctx(tuple(gens), PTrue())
        t = self.conv(e, ctx)
        alias = self.alias(t, ctx)
        return alias if alias is not None else self.emit_term(t, ctx)

    def box(self, e: ast.Box) -> str:
        """SSA-box: `fn(x, ..).k` on whole variables -> one box statement."""
        args = []
        for a in e.args:
            if not isinstance(a, ast.Var):
                raise _bad(f"{e.fn}: a box reads whole variables after elaboration", e)
            args.append(self.read_var(a, a)[0])
        dims = box_shape(e.fn, e.part, [self.b.shapes[v] for v in args])
        return self.b.box(e.fn, e.part, dims, args, e.label)

    def alias(self, t: Term, ctx: Ctx) -> str | None:
        """SSA-trivial: `v = u[I]` (same shape, identity access, no mask) is u itself."""
        if len(t.factors) != 1 or not isinstance(t.factors[0], Operand):
            return None
        if not self.covered(t, ctx):
            return None
        o = t.factors[0]
        if o.idx != ctx.ids() or self.b.shapes[o.var] != tuple(s for _, s in ctx.idx):
            return None
        return o.var

    def output(self, e: ast.Expr) -> tssa.Out:
        if isinstance(e, ast.Pair):
            return (self.output(e.a), self.output(e.b))
        return self.binding(e)


# ---------------------------------------------------------------------------------------------
# The cases


def ssa_read(cv: Converter, e: ast.Expr, ctx: Ctx) -> Term:
    """SSA-read: `x[A]` (or a scalar `x`, `x.0`) is an operand; nothing is emitted."""
    base, idx = (e.e, e.idx) if isinstance(e, ast.Access) else (e, ())
    var, rank = cv.read_var(base, e)
    if rank != len(idx):
        raise _bad(f"read of {var} with {len(idx)} of {rank} indices", e)
    return Term(PTrue(), (Operand(var, idx),), region=ctx.region())


def ssa_const(cv: Converter, e: ast.Const, ctx: Ctx) -> Term:
    """SSA-const: a constant factor; the constant 0 is the structural zero."""
    return ZERO if e.value == 0.0 else Term(PTrue(), (float(e.value),), region=ctx.region())


def ssa_index(cv: Converter, e: ast.IndexValue, ctx: Ctx) -> Term:
    """SSA-index: an index value `a(I)` is an operand of `v = gen I'. a(I')` (an iota over
    the indices in scope that `a` mentions, free) read at those indices."""
    used = [(n, size) for n, size in ctx.idx if n in e.a.vars()]
    v = cv.b.index(used, e.a)
    return Term(PTrue(), (Operand(v, tuple(Affine.var(n) for n, _ in used)),),
                region=ctx.region())


def ssa_iverson(cv: Converter, e: ast.Iverson, ctx: Ctx) -> Term:
    """SSA-iverson: `[p] * s`: s converts under mask `P and p`; p joins the guard."""
    if isinstance(e.pred, PFalse):
        return ZERO  # the body is never evaluated
    t = cv.conv(e.e, ctx.under(e.pred))
    if t.is_zero:
        return ZERO
    return Term(ast.pred_and(e.pred, t.guard), t.factors, t.clean,
                t.region | frozenset(tssa.conjuncts(e.pred)))


def ssa_add(cv: Converter, e: ast.Add, ctx: Ctx) -> Term:
    """SSA-add: `s1 + s2` -> `[P] * ([G1] * u1 + [G2] * u2)`; a structural zero side is
    the other side (the source adds nothing there)."""
    t1, t2 = cv.conv(e.a, ctx), cv.conv(e.b, ctx)
    if t1.is_zero:
        return t2
    if t2.is_zero:
        return t1
    (o1, g1), (o2, g2) = cv.with_support(t1, ctx), cv.with_support(t2, ctx)
    v = cv.b.add(ctx.idx, o1, o2, ctx.mask, (g1, g2))
    guard = ast.pred_or(g1, g2)  # the sum is zero where both operands are dead
    return Term(guard, (Operand(v, ctx.ids()),), ctx.region(guard), ctx.region(guard))


def ssa_contract(cv: Converter, e: ast.Mul, ctx: Ctx) -> Term:
    """SSA-contract: `s1 * s2`: a product term whose guard is the conjunction of the
    factors' guards (an Iverson factor is hoisted into the product's mask); the consumer
    materialises it as one contract (J empty) or fuses it into a sum's contract."""
    t1, t2 = cv.conv(e.a, ctx), cv.conv(e.b, ctx)
    if t1.is_zero or t2.is_zero:
        for t in (t1, t2):  # the source still multiplies inside the other factor
            if len(t.factors) > 1:
                cv.emit_term(t, ctx)
        return ZERO
    guard = ast.pred_and(t1.guard, t2.guard)
    parts = tuple(f for t in (t1, t2) for f in (t.factors if len(t.factors) == 1 else (t,)))
    return Term(guard, parts, t1.clean | t2.clean, ctx.region(guard))


def ssa_map(cv: Converter, e: ast.Call, ctx: Ctx) -> Term:
    """SSA-map: `f(s1, ..)` -> `[P] * f(u1, ..)`; the mask P is pushed onto the arguments'
    statements too (their values outside P are never used)."""
    if ast.BUILTINS.get(e.fn) != (len(e.args), len(e.params)):
        raise _bad(f"unknown builtin {e.fn}/{len(e.args)}", e)
    args = [cv.exact(cv.conv(a, ctx), ctx) for a in e.args]
    v = cv.b.map(ctx.idx, e.fn, args, ctx.mask, e.params)
    return cv.result(v, ctx)


def ssa_sum(cv: Converter, e: ast.Sum, ctx: Ctx) -> Term:
    """SSA-sum-contract / SSA-reduce: a nest of directly nested sums over a product of two
    operands is one contract over the whole nest; over one operand, one reduce.  (Sums
    separated by an Iverson bracket are costed separately by SPEC 3, so they are not
    fused here; the simplifier may fuse them.)"""
    sums: list[tuple[str, Affine]] = []
    body: ast.Expr = e
    while isinstance(body, ast.Sum):
        sums.append((body.idx, body.size))
        body = body.body
    t = cv.conv(body, ctx.inside(sums))
    if t.is_zero:  # a sum of structural zeros is 0 but is not itself a structural zero
        return Term(PTrue(), (0.0,), region=ctx.region())
    v = cv.emit_term(t, ctx, sums)
    names = {n for n, _ in sums}
    outer = [q for q in tssa.conjuncts(t.guard) if not (ast.free_names(q) & names)]
    return cv.result(v, ctx, ast.pred_and(*outer))


def ssa_extreme(cv: Converter, e: ast.Extremum, ctx: Ctx) -> Term:
    """SSA-extreme: `max j:n. s` -> `[P] * max j. u[I, j]` with u the exact value of s over
    I + j (its structural zeros are values: they take part in the max)."""
    inner = ctx.inside([(e.idx, e.size)])
    arg = cv.exact(cv.conv(e.body, inner), inner)
    v = cv.b.extreme(ctx.idx, e.size, e.op, arg, ctx.mask, sum_name=e.idx)
    return cv.result(v, ctx)


DISPATCH: dict[type, Callable] = {
    ast.Access: ssa_read, ast.Var: ssa_read, ast.Proj: ssa_read, ast.Const: ssa_const,
    ast.IndexValue: ssa_index,
    ast.Iverson: ssa_iverson, ast.Add: ssa_add, ast.Mul: ssa_contract, ast.Call: ssa_map,
    ast.Sum: ssa_sum, ast.Max: ssa_extreme, ast.Min: ssa_extreme,
}

CASES: dict[str, Callable] = {
    "SSA-read": ssa_read, "SSA-const": ssa_const, "SSA-index": ssa_index,
    "SSA-iverson": ssa_iverson,
    "SSA-add": ssa_add, "SSA-contract": ssa_contract, "SSA-map": ssa_map,
    "SSA-sum-contract": ssa_sum, "SSA-reduce": ssa_sum, "SSA-extreme": ssa_extreme,
    "SSA-gen": Converter.binding,
    "SSA-trivial": Converter.alias, "SSA-cse": Builder.emit, "SSA-dce": tssa.dce,
}
"""Rule id -> the function implementing it (the catalogue in proofs/rules_ssa.py)."""


def bindings(d: ast.Def) -> tuple[list[tuple[str, ast.Expr]], ast.Expr]:
    """The top-level `let` block of a let-lifted body and its result."""
    out: list[tuple[str, ast.Expr]] = []
    e = d.body
    while isinstance(e, ast.Let):
        out.append((e.name, e.value))
        e = e.body
    return out, e


def to_ssa(d: ast.Def, *, share: bool = True, prune: bool = True) -> Program:
    """Convert a gen-pushed `Def` to Tensor SSA.

    `share=False, prune=False` gives the bare conversion (every source operation one
    statement instance, dead bindings kept): its cost equals the source's.  The default
    adds CSE (hash-consing) and DCE, which only remove statements.
    """
    cv = Converter(d, share)
    binds, result = bindings(d)
    for name, value in binds:
        if name in cv.env or name in cv.ptypes:
            raise _bad(f"{name} is bound twice (names must be unique)", value)
        cv.env[name] = cv.binding(value)
    out = cv.output(result)
    return cv.b.program(out, d.name, d.ret, prune=prune)
