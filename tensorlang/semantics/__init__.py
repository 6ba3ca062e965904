"""tensorlang.semantics"""
