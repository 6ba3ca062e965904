"""The `.tl` surface syntax (SPEC 2.3-2.5): text -> surface AST of `tensorlang.ir.ast`.

Parsing is two steps.  Lark (LALR, contextual lexer, Python-like indentation) parses ONE
generic expression grammar (`grammar.lark`); this module then converts each generic tree in
one of three modes:

* expression -- `Expr` nodes, with the sugar lowering of docs/architecture.md;
* predicate  -- inside `[...]` and under `exists`: comparisons, relation calls, and/or;
* affine     -- access indices, binder sizes, type sizes and relation-call arguments:
                integer combinations of index and size variables, kept as `Affine`.

Using one grammar keeps the parser LALR(1) (an Iverson bracket and an access both start with
`[`, and only the mode tells a predicate from a value) and lets errors name the mode that was
expected.  Every node gets a `Loc`; every failure is a `ParseError` with a location.  No text
is ever evaluated: identifiers come only from the `NAME` terminal of the grammar.

Decisions where SPEC 2.3 is silent:
* `R` is special only in types: a variable may be called `R`.  The keywords are `KEYWORDS`.
* `[n1, ..., nk] t` is the array type with any element type (`[N] (R, R)`, a tensor of
  pairs); `R[n]` is `[n] R`.  `(t1, t2, t3)` nests to the right like tuples.
* Projections are `.0` and `.1` only.  Comparisons do not chain (`i < j < k` is an error).
* In affine positions a product needs one constant factor; any constant affine expression
  counts (`(1 + 1) * i`), not only a literal.
* `-` folds into any operand that is a constant: `-(2)` is `Const(-2.0)`.
* In a product chain a bracket right after `/` is a divisor, not a guard (`a / [p]` is
  `a * recip([p])`); a guard followed by `/` guards the rest: `[p] / a * b` is
  `[p] * (recip(a) * b)`.
* `parse_expr`, `parse_pred`, `parse_affine` and `parse_type` accept line breaks anywhere.
"""
from __future__ import annotations

import functools
import itertools
import re
import threading
from pathlib import Path
from typing import Callable, Iterable, Iterator, NoReturn, Sequence, TypeVar

from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedInput, UnexpectedToken
from lark.lark import PostLex

from tensorlang.ir import ast
from tensorlang.ir.ast import (
    BUILTINS, DERIVED_KINDS, Access, Add, Affine, And, Call, Cmp, Cond, CondAnd, CondCmp,
    CondNot, CondOr, CondPred, Const, Contract, Def, DefCall, DerivedDef, Exists, Expr, Gen,
    IfThen, Iverson, Let, Max, Min, Mul, Or, Pair, Param, PFalse, Pred, Proj, PTrue, RelCall,
    Sum, TPair, TRel, TSize, Type, Var, pred_not,
)
from tensorlang.ir.ast import (
    IndexDiv, IndexRead, QuasiAffine, TIndex, quasi_add, quasi_scale, quasi_term,
)
from tensorlang.syntax.errors import LimitError, Loc, ParseError, Source
from tensorlang.syntax import limits
from tensorlang.syntax.limits import LIMITS_DOC, MAX_DEPTH

T = TypeVar("T")

__all__ = ["parse_module", "parse_expr", "parse_type", "parse_pred", "parse_affine",
           "parse_contract", "KEYWORDS"]

KEYWORDS = frozenset(
    "def return gen sum let in and or not exists true false size rel max min if then else"
    .split())

AFFINE_MSG = ("expected an affine index expression: integer combination of index and size "
              "variables")

_GRAMMAR = Path(__file__).with_name("grammar.lark")
_WORD_CHAR = re.compile(r"[A-Za-z0-9_]")

Item = Tree | Token
T = TypeVar("T")


# ---------------------------------------------------------------------------------------------
# Lexing: indentation


class _LexProblem(Exception):
    """Raised inside the post-lexer; turned into a located ParseError by `_run`."""

    def __init__(self, message: str, line: int, col: int, end_col: int | None = None):
        super().__init__(message)
        self.message, self.line, self.col, self.end_col = message, line, col, end_col


