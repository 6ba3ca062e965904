"""tensorlang.proofs"""
