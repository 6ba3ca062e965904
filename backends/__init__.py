"""tensorlang.backends"""