class _Indenter(PostLex):
    """Python-style INDENT/DEDENT from the leading whitespace after each newline.

    Newlines inside brackets are dropped (`implicit_paren` drops them everywhere, for
    `parse_expr` and `parse_type`).  A keyword immediately followed by a word character
    (`x andy`) is rejected: the contextual lexer would otherwise split it into `and y`.
    """

    always_accept = ("_NL",)
    OPEN = frozenset({"LPAR", "LSQB"})
    CLOSE = frozenset({"RPAR", "RSQB"})
    TAB_LEN = 8

    def __init__(self) -> None:
        self.implicit_paren = False
        self.keyword_types: frozenset[str] = frozenset()

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        base = 1 if self.implicit_paren else 0
        depth = base
        levels = [0]
        prev: Token | None = None
        for tok in stream:
            self._check_adjacent(prev, tok)
            prev = tok
            if tok.type == "_NL":
                if depth > 0 or "\n" not in tok.value:  # bracketed, or a lone comment
                    continue
                yield tok
                yield from self._indentation(tok, levels)
                continue
            if tok.type in self.OPEN:
                depth += 1
            elif tok.type in self.CLOSE and depth > base:
                depth -= 1  # an unbalanced ')' is left to the parser to report
            yield tok
        while len(levels) > 1 and prev is not None:
            levels.pop()
            yield Token.new_borrow_pos("_DEDENT", "", prev)

    def _check_adjacent(self, prev: Token | None, tok: Token) -> None:
        if (prev is not None and prev.type in self.keyword_types
                and tok.start_pos == prev.end_pos and _WORD_CHAR.match(tok.value[:1] or " ")):
            word = prev.value + tok.value
            raise _LexProblem(f"unexpected name {word!r}", prev.line, prev.column,
                              prev.column + len(word))

    def _indentation(self, nl: Token, levels: list[int]) -> Iterator[Token]:
        text = nl.value.rsplit("\n", 1)[-1]
        indent = text.count(" ") + text.count("\t") * self.TAB_LEN
        if indent > levels[-1]:
            levels.append(indent)
            yield _at_line_start("_INDENT", text, nl)
            return
        if indent not in levels:
            raise _LexProblem("unindent does not match any outer indentation level",
                              nl.end_line, nl.end_column)
        while indent < levels[-1]:
            levels.pop()
            yield Token.new_borrow_pos("_DEDENT", text, nl)  # "missing return" is at the end


def _at_line_start(kind: str, text: str, nl: Token) -> Token:
    """An INDENT located where the indented line's text starts (not at the newline, which
    ends the line before: "unexpected indentation" must name the line it is on)."""
    return Token(kind, text, start_pos=nl.end_pos, line=nl.end_line, column=nl.end_column,
                 end_line=nl.end_line, end_column=nl.end_column, end_pos=nl.end_pos)


_LOCK = threading.Lock()
_PARSER: Lark | None = None
_INDENTER = _Indenter()
_DISPLAY: dict[str, str] = {}
_NAME_OF: dict[str, str] = {}
_TERMINALS: set[str] = {"_INDENT", "_DEDENT", "$END"}


def _lark() -> Lark:
    """The Lark parser, built once (the post-lexer is stateful: use under `_LOCK`)."""
    global _PARSER
    if _PARSER is None:
        parser = _cached_lark(_GRAMMAR.read_text(), dict(
            parser="lalr", lexer="contextual", start=["module", "expr_start", "type_start"],
            propagate_positions=True, maybe_placeholders=True))
        for t in parser.terminals:
            _TERMINALS.add(t.name)
            if t.pattern.type == "str":
                _NAME_OF[t.pattern.value] = t.name
                _DISPLAY[t.name] = repr(t.pattern.value)
        _INDENTER.keyword_types = frozenset(
            t.name for t in parser.terminals if t.pattern.type == "str" and
            t.pattern.value.isalpha())
        _PARSER = parser
    return _PARSER


def _cached_lark(grammar: str, options: dict) -> Lark:
    """The LALR tables are built once per grammar and Lark version and kept in the private
    cache (`tensorlang/cache.py`: plain data, hash checked), which saves most of the parser's
    start-up time; the post-lexer is not part of what is stored."""
    import hashlib
    import lark
    from lark.grammar import Rule
    from lark.lexer import TerminalDef

    from tensorlang import cache

    key = hashlib.sha256(repr((lark.__version__, grammar, sorted(options.items())))
                         .encode()).hexdigest()[:40]
    data = cache.get_data("parsers", key)
    if isinstance(data, dict):
        return Lark.__new__(Lark)._load(data, postlex=_INDENTER)
    parser = Lark(grammar, postlex=_INDENTER, **options)
    tables, memo = parser.memo_serialize([TerminalDef, Rule])
    tables["options"] = {k: v for k, v in tables["options"].items() if k != "postlex"}
    cache.put_data("parsers", key, {"data": tables, "memo": memo})
    return parser


# ---------------------------------------------------------------------------------------------
# Error messages


_DESCRIBE = {"NAME": "a name", "INT": "an integer", "FLOAT": "a number",
             "PROJ": "a projection", "CMP_OP": "a comparison", "_NL": "end of line",
             "_INDENT": "an indented block", "_DEDENT": "end of the block",
             "$END": "end of input"}


def _terms(*literals: str) -> set[str]:
    return {_NAME_OF[s] for s in literals if s in _NAME_OF}


def _expected_text(expected: Iterable[str]) -> str:
    names = set(expected)
    parts: list[str] = []
    expr_starts = _terms("(", "[", "-", "gen", "sum", "let", "exists", "true", "false") | {
        "NAME", "INT", "FLOAT"}
    type_starts = _terms("R", "size", "rel", "(", "[")
    operators = _terms("+", "-", "*", "/", "**", "and", "or", "[") | {"CMP_OP", "PROJ"}
    if {"NAME", "INT"} <= names:
        parts.append("an expression")
        names -= expr_starts
    elif _terms("R", "size") <= names:
        parts.append("a type")
        names -= type_starts
    if _terms("+", "*") <= names:
        parts.append("an operator")
        names -= operators
    rest = sorted(_DESCRIBE.get(n) or _DISPLAY.get(n) or n for n in names)
    parts.extend(rest)
    if len(parts) > 7:
        parts = parts[:6] + ["..."]
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + " or " + parts[-1]


