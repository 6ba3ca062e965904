"""tensorlang.syntax"""
