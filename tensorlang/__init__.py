"""tensorlang: a purely functional tensor language with verified rewrites and cheap derivatives."""
import os as _os

# SPEC 1 keeps passes/, backends/ and proofs/ beside this package; setuptools maps them to
# tensorlang.passes etc. at install time.  When this package is imported straight from a
# source checkout (e.g. `python -c` in the repository root), make the same mapping.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_root, "passes", "__init__.py")) and _root not in __path__:
    __path__.append(_root)

from .errors import NotYetSupported, ParseError, ShapeError, TLError, TypeCheckError  # noqa: E402

__all__ = ["TLError", "ParseError", "TypeCheckError", "ShapeError", "NotYetSupported"]
