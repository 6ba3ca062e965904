"""tensorlang.ir: the intermediate representations, as immutable hash-consed nodes.

`ast` (the core language of SPEC 2.1), `tssa` (Tensor SSA, SPEC 5: nodes, programs,
`to_core`), `canon` (canonical forms of SSA predicates and the node order), `build` (the
SSA `Builder`).  May import `tensorlang.syntax.errors` (locations) and nothing that runs a
program: evaluation and cost live in `tensorlang.semantics`, printing in `tensorlang.syntax`
(`tssa.Program.__str__` defers to `syntax.ssa_printer`, imported lazily).
"""
