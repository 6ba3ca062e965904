"""tensorlang.ir"""
