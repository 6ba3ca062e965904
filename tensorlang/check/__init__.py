"""tensorlang.check: the front end after parsing.

Owns `typecheck` (types, shapes, sizes and warnings of a module; the signatures of derived
functions), `elaborate` (surface sugar -> core `Def`s), `quasi` (SPEC 12's quasi-affine
indices and index-array reads lowered to affine constraints) and `contracts` (checked contracts
of the examples).  May import `tensorlang.syntax`, `tensorlang.ir` and `tensorlang.semantics`
(builtins, cost formulas); it runs no pass and imports no pass, pipeline or backend.
"""
