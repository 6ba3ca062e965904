"""Decoding an extraction back to Tensor SSA (docs/simplifier.md section 1, step 5):
every chosen operator becomes a binding over exactly its free indices (S-licm: a
loop-invariant term is computed once, not in every iteration), masked by its support and by
the masks of the places that read it; the core Def then goes through `passes.ssa.to_ssa`,
which fuses, canonicalises and shares the statements (S-cse)."""
from __future__ import annotations

import itertools
from typing import Any, Iterable, Mapping, Sequence

from tensorlang.ir import ast
from tensorlang.ir.canon import conjuncts
from tensorlang.ir.ast import (Access, Add, Affine, Call, Const, Def, Gen, Iverson, Let, Mul,
                               Proj, Sum, Var)
from tensorlang.ir.tssa import Program, prefix_ok
from tensorlang.passes.ssa import to_ssa

from .cost_model import OPS, own_mask
from .egraph import ENode, Graph
from .extract import Extraction
from .lower import Lowered, bracket
from .rules_egg import CALLS, parse_fn_key


class Raiser:
    """Builds the core Def of an extraction: a binding per chosen operator (unless fused into
    its only reader), over its free indices in creation order, masked by its support and its
    readers' masks; a binding per statement the output reads."""

    def __init__(self, low: Lowered, g: Graph, ex: Extraction, ten_roots: Mapping[str, int]):
        self.low, self.uni, self.g, self.x = low, low.uni, g, ex
        self.ten_roots = ten_roots
        taken = {p.name for p in low.params} | set(low.stmts) | set(self.uni.ranges)
        self.bprefix = next(c for c in ("t", "w", "u", "t0_")
                            if prefix_ok(c, taken))
        self._names = itertools.count()
        self.bind: dict[int, str] = {}           # op class -> binding name
        self.stmt_bind: dict[str, str] = {}      # statement -> binding name
        self.lets: list[tuple[str, ast.Expr]] = []
        self.uses: dict[int, int] = {}
        self.ctx: dict[int, frozenset[str]] = {}
        self._order: dict[int, tuple[str, ...]] = {}
        self._inputs: set[str] = set()
        self.fused: set[int] = set()

    def choice(self, cls: int) -> ENode:
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

    def ref(self, cls: int) -> ast.Expr:
        """The expression reading class `cls` where its free indices are in scope."""
        n = self.choice(cls)
        if n.op == "Num":
            return Const(n.args[0])
        if n.op == "Get":
            return self.read_ten(n.args[0], self.uni.accs[n.args[1]])
        if n.op == "Iv":
            m = self.uni.box_implied(n.args[0], self.free(cls))
            return bracket(self.uni.pred_of(m), self.ref(n.args[1]))
        if n.op == "Box":
            return self.ref(n.args[1])
        name = self.bind[cls]
        o = self.order(cls)
        return Access(Var(name), tuple(Affine.var(v) for v in o)) if o else Var(name)

    def sref(self, cls: int) -> ast.Expr:
        """A read with its support as a bracket (the supports of additions and sums)."""
        return bracket(self.uni.pred_of(self._visible(self.m(cls), cls)), self.ref(cls))

    def read_ten(self, tcls: int, idx: Sequence[Affine]) -> ast.Expr:
        n = self.choice(tcls)
        if n.op == "Param":
            st = self.low.stmts[n.args[0]]
            if st.path:
                self._inputs.add(st.var)
                base: ast.Expr = Var(st.var)
            else:
                base = Var(st.param or st.var)
        else:
            base = Var(self.stmt_bind[n.args[0]])
        return Access(base, tuple(idx)) if idx else base

    def operand(self, cls: int, support: bool = False) -> ast.Expr:
        """A child as an operand: fused into the parent's expression (with its mask as a
        bracket, which `to_ssa` hoists into the primitive's mask) or read."""
        if cls in self.fused:
            n = self.choice(cls)
            if n.op == "Sum":   # a nest: the inner sum's mask goes to the innermost body
                j, body = n.args
                inner = self.operand(body, support=True)
                mask = self.uni.pred_of(self.mask_of(cls))
                return Sum(j, self.uni.ranges[j], bracket(mask, inner))
            return bracket(self.uni.pred_of(self.mask_of(cls)), self.op_expr(cls))
        return self.sref(cls) if support else self.ref(cls)

    def mask_of(self, cls: int) -> frozenset[str]:
        """The mask a chosen operator is computed under: its support, its readers' masks
        and its own."""
        n = self.choice(cls)
        m = self.uni.restrict(self.m(cls) | self.ctx.get(cls, frozenset()) | own_mask(n),
                              self.free(cls))
        return self._visible(m, cls)

    def op_expr(self, cls: int) -> ast.Expr:
        n = self.choice(cls)
        op = n.op
        if op == "Mul":
            return Mul(self.operand(n.args[0]), self.operand(n.args[1]))
        if op == "Add":
            return Add(self.sref(n.args[0]), self.sref(n.args[1]))
        if op in CALLS:
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
            value = bracket(self.uni.pred_of(self.mask_of(c)), self.op_expr(c))
            for v in reversed(self.order(c)):
                value = Gen(v, self.uni.ranges[v], value)
            self.bind[c] = name
            self.lets.append((name, value))
        out = self._out(self.low.output)
        body: ast.Expr = out
        for name, value in reversed(self.lets):
            body = Let(name, self._tidy(value), body)
        for name in sorted(self._inputs):
            st = self.low.stmts[name]
            val: ast.Expr = Var(st.param)
            for k in st.path:
                val = Proj(val, k)
            body = Let(name, val, body)
        return Def(self.low.name, self.low.params, self.low.ret, body)

    def _fresh(self) -> str:
        return f"{self.bprefix}{next(self._names)}"

    def _tidy(self, e: ast.Expr, sizes: frozenset = frozenset()) -> ast.Expr:
        """Drop bracket conjuncts `1 <= n` where an enclosing gen or sum ranges over n (no
        point of the statement fails them)."""
        if isinstance(e, (Gen, Sum)):
            inner = sizes | {e.size}
            return type(e)(e.idx, e.size, self._tidy(e.body, inner))
        if isinstance(e, Iverson):
            body = self._tidy(e.e, sizes)
            keep = [q for q in conjuncts(e.pred)
                    if not (isinstance(q, ast.Cmp) and q.op == "<=" and q.lhs == Affine.lit(1)
                            and q.rhs in sizes)]
            return bracket(ast.pred_and(*keep), body)
        if isinstance(e, (Mul, Add, Call)):
            return ast.map_fields(e, lambda c: self._tidy(c, sizes) if isinstance(c, ast.Expr)
                                else c)
        return e

    def _out(self, out: Any) -> ast.Expr:
        if isinstance(out, tuple):
            return ast.Pair(self._out(out[0]), self._out(out[1]))
        tcls = self.ten_roots[out]
        return self.read_ten(tcls, ())




def decode(p: Program, low: Lowered, g: Graph, ex: Extraction,
           roots: Mapping[str, int]) -> Program:
    """The Tensor-SSA program of an extraction, with `p`'s name, parameters and result type."""
    q = to_ssa(Raiser(low, g, ex, roots).build())
    return Program(p.name, p.params, q.stmts, q.output, p.ret, q.ix)