def _describe_token(tok: Token) -> str:
    if tok.type in ("NAME",):
        return f"name {tok.value!r}"
    if tok.type in ("INT", "FLOAT"):
        return f"number {tok.value}"
    if tok.type in ("PROJ", "CMP_OP"):
        return repr(tok.value)
    if tok.type == "_INDENT":
        return "indentation"
    if tok.type in _DESCRIBE:
        return _DESCRIBE[tok.type]
    if tok.value.isalpha():
        return f"keyword {tok.value!r}"
    return repr(tok.value)


def _parser_expected(err: UnexpectedToken) -> set[str]:
    """The terminals the parser accepts where it stopped.

    Lark's own `expected` is the contextual lexer's set when the lexer raised (it always
    includes the newline token); the parse table of the current state is what we want.
    """
    state = getattr(err, "state", None)
    try:
        table = state.parse_conf.states[state.state_stack[-1]]  # type: ignore[union-attr]
        names = {n for n in table if n in _TERMINALS}
    except (AttributeError, IndexError, KeyError, TypeError):
        names = set(err.expected)
    return {n for n in names if not n.startswith("__IGNORE")}


def _glued_word(src: Source, tok: Token) -> ParseError | None:
    """`Rx` in a type, `2x`: a word the contextual lexer split after a keyword or number."""
    text = src.text
    start = tok.start_pos
    if (not isinstance(start, int) or start <= 0 or not _WORD_CHAR.match(tok.value[:1] or " ")
            or not _WORD_CHAR.match(text[start - 1])):
        return None
    begin = start
    while begin > 0 and _WORD_CHAR.match(text[begin - 1]):
        begin -= 1
    word = text[begin:start] + tok.value
    line = text.count("\n", 0, begin) + 1
    col = begin - (text.rfind("\n", 0, begin) + 1) + 1
    return ParseError(f"unexpected name {word!r}",
                      Loc(src, line, col, col + len(word)))


def _token_loc(src: Source, tok: Token) -> Loc:
    if tok.type == "$END":  # just after the last visible character
        body = src.text.rstrip()
        line = body.count("\n") + 1
        return Loc(src, line, len(body) - (body.rfind("\n") + 1) + 1)
    line = tok.line if tok.line is not None else max(1, src.text.count("\n"))
    col = tok.column if tok.column is not None else 1
    end = tok.end_column if tok.end_line == line and tok.end_column else None
    return Loc(src, line, col, end)


def _lark_error(src: Source, err: Exception) -> ParseError:
    if isinstance(err, UnexpectedToken):
        tok = err.token
        glued = _glued_word(src, tok)
        if glued is not None:
            return glued
        expected = _parser_expected(err)
        if tok.type in ("_DEDENT", "$END") and _NAME_OF.get("return") in expected:
            return ParseError("a def body must end with a 'return' statement",
                              _token_loc(src, tok))
        msg = f"unexpected {_describe_token(tok)}"
        if _NAME_OF.get("def") in expected:
            expected = {_NAME_OF["def"]}  # at the top level only a definition can start
        if expected and tok.type != "_INDENT":
            msg += f", expected {_expected_text(expected)}"
        return ParseError(msg, _token_loc(src, tok))
    if isinstance(err, UnexpectedCharacters):
        pos = err.pos_in_stream
        char = src.text[pos] if pos is not None and 0 <= pos < len(src.text) else err.char
        return ParseError(f"unexpected character {char!r}",
                          Loc(src, err.line, err.column))
    if isinstance(err, UnexpectedInput):
        return ParseError("unexpected input", Loc(src, err.line or 1, err.column or 1))
    return ParseError(f"syntax error: {err}", Loc(src, 1, 1))


def _run(text: str, filename: str, start: str) -> tuple[Source, Tree]:
    """Parse `text` from `start`; every failure becomes a located ParseError."""
    src = Source(filename, text)
    with _LOCK:
        parser = _lark()
        _INDENTER.implicit_paren = start != "module"
        try:
            return src, parser.parse(text + "\n", start=start)
        except _LexProblem as p:
            raise ParseError(p.message, Loc(src, p.line, p.col, p.end_col)) from None
        except LarkError as err:
            raise _lark_error(src, err) from None
        except RecursionError:
            raise _too_deep(src) from None


# ---------------------------------------------------------------------------------------------
# Tree conversion


def _is(t: Item, *names: str) -> bool:
    return isinstance(t, Tree) and t.data in names


def _unparen(t: Item) -> Item:
    while _is(t, "paren"):
        t = t.children[0]
    return t


