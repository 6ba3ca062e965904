"""tensorlang.semantics: what programs mean and cost.

`grid` (affine expressions and predicates over index boxes: the one evaluator of index
arithmetic and the point counts), `interp` (the one interpreter, of core `Def`s and
Tensor-SSA `Program`s), `cost` (SPEC 3 on core programs; `prim_cost` per SSA primitive),
`builtins` (scalar functions and their derivatives).  May import `tensorlang.ir` and
`tensorlang.syntax.errors`; no pass or backend.
"""
