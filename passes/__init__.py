"""tensorlang.passes: the program transformations, each a pure function of its input.

Owns the normalisation passes `letlift`, `pairelim`, `genpush` (with `rewrite`, their rule
machinery), `ssa` (core -> Tensor SSA), `derive` (the jvp/vjp stage) and the packages `jvp/`,
`vjp/`, `simplify/` and `indexsolve/`.  May import `tensorlang.ir`, `tensorlang.semantics`,
`tensorlang.syntax` (errors, printers for names and messages) and, in `derive`,
`check.typecheck.derived_signature`; never the pipeline, a backend, proofs or the api.
Passes are chained only by `tensorlang.pipeline`.
"""
