"""The simplifier's Python pass: everything egglog cannot express (docs/simplifier.md).

egglog rewrites terms; it has no binders, no substitution and no integer linear algebra.  So
this module does, around the e-graph of `simplify_egglog`:

* **naming** (`Universe`): every generator and summation index of the program gets a globally
  unique name with a fixed range, so that terms with free indices are tensors and the rules'
  side conditions ("j not free in a") are set operations;
* **S-pred-canon**: predicates are split into canonical atoms (`tssa.canon_pred` against the
  index ranges: comparisons implied by the ranges are dropped, refuted ones make the bracket
  false); a conjunction of atoms the solver refutes is declared `dead` to the e-graph;
* **S-inline**: a read `u[A]` of a statement `u = gen I. e` equals
  `[0 <= A < n] * e{I := A}` (zero extension): substitution, so the read and the producer's
  body are put in one e-class and the rules see through statements;
* **S-sum-solve**: `sum j. [j == a and q] * e -> [0 <= a < n and q{j:=a}] * e{j:=a}` and the
  general case (Smith normal form, Fourier-Motzkin) by the index solver
  (`indexsolve.eliminate_sums`), on every statement body with its producers inlined;
* **S-fold-call**: black-box calls of constants are evaluated (egglog's f64 has no exp/log);
* **costing**: the number of points of a masked index box at representative sizes (exact, on
  a grid), which is the static per-node cost of the extraction;
* **S-licm** (conversion back to Tensor SSA, `Raiser`): every chosen operator becomes a
  statement over exactly its free indices (so a loop-invariant term is computed once, not in
  every iteration), masked by its support and by the masks of the places that read it; the
  statements go through `passes.ssa.to_ssa`, which fuses, canonicalises and shares them.
"""
from __future__ import annotations

import itertools
import math
import zlib
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from tensorlang.ir import ast as A
from tensorlang.semantics import builtins as BI
from tensorlang.ir import tssa
from tensorlang.ir.ast import (Access, Add, Affine, Call, Const, Def, Gen, Iverson, Let, Mul, Param,
                            Pred, PFalse, Proj, PTrue, Sum, TRel, TSize, Var)
from tensorlang.semantics.interp import Env, eval_pred

from . import simplify_egglog as G
from .indexsolve import eliminate_sums, fourier_motzkin

FALSE = "false"
DEFAULT_REP = 16          # representative size for every size parameter (docs/simplifier.md)


# ---------------------------------------------------------------------------------------------
# Index universe, atoms, accesses


def _prefix_free(prefix: str, taken: Iterable[str]) -> bool:
    return tssa._prefix_ok(prefix, taken)


