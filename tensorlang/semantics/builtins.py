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
  * the comparison builtins (`step`, `ge`, `gt`) give 0 on NaN; `sign(NaN)` is NaN; the
    selections `sel_ge`, `keep_ge`, `keep_gt` give 0 where their comparison is unordered, so
    that they equal `ge(a, b) x + gt(b, a) y` etc. (their partial derivatives).

Derivative normal form.  For every builtin except the second-order helpers `d2tanh`,
`d2sigmoid`, `d2tan` the k-th partial derivative is *one* call times a constant, so that a
map's jvp is one map plus one contraction (SPEC 6, Theorem 6.1): `deriv_expr` returns one of
    Const(c) | Call(g, args', params') | Mul(Const(c), Call(g, args', params'))
    | Mul(Const(c), arg)
where `args'` are the original arguments (possibly reordered).  This needs the derivative
helpers of `ast.DERIVATIVE_HELPERS` (`EXTRA_BUILTINS`): `tanh' = dtanh`, `dtanh' = d2tanh`,
and the tower ends there: `d2tanh'` (a third derivative of a user program) is an expression
of one call used twice, `dtanh (4 - 6 dtanh)` (likewise for sigmoid and tan).

Builtins whose partials are all indicators (`INDICATOR_PARTIALS`: max, min and the selection
helpers) have a cheaper rule than "partial times tangent": `select_call` gives the whole
directional derivative `sum_k f_k' t_k` (or one cotangent contribution) as ONE call of
`sel_ge` / `keep_ge` / `keep_gt`, which are linear in their tangent arguments, so the
selection family is closed under differentiation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

import numpy as np

from tensorlang.ir import ast
from tensorlang.syntax.errors import TLError

ArrayFn = Callable[..., np.ndarray]
T = TypeVar("T")


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

def _expit(x: np.ndarray) -> np.ndarray:
    # scipy.special takes ~0.5 s to import: only programs that use sigmoid pay for it
    from scipy.special import expit

    return expit(x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return _expit(_f(x))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, _f(x))          # log(1 + e^x) without overflow or cancellation


def _dsigmoid(x: np.ndarray) -> np.ndarray:
    x = _f(x)
    return _expit(x) * _expit(-x)   # s(1-s) without cancelling 1 - s


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


def _scalar(r: np.ndarray) -> np.ndarray:
    return r[()]   # a 0-d result as a numpy scalar, like the ufuncs give


