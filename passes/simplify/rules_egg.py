"""The simplifier's egglog program (SPEC 7): sorts, constructors, the analyses and the
rewrite rules as egglog text, and the literals the encoder writes.

Encoding.  A right-hand side is a scalar term over *named* index variables: every
generator and summation index of the program gets a globally unique name with a fixed range
(`universe.Universe`), so a term's free indices say over which indices it is a tensor.
Sorts and constructors:

    Mask = (Set String)        a conjunction of canonical predicate atoms (keys into the
                               universe's atom table; "false" is the atom that never holds)
    Ten  = (Param name)        an input statement (a parameter or an input projection)
         | (Stmt name body)    a materialised statement  v = gen I_v. body
    Sc   = (Num c) | (Get t acc)                  a constant; a read of t at an access key
         | (Mul a b) | (Add a b) | (Sum j a)      a * b, a + b, sum j. a
         | (Call1 P f a) .. (Call4 P f a b c d)   [P] * f(a), .., [P] * f(a, b, c, d)
         | (Iv P a)                               [P] * a
         | (Box P a)                              a, as a tensor also over the indices of
                                                  P's atoms `0 <= i` (a loop it sits in)

Every node is a tensor over its free indices -- the Tensor-SSA statement it becomes -- and
is computed where its class's mask holds (a call where its own mask holds: f(0) need not
be 0), which is what makes the cost of a node static.  Two analyses (egglog functions with
merges) are kept saturated: `free` (the free index names; merge: intersection, since equal
terms depend on the indices both depend on) and `mask` (a conjunction outside which the
class is 0; merge: union, since every member is 0 outside its own).  Python supplies `pfree`
(free indices of a mask), `accfree` (of an access key), `ne` (the mask `n_j >= 1` of a
summation index), and the relations `dead` (masks the index solver refutes) and `orm` (the
disjunction of two masks, for the support of an addition).

Rules (`RULES`, one egglog ruleset each) come in three groups: `clean` (Iverson algebra,
zero/one elimination, constant folding: they never raise the cost), `search` (the
equalities the cost-based extraction chooses among: distributivity and factoring, sums over
additions, factoring loop-invariant factors out of sums and back, associativity and
commutativity of products, interchange of sums -- together they reassociate chains of
contractions, the einsum contraction-order problem), and `analysis`.  See
docs/simplifier.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

# ---------------------------------------------------------------------------------------------
# The egglog program: sorts, constructors, analyses

DECLARATIONS = r"""
(sort Mask (Set String))
(sort Ten)
(sort Sc)
(constructor Param (String) Ten)
(constructor Stmt (String Sc) Ten)
(constructor Num (f64) Sc)
(constructor Get (Ten String) Sc)
(constructor Mul (Sc Sc) Sc)
(constructor Add (Sc Sc) Sc)
(constructor Call1 (Mask String Sc) Sc)
(constructor Call2 (Mask String Sc Sc) Sc)
(constructor Call3 (Mask String Sc Sc Sc) Sc)
(constructor Call4 (Mask String Sc Sc Sc Sc) Sc)
(constructor Iv (Mask Sc) Sc)
(constructor Box (Mask Sc) Sc)
(constructor Sum (String Sc) Sc)
(function free (Sc) Mask :merge (set-intersect old new))
(function mask (Sc) Mask :merge (set-union old new))
(function pfree (Mask) Mask :merge (set-intersect old new))
(function accfree (String) Mask :merge (set-intersect old new))
(function ne (String) Mask :merge (set-intersect old new))
(relation dead (Mask))
(relation orm (Mask Mask Mask))
(set (pfree (set-empty)) (set-empty))
(set (pfree (set-of "false")) (set-empty))
"""

MAX_ARGS = 4     # the most arguments a builtin takes (sel_ge)
CALLS = tuple(f"Call{k}" for k in range(1, MAX_ARGS + 1))
CONSTRUCTORS: dict[str, tuple[str, ...]] = {  # name -> argument sorts
    "Param": ("String",), "Stmt": ("String", "Sc"), "Num": ("f64",), "Get": ("Ten", "String"),
    "Mul": ("Sc", "Sc"), "Add": ("Sc", "Sc"),
    **{f"Call{k}": ("Mask", "String") + ("Sc",) * k for k in range(1, MAX_ARGS + 1)},
    "Iv": ("Mask", "Sc"), "Box": ("Mask", "Sc"),
    "Sum": ("String", "Sc"),
}
OUT_SORT = {"Param": "Ten", "Stmt": "Ten"}
MASKED = CALLS + ("Iv", "Box")  # constructors whose first argument is a mask


def _marking() -> str:
    """`OldX` relations and the `mark` ruleset recording the e-nodes of the input (so that
    extraction keeps the input's choice unless another one is better at every cost point)."""
    out = ["(ruleset mark)"]
    for name, sorts in CONSTRUCTORS.items():
        vs = " ".join(f"a{k}" for k in range(len(sorts)))
        out.append(f"(relation Old{name} ({' '.join(sorts)}))")
        out.append(f"(rule ((= e ({name} {vs}))) ((Old{name} {vs})) :ruleset mark)")
    return "\n".join(out)


E = "(set-empty)"


def _pf(p: str, q: str, fp: str, fq: str) -> str:
    """The action recording the free indices of the union of two masks."""
    return f"(set (pfree (set-union {p} {q})) (set-union {fp} {fq}))"


def _call_rules(kind: str) -> str:
    """The rules of `kind` ("free", "mask", "push") for the calls of 1..MAX_ARGS arguments."""
    out = []
    for k in range(1, MAX_ARGS + 1):
        vs = [f"a{n}" for n in range(k)]
        args = " ".join(vs)
        if kind == "free":
            conds = " ".join(f"(= f{v} (free {v}))" for v in vs)
            acc = "fp"
            for v in vs:
                acc = f"(set-union {acc} f{v})"
            out.append(f"(rule ((= e (Call{k} P f {args})) (= fp (pfree P)) {conds})\n"
                       f"      ((set (free e) {acc})) :ruleset {{rs}})")
        elif kind == "mask":
            out.append(f"(rule ((= e (Call{k} P f {args}))) ((set (mask e) P)) :ruleset {{rs}})")
        else:
            pushed = " ".join(f"(Iv P {v})" for v in vs)
            out.append(f"(rule ((= e (Iv P (Call{k} Q f {args}))) (= fp (pfree P)) "
                       f"(= fq (pfree Q)))\n"
                       f"      ((union e (Call{k} (set-union P Q) f {pushed})) "
                       f"{_pf('P', 'Q', 'fp', 'fq')}) :ruleset {{rs}})")
    return "\n".join(out)


@dataclass(frozen=True)
class RuleDef:
    """One rewrite of the simplifier: `text` is egglog source with `{rs}` for its ruleset."""

    name: str
    group: str          # "analysis" | "clean" | "search"
    schema: str         # LHS -> RHS (or <->) in ASCII, for docs and the catalogue
    text: str

    @property
    def ruleset(self) -> str:
        return "rs_" + self.name.replace("-", "_")


def _r(name: str, group: str, schema: str, text: str) -> RuleDef:
    return RuleDef(name, group, schema, text.strip())


_ANALYSIS = [
    _r("A-free", "analysis", "free indices of every term (merge: intersection)", r"""
(rule ((= e (Num x))) ((set (free e) (set-empty))) :ruleset {rs})
(rule ((= e (Get t acc)) (= fa (accfree acc))) ((set (free e) fa)) :ruleset {rs})
(rule ((= e (Mul a b)) (= fa (free a)) (= fb (free b)))
      ((set (free e) (set-union fa fb))) :ruleset {rs})
(rule ((= e (Add a b)) (= fa (free a)) (= fb (free b)))
      ((set (free e) (set-union fa fb))) :ruleset {rs})
""" + _call_rules("free") + r"""
(rule ((= e (Iv P a)) (= fp (pfree P)) (= fa (free a)))
      ((set (free e) (set-union fp fa))) :ruleset {rs})
(rule ((= e (Box P a)) (= fp (pfree P)) (= fa (free a)))
      ((set (free e) (set-union fp fa))) :ruleset {rs})
(rule ((= e (Sum j a)) (= fa (free a))) ((set (free e) (set-remove fa j))) :ruleset {rs})
"""),
    _r("A-mask", "analysis",
       "zero-condition of every term (merge: union; `orm`: the disjunction of the masks of "
       "a sum's operands, from the Python pass)", r"""
(rule ((= e (Num x)) (!= x 0.0)) ((set (mask e) (set-empty))) :ruleset {rs})
(rule ((= e (Num 0.0))) ((set (mask e) (set-of "false"))) :ruleset {rs})
(rule ((= e (Mul a b)) (= ma (mask a)) (= mb (mask b)))
      ((set (mask e) (set-union ma mb))) :ruleset {rs})
(rule ((= e (Add a b)) (= ma (mask a)) (= mb (mask b)))
      ((set (mask e) (set-intersect ma mb))) :ruleset {rs})
(rule ((= e (Add a b)) (= ma (mask a)) (= mb (mask b)) (orm ma mb r))
      ((set (mask e) r)) :ruleset {rs})
""" + _call_rules("mask") + r"""
(rule ((= e (Iv P a)) (= ma (mask a))) ((set (mask e) (set-union P ma))) :ruleset {rs})
(rule ((= e (Box P a)) (= ma (mask a))) ((set (mask e) ma)) :ruleset {rs})
(rule ((= e (Sum j a)) (= nj (ne j))) ((set (mask e) nj)) :ruleset {rs})
"""),
]

_CLEAN = [
    _r("S-iv-false", "clean", "[false] * e -> 0  (also: a mask the index solver refutes)", r"""
(rule ((= m (mask e)) (set-contains m "false")) ((union e (Num 0.0))) :ruleset {rs})
(rule ((= m (mask e)) (dead m)) ((union e (Num 0.0))) :ruleset {rs})
"""),
    _r("S-iv-and", "clean", "[p] * [q] * e -> [p and q] * e", r"""
(rule ((= e (Iv P (Iv Q a))) (= fp (pfree P)) (= fq (pfree Q)) (= ma (mask a))
       (!= (set-diff Q ma) (set-empty)) (!= (set-diff P (set-union Q ma)) (set-empty)))
      ((union e (Iv (set-union P Q) a)) """ + _pf("P", "Q", "fp", "fq") + r""") :ruleset {rs})
"""),
    _r("S-iv-implied", "clean", "[p] * e -> e  when e is 0 wherever p fails", r"""
(rule ((= e (Iv P a)) (= m (mask a)) (= (set-diff P m) (set-empty))) ((union e a)) :ruleset {rs})
"""),
    _r("S-iv-push", "clean",
       "[p] * op(a, ..) -> op([p] * a, ..)  (a product over p's indices, every summand, "
       "a call and its arguments, a sum's body)", r"""
(rule ((= e (Iv P (Mul a b))) (= fp (pfree P)) (= fe (free (Mul a b)))
       (= (set-diff fp fe) (set-empty)) (= ma (mask a)) (= mb (mask b))
       (!= (set-diff P (set-union ma mb)) (set-empty)))
      ((union e (Mul (Iv P a) b))) :ruleset {rs})
(rule ((= e (Iv P (Add a b))))
      ((union e (Add (Iv P a) (Iv P b)))) :ruleset {rs})
""" + _call_rules("push") + r"""
(rule ((= e (Iv P (Sum j a))) (= fp (pfree P)) (set-not-contains fp j))
      ((union e (Sum j (Iv P a)))) :ruleset {rs})
"""),
    _r("S-iv-sum", "clean", "sum j. [q] * e -> [q] * sum j. e  (j not in q)", r"""
(rule ((= e (Sum j (Iv Q a))) (= fq (pfree Q)) (set-not-contains fq j))
      ((union e (Iv Q (Sum j a)))) :ruleset {rs})
"""),
    _r("S-box-drop", "clean",
       "(e pinned to loops I) * b -> e * b  when b is over I (the product is anyway)", r"""
(rule ((= e (Mul (Box P a) b)) (= fp (pfree P)) (= fb (free b)) (= (set-diff fp fb) (set-empty)))
      ((union e (Mul a b))) :ruleset {rs})
(rule ((= e (Mul b (Box P a))) (= fp (pfree P)) (= fb (free b)) (= (set-diff fp fb) (set-empty)))
      ((union e (Mul b a))) :ruleset {rs})
(rule ((= e (Add (Box P a) b)) (= fp (pfree P)) (= fb (free b)) (= (set-diff fp fb) (set-empty)))
      ((union e (Add a b))) :ruleset {rs})
(rule ((= e (Add b (Box P a))) (= fp (pfree P)) (= fb (free b)) (= (set-diff fp fb) (set-empty)))
      ((union e (Add b a))) :ruleset {rs})
(rule ((= e (Box P a)) (= fp (pfree P)) (= fa (free a)) (= (set-diff fp fa) (set-empty)))
      ((union e a)) :ruleset {rs})
"""),
    _r("S-mul-zero", "clean", "0 * e -> 0", r"""
(rewrite (Mul (Num 0.0) a) (Num 0.0) :ruleset {rs})
(rewrite (Mul a (Num 0.0)) (Num 0.0) :ruleset {rs})
"""),
    _r("S-mul-one", "clean", "1 * e -> e", r"""
(rewrite (Mul (Num 1.0) a) a :ruleset {rs})
(rewrite (Mul a (Num 1.0)) a :ruleset {rs})
"""),
    _r("S-add-zero", "clean", "0 + e -> e", r"""
(rewrite (Add (Num 0.0) a) a :ruleset {rs})
(rewrite (Add a (Num 0.0)) a :ruleset {rs})
"""),
    _r("S-sum-zero", "clean", "sum j. 0 -> 0", r"""
(rewrite (Sum j (Num 0.0)) (Num 0.0) :ruleset {rs})
"""),
    _r("S-fold", "clean", "c1 * c2 -> c, c1 + c2 -> c, c1 * (c2 * e) -> (c1 c2) * e", r"""
(rewrite (Mul (Num x) (Num y)) (Num (* x y)) :ruleset {rs})
(rewrite (Add (Num x) (Num y)) (Num (+ x y)) :ruleset {rs})
(rewrite (Mul (Num x) (Mul (Num y) a)) (Mul (Num (* x y)) a) :ruleset {rs})
"""),
]

_SEARCH = [
    _r("S-distribute", "search", "a * (b + c) <-> a * b + a * c", r"""
(birewrite (Mul a (Add b c)) (Add (Mul a b) (Mul a c)) :ruleset {rs})
"""),
    _r("S-sum-add", "search",
       "sum j. (a + b) -> [n_j >= 1] * (sum j. a + sum j. b)", r"""
(rule ((= e (Sum j (Add a b))) (= nj (ne j)))
      ((union e (Iv nj (Add (Sum j a) (Sum j b))))) :ruleset {rs})
"""),
    _r("S-sum-factor", "search",
       "sum j. a * b -> [n_j >= 1] * a * sum j. b  (j not free in a)", r"""
(rule ((= e (Sum j (Mul a b))) (= fa (free a)) (set-not-contains fa j) (= nj (ne j)))
      ((union e (Iv nj (Mul a (Sum j b))))) :ruleset {rs})
(rule ((= e (Sum j (Mul b a))) (= fa (free a)) (set-not-contains fa j) (= nj (ne j)))
      ((union e (Iv nj (Mul (Sum j b) a)))) :ruleset {rs})
"""),
    _r("S-sum-push", "search", "a * sum j. b -> sum j. a * b  (j not free in a)", r"""
(rule ((= e (Mul a (Sum j b))) (= fa (free a)) (set-not-contains fa j))
      ((union e (Sum j (Mul a b)))) :ruleset {rs})
"""),
    _r("S-mul-comm", "search", "a * b <-> b * a", r"""
(rewrite (Mul a b) (Mul b a) :ruleset {rs})
"""),
    _r("S-add-comm", "search", "a + b <-> b + a", r"""
(rewrite (Add a b) (Add b a) :ruleset {rs})
"""),
    _r("S-mul-assoc", "search", "(a * b) * c <-> a * (b * c)", r"""
(birewrite (Mul (Mul a b) c) (Mul a (Mul b c)) :ruleset {rs})
"""),
    _r("S-sum-swap", "search", "sum j. sum k. e <-> sum k. sum j. e", r"""
(rewrite (Sum j (Sum k a)) (Sum k (Sum j a)) :ruleset {rs})
"""),
]

RULES: dict[str, RuleDef] = {r.name: r for r in _ANALYSIS + _CLEAN + _SEARCH}
GROUPS: dict[str, tuple[str, ...]] = {
    g: tuple(r.name for r in RULES.values() if r.group == g)
    for g in ("analysis", "clean", "search")}


def program(rules: Iterable[str] | None = None) -> str:
    """The egglog source: declarations, one ruleset per rule, and a combined ruleset per
    group (`g_analysis`, `g_clean`, `g_search`) of the selected rules (all by default)."""
    chosen = set(RULES) if rules is None else set(rules) | set(GROUPS["analysis"])
    parts = [DECLARATIONS, _marking()]
    for r in RULES.values():
        parts.append(f"(ruleset {r.ruleset})")
        if r.name in chosen:
            parts.append(r.text.replace("{rs}", r.ruleset))
    for g, names in GROUPS.items():
        members = " ".join(RULES[n].ruleset for n in names if n in chosen)
        parts.append(f"(unstable-combined-ruleset g_{g} {members})" if members else
                     f"(ruleset g_{g})")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Literals


def f64(x: float) -> str:
    """An egglog f64 literal."""
    if not math.isfinite(x):
        raise ValueError(f"non-finite constant {x}")
    s = repr(float(x))
    return s if ("." in s or "e" in s) else s + ".0"


def string(s: str) -> str:
    if '"' in s or "\\" in s:
        raise ValueError(f"bad egglog string {s!r}")
    return f'"{s}"'


def mask_lit(atoms: Iterable[str]) -> str:
    atoms = sorted(set(atoms))
    if not atoms:
        return E
    return "(set-of " + " ".join(string(a) for a in atoms) + ")"




def fn_key(fn: str, params: Sequence[float]) -> str:
    """The egglog string naming a builtin with its constant parameters."""
    return fn if not params else fn + ":" + ":".join(f64(c) for c in params)


def parse_fn_key(key: str) -> tuple[str, tuple[float, ...]]:
    parts = key.split(":")
    return parts[0], tuple(float(c) for c in parts[1:])
