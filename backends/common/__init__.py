"""tensorlang.backends.common: lowering decisions shared by the code generators (SPEC 17).

Owns `storage` (how each materialised statement's array is allocated) and `machine_model`
(SPEC 16: bytes moved, flops and BLAS or not, per statement).  May import
`tensorlang.ir`, `tensorlang.semantics` and the backends' plan (`backends.codegen`,
`backends.codegen_nest`); never a code emitter, a pass, the pipeline or the api.
"""