def _sel_ge(a: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    a, b = _f(a), _f(b)
    return _scalar(np.where(a >= b, _f(x), np.where(a < b, _f(y), 0.0)))


def _keep_ge(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    return _scalar(np.where(_f(a) >= _f(b), _f(x), 0.0))


def _keep_gt(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    return _scalar(np.where(_f(a) > _f(b), _f(x), 0.0))


def _d2tanh(x: np.ndarray) -> np.ndarray:
    return -2.0 * np.tanh(_f(x)) * _dtanh(x)


def _d2sigmoid(x: np.ndarray) -> np.ndarray:
    # 1 - 2 sigmoid(x) = -tanh(x / 2): no cancellation near x = 0
    return -np.tanh(0.5 * _f(x)) * _dsigmoid(x)


def _d2tan(x: np.ndarray) -> np.ndarray:
    return 2.0 * np.tan(_f(x)) * _dtan(x)


def _of_ab(g: ArrayFn) -> ArrayFn:
    """`g(a, b)` of a selection's first two arguments, broadcast against all of them (its
    partial derivative with respect to a tangent argument)."""
    return lambda *args: g(args[0], args[1]) + _zero1(*args)


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
        # Derivative helpers (ast.DERIVATIVE_HELPERS; see the module docstring).
        b("step", 1, 0, _step, [_zero1], "[x > 0] (Heaviside, step(0) = 0)"),
        b("sign", 1, 0, lambda x: np.sign(_f(x)), [_zero1], "sign of x (sign(0) = 0)"),
        b("ge", 2, 0, _ge, [_zero1, _zero1], "[a >= b]"),
        b("gt", 2, 0, _gt, [_zero1, _zero1], "[a > b]"),
        b("dtanh", 1, 0, _dtanh, [_d2tanh], "1 - tanh(x)^2, stable"),
        b("dsigmoid", 1, 0, _dsigmoid, [_d2sigmoid], "sigmoid(x)(1 - sigmoid(x))"),
        b("dtan", 1, 0, _dtan, [_d2tan], "1 + tan(x)^2"),
        # The end of the tower: third derivatives are expressions (see `_deriv_template`,
        # which computes them exactly as these lambdas do).
        b("d2tanh", 1, 0, _d2tanh, [lambda x: _dtanh(x) * (4.0 + -6.0 * _dtanh(x))],
          "-2 tanh(x) dtanh(x)"),
        b("d2sigmoid", 1, 0, _d2sigmoid,
          [lambda x: _dsigmoid(x) * (1.0 + -6.0 * _dsigmoid(x))],
          "dsigmoid(x)(1 - 2 sigmoid(x)), stable"),
        b("d2tan", 1, 0, _d2tan, [lambda x: _dtan(x) * (-4.0 + 6.0 * _dtan(x))],
          "2 tan(x) dtan(x)"),
        b("sel_ge", 4, 0, _sel_ge,
          [_zero1, _zero1, _of_ab(_ge), _of_ab(lambda a, b_: _gt(b_, a))],
          "x if a >= b, y if a < b (0 if unordered): the tangent of max"),
        b("keep_ge", 3, 0, _keep_ge, [_zero1, _zero1, _of_ab(_ge)],
          "x if a >= b else 0"),
        b("keep_gt", 3, 0, _keep_gt, [_zero1, _zero1, _of_ab(_gt)],
          "x if a > b else 0"),
    ]
    return {r.name: r for r in rows}


BUILTIN_FUNCS: dict[str, Builtin] = _table()

# The builtins whose derivatives are NOT one call times a constant (the tower's end: they
# appear only in second derivatives, so these are third derivatives of user programs).
TOWER_END = frozenset({"d2tanh", "d2sigmoid", "d2tan"})

# The derivative helpers beyond SPEC 2.3's builtins (name -> (arity, nparams)); they are in
# the grammar too, so derivative programs print and re-parse.
EXTRA_BUILTINS: dict[str, tuple[int, int]] = {
    n: (f.arity, f.nparams) for n, f in BUILTIN_FUNCS.items() if n in ast.DERIVATIVE_HELPERS}


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

def _call(fn: str, *args: ast.Expr, params: Sequence[float] = ()) -> ast.Expr:
    return ast.Call(fn, tuple(args), tuple(params))


def _scale(c: float, e: ast.Expr) -> ast.Expr:
    return e if c == 1.0 else ast.Mul(ast.Const(c), e)


def _deriv_template(name: str, xs: Sequence[ast.Expr], params: Sequence[float], k: int) -> ast.Expr:
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
           "step": lambda: ast.Const(0.0), "sign": lambda: ast.Const(0.0),
           "dtanh": lambda: _call("d2tanh", x), "dsigmoid": lambda: _call("d2sigmoid", x),
           "dtan": lambda: _call("d2tan", x),
           # The tower's end: `g (c0 + c1 g)` with g = dtanh etc., one call used twice (x is
           # let-bound by `deriv_expr` when it is not atomic).
           "d2tanh": lambda: _affine_times("dtanh", x, 4.0, -6.0),
           "d2sigmoid": lambda: _affine_times("dsigmoid", x, 1.0, -6.0),
           "d2tan": lambda: _affine_times("dtan", x, -4.0, 6.0)}
    if name in one:
        return one[name]()
    if name == "pow":
        c = float(params[0])
        if c == 0.0:
            return ast.Const(0.0)
        if c == 1.0:
            return ast.Const(1.0)
        if c == 2.0:
            return _scale(2.0, x)
        return _scale(c, _call("pow", x, params=(c - 1.0,)))
    if name in INDICATOR_PARTIALS:
        ind = INDICATOR_PARTIALS[name][k]
        return ast.Const(0.0) if ind is None else _call(ind[0], xs[ind[1]], xs[ind[2]])
    if name in ("ge", "gt"):
        return ast.Const(0.0)
    raise TLError(f"no derivative rule for {name}")


def _affine_times(g: str, x: ast.Expr, c0: float, c1: float) -> ast.Expr:
    """`g(x) * (c0 + c1 * g(x))`."""
    return ast.Mul(_call(g, x), ast.Add(ast.Const(c0), ast.Mul(ast.Const(c1), _call(g, x))))


# Builtins whose partial derivatives are all indicators: per argument, None (a zero partial)
# or (cmp, i, j) for `cmp(args[i], args[j])`, cmp "ge" ([>=]) or "gt" ([>]).  Ties follow
# SPEC 2.3 (max and min pick their first argument).
Indicator = tuple[str, int, int]
INDICATOR_PARTIALS: dict[str, tuple[Indicator | None, ...]] = {
    "max": (("ge", 0, 1), ("gt", 1, 0)),
    "min": (("ge", 1, 0), ("gt", 0, 1)),
    "sel_ge": (None, None, ("ge", 0, 1), ("gt", 1, 0)),
    "keep_ge": (None, None, ("ge", 0, 1)),
    "keep_gt": (None, None, ("gt", 0, 1)),
}


def select_call(name: str, args: Sequence[T], tangents: Sequence[T | None]
                ) -> tuple[str, tuple[T, ...]] | None:
    """`sum_k f_k'(args) * tangents[k]` for a builtin of `INDICATOR_PARTIALS`, as one call
    `(helper, helper_args)`: `keep_ge(a, b, t)` / `keep_gt(a, b, t)` for one live term,
    `sel_ge(a, b, t1, t2)` for two (the two indicators of max and min are complementary).
    The helper is linear in its arguments from position 2 on (the tangents): it is zero
    where they all are.  None when every live term is zero.  Works on any argument type
    (expressions, Tensor-SSA operands).  With a single tangent it is the cotangent
    contribution `f_k' * t` of the adjoint."""
    live = [(ind, t) for ind, t in zip(INDICATOR_PARTIALS[name], tangents)
            if ind is not None and t is not None]
    if not live:
        return None
    if len(live) == 1:
        (cmp, i, j), t = live[0]
        return f"keep_{cmp}", (args[i], args[j], t)
    live.sort(key=lambda lt: lt[0][0])    # "ge" before "gt"
    ((c1, i1, j1), t1), ((c2, i2, j2), t2) = live
    if (c1, c2, i2, j2) != ("ge", "gt", j1, i1):
        raise AssertionError(f"{name}: indicators {live} are not complementary")
    return "sel_ge", (args[i1], args[j1], t1, t2)


def _is_atomic(e: ast.Expr) -> bool:
    """Cost-free to duplicate: a variable, a constant, or an access of a variable."""
    return isinstance(e, (ast.Var, ast.Const)) or (
        isinstance(e, ast.Access) and isinstance(e.e, ast.Var))


def _count_var(e: ast.Node, name: str) -> int:
    """Occurrences of `Var(name)` in `e` (counting shared subterms every time they occur)."""
    if isinstance(e, ast.Var):
        return int(e.name == name)
    return sum(_count_var(c, name) for c in ast.children(e))


def deriv_expr(name: str, args: Sequence[ast.Expr], params: Sequence[float], k: int) -> ast.Expr:
    """The core expression of the k-th partial derivative of `name(args; params)`.

    Arguments are substituted into the formula; a non-atomic argument that the formula uses
    more than once is bound once with a `let`, so the result never duplicates work.
    """
    f = lookup(name, len(args), len(params))
    if not 0 <= k < f.arity:
        raise TLError(f"{name} has no argument {k}")
    avoid = set().union(*(ast.free_names(a) for a in args)) if args else set()
    holes = [ast.fresh("d", avoid) for _ in args]
    template = _deriv_template(name, [ast.Var(h) for h in holes], params, k)
    mapping: dict[str, ast.Expr] = {}
    lets: list[tuple[str, ast.Expr]] = []
    for hole, arg in zip(holes, args):
        if _is_atomic(arg) or _count_var(template, hole) <= 1:
            mapping[hole] = arg
        else:
            lets.append((hole, arg))
    out = ast.subst(template, mapping) if mapping else template
    for hole, arg in reversed(lets):
        out = ast.Let(hole, arg, out)
    return out