class _Converter:
    """Generic Lark tree -> surface AST, in expression, predicate or affine mode."""

    def __init__(self, src: Source):
        self.src = src

    # -- locations and errors --------------------------------------------------------------

    def loc(self, t: Item) -> Loc | None:
        if isinstance(t, Token):
            return _token_loc(self.src, t) if t.line is not None else None
        m = t.meta
        if m.empty:
            return None
        return Loc(self.src, m.line, m.column, m.end_column if m.end_line == m.line else None)

    def span(self, first: Item, last: Item) -> Loc | None:
        a, b = self.loc(first), self.loc(last)
        if a is None or b is None:
            return a
        tail = last if isinstance(last, Token) else last.meta
        end_line = getattr(tail, "end_line", None)
        return Loc(self.src, a.line, a.col,
                   getattr(tail, "end_column", None) if end_line == a.line else None)

    def fail(self, message: str, t: Item) -> NoReturn:
        raise ParseError(message, self.loc(t))

    def name(self, tok: Item) -> str:
        assert isinstance(tok, Token)
        if tok.value in KEYWORDS:
            self.fail(f"{tok.value!r} is a keyword and cannot be used as a name", tok)
        return str(tok.value)

    # -- expression mode -------------------------------------------------------------------

    def expr(self, t: Item) -> Expr:
        t = _unparen(t)
        assert isinstance(t, Tree)
        method = getattr(self, f"e_{t.data}", None)
        if method is None:
            self._not_an_expr(t)
        out = method(t)
        return out.with_loc(self.loc(t))

    def _not_an_expr(self, t: Tree) -> NoReturn:
        if t.data in ("cmp", "and_", "or_", "true", "false", "exists"):
            self.fail("a predicate is not a value: write it as an Iverson bracket [p]", t)
        self.fail("expected an expression", t)

    def e_name(self, t: Tree) -> Expr:
        return Var(self.name(t.children[0]), loc=self.loc(t))

    def e_int(self, t: Tree) -> Expr:
        return Const(float(t.children[0]), loc=self.loc(t))

    e_float = e_int

    def e_add(self, t: Tree) -> Expr:
        """`a + b - c ...`, converted along the left spine without recursion (long sums)."""
        spine: list[Tree] = []
        node: Item = t
        while _is(node, "add", "sub"):
            assert isinstance(node, Tree)
            spine.append(node)
            node = node.children[0]
        acc = self.expr(node)
        for n in reversed(spine):
            loc = self.loc(n)
            rhs = self.expr(n.children[1])
            if n.data == "sub":  # a - b  ->  a + (-1.0) * b
                rhs = Mul(Const(-1.0, loc=loc), rhs, loc=loc)
            acc = Add(acc, rhs, loc=loc).with_loc(loc)
        return acc

    e_sub = e_add

    def e_neg(self, t: Tree) -> Expr:
        x = self.expr(t.children[0])
        loc = self.loc(t)
        if isinstance(x, Const):
            return Const(-x.value, loc=loc)
        return Mul(Const(-1.0, loc=loc), x, loc=loc)

    def e_mul(self, t: Tree) -> Expr:
        return self.chain(t)

    e_div = e_mul

    def e_floordiv(self, t: Tree) -> Expr:
        self.fail("`//` and `%` are index operators: use them inside an index (`x[i // 2]`) "
                  "or a comparison (`[i % 2 == 0]`)", t)

    e_mod = e_floordiv

    def chain(self, t: Tree) -> Expr:
        """A product chain: a bare `[p]` guards the product of everything to its right."""
        items: list[tuple[str, Item]] = []
        node: Item = t
        while _is(node, "mul", "div"):
            assert isinstance(node, Tree)
            items.append((node.data, node.children[1]))
            node = node.children[0]
        items.append(("mul", node))
        items.reverse()
        guards = [k for k, (op, f) in enumerate(items) if op == "mul" and _is(f, "bracket")]
        tail: Expr | None = None
        bounds = guards + [len(items)]
        for g, end in reversed(list(zip(guards, bounds[1:]))):
            seg = self.product(items[g + 1:end])
            inner = seg if tail is None else (tail if seg is None else
                                              Mul(seg, tail, loc=self.span(items[g + 1][1],
                                                                           items[-1][1])))
            bracket = items[g][1]
            assert isinstance(bracket, Tree)
            pred = self.pred(bracket.children[0])
            loc = self.span(bracket, items[-1][1])
            tail = Iverson(pred, inner if inner is not None else Const(1.0, loc=loc), loc=loc)
        head = self.product(items[:guards[0]] if guards else items)
        if tail is None:
            assert head is not None
            return head
        return tail if head is None else Mul(head, tail, loc=self.loc(t))

    def product(self, items: Sequence[tuple[str, Item]]) -> Expr | None:
        """Left-associated product of chain items (`/ x` is `* recip(x)`)."""
        acc: Expr | None = None
        for op, f in items:
            x = self.expr(f)
            if op == "div":
                x = Call("recip", (x,), (), loc=self.loc(f))
            acc = x if acc is None else Mul(acc, x, loc=self.span(items[0][1], f))
        return acc

    def e_pow(self, t: Tree) -> Expr:
        base, exponent = t.children
        return self.power(self.expr(base), exponent, self.loc(t))

    def power(self, base: Expr, exponent: Item, loc: Loc | None) -> Expr:
        """`x ** c` for a constant c is the builtin `pow`; with a real exponent y (SPEC 12)
        it is `exp(y * log(x))`, defined for x > 0 (docs/tutorial.md), whose derivative is
        `y x^(y-1) dx + log(x) x^y dy`."""
        try:
            x = self.expr(exponent)
        except ParseError:
            x = None
        if isinstance(x, Const):
            return Call("pow", (base,), (x.value,), loc=loc)
        y = self.expr(exponent)
        return Call("exp", (Mul(y, Call("log", (base,), (), loc=loc), loc=loc),), (), loc=loc)

    def constant(self, t: Item, message: str) -> float:
        try:
            x = self.expr(t)
        except ParseError:
            x = None
        if not isinstance(x, Const):
            self.fail(message, t)
        return x.value

    def e_access(self, t: Tree) -> Expr:
        e, idx = t.children
        assert isinstance(idx, Tree)
        return Access(self.expr(e), tuple(self.index(a) for a in idx.children),
                      loc=self.loc(t))

    def e_proj(self, t: Tree) -> Expr:
        e, tok = t.children
        k = tok[1:]
        if k not in ("0", "1"):
            self.fail("a projection is .0 or .1 (n-tuples nest to the right)", tok)
        return Proj(self.expr(e), int(k), loc=self.loc(t))

    def e_call(self, t: Tree) -> Expr:
        fn_tok, arg_list = t.children
        fn = self.name(fn_tok)
        raw = list(arg_list.children) if isinstance(arg_list, Tree) else []
        loc = self.loc(t)
        if fn == "where":
            if len(raw) != 3:
                self.fail(f"where() takes 3 arguments (condition, then, else), got {len(raw)}",
                          t)
            return IfThen(self.cond(raw[0]), self.expr(raw[1]), self.expr(raw[2]), loc=loc)
        if fn == "pow" and len(raw) == 2:
            return self.power(self.expr(raw[0]), raw[1], loc)
        if fn not in BUILTINS:
            return DefCall(fn, tuple(self.expr(a) for a in raw), loc=loc)
        return self.builtin_call(fn, raw, t)

    def e_max_call(self, t: Tree) -> Expr:
        return self.builtin_call("max", self.args(t.children[0]), t)

    def e_min_call(self, t: Tree) -> Expr:
        return self.builtin_call("min", self.args(t.children[0]), t)

    @staticmethod
    def args(arg_list: Item) -> list[Item]:
        return list(arg_list.children) if isinstance(arg_list, Tree) else []

    def builtin_call(self, fn: str, raw: list[Item], t: Tree) -> Expr:
        loc = self.loc(t)
        n_args, n_params = BUILTINS[fn]
        if len(raw) != n_args + n_params:
            want = n_args + n_params
            self.fail(f"{fn}() takes {want} argument{'s' if want != 1 else ''}, "
                      f"got {len(raw)}", t)
        args = tuple(self.expr(a) for a in raw[:n_args])
        params = tuple(self.constant(p, f"argument {n_args + k + 1} of {fn}() must be a "
                                        "numeric constant")
                       for k, p in enumerate(raw[n_args:]))
        return Call(fn, args, params, loc=loc)

    def e_tuple(self, t: Tree) -> Expr:
        parts = [self.expr(c) for c in t.children]
        loc = self.loc(t)
        out = parts[-1]
        for p in reversed(parts[:-1]):
            out = Pair(p, out, loc=loc)
        return out

    def e_bracket(self, t: Tree) -> Expr:
        loc = self.loc(t)
        return Iverson(self.pred(t.children[0]), Const(1.0, loc=loc), loc=loc)

    def e_literal(self, t: Tree) -> Expr:
        """`[e0, ..., en-1]` (SPEC 12) is `gen k:n. [k == 0] * e0 + ... + [k == n-1] * en-1`
        (the additions have disjoint supports, so they cost nothing)."""
        elems = [self.expr(c) for c in t.children]
        loc = self.loc(t)
        avoid = set().union(*(ast.free_names(e) for e in elems))
        k = ast.fresh("lit", avoid, itertools.count())
        body: Expr | None = None
        for m, e in reversed(list(enumerate(elems))):
            term = Iverson(Cmp("==", Affine.var(k), Affine.lit(m)), e, loc=loc)
            body = term if body is None else Add(term, body, loc=loc)
        assert body is not None
        return Gen(k, Affine.lit(len(elems)), body, loc=loc)

    def e_max_red(self, t: Tree) -> Expr:
        return self.binder(Max, t, self.expr)

    def e_min_red(self, t: Tree) -> Expr:
        return self.binder(Min, t, self.expr)

    def e_if_(self, t: Tree) -> Expr:
        c, a, b = t.children
        return IfThen(self.cond(c), self.expr(a), self.expr(b), loc=self.loc(t))

    # -- condition mode (`if` and `where`) -------------------------------------------------

    def cond(self, t: Item) -> Cond:
        t = _unparen(t)
        assert isinstance(t, Tree)
        loc = self.loc(t)
        if t.data in ("and_", "or_"):
            a, b = (self.cond(c) for c in t.children)
            return (CondAnd if t.data == "and_" else CondOr)(a, b, loc=loc)
        if t.data == "not_":
            return CondNot(self.cond(t.children[0]), loc=loc)
        if t.data == "cmp":
            a_t, op, b_t = t.children
            e1, e2 = self.maybe(self.expr, a_t), self.maybe(self.expr, b_t)
            a1, a2 = self.maybe(self.affine, a_t), self.maybe(self.affine, b_t)
            for e, a, side in ((e1, a1, a_t), (e2, a2, b_t)):
                if e is None and a is None:
                    # `i % 2 == 0`, `i // 2 < j`: only an index reading, so an index predicate
                    p = self.maybe(self.p_cmp, t)
                    if p is None:
                        self.expr(side)   # raises its error
                    return CondPred(p.with_loc(loc), loc=loc)
            return CondCmp(str(op), e1, e2, a1, a2, loc=loc)
        if t.data in ("true", "false", "exists") or (
                t.data == "call" and str(t.children[0]) not in BUILTINS):
            return CondPred(self.pred(t), loc=loc)
        self.fail("expected a condition: comparisons (< <= > >= == !=) of indices or of real "
                  "values, relation calls, true, false, exists, combined with and, or, not", t)

    @staticmethod
    def maybe(convert: Callable[[Item], T], t: Item) -> T | None:
        try:
            return convert(t)
        except ParseError:
            return None

    def e_gen(self, t: Tree) -> Expr:
        return self.binder(Gen, t, self.expr)

    def e_sum(self, t: Tree) -> Expr:
        return self.binder(Sum, t, self.expr)

    def e_let(self, t: Tree) -> Expr:
        name, value, body = t.children
        return Let(self.name(name), self.expr(value), self.expr(body), loc=self.loc(t))

    def binder(self, cls: type, t: Tree, convert: Callable[[Item], object]) -> object:
        """`gen i:N, j:M. e` -> nested binders (the same for sum and exists)."""
        binds, body = t.children
        assert isinstance(binds, Tree)
        heads = [(self.name(b.children[0]), self.affine(b.children[1]))
                 for b in binds.children]
        out = convert(body)
        loc = self.loc(t)
        for idx, size in reversed(heads):
            out = cls(idx, size, out, loc=loc)
        return out

    # -- predicate mode --------------------------------------------------------------------

    def pred(self, t: Item) -> Pred:
        t = _unparen(t)
        assert isinstance(t, Tree)
        method = getattr(self, f"p_{t.data}", None)
        if method is None:
            self.fail("expected a predicate: a comparison, a relation call, true, false, "
                      "and, or, exists", t)
        return method(t).with_loc(self.loc(t))

    def p_true(self, t: Tree) -> Pred:
        return PTrue(loc=self.loc(t))

    def p_false(self, t: Tree) -> Pred:
        return PFalse(loc=self.loc(t))

    def p_and_(self, t: Tree) -> Pred:
        a, b = t.children
        return And(self.pred(a), self.pred(b), loc=self.loc(t))

    def p_not_(self, t: Tree) -> Pred:
        p = pred_not(self.pred(t.children[0]))
        if p is None:
            self.fail("'not' of a relation call or of exists cannot be written as an index "
                      "predicate (use if ... then ... else)", t)
        return p

    def p_or_(self, t: Tree) -> Pred:
        a, b = t.children
        return Or(self.pred(a), self.pred(b), loc=self.loc(t))

    def p_cmp(self, t: Tree) -> Pred:
        a_t, op, b_t = t.children
        return ast.cmp_pred(str(op), self.index(a_t), self.index(b_t), self.loc(t))

    def p_call(self, t: Tree) -> Pred:
        name, arg_list = t.children
        raw = list(arg_list.children) if isinstance(arg_list, Tree) else []
        return RelCall(self.name(name), tuple(self.affine(a) for a in raw), loc=self.loc(t))

    def p_exists(self, t: Tree) -> Pred:
        return self.binder(Exists, t, self.pred)  # type: ignore[return-value]

    # -- affine mode -----------------------------------------------------------------------

    def affine(self, t: Item) -> Affine:
        out = self.index(t)
        if not isinstance(out, Affine):
            self.fail(AFFINE_MSG + " (`//`, `%` and index arrays are allowed only in the "
                      "indices of an access and in comparisons)", t)
        return out

    def index(self, t: Item) -> Affine | QuasiAffine:
        """An index expression: affine, or quasi-affine (`e // c`, `e % c`, `idx[i]`, SPEC 12)
        where the caller allows it (accesses and comparisons)."""
        t = _unparen(t)
        assert isinstance(t, Tree)
        kind = t.data
        out: Affine | QuasiAffine
        if kind == "name":
            out = Affine.var(self.name(t.children[0]))
        elif kind == "int":
            out = Affine.lit(self.integer(t.children[0]))
        elif kind in ("add", "sub"):
            out = self.index_sum(t)
        elif kind == "neg":
            out = quasi_scale(self.index(t.children[0]), -1)
        elif kind == "mul":
            a, b = (self.index(c) for c in t.children)
            if isinstance(a, Affine) and a.is_const():
                out = quasi_scale(b, a.const)
            elif isinstance(b, Affine) and b.is_const():
                out = quasi_scale(a, b.const)
            else:
                self.fail(AFFINE_MSG + " (a product needs an integer constant factor)", t)
        elif kind in ("floordiv", "mod"):
            num = self.index(t.children[0])
            den = self.affine(t.children[1])
            if den.is_const() and den.const <= 0:
                self.fail(f"the divisor of {'//' if kind == 'floordiv' else '%'} must be a "
                          "positive integer constant or a size", t.children[1])
            out = quasi_term(IndexDiv("//" if kind == "floordiv" else "%", num, den,
                                      loc=self.loc(t)))
        elif kind == "access" and _is(_unparen(t.children[0]), "name"):
            target, args = t.children
            assert isinstance(args, Tree)
            name = self.name(_unparen(target).children[0])  # type: ignore[union-attr]
            out = quasi_term(IndexRead(name, tuple(self.index(a) for a in args.children),
                                       loc=self.loc(t)))
        else:
            self.fail(AFFINE_MSG, t)
        return out.with_loc(self.loc(t))

    def index_sum(self, t: Tree) -> Affine | QuasiAffine:
        spine: list[Tree] = []
        node: Item = t
        while _is(node, "add", "sub"):
            assert isinstance(node, Tree)
            spine.append(node)
            node = node.children[0]
        acc = self.index(node)
        for n in reversed(spine):
            rhs = self.index(n.children[1])
            acc = quasi_add(acc, rhs if n.data == "add" else quasi_scale(rhs, -1))
        return acc

    def integer(self, tok: Item) -> int:
        try:
            return int(tok)
        except ValueError:  # beyond Python's digit limit for int()
            self.fail("integer literal too large", tok)

    # -- types -----------------------------------------------------------------------------

    def type(self, t: Item) -> Type:
        assert isinstance(t, Tree)
        loc = self.loc(t)
        kind, ch = t.data, t.children
        if kind == "t_real":
            return ast.REAL
        if kind == "t_tensor":
            return ast.tensor(self.sizes(ch[0])).with_loc(loc)
        if kind == "t_arr":
            return ast.tensor(self.sizes(ch[0]), self.type(ch[1])).with_loc(loc)
        if kind == "t_tuple":
            parts = [self.type(c) for c in ch]
            out = parts[-1]
            for p in reversed(parts[:-1]):
                out = TPair(p, out, loc=loc)
            return out
        if kind == "t_size":
            return TSize(loc=loc)
        if kind == "t_rel":
            return TRel(tuple(self.sizes(ch[0])) if ch[0] is not None else (), loc=loc)
        if kind == "t_index":  # `Z[N]` (entries' range inferred from the uses) or `Z[N] in V`
            shape = tuple(self.sizes(ch[0]))
            if ch[1] is None:
                return TIndex(shape, True, loc=loc)
            return TIndex(shape + (self.affine(ch[1]),), loc=loc)
        self.fail("expected a type", t)

    def sizes(self, t: Item) -> list[Affine]:
        assert isinstance(t, Tree)
        return [self.affine(c) for c in t.children]

    # -- definitions -----------------------------------------------------------------------

    def module(self, t: Tree) -> list[Def | DerivedDef]:
        out: list[Def | DerivedDef] = []
        for d in t.children:
            assert isinstance(d, Tree)
            out.append(self.fundef(d) if d.data == "fundef" else self.derived(d))
        return out

    def fundef(self, t: Tree) -> Def:
        name_tok, params_t, ret_t, requires_t, body_t = t.children
        params = []
        if isinstance(params_t, Tree):
            for p in params_t.children:
                assert isinstance(p, Tree)
                params.append(Param(self.name(p.children[0]), self.type(p.children[1]),
                                    loc=self.loc(p)).with_loc(self.loc(p)))
        ret = self.type(ret_t) if ret_t is not None else None
        assert isinstance(body_t, Tree)
        *stmts, ret_stmt = body_t.children
        assert isinstance(ret_stmt, Tree)
        body = self.expr(ret_stmt.children[0])
        for s in reversed(stmts):
            body = self.statement(s, body)
        return Def(self.name(name_tok), tuple(params), ret, body, self.contract(requires_t),
                   loc=self.loc(t)).with_loc(self.loc(t))

    def contract(self, t: Item | None) -> Contract | None:
        """`requires cost <= BOUND` (also `adds`, `muls`, `calls`; `<`): see docs/testing.md."""
        if t is None:
            return None
        assert isinstance(t, Tree)
        return self.contract_clause(t.children[0], self.loc(t))

    def contract_clause(self, clause: Item, loc: Loc | None) -> Contract:
        """`cost <= BOUND` (the clause after `requires`)."""
        clause = _unparen(clause)
        if not _is(clause, "cmp"):
            self.fail("a contract reads `requires cost <= BOUND` (cost, adds, muls or calls; "
                      "<= or <)", clause)
        assert isinstance(clause, Tree)
        lhs, op, rhs = clause.children
        lhs = _unparen(lhs)
        measure = str(lhs.children[0]) if _is(lhs, "name") else ""
        if measure not in Contract.MEASURES:
            self.fail(f"a contract bounds one of {', '.join(Contract.MEASURES)} (the def's own "
                      "cost): write `requires cost <= BOUND`", lhs)
        if str(op) not in Contract.OPS:
            self.fail(f"a contract is an upper bound: use <= or <, not {str(op)!r}", op)
        return Contract(measure, str(op), self.expr(rhs), loc=loc).with_loc(loc)

    def statement(self, s: Item, body: Expr) -> Expr:
        """`name = e` or `name[i:n, j:m] = e` (`let name = gen i:n. gen j:m. e`)."""
        assert isinstance(s, Tree)
        loc = self.loc(s)
        if s.data == "assign":
            name, value_t = s.children
            value = self.expr(value_t)
        else:
            name, binds, value_t = s.children
            value = self.binder(Gen, Tree("gen", [binds, value_t], s.meta), self.expr)
        return Let(self.name(name), value, body, loc=loc).with_loc(loc)

    def derived(self, t: Tree) -> DerivedDef:
        name, kind, fn, *wrt, requires_t = t.children
        if kind not in DERIVED_KINDS:
            self.fail(f"unknown derived function {str(kind)!r}: expected one of "
                      f"{', '.join(DERIVED_KINDS)}", kind)
        loc = self.loc(t)
        return DerivedDef(self.name(name), str(kind), self.name(fn),
                          tuple(self.name(w) for w in wrt), self.contract(requires_t),
                          loc=loc).with_loc(loc)


