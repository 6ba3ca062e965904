"""tensorlang.syntax: the concrete syntax and its diagnostics.

Owns `grammar.lark` and `parser` (source -> surface `ast` nodes), `printer` (core nodes ->
tensorlang source), `ssa_printer` (Tensor SSA -> text) and `errors` (`TLError` and its
subclasses, source locations, carets).  At the bottom with `tensorlang.ir`: may import
`tensorlang.ir` only (`ir` in turn imports `errors`, and `tssa.Program.__str__` this
package's `ssa_printer`, lazily); never semantics, check, a pass or a backend.
"""
