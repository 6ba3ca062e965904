"""tensorlang: a purely functional tensor language with verified rewrites and cheap derivatives."""
import os as _os

# SPEC 1 keeps passes/, backends/ and proofs/ beside this package; setuptools maps them to
# tensorlang.passes etc. at install time.  When this package is imported straight from a
# source checkout (e.g. `python -c` in the repository root), make the same mapping.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_root, "passes", "__init__.py")) and _root not in __path__:
    __path__.append(_root)

from tensorlang.syntax.errors import (NotYetSupported, ParseError, ResourceError,  # noqa: E402
                                      ShapeError, TLError, TypeCheckError)

# The user-facing API (SPEC 9), imported on first use: `import tensorlang.ir.ast` from inside the
# compiler must not pull in the API (and its imports) or create import cycles.
_API = ("load", "parse", "from_def", "Module", "Function", "grad", "jvp", "vjp", "hvp",
        "hessian", "jacobian", "default_backend", "Relation")
_SUBMODULES = ("dsl", "api", "pipeline")

__all__ = ["TLError", "ParseError", "TypeCheckError", "ShapeError", "NotYetSupported",
           "ResourceError",
           *_API, *_SUBMODULES]


def __getattr__(name: str):  # PEP 562
    import importlib

    if name in _API:
        return getattr(importlib.import_module(".api", __name__), name)
    if name in _SUBMODULES:
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"tensorlang.{name} is not available yet") from None
    raise AttributeError(f"module 'tensorlang' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
