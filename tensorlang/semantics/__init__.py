"""tensorlang.semantics: what programs mean and cost.

`grid` (affine expressions and predicates over index boxes: the one evaluator of index
arithmetic and the point counts), `interp` (the one interpreter, of core `Def`s and
Tensor-SSA `Program`s), `cost` (SPEC 3 on core programs; `prim_cost` per SSA primitive),
`cost_formula` (that cost as a quasi-polynomial in the sizes), `bounds` (the derivative cost
bounds of SPEC 6), `memory` (the memory estimate of a run), `relation` (relation values:
mask, coordinates and CSR forms, each built once) and `builtins` (scalar functions and
their derivatives).  May import `tensorlang.ir` and `tensorlang.syntax.errors`; no
pass, pipeline or backend.
"""
