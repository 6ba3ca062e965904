"""tensorlang.check"""
