"""tensorlang.backends: code generation from Tensor SSA.

Owns `codegen`/`codegen_nest` (the shared lowering plan and loop nests), `common/`
(storage layouts and the SPEC 16 machine model), `numba_cpu`,
`numba_cuda`, `jax_backend` (with their runtimes `numba_rt`, `jax_rt`, `scalar_builtins`)
and `kernel_cache`.  Consumes `tssa.Program`s: may import `tensorlang.ir`,
`tensorlang.semantics`, `tensorlang.syntax` (errors, the SSA printer) and
`passes.indexsolve` (loop bounds); never another pass, the pipeline, proofs or the api.
"""
