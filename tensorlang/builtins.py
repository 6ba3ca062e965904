"""The black-box scalar functions of SPEC 2.3 and their derivatives, in one table.

`BUILTIN_FUNCS[name]` is a `Builtin`: arity, number of constant parameters, the numpy-
vectorised function `fn(*args, *params)` and one vectorised partial derivative per argument
`derivs[k](*args, *params)`.  `deriv_expr` builds the same partial derivatives as core-AST
expressions, for the derivative passes and the backends.

Conventions at non-differentiable points (SPEC 2.3):
  * relu'(0) = 0, abs'(0) = 0 (`step(0) = 0`, `sign(0) = 0`);
  * max(a, b) picks its first argument on ties: d/da = [a >= b], d/db = [a < b];
    min(a, b) likewise: d/da = [a <= b], d/db = [a > b];
  * pow(x, 0)' = 0 everywhere (also at x = 0, where c * x**(c-1) would be 0 * inf);
  * the comparison builtins (`step`, `ge`, `gt`) give 0 on NaN; `sign(NaN)` is NaN.

Derivative normal form.  For the 16 language builtins (`ast.BUILTINS`) the k-th partial
derivative is *one* call times a constant, so that a map's jvp is one map plus one
contraction (SPEC 6, Theorem 6.1): `deriv_expr` returns one of
    Const(c) | Call(g, args', params') | Mul(Const(c), Call(g, args', params'))
    | Mul(Const(c), arg)
where `args'` are the original arguments (possibly reordered).  This needs a few derivative
builtins that are not in `ast.BUILTINS` (see `EXTRA_BUILTINS`); their own derivatives (needed
for second derivatives) are ordinary expressions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy import special

from . import ast as A
from .errors import TLError

ArrayFn = Callable[..., np.ndarray]


@dataclass(frozen=True)
class Builtin:
    name: str
    arity: int          # number of expression arguments
    nparams: int        # number of constant parameters (pow's exponent)
    fn: ArrayFn         # fn(*args, *params), elementwise on numpy arrays
    derivs: tuple[ArrayFn, ...]   # derivs[k](*args, *params): partial w.r.t. argument k
    doc: str


def _f(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


# --- numerically careful primitives -------------------------------------------------------

def _sigmoid(x: np.ndarray) -> np.ndarray:
    return special.expit(_f(x))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, _f(x))          # log(1 + e^x) without overflow or cancellation


def _dsigmoid(x: np.ndarray) -> np.ndarray:
    x = _f(x)
    return special.expit(x) * special.expit(-x)   # s(1-s) without cancelling 1 - s


def _dtanh(x: np.ndarray) -> np.ndarray:
    # 1 - tanh(x)^2 = 4u / (1 + u)^2 with u = e^{-2|x|}: no cancellation, no overflow.
    u = np.exp(-2.0 * np.abs(_f(x)))
    return 4.0 * u / np.square(1.0 + u)


def _dtan(x: np.ndarray) -> np.ndarray:
    return 1.0 + np.square(np.tan(_f(x)))


def _step(x: np.ndarray) -> np.ndarray:
    return (_f(x) > 0.0).astype(np.float64)


def _ge(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (_f(a) >= _f(b)).astype(np.float64)


def _gt(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (_f(a) > _f(b)).astype(np.float64)


def _pow(x: np.ndarray, c: float) -> np.ndarray:
    return np.power(_f(x), float(c))


def _dpow(x: np.ndarray, c: float) -> np.ndarray:
    x = _f(x)
    if c == 0.0:
        return np.zeros_like(x)
    if c == 1.0:
        return np.ones_like(x)
    if c == 2.0:
        return 2.0 * x
    return c * np.power(x, c - 1.0)


def _zero1(*args: np.ndarray) -> np.ndarray:
    return np.zeros(np.broadcast(*[_f(a) for a in args]).shape)


def _table() -> dict[str, Builtin]:
    def b(name: str, arity: int, nparams: int, fn: ArrayFn, derivs: Sequence[ArrayFn],
          doc: str) -> Builtin:
        return Builtin(name, arity, nparams, fn, tuple(derivs), doc)

    rows = [
        b("exp", 1, 0, lambda x: np.exp(_f(x)), [lambda x: np.exp(_f(x))], "e^x"),
        b("log", 1, 0, lambda x: np.log(_f(x)), [lambda x: np.reciprocal(_f(x))],
          "natural log (log 0 = -inf, log x<0 = nan)"),
        b("sin", 1, 0, lambda x: np.sin(_f(x)), [lambda x: np.cos(_f(x))], "sine"),
        b("cos", 1, 0, lambda x: np.cos(_f(x)), [lambda x: -np.sin(_f(x))], "cosine"),
        b("tan", 1, 0, lambda x: np.tan(_f(x)), [_dtan], "tangent"),
        b("tanh", 1, 0, lambda x: np.tanh(_f(x)), [_dtanh], "hyperbolic tangent"),
        b("sqrt", 1, 0, lambda x: np.sqrt(_f(x)), [lambda x: 0.5 * np.power(_f(x), -0.5)],
          "square root"),
        b("sigmoid", 1, 0, _sigmoid, [_dsigmoid], "1 / (1 + e^-x), stable"),
        b("softplus", 1, 0, _softplus, [_sigmoid], "log(1 + e^x), stable"),
        b("abs", 1, 0, lambda x: np.abs(_f(x)), [lambda x: np.sign(_f(x))], "|x|"),
        b("relu", 1, 0, lambda x: np.maximum(_f(x), 0.0), [_step], "max(x, 0)"),
        b("square", 1, 0, lambda x: np.square(_f(x)), [lambda x: 2.0 * _f(x)], "x^2"),
        b("recip", 1, 0, lambda x: np.reciprocal(_f(x)), [lambda x: -np.power(_f(x), -2.0)],
          "1 / x"),
        b("pow", 1, 1, _pow, [_dpow], "x ** c for a constant c"),
        b("max", 2, 0, lambda a, b_: np.maximum(_f(a), _f(b_)),
          [lambda a, b_: _ge(a, b_), lambda a, b_: _gt(b_, a)], "larger of a, b"),
        b("min", 2, 0, lambda a, b_: np.minimum(_f(a), _f(b_)),
          [lambda a, b_: _ge(b_, a), lambda a, b_: _gt(a, b_)], "smaller of a, b"),
        # Derivative builtins (not yet in ast.BUILTINS; see module docstring).
        b("step", 1, 0, _step, [_zero1], "[x > 0] (Heaviside, step(0) = 0)"),
        b("sign", 1, 0, lambda x: np.sign(_f(x)), [_zero1], "sign of x (sign(0) = 0)"),
        b("ge", 2, 0, _ge, [_zero1, _zero1], "[a >= b]"),
        b("gt", 2, 0, _gt, [_zero1, _zero1], "[a > b]"),
        b("dtanh", 1, 0, _dtanh, [lambda x: -2.0 * np.tanh(_f(x)) * _dtanh(x)],
          "1 - tanh(x)^2, stable"),
        b("dsigmoid", 1, 0, _dsigmoid,
          [lambda x: _dsigmoid(x) * (1.0 - 2.0 * _sigmoid(x))], "sigmoid(x)(1 - sigmoid(x))"),
        b("dtan", 1, 0, _dtan, [lambda x: 2.0 * np.tan(_f(x)) * _dtan(x)], "1 + tan(x)^2"),
    ]
    return {r.name: r for r in rows}


BUILTIN_FUNCS: dict[str, Builtin] = _table()

# The derivative helpers beyond SPEC 2.3's builtins (name -> (arity, nparams)); they are in
# the grammar too, so derivative programs print and re-parse.
EXTRA_BUILTINS: dict[str, tuple[int, int]] = {
    n: (f.arity, f.nparams) for n, f in BUILTIN_FUNCS.items() if n in A.DERIVATIVE_HELPERS}


def lookup(name: str, nargs: int | None = None, nparams: int | None = None) -> Builtin:
    """The table entry for `name`, checking the number of arguments and parameters."""
    f = BUILTIN_FUNCS.get(name)
    if f is None:
        raise TLError(f"unknown builtin function {name!r}")
    if nargs is not None and nargs != f.arity:
        raise TLError(f"{name} takes {f.arity} argument(s), got {nargs}")
    if nparams is not None and nparams != f.nparams:
        raise TLError(f"{name} takes {f.nparams} constant parameter(s), got {nparams}")
    return f


def apply(name: str, args: Sequence[np.ndarray], params: Sequence[float] = ()) -> np.ndarray:
    """Evaluate a builtin elementwise (floating-point warnings silenced: inf/nan are values)."""
    f = lookup(name, len(args), len(params))
    with np.errstate(all="ignore"):
        return f.fn(*args, *params)


def apply_deriv(name: str, k: int, args: Sequence[np.ndarray],
                params: Sequence[float] = ()) -> np.ndarray:
    """The k-th partial derivative of a builtin, elementwise."""
    f = lookup(name, len(args), len(params))
    with np.errstate(all="ignore"):
        return f.derivs[k](*args, *params)


# --- derivatives as core expressions ------------------------------------------------------

def _call(fn: str, *args: A.Expr, params: Sequence[float] = ()) -> A.Expr:
    return A.Call(fn, tuple(args), tuple(params))


def _scale(c: float, e: A.Expr) -> A.Expr:
    return e if c == 1.0 else A.Mul(A.Const(c), e)


def _deriv_template(name: str, xs: Sequence[A.Expr], params: Sequence[float], k: int) -> A.Expr:
    """The k-th partial of `name` at the (atomic) arguments `xs`."""
    x = xs[0]
    one = {"exp": lambda: _call("exp", x), "log": lambda: _call("recip", x),
           "sin": lambda: _call("cos", x), "cos": lambda: _scale(-1.0, _call("sin", x)),
           "tan": lambda: _call("dtan", x), "tanh": lambda: _call("dtanh", x),
           "sqrt": lambda: _scale(0.5, _call("pow", x, params=(-0.5,))),
           "sigmoid": lambda: _call("dsigmoid", x), "softplus": lambda: _call("sigmoid", x),
           "abs": lambda: _call("sign", x), "relu": lambda: _call("step", x),
           "square": lambda: _scale(2.0, x),
           "recip": lambda: _scale(-1.0, _call("pow", x, params=(-2.0,))),
           "step": lambda: A.Const(0.0), "sign": lambda: A.Const(0.0),
           # Second-order helpers: ordinary expressions (x used twice: let-bound if needed).
           "dtanh": lambda: _scale(-2.0, A.Mul(_call("tanh", x), _call("dtanh", x))),
           "dsigmoid": lambda: A.Mul(_call("dsigmoid", x), A.Add(
               A.Const(1.0), A.Mul(A.Const(-2.0), _call("sigmoid", x)))),
           "dtan": lambda: _scale(2.0, A.Mul(_call("tan", x), _call("dtan", x)))}
    if name in one:
        return one[name]()
    if name == "pow":
        c = float(params[0])
        if c == 0.0:
            return A.Const(0.0)
        if c == 1.0:
            return A.Const(1.0)
        if c == 2.0:
            return _scale(2.0, x)
        return _scale(c, _call("pow", x, params=(c - 1.0,)))
    a, b = xs
    two = {("max", 0): lambda: _call("ge", a, b), ("max", 1): lambda: _call("gt", b, a),
           ("min", 0): lambda: _call("ge", b, a), ("min", 1): lambda: _call("gt", a, b),
           ("ge", 0): lambda: A.Const(0.0), ("ge", 1): lambda: A.Const(0.0),
           ("gt", 0): lambda: A.Const(0.0), ("gt", 1): lambda: A.Const(0.0)}
    return two[(name, k)]()


def _is_atomic(e: A.Expr) -> bool:
    """Cost-free to duplicate: a variable, a constant, or an access of a variable."""
    return isinstance(e, (A.Var, A.Const)) or (
        isinstance(e, A.Access) and isinstance(e.e, A.Var))


def _count_var(e: A.Node, name: str) -> int:
    """Occurrences of `Var(name)` in `e` (counting shared subterms every time they occur)."""
    if isinstance(e, A.Var):
        return int(e.name == name)
    return sum(_count_var(c, name) for c in A.children(e))


def deriv_expr(name: str, args: Sequence[A.Expr], params: Sequence[float], k: int) -> A.Expr:
    """The core expression of the k-th partial derivative of `name(args; params)`.

    Arguments are substituted into the formula; a non-atomic argument that the formula uses
    more than once is bound once with a `let`, so the result never duplicates work.
    """
    f = lookup(name, len(args), len(params))
    if not 0 <= k < f.arity:
        raise TLError(f"{name} has no argument {k}")
    avoid = set().union(*(A.free_names(a) for a in args)) if args else set()
    holes = [A.fresh("d", avoid) for _ in args]
    template = _deriv_template(name, [A.Var(h) for h in holes], params, k)
    mapping: dict[str, A.Expr] = {}
    lets: list[tuple[str, A.Expr]] = []
    for hole, arg in zip(holes, args):
        if _is_atomic(arg) or _count_var(template, hole) <= 1:
            mapping[hole] = arg
        else:
            lets.append((hole, arg))
    out = A.subst(template, mapping) if mapping else template
    for hole, arg in reversed(lets):
        out = A.Let(hole, arg, out)
    return out
