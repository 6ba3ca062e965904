"""Encoding a lowered program into egglog commands (docs/simplifier.md section 1, step 2).

Bodies become egglog terms (`rules_egg`); predicates become sets of canonical atoms.  The
encoding reproduces the input's cost exactly: like `to_ssa`, every primitive carries the
brackets around it as its mask, and is pinned (`Box`) to the loops it sits in but does not
use.  Next to the input, the Python-made equalities: S-licm (each pinned or masked primitive
computed over its own indices only, under an exact `exists` mask), S-inline (a read of a
linear statement equals the statement's body at the read's indices) and S-sum-solve (each
body with sums, its linear producers inlined, solved by the index solver).

Determinism (SPEC 15): the commands are emitted in program order, and every iteration over
a set of atoms that creates atoms or text is sorted."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable, Sequence

from tensorlang.ir import ast
from tensorlang.ir.tssa import out_leaves
from tensorlang.ir.ast import Access, Add, Affine, Call, Const, Iverson, Mul, Pred, Proj, Sum, Var

from .egraph import Graph
from .lower import Lowered, Stmt, read_base
from .rules_egg import MAX_ARGS, f64, fn_key, mask_lit, string
from .rules_py import fold_call, inline_read, solve
from .universe import FALSE

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
        self._ten: dict[str, str] = {}           # statement -> $T name (egglog let)
        self._inlined: set[tuple[str, str]] = set()
        self._queue: list[tuple[str, tuple[Affine, ...], bool]] = []
        self._lets = itertools.count()
        self._inline_memo: dict[tuple, ast.Expr] = {}
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
        lit = mask_lit(atoms)
        if atoms:
            self._fact(f"(set (pfree {lit}) {mask_lit(self.uni.pfree(atoms))})")
        return lit

    def sum_index(self, j: str) -> None:
        size = self.uni.ranges[j]
        atoms = self.uni.atoms_of(ast.Cmp("<=", Affine.lit(1), size))
        if atoms is None:
            atoms = frozenset((FALSE,))
        self._fact(f"(set (ne {string(j)}) {self.mask(atoms)})")

    # -- terms ---------------------------------------------------------------------------------

    def encode(self, e: ast.Expr, mulctx: bool = False, argctx: bool = False,
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

    def cfree(self, e: ast.Node) -> frozenset[str]:
        return self.uni.index_vars(ast.free_names(e))

    def _encode(self, e: ast.Expr, mulctx: bool, argctx: bool, ctx: frozenset[str]) -> str:
        if isinstance(e, Const):
            return f"(Num {f64(e.value)})"
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
        if not used and not any(isinstance(n, (Access, Var)) for n in ast.walk(e)):
            pins = frozenset()
        exact = self._primitive(e, mulctx, ctx, real, pins)
        inner = self.uni.restrict(real, used)
        if (inner != real or pins) and self.policy.licm:
            # S-licm: computed over its own indices only, where some point of the loops and
            # brackets it leaves needs it (so never more often than the input), then
            # broadcast; its operands are encoded in that smaller context too
            left = [next(iter(self.uni.atom_vars[a])) for a in sorted(pins)]
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

    def _primitive(self, e: ast.Expr, mulctx: bool, ctx: frozenset[str], m: frozenset[str],
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
            return f"(Sum {string(e.idx)} {masked(body)})"
        if isinstance(e, Call):
            args = [self.encode(a, False, True, ctx) for a in e.args]
            if pins:
                args = [f"(Box {self.mask(pins)} {a})" for a in args]
            if not 1 <= len(e.args) <= MAX_ARGS:
                raise ValueError(f"builtin {e.fn} with {len(e.args)} arguments")
            op = f"Call{len(e.args)}"
            return (f"({op} {self.mask(m)} {string(fn_key(e.fn, e.params))} "
                    f"{' '.join(args)})")
        raise ValueError(f"cannot encode {type(e).__name__} in a scalar body")

    def read(self, e: ast.Expr, mulctx: bool, argctx: bool) -> str:
        base, idx = (e.e, e.idx) if isinstance(e, Access) else (e, ())
        rb = read_base(base)
        if rb is None:
            raise ValueError(f"read of a non-variable {type(base).__name__}")
        name, path = rb
        st = self.low.stmts.get(name)
        if path or st is None:
            raise ValueError(f"read of {name}{''.join('.' + str(k) for k in path)}: "
                             f"projections are read through input statements")
        ten = self.ten(name)
        acc = self.uni.acc(idx)
        self._fact(f"(set (accfree {string(acc)}) {mask_lit(self.uni.accfree(acc))})")
        text = f"(Get {ten} {string(acc)})"
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
            return frozenset(self.uni.atom(ast.subst(self.uni.atoms[a], m))
                             for a in sorted(st.support))
        # a shifted or partial read: re-canonicalise (large disjunctions are left out: a
        # weaker support is still a support, and canonicalising them is slow)
        preds = [ast.subst(self.uni.atoms[a], m) for a in sorted(st.support)
                 if self.uni.atom_size[a] <= 30]
        preds += [ast.in_range(a, n) for a, (_, n) in zip(idx, st.gens)]
        if FALSE in st.support:
            return frozenset((FALSE,))
        atoms = self.uni.atoms_of(ast.pred_and(*preds))
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
                self.commands.append(f"(let {t} (Param {string(name)}))")
                self._ten[name] = t
                continue
            assert st.body is not None
            body = self.encode(st.body, ctx=frozenset(self.uni.box(g) for g, _ in st.gens))
            b = f"$B{k}"
            self.commands.append(f"(let {b} {body})")
            t = f"$T{k}"
            self.commands.append(f"(let {t} (Stmt {string(name)} {b}))")
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
        if not any(isinstance(n, Sum) for n in ast.walk(st.body)):
            return
        full = self._inline_all(st.body, [64], {}, False)
        solved = solve(full, self.uni)
        if solved is not full and solved is not st.body:
            self.commands.append(f"(union {b} {self.encode(solved)})")

    def inlined(self, st: Stmt, idx: Sequence[Affine]) -> ast.Expr:
        key = (st.var, tuple(idx))
        hit = self._inline_memo.get(key)
        if hit is None:
            hit = self._inline_memo[key] = inline_read(st, idx, self.uni)
        return hit

    def _inline_all(self, e: ast.Expr, budget: list[int], memo: dict, in_sum: bool) -> ast.Expr:
        key = (e, in_sum)
        hit = memo.get(key)
        if hit is not None:
            return hit
        out: ast.Expr
        if isinstance(e, (Access, Var)):
            out = e
            base, idx = (e.e, e.idx) if isinstance(e, Access) else (e, ())
            rb = read_base(base)
            st = self.low.stmts.get(rb[0]) if rb and not rb[1] else None
            if (in_sum and budget[0] > 0 and st is not None and not st.is_input
                    and self._inlinable(st, True, False)):
                budget[0] -= 1
                out = self._inline_all(self.inlined(st, idx), budget, memo, in_sum)
        elif isinstance(e, (Affine, Pred, Const, Call)):
            out = e
        else:
            inner = in_sum or isinstance(e, Sum)
            out = ast.map_fields(e, lambda c: self._inline_all(c, budget, memo, inner)
                               if isinstance(c, ast.Expr) else c)
        memo[key] = out
        return out

    def _drain(self) -> None:
        while self._queue:
            name, idx, mulctx = self._queue.pop(0)
            if self.inline_nodes > self.policy.max_nodes:
                break
            st = self.low.stmts[name]
            e = self.inlined(st, idx)
            self.inline_nodes += sum(1 for _ in ast.walk(e))
            acc = self.uni.acc(idx)
            text = self.encode(e, mulctx)
            self.commands.append(f"(union (Get {self.ten(name)} {string(acc)}) {text})")

    def roots(self, g: Graph) -> dict[str, int]:
        """The e-class of every statement the output reads, in a frozen e-graph."""
        return {name: g.roots[self.ten(name)[1:]] for name in out_leaves(self.low.output)}
