"""tensorlang.proofs: the checks that every rule, pass and derivative keeps its promises.

Owns `catalogue` (one entry per rule of every registry and per pass, checked against the
interpreter on random instances), `rules_*` (those entries), `normal_forms`/
`normal_forms_ssa` (the normal-form checkers) and `theorems` (cost bounds, derivative
checks).  Sits on top: may import anything in tensorlang (pass inputs come from
`tensorlang.pipeline.run_to`); nothing but the CLI's `tl prove` and tests imports it.
"""