# ---------------------------------------------------------------------------------------------
# Public API


def _convert(src: Source, fn: Callable[[_Converter], object]) -> object:
    try:
        return fn(_Converter(src))
    except RecursionError:
        raise _too_deep(src) from None


def _deep(parse: Callable[[str, str], T]) -> Callable[[str, str], T]:
    """A public parse function, run on the deep worker (`limits.run`): the tree conversion
    recurses as deep as the source nests."""
    @functools.wraps(parse)
    def run(text: str, filename: str = "<input>") -> T:
        return limits.run(parse, text, filename)
    return run


def _too_deep(src: Source) -> LimitError:
    """Nesting beyond what the parser's stack holds (far beyond `MAX_DEPTH`): reported at
    the deepest bracket, or at the longest run of prefix operators."""
    depth, best, run, best_run, at, run_at = 0, 0, 0, 0, 0, 0
    for k, ch in enumerate(src.text):
        if ch in "([":
            depth += 1
            if depth > best:
                best, at = depth, k
        elif ch in ")]":
            depth -= 1
        run = run + 1 if ch in "-+" or (run and ch == " ") else 0
        if run > best_run:
            best_run, run_at = run, k - run + 1
    at = run_at if best_run > best else at
    line = src.text.count("\n", 0, at) + 1
    col = at - (src.text.rfind("\n", 0, at) + 1) + 1
    return LimitError(f"expression nested too deeply: more than {MAX_DEPTH:,} levels of "
                      f"nesting ({LIMITS_DOC})", Loc(src, line, col))


