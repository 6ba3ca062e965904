"""Statement emission shared by the derivative rules (jvp, vjp, derived functions).

The derivative rules of SPEC 6 produce masked sums `gen I. sum J. [P] * c * u1[A1] * u2[A2]`
whose summation indices are often determined by equalities in P (the adjoint of a read
`u[A]` sums over all I with `A(I) == K`; a one-hot seed `[k == j]` pins a sum index).
`Emitter` turns such a sum into ordinary Tensor SSA, simplifying as it goes:

  * const inlining   a read of a constant statement `w = gen I'. [Q] * c'` becomes the mask
                     `Q(A) and 0 <= A < dims` and the factor c' (cost never rises: a contract
                     becomes a reduce, a reduce of a constant becomes a constant);
  * gather forwarding a read of a gather `g = gen I'. [Q] * c' * u[B]` (a reduce with no sum)
                     reads `u[B(A)]` under `Q(A)` instead (when the coefficients do not add a
                     multiplication), so zero-cost copies such as the adjoint of a diagonal
                     never have to be materialised;
  * mask strengthening the product is zero where an operand's support fails or its
                     access leaves the operand's range, so both join the mask;
  * sum elimination  the index solver (`passes.indexsolve.eliminate_sum`: unit substitution,
                     Smith normal form with divisibility guards, Fourier-Motzkin bounds)
                     removes every summation index the equalities determine: an adjoint is a
                     gather over its output index, never a scatter;
  * aliasing         `v = gen I. u[I]` (same shape, mask implied by u's support) is u.

Every statement variable carries a *support*: a predicate over its generator indices
outside which it is structurally zero (the mask; for a sum, the mask projected onto I:
Fourier-Motzkin, plus an `exists` over the summed indices where that is not exact, so that
the support is false wherever the sum is empty).  Supports make a fan-out add count only
where both contributions are live (SPEC 3's guarded addition).  Every step only
lowers the SPEC 3 cost.  `naive=True` switches all of them off (the bare rules, kept for the
comparisons of docs/derivatives.md).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.ir.build import (Builder, make_add, make_const, make_contract, make_map,
                                 make_reduce)
from tensorlang.ir.canon import disjuncts
from tensorlang.ir.ast import Affine, Cmp, PFalse, Pred, PTrue
from tensorlang.semantics.builtins import INDICATOR_PARTIALS, deriv_expr, select_call
from tensorlang.ir.tssa import (ExtremeRhs, AddRhs, ConstRhs, Input, MapRhs, Operand, ReduceRhs,
                             Rhs)

from ..indexsolve import eliminate_sum
from ..indexsolve import constraint_to_pred, fourier_motzkin

IndexList = Sequence[tuple[str, Affine]]
_ROUNDS = 8  # forwarding rounds per emitted sum (each round removes a statement level)


def ids(names: Iterable[str]) -> tuple[Affine, ...]:
    return tuple(Affine.var(n) for n in names)


def tidy(p: Pred, context: frozenset = frozenset()) -> Pred:
    """Drop what the context already says: `A and (A and B or C)` -> `A and (B or C)`;
    nested disjunctions are spliced and absorbed (`B or B and C` -> `B`).  Supports of sums
    of products of supports are built by conjunction and disjunction, and would otherwise
    repeat themselves at every level."""
    atoms = [q for q in tssa.conjuncts(p) if not isinstance(q, ast.Or)]
    if any(isinstance(q, PFalse) for q in atoms):
        return PFalse()
    ctx = context | frozenset(atoms)
    out = [q for q in atoms if q not in context]
    for q in tssa.conjuncts(p):
        if not isinstance(q, ast.Or):
            continue
        alts: list[frozenset] = []
        true = False
        for d in disjuncts(q):
            d2 = tidy(d, ctx)
            if isinstance(d2, PTrue):
                true = True
                break
            for e in (disjuncts(d2) if isinstance(d2, ast.Or) else [d2]):
                if not isinstance(e, PFalse):
                    alts.append(frozenset(tssa.conjuncts(e)))
        if true:
            continue
        alts = [a for a in alts if not any(b < a for b in alts)]
        uniq = list(dict.fromkeys(alts))
        if not uniq:
            return PFalse()
        if len(uniq) == 1:
            out += [a for a in uniq[0] if a not in ctx]
        else:
            out.append(ast.pred_or(*(ast.pred_and(*sorted(a, key=tssa.node_key)) for a in uniq)))
    return ast.pred_and(*out)


def _drop_range_implied(p: Pred, dims: Sequence[Affine]) -> Pred:
    return _drop_cached(p, tuple(dims))


@functools.lru_cache(maxsize=1 << 14)
def _drop_cached(p: Pred, dims: tuple[Affine, ...]) -> Pred:
    """Drop size-only atoms that hold whenever one of `dims` is non-empty: a mask is only
    evaluated at points of its ranges (`0 < N` inside `gen i:N`, from the index solver)."""
    parts = tssa.conjuncts(p)
    keep = [ast.pred_or(*(_drop_cached(d, dims) for d in disjuncts(q)))
            if isinstance(q, ast.Or) else q
            for q in parts if not _implied_by_dims(q, dims)]
    return ast.pred_and(*keep)


@functools.lru_cache(maxsize=1 << 14)
def _implied_by_dims(q: Pred, dims: tuple[Affine, ...]) -> bool:
    if not isinstance(q, Cmp) or q.op == "==" or not q.lhs.vars() | q.rhs.vars():
        return False
    d = q.rhs - q.lhs - (1 if q.op == "<" else 0)  # the atom is d >= 0
    for n in dims:  # n >= 1 at any point; d - (n - 1) >= 0 for all sizes >= 0 suffices
        r = d - (n - 1)
        if r.const >= 0 and all(c >= 0 for _, c in r.terms):
            return True
    return False


def _range_pred(idx: Sequence[Affine], dims: Sequence[Affine]) -> Pred:
    return ast.pred_and(*(ast.in_range(a, n) for a, n in zip(idx, dims)))


def project(pred: Pred, names: Sequence[str], sizes: Sequence[Affine]) -> Pred:
    """A predicate over the other variables that holds exactly where `exists names. pred`
    does: rational Fourier-Motzkin on the affine atoms, disjunctions projected disjunct by
    disjunct (one disjunction at a time, so the result stays small), and, where that is not
    exact (a relation or an `exists` over `names`, a non-unit coefficient of a name, a second
    disjunction, an atom bounding two of them), also `exists names. <the atoms naming them>`
    itself.  Exactness matters: an add is counted where both supports hold, and a support
    that holds where the sum is empty would count an add the primal never pays for
    (Theorem 6.1; found by the FWD-contract catalogue entry)."""
    drop = set(names)
    keep: list[Pred] = []
    rest: list[Pred] = []
    ors: list[ast.Or] = []
    named: list[Pred] = []
    for q in tssa.conjuncts(pred):
        if isinstance(q, PFalse):
            return PFalse()
        if not (ast.free_names(q) & drop):
            keep.append(q)
            continue
        named.append(q)
        if isinstance(q, Cmp):
            rest.append(q)
        elif isinstance(q, ast.Or) and not ors:
            ors.append(q)
    if ors and len(disjuncts(ors[0])) <= _MAX_DISJUNCTS:
        alts = [_fm_project(rest + tssa.conjuncts(d), names, sizes)
                for d in disjuncts(ors[0])]
        out = ast.pred_and(*keep, ast.pred_or(*alts))
    else:
        out = ast.pred_and(*keep, _fm_project(rest, names, sizes))
    exact = (len(ors) <= 1 and all(_fm_exact(q, drop) for q in named)
             and not (ors and len(disjuncts(ors[0])) > _MAX_DISJUNCTS))
    if exact or isinstance(out, PFalse):
        return out
    body = ast.pred_and(*named)
    for n, size in reversed(list(zip(names, sizes))):
        if n in ast.free_names(body):
            body = ast.Exists(n, size, body)
    return ast.pred_and(out, body)


def _fm_exact(q: Pred, drop: set[str]) -> bool:
    """Whether Fourier-Motzkin projects `q` out of `drop` exactly over the integers:
    comparisons that each bound one dropped name with coefficient 1 or -1 (the system is then
    a box per name, non-empty iff every lower bound is at most every upper bound), combined
    by `and` / `or`."""
    if not (ast.free_names(q) & drop):
        return True
    if isinstance(q, Cmp):
        terms = [c for n, c in (q.rhs - q.lhs).terms if n in drop]
        return len(terms) == 1 and abs(terms[0]) == 1
    if isinstance(q, (ast.And, ast.Or)):
        return _fm_exact(q.a, drop) and _fm_exact(q.b, drop)
    return False


_MAX_DISJUNCTS = 16


def _fm_project(atoms: Sequence[Pred], names: Sequence[str], sizes: Sequence[Affine]) -> Pred:
    """Fourier-Motzkin projection of a conjunction of comparisons (the boxes of `names`
    included: an empty range is a structural zero); other atoms naming `names` dropped."""
    drop = set(names)
    keep: list[Pred] = []
    cons: list[Affine] = []
    for q in atoms:
        if isinstance(q, PFalse):
            return PFalse()
        if not (ast.free_names(q) & drop):
            keep.append(q)
        elif isinstance(q, Cmp):
            d = q.rhs - q.lhs
            if q.op == "<":
                cons.append(d - 1)
            elif q.op == "<=":
                cons.append(d)
            else:
                cons += [d, -d]
    if names:
        for n, s in zip(names, sizes):
            cons += [Affine.var(n), s - 1 - Affine.var(n)]
        nest = fourier_motzkin(cons, list(names))
        if not nest.feasible:
            return PFalse()
        keep += [constraint_to_pred(a) for a in nest.guard]
    return ast.pred_and(*keep)


@dataclass
class Val:
    """`coeff * op` (op None: the constant `coeff`) -- a scalar value under construction."""

    coeff: float
    op: Operand | None = None

    @property
    def zero(self) -> bool:
        return self.coeff == 0.0


class Emitter:
    """A `build.Builder` that simplifies the sums it is given and tracks supports."""

    def __init__(self, params: Sequence[ast.Param], ix: tuple[str, str, str],
                 naive: bool = False) -> None:
        self.b = Builder(params, ix=ix)
        self.ix = self.b.ix
        self.supp: dict[str, Pred] = {}
        self.naive = naive  # the bare rules, no simplification (for comparison only)
        taken = {q.name for q in params}
        tmp = "_t"
        while any(n.startswith(tmp) for n in taken):
            tmp += "_"
        self.tmp = tmp  # prefix of temporary index names (never a parameter's)

    # -- bookkeeping -----------------------------------------------------------------------

    def shape(self, var: str) -> tuple[Affine, ...]:
        return self.b.shapes[var]

    def gens(self, dims: Sequence[Affine]) -> list[tuple[str, Affine]]:
        """The canonical generator indices of a statement with these dims."""
        return [(f"{self.ix[0]}{k}", d) for k, d in enumerate(dims)]

    def canon(self, p: Pred, gen: IndexList, sums: IndexList = (),
              context: Pred = PTrue()) -> Pred:
        """Canonical form (tssa.canon_pred) plus the clean-ups of `tidy`, given that
        `context` holds."""
        rng = {n: s for n, s in list(gen) + list(sums)}
        p = _drop_range_implied(p, list(rng.values()))
        p = tssa.canon_pred(p, rng, self.ix[2])
        ctx = tssa.canon_pred(context, rng, self.ix[2])
        return tssa.canon_pred(tidy(p, frozenset(tssa.conjuncts(ctx))), rng, self.ix[2])

    def _support_of(self, rhs: Rhs) -> Pred:
        if isinstance(rhs, Input):
            return PTrue()
        if isinstance(rhs, ConstRhs):
            return PFalse() if rhs.value == 0.0 else rhs.pred
        if isinstance(rhs, MapRhs):
            return rhs.pred
        if isinstance(rhs, AddRhs):
            parts = []
            for s, o in zip(rhs.supports, rhs.operands):
                parts.append(ast.pred_and(s, *self._atoms_at(o)))
            return ast.pred_and(rhs.pred, ast.pred_or(*parts))
        return project(rhs.pred, rhs.sum_names(), rhs.sdims)

    def _note(self, var: str, rhs: Rhs) -> str:
        if var not in self.supp:
            gen = list(zip(rhs.gen_names(), rhs.dims)) if not isinstance(rhs, Input) else []
            self.supp[var] = self.canon(self._support_of(rhs), gen)
        return var

    def _atoms_at(self, o: Operand) -> list[Pred]:
        """The conjuncts of o.var's support read at o's access, and o's range condition: a
        product (or an add's side) is zero wherever they fail."""
        s = self.supp.get(o.var, PTrue())
        shape = self.b.shapes.get(o.var, ())
        rng = tssa.conjuncts(_range_pred(o.idx, shape)) if len(shape) == len(o.idx) else []
        if isinstance(s, PTrue):
            return rng  # a read out of range is zero (SPEC 2.2)
        m = {f"{self.ix[0]}{k}": a for k, a in enumerate(o.idx)}
        if isinstance(s, PFalse):
            return [PFalse()]
        return rng + [ast.subst(q, m) for q in tssa.conjuncts(s)]

    # -- plain statements ------------------------------------------------------------------

    def input(self, param: str, path: Sequence[int] = ()) -> str:
        var = self.b.input(param, path)
        self.supp.setdefault(var, PTrue())
        return var

    def copy(self, rhs: Rhs, rename: Mapping[str, str]) -> str:
        """A statement of another program, operands renamed, emitted verbatim."""
        if isinstance(rhs, Input):
            return self.input(rhs.param, rhs.path)
        rhs = rhs.rename_vars(rename)
        return self._note(self.b.emit(rhs), rhs)

    def const(self, gen: IndexList, value: float, pred: Pred = PTrue()) -> str | None:
        pred = self.canon(pred, gen)
        if value == 0.0 or isinstance(pred, PFalse):
            return None
        rhs = make_const(gen, value, pred, self.ix)
        return self._note(self.b.emit(rhs), rhs)

    def zeros(self, dims: Sequence[Affine]) -> str:
        rhs = make_const(self.gens(dims), 0.0, PTrue(), self.ix)
        return self._note(self.b.emit(rhs), rhs)

    def map(self, gen: IndexList, fn: str, params: Sequence[float], ops: Sequence[Operand],
            pred: Pred = PTrue(), linear: Sequence[Operand] = ()) -> str | None:
        """`gen. [pred] * fn(ops)`; `linear`: operands the function is zero without (a
        selection's tangents), whose supports then join the mask, so the call runs only
        where one of them is live."""
        if linear and not self.naive:
            live = [ast.pred_and(*self._atoms_at(o)) for o in linear]
            pred = ast.pred_and(pred, ast.pred_or(*live))
        pred = self.canon(pred, gen)
        if isinstance(pred, PFalse):
            return None
        rhs = make_map(gen, fn, ops, pred, params, self.ix)
        return self._note(self.b.emit(rhs), rhs)

    # -- adds ------------------------------------------------------------------------------

    def add(self, gen: IndexList, a: tuple[Operand, Pred], b: tuple[Operand, Pred],
            pred: Pred = PTrue()) -> str | None:
        """`gen. [pred] * ([s1] * o1 + [s2] * o2)` with forwarded gathers and supports
        strengthened by the operands' supports (the add then counts only where both are
        live)."""
        if self.naive:
            rhs = make_add(gen, a[0], b[0], pred, (a[1], b[1]), self.ix)
            return self._note(self.b.emit(rhs), rhs)
        sides = []
        for o, s in (a, b):
            o, s = self.forward_add_operand(o, s)
            if o is not None:
                s = self.canon(ast.pred_and(s, *self._atoms_at(o)), gen,
                               context=pred)
                if not isinstance(s, PFalse):
                    sides.append((o, s))
        if not sides:
            return None
        if len(sides) == 1:
            (o, s), = sides
            return self.sum(gen, [], ast.pred_and(pred, s), 1.0, [o])
        (o1, s1), (o2, s2) = sides
        pred = self.canon(pred, gen)
        if isinstance(pred, PFalse):
            return None
        rhs = make_add(gen, o1, o2, pred, (s1, s2), self.ix)
        return self._note(self.b.emit(rhs), rhs)

    def forward_add_operand(self, o: Operand, s: Pred) -> tuple[Operand | None, Pred]:
        """`o` (under mask `s`) read through the unit-coefficient reductions that define it,
        with their masks joined to `s`; (None, false) for a constant zero."""
        for _ in range(_ROUNDS):
            d = self.b.defs.get(o.var)
            if isinstance(d, ConstRhs) and d.value == 0.0:
                return None, PFalse()
            if not (isinstance(d, ReduceRhs) and not d.sdims and d.coeff == 1.0):
                break
            o, extra = self._through(d, o)
            s = ast.pred_and(s, extra)
        return o, s

    def add_all(self, dims: Sequence[Affine], terms: Sequence[str | None]) -> str | None:
        """The sum of statements of shape `dims` (one guarded add per extra term)."""
        gen = self.gens(dims)
        idx = ids(n for n, _ in gen)
        out: str | None = None
        for t in terms:
            if t is None:
                continue
            out = t if out is None else self.add(gen, (Operand(out, idx), PTrue()),
                                                 (Operand(t, idx), PTrue()))
        return out

    # -- sums ------------------------------------------------------------------------------

    def _through(self, d: Rhs, o: Operand) -> tuple[Operand, Pred]:
        """Read through the gather / constant `d` at o's access: (new operand or o, mask)."""
        m = {n: a for n, a in zip(d.gen_names(), o.idx)}
        mask = ast.pred_and(ast.subst(d.pred, m), _range_pred(o.idx, d.dims))
        if isinstance(d, ReduceRhs):
            u = d.operands[0]
            return Operand(u.var, tuple(a.subst(m) for a in u.idx)), mask
        return o, mask

    def sum(self, gen: IndexList, sums: IndexList, pred: Pred, coeff: float,
            ops: Sequence[Operand]) -> str | None:
        """`gen I. sum J. [pred] * coeff * ops...` (at most two operands) as one simplified
        statement; None when it is structurally zero.  Index names are arbitrary (distinct
        from sizes and relations)."""
        if coeff == 0.0:
            return None
        ren: dict[str, Affine] = {}
        g2 = [(f"{self.tmp}g{k}", s) for k, (_, s) in enumerate(gen)]
        s2 = [(f"{self.tmp}s{k}", s) for k, (_, s) in enumerate(sums)]
        for (n, _), (t, _) in zip(list(gen) + list(sums), g2 + s2):
            ren[n] = Affine.var(t)
        pred = ast.subst(pred, ren)
        cur = [o.subst(ren) for o in ops]
        sums_l = list(s2)
        for _ in range(0 if self.naive else _ROUNDS):
            changed = False
            nxt: list[Operand] = []
            for o in cur:
                d = self.b.defs.get(o.var)
                if isinstance(d, ConstRhs):
                    if d.value == 0.0:
                        return None
                    coeff *= d.value
                    _, mask = self._through(d, o)
                    pred = ast.pred_and(pred, mask)
                    changed = True
                    continue
                if (isinstance(d, ReduceRhs) and not d.sdims
                        and (d.coeff == 1.0 or coeff != 1.0)):
                    o, mask = self._through(d, o)
                    coeff *= d.coeff
                    pred = ast.pred_and(pred, mask)
                    changed = True
                nxt.append(o)
            cur = nxt
            for o in cur:
                pred = ast.pred_and(pred, *self._atoms_at(o))
            if isinstance(self.canon(pred, g2, sums_l), PFalse):
                return None
            if sums_l:
                solved = _solve(sums_l, pred, cur)
                if solved is None:
                    return None
                sums_l, pred, cur, k = solved
                coeff *= k
            if not changed:
                break
        return self._emit_sum(g2, sums_l, pred, coeff, cur)

    def _emit_sum(self, gen: IndexList, sums: IndexList, pred: Pred, coeff: float,
                  ops: list[Operand]) -> str | None:
        pred = self.canon(pred, gen, sums)
        if coeff == 0.0 or isinstance(pred, PFalse):
            return None
        if not ops:
            if not sums:
                return self.const(gen, coeff, pred)
            c = self.const([], coeff)  # a sum of a constant: additions only
            assert c is not None
            ops, coeff = [Operand(c, ())], 1.0
        if len(ops) == 1:
            rhs: Rhs = make_reduce(gen, sums, ops[0], pred, coeff, self.ix)
        else:
            rhs = make_contract(gen, sums, ops[0], ops[1], pred, coeff, self.ix)
        alias = None if self.naive else self._alias(rhs)
        if alias is not None:
            return alias
        return self._note(self.b.emit(rhs), rhs)

    def _alias(self, rhs: Rhs) -> str | None:
        """`v = gen I. [P] * u[I]` with u of shape I and P implied by u's support is u."""
        if not (isinstance(rhs, ReduceRhs) and not rhs.sdims and rhs.coeff == 1.0):
            return None
        o = rhs.operands[0]
        if o.idx != ids(rhs.gen_names()) or self.shape(o.var) != rhs.dims:
            return None
        have = set(tssa.conjuncts(self.supp.get(o.var, PTrue())))
        if all(q in have for q in tssa.conjuncts(rhs.pred)):
            return o.var
        return None


def _solve(sums: list[tuple[str, Affine]], pred: Pred, ops: list[Operand]
           ) -> tuple[list[tuple[str, Affine]], Pred, list[Operand], float] | None:
    """Eliminate the summation indices that the equalities of `pred` determine (index
    solver); returns (sums, pred, operands, factor) or None for a structural zero."""
    factors: list[ast.Expr] = [ast.Access(ast.Var(o.var), o.idx) if o.idx else ast.Var(o.var)
                             for o in ops]
    body: ast.Expr = factors[0] if factors else ast.Const(1.0)
    for f in factors[1:]:
        body = ast.Mul(body, f)
    e: ast.Expr = body if isinstance(pred, PTrue) else ast.Iverson(pred, body)
    for name, size in reversed(sums):
        e = ast.Sum(name, size, e)
    r = eliminate_sum(e)
    guards: list[Pred] = []
    new_sums: list[tuple[str, Affine]] = []
    while isinstance(r, (ast.Sum, ast.Iverson)):
        if isinstance(r, ast.Iverson):
            guards.append(r.pred)
            r = r.e
        else:
            new_sums.append((r.idx, r.size))
            r = r.body
    coeff = 1.0
    out: list[Operand] = []
    stack = [r]
    while stack:
        f = stack.pop(0)
        if isinstance(f, ast.Mul):
            stack[:0] = [f.a, f.b]
        elif isinstance(f, ast.Const):
            coeff *= f.value
        elif isinstance(f, ast.Access) and isinstance(f.e, ast.Var):
            out.append(Operand(f.e.name, f.idx))
        elif isinstance(f, ast.Var):
            out.append(Operand(f.name, ()))
        else:
            raise AssertionError(f"unexpected factor from the index solver: {f!r}")
    if coeff == 0.0:
        return None
    return new_sums, ast.pred_and(*guards), out, coeff


# ---------------------------------------------------------------------------------------------
# Derivatives of builtins as statements


def emit_scalar(em: Emitter, gen: IndexList, pred: Pred, e: ast.Expr,
                env: Mapping[str, Operand]) -> Val:
    """Statements computing the scalar expression `e` at every point of `gen` under `pred`
    (`env` maps the expression's variables to operands).  A constant factor is left pending
    in the result (`Val.coeff`) so the consumer can fold it into its own coefficient."""
    if isinstance(e, ast.Const):
        return Val(float(e.value))
    if isinstance(e, ast.Var):
        return Val(1.0, env[e.name])
    if isinstance(e, ast.Let):
        v = emit_scalar(em, gen, pred, e.value, env)
        op = materialise(em, gen, pred, v)
        if op is None:
            zero = em.zeros([s for _, s in gen])
            op = Operand(zero, ids(n for n, _ in gen))
        return emit_scalar(em, gen, pred, e.body, {**env, e.name: op})
    here = ids(n for n, _ in gen)
    if isinstance(e, ast.Call):
        args = []
        for a in e.args:
            op = materialise(em, gen, pred, emit_scalar(em, gen, pred, a, env))
            if op is None:
                op = Operand(em.zeros([s for _, s in gen]), here)
            args.append(op)
        var = em.map(gen, e.fn, e.params, args, pred)
        return Val(0.0) if var is None else Val(1.0, Operand(var, here))
    if isinstance(e, ast.Mul):
        a, b = emit_scalar(em, gen, pred, e.a, env), emit_scalar(em, gen, pred, e.b, env)
        if a.zero or b.zero:
            return Val(0.0)
        if a.op is None or b.op is None:
            return Val(a.coeff * b.coeff, a.op or b.op)
        var = em.sum(gen, [], pred, 1.0, [a.op, b.op])
        return Val(0.0) if var is None else Val(a.coeff * b.coeff, Operand(var, here))
    if isinstance(e, ast.Add):
        a, b = emit_scalar(em, gen, pred, e.a, env), emit_scalar(em, gen, pred, e.b, env)
        if a.zero:
            return b
        if b.zero:
            return a
        if a.op is None and b.op is None:
            return Val(a.coeff + b.coeff)
        oa, ob = materialise(em, gen, pred, a), materialise(em, gen, pred, b)
        sides = [o for o in (oa, ob) if o is not None]
        if len(sides) == 1:
            return Val(1.0, sides[0])
        var = em.add(gen, (sides[0], PTrue()), (sides[1], PTrue()), pred)
        return Val(0.0) if var is None else Val(1.0, Operand(var, here))
    raise TypeError(f"cannot emit {type(e).__name__} as a scalar statement")


def materialise(em: Emitter, gen: IndexList, pred: Pred, v: Val) -> Operand | None:
    """An operand holding the value `v` under `pred` (None for zero)."""
    here = ids(n for n, _ in gen)
    if v.zero:
        return None
    if v.op is None:
        var = em.const(gen, v.coeff, pred)
    elif v.coeff == 1.0:
        return v.op
    else:
        var = em.sum(gen, [], pred, v.coeff, [v.op])
    return None if var is None else Operand(var, here)


def builtin_partial(em: Emitter, gen: IndexList, pred: Pred, fn: str, params: Sequence[float],
                    args: Sequence[Operand], k: int) -> Val:
    """The k-th partial derivative of `fn(args; params)` at every point of `gen` under
    `pred`: usually one map (shared with an equal primal map by hash-consing) times a
    pending constant (`builtins.deriv_expr`)."""
    holes = [f"{em.tmp}h{m}" for m in range(len(args))]
    e = deriv_expr(fn, [ast.Var(h) for h in holes], params, k)
    return emit_scalar(em, gen, pred, e, dict(zip(holes, args)))


def has_select_rule(fn: str) -> bool:
    """Whether `fn`'s derivatives are selections (`builtin_select`), not partial * tangent."""
    return fn in INDICATOR_PARTIALS


def builtin_select(em: Emitter, gen: IndexList, pred: Pred, fn: str, args: Sequence[Operand],
                   tangents: Sequence[Operand | None]) -> str | None:
    """`sum_k f_k'(args) * tangents[k]` at every point of `gen` under `pred`, for a builtin
    whose partials are indicators (max, min, the selections): ONE call of `sel_ge`,
    `keep_ge` or `keep_gt` (`builtins.select_call`), masked by the tangents' supports.
    The tangents are read through gathers (a selection is zero where its tangents are, so
    the gather's mask may join the call's when there is one tangent); `keep_ge(a, b, t)` of
    a constant-1 tangent t is `ge(a, b)` under t's mask (the gradient seed).  None for a
    structural zero."""
    call = select_call(fn, args, tangents)
    if call is None:
        return None
    helper, ops = call
    lin: list[Operand] = []
    for t in ops[2:]:
        o, s = (None, PTrue()) if em.naive else em.forward_add_operand(t, PTrue())
        if o is not None and (len(ops) == 3 or isinstance(em.canon(s, gen), PTrue)):
            pred, t = ast.pred_and(pred, s), o
        lin.append(t)
    if len(lin) == 1 and not em.naive:
        d = em.b.defs.get(lin[0].var)
        if isinstance(d, ConstRhs) and d.value == 1.0:
            return em.map(gen, helper[len("keep_"):], (), ops[:2], pred, linear=lin)
    return em.map(gen, helper, (), list(ops[:2]) + lin, pred, linear=lin)


def extreme_weights(em: Emitter, rhs: ExtremeRhs, v: Operand, u: Operand
                    ) -> tuple[list[tuple[str, Affine]], Operand, str | None, Pred]:
    """The tie weights of a max/min reduction `v[I] = [P] * max j. u[A]` (SPEC 12: ties
    share the derivative equally, as JAX does), as data-dependent selections, so that
    derivatives stay gathers: `eq[I, j] = ge(u[A], v[I])` (`ge(v[I], u[A])` for min: the
    maximisers), and `r[I] = [P and 0 < n] * recip(sum j. eq[I, j])`.  `u` and `v` are primal
    operands in the statement's index names.  Returns (generators over I + j, eq read at
    (I, j) in the statement's names, r's variable, the mask `P and 0 < n`)."""
    (jn,), (n,) = rhs.sum_names(), rhs.sdims
    gij = em.gens(tuple(rhs.dims) + (n,))
    to_gen = {jn: Affine.var(gij[-1][0])}
    a, b = (u.subst(to_gen), v) if rhs.op == "max" else (v, u.subst(to_gen))
    eq = em.map(gij, "ge", (), [a, b], rhs.pred)
    here = ids(rhs.gen_names())
    mask = ast.pred_and(rhs.pred, ast.Cmp("<", Affine.lit(0), n))
    if eq is None:
        return gij, Operand(em.zeros(tuple(rhs.dims) + (n,)), here + ids([jn])), None, mask
    eq_read = Operand(eq, here + ids([jn]))
    cnt = em.sum(em.gens(rhs.dims), [(jn, n)], rhs.pred, 1.0, [eq_read])
    r = None if cnt is None else em.map(em.gens(rhs.dims), "recip", (),
                                         [Operand(cnt, here)], mask)
    return gij, eq_read, r, mask