class Universe:
    """Global index names with their ranges; canonical predicate atoms; access keys; point
    counting at representative sizes."""

    def __init__(self, params: Sequence[Param], ex: str = "k",
                 reps: Mapping[str, int] | None = None) -> None:
        self.params = tuple(params)
        self.size_names = frozenset(p.name for p in params if isinstance(p.type, TSize))
        self.rel_shapes = {p.name: p.type.sizes for p in params if isinstance(p.type, TRel)}
        taken = [p.name for p in params]
        self.prefix = next(c for c in ("ix", "iy", "iz", "ix0_", "ix1_")
                           if _prefix_free(c, taken) and _prefix_free(c, [ex]))
        self.ex = ex
        self._n = itertools.count()
        self.ranges: dict[str, Affine] = {}
        self.atoms: dict[str, Pred] = {FALSE: PFalse()}
        self.atom_vars: dict[str, frozenset[str]] = {FALSE: frozenset()}
        self.atom_size: dict[str, int] = {FALSE: 1}
        self._keys: dict[Pred, str] = {}
        self.boxes: set[str] = set()
        self.accs: dict[str, tuple[Affine, ...]] = {}
        self.acc_vars: dict[str, frozenset[str]] = {}
        self.points = cost_points(self.size_names, reps)
        self.reps = self.points[0]
        self._rels: dict[int, dict[str, np.ndarray]] = {}
        self._counts: dict[tuple, tuple[int, ...]] = {}
        self._pfree: dict[frozenset, frozenset[str]] = {}
        self._refuted: dict[frozenset, bool] = {}
        self._atom_grids: dict[tuple, np.ndarray] = {}

    # -- names -----------------------------------------------------------------------------

    def new_index(self, size: Affine) -> str:
        name = f"{self.prefix}{next(self._n)}"
        self.ranges[name] = size
        return name

    def register(self, e: A.Node) -> None:
        """Record the range of every summation binder of `e` (the index solver and
        capture-avoiding substitution introduce fresh ones)."""
        for n in A.walk(e):
            if isinstance(n, Sum) and n.idx not in self.ranges:
                self.ranges[n.idx] = n.size

    def renaming(self, gens: Sequence[tuple[str, Affine]], idx: Sequence[Affine]) -> bool:
        """`idx` reads every dimension with a distinct index of the same range."""
        names = [a.as_var() for a in idx]
        return (len(set(names)) == len(names) and None not in names
                and all(self.ranges.get(v) == n for v, (_, n) in zip(names, gens)))

    def index_key(self, name: str) -> tuple:
        """Creation order of the universe's own names; other (solver-made) names after."""
        tail = name[len(self.prefix):]
        if name.startswith(self.prefix) and tail.isdigit():
            return (0, int(tail), "")
        return (1, 0, name)

    def index_vars(self, names: Iterable[str]) -> frozenset[str]:
        return frozenset(n for n in names if n in self.ranges)

    # -- atoms (S-pred-canon) ----------------------------------------------------------------

    def canon(self, p: Pred) -> Pred:
        names = A.free_names(p)
        rng = {n: self.ranges[n] for n in names if n in self.ranges}
        return tssa.canon_pred(p, rng, self.ex)

    def atoms_of(self, p: Pred) -> frozenset[str] | None:
        """The canonical atoms of `p` (a conjunction); None when `p` is false."""
        c = self.canon(p)
        if isinstance(c, PFalse):
            return None
        return frozenset(self.atom(q) for q in tssa.conjuncts(c))

    def atom(self, q: Pred) -> str:
        """The key of a canonical atom (short: egglog parses and compares them often)."""
        key = self._keys.get(q)
        if key is None:
            key = self._keys[q] = f"a{len(self._keys)}"
            self.atoms[key] = q
            self.atom_vars[key] = self.index_vars(A.free_names(q))
            self.atom_size[key] = sum(1 for _ in A.walk(q))
        return key

    def box(self, name: str) -> str:
        """The atom `0 <= i` of an index (true on its range, and not canonicalised away): in
        a primitive's mask it keeps the primitive over that loop, as the input computes it."""
        key = self.atom(A.Cmp("<=", Affine.lit(0), Affine.var(name)))
        self.boxes.add(key)
        return key

    def quantified(self, atom: str) -> bool:
        return isinstance(self.atoms[atom], A.Exists)

    def pred_of(self, mask: Iterable[str]) -> Pred:
        atoms = sorted(set(mask))
        if FALSE in atoms:
            return PFalse()
        return A.pred_and(*(self.atoms[a] for a in atoms))

    def pfree(self, mask: Iterable[str]) -> frozenset[str]:
        mask = frozenset(mask)
        hit = self._pfree.get(mask)
        if hit is None:
            hit = frozenset().union(*(self.atom_vars[a] for a in mask)) if mask else frozenset()
            self._pfree[mask] = hit
        return hit

    def restrict(self, mask: Iterable[str], free: frozenset[str]) -> frozenset[str]:
        """The atoms of `mask` over the indices `free` only."""
        return frozenset(a for a in mask if self.atom_vars[a] <= free)

    def box_implied(self, mask: Iterable[str], free: frozenset[str]) -> frozenset[str]:
        """`mask` without the atoms `1 <= n` for a range n of an index of `free` (a statement
        over that index has no point where they fail)."""
        drop = set()
        for i in free:
            q = self.canon(A.Cmp("<=", Affine.lit(1), self.ranges[i]))
            if q in self._keys:
                drop.add(self._keys[q])
        return frozenset(a for a in mask if a not in drop)

    def project(self, atoms: frozenset[str], keep: frozenset[str],
                loops: Iterable[str] = ()) -> frozenset[str]:
        """Where a statement hoisted over the indices `keep` is needed: `exists` (the other
        indices). atoms`, and the loops it leaves (`loops`) non-empty.  So the hoisted
        statement computes no point the loops it leaves would not have computed."""
        out: set[str] = set()
        gone = set(loops)
        if atoms:
            body = self.pred_of(atoms)
            drop = sorted(self.pfree(atoms) - keep, key=self.index_key)
            for v in reversed(drop):
                body = A.Exists(v, self.ranges[v], body)
            gone -= set(drop)
            got = self.atoms_of(body)
            if got is None:
                return frozenset((FALSE,))
            out |= got
        for v in gone:
            got = self.atoms_of(A.Cmp("<=", Affine.lit(1), self.ranges[v]))
            if got is None:
                return frozenset((FALSE,))
            out |= got
        return frozenset(out)

    def disjunction(self, a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
        """Atoms of `A or B` for conjunctions A, B: the common atoms and, when neither side
        is implied by them, the canonical disjunction of the rest as one atom."""
        if FALSE in a:
            return b
        if FALSE in b:
            return a
        common = a & b
        ra, rb = a - common, b - common
        if not ra or not rb:
            return common
        if sum(self.atom_size[x] for x in ra | rb) > 60:   # keep supports small
            return common
        atoms = self.atoms_of(A.Or(self.pred_of(ra), self.pred_of(rb)))
        return common | (atoms or frozenset())

    def refuted(self, mask: frozenset[str]) -> bool:
        """The index solver refutes the conjunction: Fourier-Motzkin (integer-tightened) on
        its comparisons and the ranges of their indices.  (Relation calls, `or` and `exists`
        are not used: they rarely make a conjunction contradictory on their own.)"""
        if FALSE in mask:
            return True
        cmps = frozenset(a for a in mask if isinstance(self.atoms[a], A.Cmp))
        if len(cmps) < 2:
            return False
        hit = self._refuted.get(cmps)
        if hit is None:
            cons: list[Affine] = []
            for a in cmps:
                q = self.atoms[a]
                d = q.rhs - q.lhs
                cons.append(d if q.op != "<" else d - 1)
                if q.op == "==":
                    cons.append(-d)
            names = sorted(self.pfree(cmps), key=self.index_key)
            for v in names:
                cons += [Affine.var(v), self.ranges[v] - 1 - Affine.var(v)]
            hit = self._refuted[cmps] = not fourier_motzkin(cons, names).feasible
        return hit

    # -- accesses ----------------------------------------------------------------------------

    def acc(self, idx: Sequence[Affine]) -> str:
        key = ",".join(tssa.fmt_affine(a) for a in idx)
        if key not in self.accs:
            self.accs[key] = tuple(idx)
            self.acc_vars[key] = self.index_vars(frozenset().union(*(a.vars() for a in idx))
                                                 if idx else frozenset())
        return key

    def accfree(self, key: str) -> frozenset[str]:
        return self.acc_vars[key]

    # -- representative sizes and point counting --------------------------------------------

    def extent(self, a: Affine, k: int = 0) -> int:
        return max(0, int(a.evaluate(self.points[k])))

    def _relations(self, k: int) -> dict[str, np.ndarray]:
        """Relations at the k-th cost point: deterministic, half of the entries set (the
        extraction does not see the data; docs/simplifier.md)."""
        rels = self._rels.get(k)
        if rels is None:
            rels = self._rels[k] = {}
            for name, dims in self.rel_shapes.items():
                shape = tuple(self.extent(d, k) for d in dims)
                rng = np.random.default_rng(zlib.crc32(name.encode()) + k)
                rels[name] = rng.random(shape) < 0.5
        return rels

    def _atom_grid(self, atom: str, k: int) -> np.ndarray:
        """The atom on the grid of its own indices (in `index_key` order), at point k."""
        key = (atom, k)
        hit = self._atom_grids.get(key)
        if hit is None:
            names = sorted(self.atom_vars[atom], key=self.index_key)
            env = Env(sizes=self.points[k], rels=self._relations(k))
            shape = []
            for n in names:
                m = self.extent(self.ranges[n], k)
                env = env.bind_index(n, m)
                shape.append(m)
            hit = np.broadcast_to(eval_pred(self.atoms[atom], env), tuple(shape))
            self._atom_grids[key] = hit
        return hit

    def _grid(self, names: Sequence[str], mask: frozenset[str], k: int) -> np.ndarray:
        """The conjunction `mask` on the grid of `names` (in `index_key` order)."""
        shape = tuple(self.extent(self.ranges[n], k) for n in names)
        out = np.ones(shape, dtype=bool)
        pos = {n: d for d, n in enumerate(names)}
        for a in mask:
            g = self._atom_grid(a, k)
            view = [1] * len(names)
            for n, m in zip(sorted(self.atom_vars[a], key=self.index_key), g.shape):
                view[pos[n]] = m
            out = out & g.reshape(view)
        return out

    def count(self, free: frozenset[str], mask: frozenset[str]) -> tuple[int, ...]:
        """Points of the box of `free` where the atoms `mask` hold, at each cost point;
        `mask` mentions only indices of `free` (and sizes)."""
        key = ("c", free, mask)
        hit = self._counts.get(key)
        if hit is None:
            out = []
            names = sorted(self.pfree(mask) & free, key=self.index_key)
            for k in range(len(self.points)):
                if FALSE in mask:
                    out.append(0)
                    continue
                rest = math.prod(self.extent(self.ranges[n], k) for n in free if n not in names)
                out.append(rest * int(np.count_nonzero(self._grid(names, mask, k))) if rest
                           else 0)
            hit = self._counts[key] = tuple(out)
        return hit

    def sum_adds(self, free: frozenset[str], mask: frozenset[str], j: str,
                 body: frozenset[str]) -> tuple[int, ...]:
        """Additions of `[mask] * sum j. e` with e live where `body` holds: the sum over the
        points of `free` in `mask` of max(0, live - 1), at each cost point."""
        key = ("s", free, mask, j, body)
        hit = self._counts.get(key)
        if hit is None:
            allm = mask | body
            names = sorted(((self.pfree(allm) & free) - {j}) | {j}, key=self.index_key)
            out = []
            for k in range(len(self.points)):
                if FALSE in allm:
                    out.append(0)
                    continue
                rest = math.prod(self.extent(self.ranges[n], k) for n in free
                                 if n not in names)
                if not rest:
                    out.append(0)
                    continue
                grid = np.moveaxis(self._grid(names, allm, k), names.index(j), -1)
                live = grid.sum(axis=-1)
                out.append(rest * int(np.maximum(live - 1, 0).sum()))
            hit = self._counts[key] = tuple(out)
        return hit


def cost_points(size_names: Iterable[str], sizes: Mapping[str, int] | None) -> list[dict[str, int]]:
    """The size assignments node costs are counted at.  With every size given: those sizes.
    Otherwise the representative point (given sizes, DEFAULT_REP for the others) and, per
    unknown size, the same point with that size small (3), and all unknown sizes 2 and 1:
    the extraction only trades a node of the input for one that is no worse at all of them,
    so size-dependent choices (a product over N or over M?) stay as written."""
    names = sorted(size_names)
    sizes = dict(sizes or {})
    base = {n: int(sizes.get(n, DEFAULT_REP)) for n in names}
    free = [n for n in names if n not in sizes]
    points = [base]
    for n in free:
        points.append({**base, n: 3})
    if free:
        points.append({**base, **{n: 2 for n in free}})
        points.append({**base, **{n: 1 for n in free}})
    return points


# ---------------------------------------------------------------------------------------------
# Lowering: a gen-pushed core Def as statements over global index names


@dataclass
class Stmt:
    """`var = gen gens. body` over global names, or an input (`param` with a projection
    path) when `body` is None.  `support`: atoms over the gens outside which it is 0."""

    var: str
    gens: tuple[tuple[str, Affine], ...]
    body: A.Expr | None
    support: frozenset[str] = frozenset()
    param: str | None = None
    path: tuple[int, ...] = ()

    @property
    def is_input(self) -> bool:
        return self.body is None


@dataclass
class Lowered:
    name: str
    params: tuple[Param, ...]
    ret: Any
    stmts: dict[str, Stmt]
    order: list[str]
    output: Any                 # Out tree of statement/parameter names
    uni: Universe


def _read_base(e: A.Expr) -> tuple[str, tuple[int, ...]] | None:
    path: list[int] = []
    while isinstance(e, Proj):
        path.append(e.k)
        e = e.e
    if isinstance(e, Var):
        return e.name, tuple(reversed(path))
    return None


def _rename_binders(e: A.Expr, uni: Universe, memo: dict) -> A.Expr:
    """Every summation binder of `e` gets a fresh global name."""
    hit = memo.get(e)
    if hit is not None:
        return hit
    if isinstance(e, Sum):
        new = uni.new_index(e.size)
        body = A.subst(e.body, {e.idx: Affine.var(new)})
        out: A.Expr = Sum(new, e.size, _rename_binders(body, uni, memo))
    elif isinstance(e, (Affine, Pred)):
        out = e
    else:
        out = A.map_fields(e, lambda c: _rename_binders(c, uni, memo)
                           if isinstance(c, A.Expr) else c)
    memo[e] = out
    return out


def support_atoms(e: A.Expr, uni: Universe) -> frozenset[str]:
    """Atoms outside which `e` is structurally 0 (the Iverson brackets of its spine)."""
    if isinstance(e, Iverson):
        atoms = uni.atoms_of(e.pred)
        if atoms is None:
            return frozenset((FALSE,))
        return atoms | support_atoms(e.e, uni)
    if isinstance(e, Const):
        return frozenset((FALSE,)) if e.value == 0.0 else frozenset()
    if isinstance(e, Sum):
        return frozenset(a for a in support_atoms(e.body, uni) if e.idx not in uni.atom_vars[a])
    if isinstance(e, Mul):
        return support_atoms(e.a, uni) | support_atoms(e.b, uni)
    if isinstance(e, Add):
        return uni.disjunction(support_atoms(e.a, uni), support_atoms(e.b, uni))
    return frozenset()


def lower(d: Def, reps: Mapping[str, int] | None = None, ex: str = "k") -> Lowered:
    """The statements of a gen-pushed core Def (e.g. `tssa.to_core(p)`) over global names."""
    uni = Universe(d.params, ex, reps)
    ptypes = {p.name: p.type for p in d.params}
    stmts: dict[str, Stmt] = {}
    order: list[str] = []
    for p in d.params:  # parameters read directly are input statements
        if isinstance(A.scalar_of(p.type), A.TReal):
            stmts[p.name] = Stmt(p.name, (), None, param=p.name)
            order.append(p.name)
    body = d.body
    while isinstance(body, Let):
        name, value = body.name, body.value
        base = _read_base(value)
        if base is not None and base[0] in ptypes:
            stmts[name] = Stmt(name, (), None, param=base[0], path=base[1])
        else:
            gens: list[tuple[str, Affine]] = []
            ren: dict[str, Affine] = {}
            while isinstance(value, Gen):
                g = uni.new_index(value.size)
                gens.append((g, value.size))
                value = A.subst(value.body, {value.idx: Affine.var(g)})
            value = _rename_binders(value, uni, {})
            uni.register(value)
            stmts[name] = Stmt(name, tuple(gens), value, support_atoms(value, uni))
        order.append(name)
        body = body.body
    out = _out_tree(body)
    for leaf in _leaves(out):
        if leaf not in stmts:
            raise ValueError(f"output {leaf} is not a statement or real parameter")
    return Lowered(d.name, d.params, d.ret, stmts, order, out, uni)


def _out_tree(e: A.Expr) -> Any:
    if isinstance(e, A.Pair):
        return (_out_tree(e.a), _out_tree(e.b))
    if isinstance(e, Var):
        return e.name
    raise ValueError(f"output must be a tree of variables, not {type(e).__name__}")


def _leaves(out: Any) -> Iterable[str]:
    if isinstance(out, str):
        yield out
    else:
        for o in out:
            yield from _leaves(o)


# ---------------------------------------------------------------------------------------------
# S-inline and S-sum-solve


def inline_read(st: Stmt, idx: Sequence[Affine], uni: Universe) -> A.Expr:
    """`u[A]` as `[0 <= A < n] * body{I := A}` (the read's zero extension), its sums solved."""
    assert st.body is not None
    m = {g: a for (g, _), a in zip(st.gens, idx)}
    e = A.subst(st.body, m) if m else st.body
    if uni.renaming(st.gens, idx):
        return e
    guard = A.pred_and(*(A.in_range(a, n) for a, (_, n) in zip(idx, st.gens)))
    atoms = uni.atoms_of(guard)
    if atoms is None:
        return Const(0.0)
    if atoms:
        e = Iverson(uni.pred_of(atoms), e)
    e = solve(e, uni)
    return e


def solve(e: A.Expr, uni: Universe) -> A.Expr:
    """S-sum-solve: the index solver on every sum of `e` (new binders registered)."""
    out = eliminate_sums(e)
    if out is not e:
        uni.register(out)
    return out


def fold_call(e: Call) -> A.Expr:
    """S-fold-call: a call of constants is a constant (when finite)."""
    if all(isinstance(a, Const) for a in e.args):
        with np.errstate(all="ignore"):
            v = float(BI.apply(e.fn, [np.float64(a.value) for a in e.args], e.params))
        if math.isfinite(v):
            return Const(v)
    return e


# ---------------------------------------------------------------------------------------------
# The Python rules on core programs (the proofs/ catalogue applies them one at a time)


def _map_bodies(d: Def, f: Any) -> Def:
    """`d` with `f(value, uni)` applied to every binding's value (gens kept)."""
    low_uni = Universe(d.params)
    out: list[tuple[str, A.Expr]] = []
    body = d.body
    while isinstance(body, Let):
        value = body.value
        gens: list[tuple[str, Affine]] = []
        while isinstance(value, Gen):
            gens.append((value.idx, value.size))
            low_uni.ranges[value.idx] = value.size
            value = value.body
        low_uni.register(value)
        value = f(value, low_uni)
        for name, size in reversed(gens):
            value = Gen(name, size, value)
        out.append((body.name, value))
        body = body.body
    for name, value in reversed(out):
        body = Let(name, value, body)
    return Def(d.name, d.params, d.ret, body)


def canon_brackets(d: Def) -> Def:
    """S-pred-canon on a gen-pushed core Def: every bracket canonical against the ranges of
    the indices in scope (implied comparisons dropped; a refuted bracket is 0)."""
    def go(e: A.Expr, uni: Universe) -> A.Expr:
        if isinstance(e, Iverson):
            inner = go(e.e, uni)
            atoms = uni.atoms_of(e.pred)
            if atoms is None:
                return Const(0.0)
            return _iv(uni.pred_of(atoms), inner)
        if isinstance(e, (Affine, Pred)):
            return e
        return A.map_fields(e, lambda c: go(c, uni) if isinstance(c, A.Expr) else c)
    return _map_bodies(d, go)


def fold_calls(d: Def) -> Def:
    """S-fold-call on a core Def: calls of constants evaluated."""
    def go(e: A.Expr, uni: Universe) -> A.Expr:
        if isinstance(e, (Affine, Pred)):
            return e
        e = A.map_fields(e, lambda c: go(c, uni) if isinstance(c, A.Expr) else c)
        return fold_call(e) if isinstance(e, Call) else e
    return _map_bodies(d, go)


def solve_sums(d: Def) -> Def:
    """S-sum-solve on a core Def: the index solver on every sum."""
    return _map_bodies(d, lambda e, uni: eliminate_sums(e))


def inline_single_use(d: Def) -> Def:
    """S-inline on a core Def: the first (non-input) binding read by exactly one other
    binding, and not returned, is substituted into it (with the reads' zero-extension
    guards) and dropped.  `ValueError` if there is none."""
    low = lower(d)
    readers: dict[str, list[str]] = {}
    for name in low.order:
        st = low.stmts[name]
        if st.body is not None:
            for n in A.walk(st.body):
                if isinstance(n, Var) and n.name in low.stmts and n.name != name:
                    readers.setdefault(n.name, []).append(name)
    outs = set(_leaves(low.output))
    target = next((v for v in low.order if not low.stmts[v].is_input and v not in outs
                   and len(set(readers.get(v, ()))) == 1), None)
    if target is None:
        raise ValueError("no binding is read by exactly one other")
    st = low.stmts[target]

    def sub(e: A.Expr) -> A.Expr:
        if isinstance(e, Access) and isinstance(e.e, Var) and e.e.name == target:
            return inline_read(st, e.idx, low.uni)
        if isinstance(e, Var) and e.name == target:
            return inline_read(st, (), low.uni)
        if isinstance(e, (Affine, Pred)):
            return e
        return A.map_fields(e, lambda c: sub(c) if isinstance(c, A.Expr) else c)

    out: list[tuple[str, A.Expr]] = []
    body = d.body
    while isinstance(body, Let):
        if body.name != target:
            value = body.value
            if body.name in readers.get(target, ()):
                gens = []
                while isinstance(value, Gen):
                    gens.append((value.idx, value.size))
                    value = value.body
                cur = low.stmts[body.name]
                # the lowered body uses global names: read back through them
                ren = {g: Affine.var(n) for (g, _), (n, _) in zip(cur.gens, gens)}
                assert cur.body is not None
                value = A.subst(sub(cur.body), ren)
                for name, size in reversed(gens):
                    value = Gen(name, size, value)
            out.append((body.name, value))
        body = body.body
    for name, value in reversed(out):
        body = Let(name, value, body)
    return Def(d.name, d.params, d.ret, body)


# ---------------------------------------------------------------------------------------------
# Encoding into egglog


def fn_key(fn: str, params: Sequence[float]) -> str:
    return fn if not params else fn + ":" + ":".join(G.f64(c) for c in params)


def parse_fn_key(key: str) -> tuple[str, tuple[float, ...]]:
    parts = key.split(":")
    return parts[0], tuple(float(c) for c in parts[1:])


@dataclass
class InlinePolicy:
    """Which Python-made equalities the encoding adds: S-inline (which reads, within what
    budget), S-sum-solve, S-licm."""

    enabled: bool = True
    max_nodes: int = 4000        # core nodes encoded through inlining, per program
    solve: bool = True           # S-sum-solve alternatives of statement bodies
    licm: bool = True            # S-licm alternatives (a primitive over its own indices)


class Encoder:
    """Builds the egglog commands of a lowered program: one `Stmt`/`Param` per statement,
    S-inline unions for reads of statements, S-sum-solve alternatives, and the facts the
    analyses need (access and mask free indices, supports of reads, `ne` of summations)."""

    def __init__(self, low: Lowered, policy: InlinePolicy | None = None) -> None:
        self.low = low
        self.uni = low.uni
        self.policy = policy or InlinePolicy()
        self.commands: list[str] = []
        self.facts: list[str] = []
        self._done_facts: set[str] = set()
        self._text: dict[tuple, str] = {}
        self._ten: dict[str, str] = {}           # statement -> $T name
        self._inlined: set[tuple[str, str]] = set()
        self._queue: list[tuple[str, tuple[Affine, ...], bool]] = []
        self._lets = itertools.count()
        self._inline_memo: dict[tuple, A.Expr] = {}
        self.alternatives: list[str] = []         # S-licm unions (after everything else)
        self._supports: dict[tuple, frozenset[str]] = {}
        self.inline_nodes = 0

    # -- facts ---------------------------------------------------------------------------------

    def _fact(self, s: str) -> None:
        if s not in self._done_facts:
            self._done_facts.add(s)
            self.facts.append(s)

    def mask(self, atoms: Iterable[str]) -> str:
        atoms = frozenset(atoms)
        lit = G.mask_lit(atoms)
        if atoms:
            self._fact(f"(set (pfree {lit}) {G.mask_lit(self.uni.pfree(atoms))})")
        return lit

    def sum_index(self, j: str) -> None:
        size = self.uni.ranges[j]
        atoms = self.uni.atoms_of(A.Cmp("<=", Affine.lit(1), size))
        if atoms is None:
            atoms = frozenset((FALSE,))
        self._fact(f"(set (ne {G.string(j)}) {self.mask(atoms)})")

    # -- terms ---------------------------------------------------------------------------------

    def encode(self, e: A.Expr, mulctx: bool = False, argctx: bool = False,
               ctx: frozenset[str] = frozenset()) -> str:
        """The egglog term of a scalar expression under the brackets `ctx` (atoms).  Like
        the SSA conversion, every primitive gets the enclosing brackets over its own
        indices as its mask (on its first operand), so that its class -- and its cost --
        is masked; reads of statements queue S-inline."""
        key = (e, mulctx, argctx, ctx)
        hit = self._text.get(key)
        if hit is not None:
            return hit
        out = self._encode(e, mulctx, argctx, ctx)
        if len(out) > 400:
            name = f"$s{next(self._lets)}"
            self.commands.append(f"(let {name} {out})")
            out = name
        self._text[key] = out
        return out

    def cfree(self, e: A.Node) -> frozenset[str]:
        return self.uni.index_vars(A.free_names(e))

    def _encode(self, e: A.Expr, mulctx: bool, argctx: bool, ctx: frozenset[str]) -> str:
        if isinstance(e, Const):
            return f"(Num {G.f64(e.value)})"
        if isinstance(e, (Access, Var, Proj)):
            return self.read(e, mulctx, argctx)
        if isinstance(e, Iverson):
            atoms = self.uni.atoms_of(e.pred)
            if atoms is None:
                return "(Num 0.0)"
            inner = self.encode(e.e, mulctx, argctx, ctx | atoms)
            return inner if not atoms else f"(Iv {self.mask(atoms)} {inner})"
        if isinstance(e, Call):
            folded = fold_call(e)
            if folded is not e:
                return self._encode(folded, mulctx, argctx, ctx)
        if isinstance(e, Sum) and e.idx not in self.uni.ranges:
            self.uni.ranges[e.idx] = e.size
        # The input's primitive: under the brackets around it, and pinned (Box) to the loops
        # it sits in but does not use, as the input computes it.  Constants are not pinned:
        # they fold.
        used = self.cfree(e)
        real = frozenset(a for a in ctx if a not in self.uni.boxes)
        pins = frozenset(a for a in ctx if a in self.uni.boxes
                         and not self.uni.atom_vars[a] <= used)
        if not used and not any(isinstance(n, (Access, Var)) for n in A.walk(e)):
            pins = frozenset()
        exact = self._primitive(e, mulctx, ctx, real, pins)
        inner = self.uni.restrict(real, used)
        if (inner != real or pins) and self.policy.licm:
            # S-licm: computed over its own indices only, where some point of the loops and
            # brackets it leaves needs it (so never more often than the input), then
            # broadcast; its operands are encoded in that smaller context too
            left = [next(iter(self.uni.atom_vars[a])) for a in pins]
            proj = self.uni.project(real - inner, used, left)
            small = frozenset(a for a in ctx if self.uni.atom_vars[a] <= used)
            hoisted = self._primitive(e, mulctx, small, inner | proj, frozenset())
            alt = f"(Iv {self.mask(real)} {hoisted})" if real else hoisted
            alt = f"(Box {self.mask(pins)} {alt})" if pins else alt
            name = f"$s{next(self._lets)}"
            self.commands.append(f"(let {name} {exact})")
            self.alternatives.append(f"(union {name} {alt})")
            return name
        return exact

    def _primitive(self, e: A.Expr, mulctx: bool, ctx: frozenset[str], m: frozenset[str],
                   pins: frozenset[str]) -> str:
        """A product, sum of two terms, call or summation, masked by `m` and pinned to the
        loops of `pins` (on its first operand, on every summand, on a call's arguments, on a
        summation's body); its operands are encoded under the brackets `ctx`."""
        def masked(text: str) -> str:
            text = f"(Iv {self.mask(m)} {text})" if m else text
            return f"(Box {self.mask(pins)} {text})" if pins else text

        if isinstance(e, Mul):
            return (f"(Mul {masked(self.encode(e.a, True, False, ctx))} "
                    f"{self.encode(e.b, True, False, ctx)})")
        if isinstance(e, Add):
            return (f"(Add {masked(self.encode(e.a, mulctx, False, ctx))} "
                    f"{masked(self.encode(e.b, mulctx, False, ctx))})")
        if isinstance(e, Sum):
            self.sum_index(e.idx)
            body = self.encode(e.body, True, False, ctx | {self.uni.box(e.idx)})
            return f"(Sum {G.string(e.idx)} {masked(body)})"
        if isinstance(e, Call):
            args = [self.encode(a, False, True, ctx) for a in e.args]
            if pins:
                args = [f"(Box {self.mask(pins)} {a})" for a in args]
            if not 1 <= len(e.args) <= G.MAX_ARGS:
                raise ValueError(f"builtin {e.fn} with {len(e.args)} arguments")
            op = f"Call{len(e.args)}"
            return (f"({op} {self.mask(m)} {G.string(fn_key(e.fn, e.params))} "
                    f"{' '.join(args)})")
        raise ValueError(f"cannot encode {type(e).__name__} in a scalar body")

    def read(self, e: A.Expr, mulctx: bool, argctx: bool) -> str:
        base, idx = (e.e, e.idx) if isinstance(e, Access) else (e, ())
        rb = _read_base(base)
        if rb is None:
            raise ValueError(f"read of a non-variable {type(base).__name__}")
        name, path = rb
        st = self.low.stmts.get(name)
        if path or st is None:
            raise ValueError(f"read of {name}{''.join('.' + str(k) for k in path)}: "
                             f"projections are read through input statements")
        ten = self.ten(name)
        acc = self.uni.acc(idx)
        self._fact(f"(set (accfree {G.string(acc)}) {G.mask_lit(self.uni.accfree(acc))})")
        text = f"(Get {ten} {G.string(acc)})"
        sup = self.read_support(st, idx)
        fact = f"(set (mask {text}) {self.mask(sup)})"
        if fact not in self._done_facts:   # after the statement's let, so not in `facts`
            self._done_facts.add(fact)
            self.commands.append(fact)
        if self.policy.enabled and self._inlinable(st, mulctx, argctx):
            k = (name, acc)
            if k not in self._inlined:
                self._inlined.add(k)
                self._queue.append((name, tuple(idx), mulctx))
        return text

    def read_support(self, st: Stmt, idx: Sequence[Affine]) -> frozenset[str]:
        """Atoms outside which the read is 0: the producer's support at the access, and the
        access's range (zero extension)."""
        if st.is_input or not st.gens:
            return frozenset()
        key = (st.var, tuple(idx))
        hit = self._supports.get(key)
        if hit is None:
            hit = self._supports[key] = self._read_support(st, idx)
        return hit

    def _read_support(self, st: Stmt, idx: Sequence[Affine]) -> frozenset[str]:
        m = {g: a for (g, _), a in zip(st.gens, idx)}
        if FALSE in st.support:
            return frozenset((FALSE,))
        if self.uni.renaming(st.gens, idx):   # same ranges: canonical atoms stay canonical
            return frozenset(self.uni.atom(A.subst(self.uni.atoms[a], m)) for a in st.support)
        # a shifted or partial read: re-canonicalise (large disjunctions are left out: a
        # weaker support is still a support, and canonicalising them is slow)
        preds = [A.subst(self.uni.atoms[a], m) for a in st.support
                 if self.uni.atom_size[a] <= 30]
        preds += [A.in_range(a, n) for a, (_, n) in zip(idx, st.gens)]
        if FALSE in st.support:
            return frozenset((FALSE,))
        atoms = self.uni.atoms_of(A.pred_and(*preds))
        return frozenset((FALSE,)) if atoms is None else atoms

    def _inlinable(self, st: Stmt, mulctx: bool, argctx: bool) -> bool:
        """Linear producers are inlined (a map is a barrier: recomputing it is never cheaper);
        an addition only under a product or sum (where distributing it can pay off); nothing
        directly as a call's argument (it is materialised there anyway)."""
        if st.is_input or argctx:
            return False
        head = st.body
        while isinstance(head, Iverson):
            head = head.e
        if isinstance(head, Call):
            return False
        if isinstance(head, Add) and not mulctx:
            return False
        return True

    def ten(self, name: str) -> str:
        t = self._ten.get(name)
        if t is None:
            raise ValueError(f"statement {name} is read before it is defined")
        return t

    # -- the program ------------------------------------------------------------------------------

    def build(self) -> tuple[list[str], list[str]]:
        """(the input's terms and facts, the alternatives: S-sum-solve and S-inline unions)."""
        solve_later: list[tuple[Stmt, str]] = []
        for k, name in enumerate(list(self.low.order)):
            st = self.low.stmts[name]
            if st.is_input:
                t = f"$T{k}"
                self.commands.append(f"(let {t} (Param {G.string(name)}))")
                self._ten[name] = t
                continue
            assert st.body is not None
            body = self.encode(st.body, ctx=frozenset(self.uni.box(g) for g, _ in st.gens))
            b = f"$B{k}"
            self.commands.append(f"(let {b} {body})")
            t = f"$T{k}"
            self.commands.append(f"(let {t} (Stmt {G.string(name)} {b}))")
            self._ten[name] = t
            solve_later.append((st, b))
        base = self.facts + self.commands
        self.facts, self.commands = [], []
        if self.policy.enabled and self.policy.solve:
            for st, b in solve_later:
                self._solved(st, b)
        self._drain()
        return base, self.facts + self.commands + self.alternatives

    def _solved(self, st: Stmt, b: str) -> None:
        """S-sum-solve on the body with the linear producers read inside its sums inlined
        (where their brackets can pin a summation index)."""
        assert st.body is not None
        if not any(isinstance(n, Sum) for n in A.walk(st.body)):
            return
        full = self._inline_all(st.body, [64], {}, False)
        solved = solve(full, self.uni)
        if solved is not full and solved is not st.body:
            self.commands.append(f"(union {b} {self.encode(solved)})")

    def inlined(self, st: Stmt, idx: Sequence[Affine]) -> A.Expr:
        key = (st.var, tuple(idx))
        hit = self._inline_memo.get(key)
        if hit is None:
            hit = self._inline_memo[key] = inline_read(st, idx, self.uni)
        return hit

    def _inline_all(self, e: A.Expr, budget: list[int], memo: dict, in_sum: bool) -> A.Expr:
        key = (e, in_sum)
        hit = memo.get(key)
        if hit is not None:
            return hit
        out: A.Expr
        if isinstance(e, (Access, Var)):
            out = e
            base, idx = (e.e, e.idx) if isinstance(e, Access) else (e, ())
            rb = _read_base(base)
            st = self.low.stmts.get(rb[0]) if rb and not rb[1] else None
            if (in_sum and budget[0] > 0 and st is not None and not st.is_input
                    and self._inlinable(st, True, False)):
                budget[0] -= 1
                out = self._inline_all(self.inlined(st, idx), budget, memo, in_sum)
        elif isinstance(e, (Affine, Pred, Const, Call)):
            out = e
        else:
            inner = in_sum or isinstance(e, Sum)
            out = A.map_fields(e, lambda c: self._inline_all(c, budget, memo, inner)
                               if isinstance(c, A.Expr) else c)
        memo[key] = out
        return out

    def _drain(self) -> None:
        while self._queue:
            name, idx, mulctx = self._queue.pop(0)
            if self.inline_nodes > self.policy.max_nodes:
                break
            st = self.low.stmts[name]
            e = self.inlined(st, idx)
            self.inline_nodes += sum(1 for _ in A.walk(e))
            acc = self.uni.acc(idx)
            text = self.encode(e, mulctx)
            self.commands.append(f"(union (Get {self.ten(name)} {G.string(acc)}) {text})")


# ---------------------------------------------------------------------------------------------
# The cost of an e-node (SPEC 3 at representative sizes)

OPS = ("Mul", "Add", "Sum") + G.CALLS


def own_mask(n: G.ENode) -> frozenset[str]:
    """The mask an e-node computes under (a Box's atoms are loop pins, true everywhere)."""
    return n.args[0] if n.op in G.MASKED and n.op != "Box" else frozenset()


def node_cost(uni: Universe, n: G.ENode, g: G.Graph,
              free: Mapping[int, frozenset[str]]) -> tuple[int, ...]:
    """The scalar operations of the Tensor-SSA primitive the node becomes: a statement over
    the node's free indices, masked by its own mask and its class's support (SPEC 5's
    "propagate the sparsity"); reads, constants and brackets are free."""
    op = n.op
    if op not in OPS:
        return (0,) * len(uni.points)
    f = free[n.cls]
    m = uni.restrict(g.mask.get(n.cls, frozenset()) | own_mask(n), f)
    if op == "Mul" or op in G.CALLS:
        return uni.count(f, m)
    if op == "Add":
        a, b = n.args
        ma = uni.restrict(g.mask.get(a, frozenset()), free[a])
        mb = uni.restrict(g.mask.get(b, frozenset()), free[b])
        return uni.count(f, m | ma | mb)
    j, body = n.args
    mb = uni.restrict(g.mask.get(body, frozenset()), free[body])
    return uni.sum_adds(f, m, j, mb)


# ---------------------------------------------------------------------------------------------
# Conversion back: extracted terms -> gen-pushed core Def -> Tensor SSA  (S-licm)



class Raiser:
    """Builds the core Def of an extraction: a binding per chosen operator (unless fused into
    its only reader), over its free indices in creation order, masked by its support and its
    readers' masks; a binding per statement the output reads."""

    def __init__(self, low: Lowered, g: G.Graph, ex: G.Extraction, ten_roots: Mapping[str, int]):
        self.low, self.uni, self.g, self.x = low, low.uni, g, ex
        self.ten_roots = ten_roots
        taken = {p.name for p in low.params} | set(low.stmts) | set(self.uni.ranges)
        self.bprefix = next(c for c in ("t", "w", "u", "t0_")
                            if _prefix_free(c, taken))
        self._n = itertools.count()
        self.bind: dict[int, str] = {}           # op class -> binding name
        self.stmt_bind: dict[str, str] = {}      # statement -> binding name
        self.lets: list[tuple[str, A.Expr]] = []
        self.uses: dict[int, int] = {}
        self.ctx: dict[int, frozenset[str]] = {}
        self._order: dict[int, tuple[str, ...]] = {}
        self._inputs: set[str] = set()
        self.fused: set[int] = set()

    def choice(self, cls: int) -> G.ENode:
        return self.x.choice[cls]

    def free(self, cls: int) -> frozenset[str]:
        return self.x.free[cls]

    def m(self, cls: int) -> frozenset[str]:
        return self.uni.restrict(self.g.mask.get(cls, frozenset()), self.free(cls))

    # -- analysis of the chosen DAG ----------------------------------------------------------

    def _topo(self, roots: Iterable[int]) -> list[int]:
        """Classes reachable from `roots` (through statements too), parents first."""
        post: list[int] = []
        seen: set[int] = set()
        for r in roots:
            if r in seen:
                continue
            stack = [(r, iter(self.choice(r).children()))]
            seen.add(r)
            while stack:
                c, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    post.append(c)
                    stack.pop()
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, iter(self.choice(nxt).children())))
        return list(reversed(post))

    def _contexts(self, order: list[int]) -> None:
        """The readers' masks of every class (intersection over its readers)."""
        ctx: dict[int, frozenset[str] | None] = {}
        for c in order:
            n = self.choice(c)
            if n.op == "Stmt":      # a statement is materialised whole
                ctx[n.args[1]] = frozenset()
                continue
            if n.op in ("Param", "Num", "Get"):
                continue
            here = (ctx.get(c) or frozenset()) | self.m(c)
            if n.op != "Box":
                here = here | own_mask(n)
            box = self.free(c) | ({n.args[0]} if n.op == "Sum" else set())
            for k in n.children():
                self.uses[k] = self.uses.get(k, 0) + 1
                # needed where the reader is, and only if the loops it leaves are not empty
                mine = self.uni.restrict(here, self.free(k)) | self.uni.project(
                    frozenset(), self.free(k), box - self.free(k))
                prev = ctx.get(k)
                ctx[k] = mine if prev is None else (prev & mine)
        self.ctx = {k: v for k, v in ctx.items() if v is not None}

    def order(self, cls: int) -> tuple[str, ...]:
        """The free indices of a class in the order they were created (a statement's
        generators, then its summation indices), so statements keep the input's layout."""
        hit = self._order.get(cls)
        if hit is None:
            n = self.choice(cls)
            f = self.free(cls) if n.op not in ("Stmt", "Param") else frozenset()
            hit = self._order[cls] = tuple(sorted(f, key=self.uni.index_key))
        return hit

    # -- expressions -------------------------------------------------------------------------

    def ref(self, cls: int) -> A.Expr:
        """The expression reading class `cls` where its free indices are in scope."""
        n = self.choice(cls)
        if n.op == "Num":
            return Const(n.args[0])
        if n.op == "Get":
            return self.read_ten(n.args[0], self.uni.accs[n.args[1]])
        if n.op == "Iv":
            m = self.uni.box_implied(n.args[0], self.free(cls))
            return _iv(self.uni.pred_of(m), self.ref(n.args[1]))
        if n.op == "Box":
            return self.ref(n.args[1])
        name = self.bind[cls]
        o = self.order(cls)
        return Access(Var(name), tuple(Affine.var(v) for v in o)) if o else Var(name)

    def sref(self, cls: int) -> A.Expr:
        """A read with its support as a bracket (the supports of additions and sums)."""
        return _iv(self.uni.pred_of(self._visible(self.m(cls), cls)), self.ref(cls))

    def read_ten(self, tcls: int, idx: Sequence[Affine]) -> A.Expr:
        n = self.choice(tcls)
        if n.op == "Param":
            st = self.low.stmts[n.args[0]]
            if st.path:
                self._inputs.add(st.var)
                base: A.Expr = Var(st.var)
            else:
                base = Var(st.param or st.var)
        else:
            base = Var(self.stmt_bind[n.args[0]])
        return Access(base, tuple(idx)) if idx else base

    def operand(self, cls: int, support: bool = False) -> A.Expr:
        """A child as an operand: fused into the parent's expression (with its mask as a
        bracket, which `to_ssa` hoists into the primitive's mask) or read."""
        if cls in self.fused:
            n = self.choice(cls)
            if n.op == "Sum":   # a nest: the inner sum's mask goes to the innermost body
                j, body = n.args
                inner = self.operand(body, support=True)
                return Sum(j, self.uni.ranges[j], _iv(self.uni.pred_of(self.mask_of(cls)), inner))
            return _iv(self.uni.pred_of(self.mask_of(cls)), self.op_expr(cls))
        return self.sref(cls) if support else self.ref(cls)

    def mask_of(self, cls: int) -> frozenset[str]:
        """The mask a chosen operator is computed under: its support, its readers' masks
        and its own."""
        n = self.choice(cls)
        m = self.uni.restrict(self.m(cls) | self.ctx.get(cls, frozenset()) | own_mask(n),
                              self.free(cls))
        return self._visible(m, cls)

    def op_expr(self, cls: int) -> A.Expr:
        n = self.choice(cls)
        op = n.op
        if op == "Mul":
            return Mul(self.operand(n.args[0]), self.operand(n.args[1]))
        if op == "Add":
            return Add(self.sref(n.args[0]), self.sref(n.args[1]))
        if op in G.CALLS:
            fn, params = parse_fn_key(n.args[1])
            return Call(fn, tuple(self.ref(k) for k in n.args[2:]), params)
        j, body = n.args
        return Sum(j, self.uni.ranges[j], self.operand(body, support=True))

    def _fusible(self, child: int, parent: int) -> bool:
        """A product read once by a product over the same indices, or by a sum over them and
        the summation index, is computed inside it (`to_ssa` makes one contraction of them,
        at the same cost); a sum read once by a sum joins its nest (SPEC 3 costs a nest
        jointly).  Over fewer indices it stays a statement of its own: inside, it would be
        recomputed at every point of the parent."""
        n, p = self.choice(child), self.choice(parent)
        if n.op not in ("Mul", "Sum") or self.uses.get(child, 0) != 1:
            return False
        if n.op == "Mul" and p.op == "Mul":
            return self.free(child) == self.free(parent)
        if p.op == "Sum" and p.args[1] == child:
            return self.free(child) == self.free(parent) | {p.args[0]}
        return False

    def _visible(self, mask: frozenset[str], cls: int) -> frozenset[str]:
        """Atoms worth writing in a statement's mask: without those its indices imply, and
        without the `exists` an operand's support brings along (it costs a loop to test and
        the operand's own statement has it)."""
        n = self.choice(cls)
        box = self.free(cls) | ({n.args[0]} if n.op == "Sum" else set())
        mine = own_mask(n) | self.ctx.get(cls, frozenset())
        keep = frozenset(a for a in mask if a in mine or not self.uni.quantified(a))
        return self.uni.box_implied(keep, frozenset(box))

    # -- the Def ---------------------------------------------------------------------------------

    def build(self) -> Def:
        roots = list(self.ten_roots.values())
        order = self._topo(roots)
        self._contexts(order)
        self.fused = {k for c in order if self.choice(c).op in ("Mul", "Sum")
                      for k in self.choice(c).children() if self._fusible(k, c)}
        for c in reversed(order):          # children first
            n = self.choice(c)
            if n.op == "Stmt":
                name, body = n.args
                bname = self._fresh()
                gens = self.low.stmts[name].gens
                value = self.ref(body)
                for g, size in reversed(gens):
                    value = Gen(g, size, value)
                self.stmt_bind[name] = bname
                self.lets.append((bname, value))
                continue
            if n.op not in OPS or c in self.fused:
                continue
            name = self._fresh()
            value = _iv(self.uni.pred_of(self.mask_of(c)), self.op_expr(c))
            for v in reversed(self.order(c)):
                value = Gen(v, self.uni.ranges[v], value)
            self.bind[c] = name
            self.lets.append((name, value))
        out = self._out(self.low.output)
        body: A.Expr = out
        for name, value in reversed(self.lets):
            body = Let(name, self._tidy(value), body)
        for name in sorted(self._inputs):
            st = self.low.stmts[name]
            val: A.Expr = Var(st.param)
            for k in st.path:
                val = Proj(val, k)
            body = Let(name, val, body)
        return Def(self.low.name, self.low.params, self.low.ret, body)

    def _fresh(self) -> str:
        return f"{self.bprefix}{next(self._n)}"

    def _tidy(self, e: A.Expr, sizes: frozenset = frozenset()) -> A.Expr:
        """Drop bracket conjuncts `1 <= n` where an enclosing gen or sum ranges over n (no
        point of the statement fails them)."""
        if isinstance(e, (Gen, Sum)):
            inner = sizes | {e.size}
            return type(e)(e.idx, e.size, self._tidy(e.body, inner))
        if isinstance(e, Iverson):
            body = self._tidy(e.e, sizes)
            keep = [q for q in tssa.conjuncts(e.pred)
                    if not (isinstance(q, A.Cmp) and q.op == "<=" and q.lhs == Affine.lit(1)
                            and q.rhs in sizes)]
            return _iv(A.pred_and(*keep), body)
        if isinstance(e, (Mul, Add, Call)):
            return A.map_fields(e, lambda c: self._tidy(c, sizes) if isinstance(c, A.Expr)
                                else c)
        return e

    def _out(self, out: Any) -> A.Expr:
        if isinstance(out, tuple):
            return A.Pair(self._out(out[0]), self._out(out[1]))
        tcls = self.ten_roots[out]
        return self.read_ten(tcls, ())


def _iv(p: Pred, e: A.Expr) -> A.Expr:
    if isinstance(p, PTrue):
        return e
    if isinstance(p, PFalse):
        return Const(0.0)
    return Iverson(p, e)


__all__ = ["Universe", "Stmt", "Lowered", "lower", "inline_read", "solve", "fold_call",
           "canon_brackets", "fold_calls", "solve_sums", "inline_single_use",
           "Encoder", "InlinePolicy", "node_cost", "Raiser", "support_atoms", "FALSE",
           "DEFAULT_REP", "fn_key", "parse_fn_key"]
