"""The simplifier's names: every generator and summation index of a program gets a globally
unique name with a fixed range, so that terms with free indices are tensors and the rules'
side conditions ("j not free in a") are set operations; predicates are split into canonical
atoms (S-pred-canon: `canon_pred` against the index ranges), keyed by short strings
(`a17`) that egglog masks are sets of; accesses are keyed by their text.

Determinism (SPEC 15): keys are numbered in creation order, so everything that creates
atoms or names iterates in a fixed order (sorted, never a set's order)."""
from __future__ import annotations

import itertools
from typing import Iterable, Sequence

from tensorlang.ir import ast
from tensorlang.ir import tssa
from tensorlang.ir.canon import canon_pred, conjuncts
from tensorlang.syntax.ssa_printer import fmt_affine
from tensorlang.ir.ast import Affine, Param, PFalse, Pred, Sum, TRel, TSize

from tensorlang.passes.indexsolve import fourier_motzkin

FALSE = "false"


class Universe:
    """Global index names with their ranges; canonical predicate atoms; access keys.  (Point
    counting at the cost points: `counting.PointCounter`.)"""

    def __init__(self, params: Sequence[Param], ex: str = "k") -> None:
        self.params = tuple(params)
        self.size_names = frozenset(p.name for p in params if isinstance(p.type, TSize))
        self.rel_shapes = {p.name: p.type.sizes for p in params if isinstance(p.type, TRel)}
        taken = [p.name for p in params]
        self.prefix = next(c for c in ("ix", "iy", "iz", "ix0_", "ix1_")
                           if tssa.prefix_ok(c, taken) and tssa.prefix_ok(c, [ex]))
        self.ex = ex
        self._names = itertools.count()
        self.ranges: dict[str, Affine] = {}
        self.atoms: dict[str, Pred] = {FALSE: PFalse()}
        self.atom_vars: dict[str, frozenset[str]] = {FALSE: frozenset()}
        self.atom_size: dict[str, int] = {FALSE: 1}
        self._keys: dict[Pred, str] = {}
        self.boxes: set[str] = set()
        self.accs: dict[str, tuple[Affine, ...]] = {}
        self.acc_vars: dict[str, frozenset[str]] = {}
        self._pfree: dict[frozenset, frozenset[str]] = {}
        self._refuted: dict[frozenset, bool] = {}

    # -- names -----------------------------------------------------------------------------

    def new_index(self, size: Affine) -> str:
        name = f"{self.prefix}{next(self._names)}"
        self.ranges[name] = size
        return name

    def register(self, e: ast.Node) -> None:
        """Record the range of every summation binder of `e` (the index solver and
        capture-avoiding substitution introduce fresh ones)."""
        for n in ast.walk(e):
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
        names = ast.free_names(p)
        rng = {n: self.ranges[n] for n in names if n in self.ranges}
        return canon_pred(p, rng, self.ex)

    def atoms_of(self, p: Pred) -> frozenset[str] | None:
        """The canonical atoms of `p` (a conjunction); None when `p` is false."""
        c = self.canon(p)
        if isinstance(c, PFalse):
            return None
        return frozenset(self.atom(q) for q in conjuncts(c))

    def atom(self, q: Pred) -> str:
        """The key of a canonical atom (short: egglog parses and compares them often)."""
        key = self._keys.get(q)
        if key is None:
            key = self._keys[q] = f"a{len(self._keys)}"
            self.atoms[key] = q
            self.atom_vars[key] = self.index_vars(ast.free_names(q))
            self.atom_size[key] = sum(1 for _ in ast.walk(q))
        return key

    def box(self, name: str) -> str:
        """The atom `0 <= i` of an index (true on its range, and not canonicalised away): in
        a primitive's mask it keeps the primitive over that loop, as the input computes it."""
        key = self.atom(ast.Cmp("<=", Affine.lit(0), Affine.var(name)))
        self.boxes.add(key)
        return key

    def quantified(self, atom: str) -> bool:
        return isinstance(self.atoms[atom], ast.Exists)

    def pred_of(self, mask: Iterable[str]) -> Pred:
        atoms = sorted(set(mask))
        if FALSE in atoms:
            return PFalse()
        return ast.pred_and(*(self.atoms[a] for a in atoms))

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
        for i in sorted(free, key=self.index_key):
            q = self.canon(ast.Cmp("<=", Affine.lit(1), self.ranges[i]))
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
                body = ast.Exists(v, self.ranges[v], body)
            gone -= set(drop)
            got = self.atoms_of(body)
            if got is None:
                return frozenset((FALSE,))
            out |= got
        for v in sorted(gone, key=self.index_key):   # creates atoms: a fixed order
            got = self.atoms_of(ast.Cmp("<=", Affine.lit(1), self.ranges[v]))
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
        atoms = self.atoms_of(ast.Or(self.pred_of(ra), self.pred_of(rb)))
        return common | (atoms or frozenset())

    def refuted(self, mask: frozenset[str]) -> bool:
        """The index solver refutes the conjunction: Fourier-Motzkin (integer-tightened) on
        its comparisons and the ranges of their indices.  (Relation calls, `or` and `exists`
        are not used: they rarely make a conjunction contradictory on their own.)"""
        if FALSE in mask:
            return True
        cmps = frozenset(a for a in mask if isinstance(self.atoms[a], ast.Cmp))
        if len(cmps) < 2:
            return False
        hit = self._refuted.get(cmps)
        if hit is None:
            cons: list[Affine] = []
            for a in sorted(cmps):
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
        key = ",".join(fmt_affine(a) for a in idx)
        if key not in self.accs:
            self.accs[key] = tuple(idx)
            self.acc_vars[key] = self.index_vars(frozenset().union(*(a.vars() for a in idx))
                                                 if idx else frozenset())
        return key

    def accfree(self, key: str) -> frozenset[str]:
        return self.acc_vars[key]

