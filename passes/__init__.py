"""tensorlang.passes"""