@_deep
def parse_module(text: str, filename: str = "<input>") -> list[Def | DerivedDef]:
    """The definitions of a `.tl` file, as surface AST (see `tensorlang.check.elaborate`)."""
    src, tree = _run(text, filename, "module")
    return _convert(src, lambda c: c.module(tree))  # type: ignore[return-value]


@_deep
def parse_expr(text: str, filename: str = "<input>") -> Expr:
    """One expression (newlines allowed anywhere)."""
    src, tree = _run(text, filename, "expr_start")
    return _convert(src, lambda c: c.expr(tree.children[0]))  # type: ignore[return-value]


@_deep
def parse_pred(text: str, filename: str = "<input>") -> Pred:
    """One predicate, as written inside `[...]`."""
    src, tree = _run(text, filename, "expr_start")
    return _convert(src, lambda c: c.pred(tree.children[0]))  # type: ignore[return-value]


@_deep
def parse_affine(text: str, filename: str = "<input>") -> Affine:
    """One affine index expression."""
    src, tree = _run(text, filename, "expr_start")
    return _convert(src, lambda c: c.affine(tree.children[0]))  # type: ignore[return-value]


@_deep
def parse_contract(text: str, filename: str = "<input>") -> Contract:
    """A contract clause without `requires`: `cost <= 4 * cost(f) + N` (docs/testing.md)."""
    src, tree = _run(text, filename, "expr_start")
    return _convert(src, lambda c: c.contract_clause(  # type: ignore[return-value]
        tree.children[0], c.loc(tree.children[0])))


@_deep
def parse_type(text: str, filename: str = "<input>") -> Type:
    """A type: `R`, `R[n, m]`, `[n] t`, `(t1, t2)`, `size`, `rel(n, m)`."""
    src, tree = _run(text, filename, "type_start")
    return _convert(src, lambda c: c.type(tree.children[0]))  # type: ignore[return-value]
