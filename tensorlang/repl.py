"""The tensorlang REPL (SPEC 9).

`Repl.handle(line) -> str` is the whole session logic, independent of any terminal: it takes
one input line and returns what to print.  `run()` drives it with prompt_toolkit (history,
completion) on a terminal, or reads lines from stdin when stdin is not a TTY.

Input forms:
    def f(...) -> t:        a definition; continues until a blank line
    def g = grad(f, x)      a derived definition (one line)
    e                       an expression, evaluated with the bound values
    :load FILE              load the definitions of a .tl file
    :set x = VALUE          VALUE: a number, rand(N, M), load("x.npy"), or an expression
    :type e | :type f       the type of an expression, the signature of a function
    :show f [STAGE] [unicode]
    :cost f N=100 ... [stage=STAGE]
    :vars  :help  :quit
"""
from __future__ import annotations

import os
import re
import shlex
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Iterable, TextIO

import numpy as np

from tensorlang import api, pipeline
from tensorlang.ir import ast
from tensorlang.ir.ast import Affine, Param, TRel, TSize, Type
from tensorlang.syntax.errors import Loc, ResourceError, TLError
from tensorlang.syntax import limits
from tensorlang.syntax.parser import KEYWORDS as GRAMMAR_KEYWORDS

COMMANDS = (":load", ":set", ":type", ":show", ":cost", ":vars", ":help", ":quit")
KEYWORDS = (*sorted(GRAMMAR_KEYWORDS), "R", "where", "rand", "load", *ast.DERIVED_KINDS)
HELP = """\
def f(N: size, x: R[N]) -> R:   define a function (end the definition with a blank line)
    return sum i:N. x[i]
def g = grad(f, x)              a derived function
EXPR                            evaluate an expression with the bound values
:load FILE                      load the definitions of a .tl file
:set x = VALUE                  bind x: a number, rand(N, M), load("x.npy") or an expression
                                (rand(N, M) may also appear inside expressions)
:type EXPR | :type f            the type of an expression, the signature of a function
:show f [STAGE] [unicode]       f at a pipeline stage (source parsed letlift pairelim
                                genpush ssa derive simplified), or its kernel (numba cuda)
:cost f N=100 ... [stage=S]     exact operation counts (sizes, relations from bound names)
:vars                           the bound values and the functions defined
:help                           this text
:quit                           leave (also Ctrl-D)"""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT = re.compile(r"\d+")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?)")
_DERIVED_LINE = re.compile(r"def\s+[A-Za-z_][A-Za-z0-9_]*\s*=")
_RAND = re.compile(r"rand\s*\((.*)\)", re.DOTALL)
_RAND_CALL = re.compile(r"(?<![A-Za-z0-9_])rand\s*\(")
_LOAD = re.compile(r"load\s*\(\s*(\"[^\"]*\"|'[^']*')\s*\)")


@dataclass
class Binding:
    """A value bound with `:set`, with the type it has in expressions.

    `type` is None for an integer, which is a size where an expression uses it as one and a
    real where it uses it as a value."""

    value: Any
    type: Type | None


class Repl:
    """The REPL's state (definitions, bound values) and its line handler."""

    def __init__(self, seed: int | None = None) -> None:
        self.defs: list[Any] = []  # surface Defs / DerivedDefs, in definition order
        self.module: api.Module = api.Module({}, filename="<repl>")
        self.values: dict[str, Binding] = {}
        self.pending: list[str] | None = None
        self.done = False
        self.errors = 0  # errors reported so far (a piped session exits 1 if any)
        # `rand` differs from session to session unless a seed is given (`tl repl --seed`)
        self.rng = np.random.default_rng(seed)

    # -- the line handler ------------------------------------------------------------------

    @property
    def prompt(self) -> str:
        return "... " if self.pending is not None else "tl> "

    def handle(self, line: str) -> str:
        """Process one input line; return the text to print ("" for nothing)."""
        try:
            return limits.run(self._handle, line.rstrip("\r\n"))  # deep programs: syntax/limits.py
        except TLError as err:
            self.errors += 1
            return str(err)
        except KeyboardInterrupt:
            self.pending = None
            return "interrupted"
        except MemoryError as err:  # an allocation the memory estimate did not foresee
            self.errors += 1
            return str(ResourceError(f"out of memory: {err or 'an allocation failed'} (lower "
                                     f"the sizes, or set TENSORLANG_MAX_MEMORY)"))
        except Exception as err:  # noqa: BLE001 -- the session must survive its own bugs
            self.errors += 1
            if os.environ.get("TL_DEBUG"):
                traceback.print_exc()
            return f"internal error: {type(err).__name__}: {err} (a bug in tensorlang)"

    def finish(self) -> str:
        """End of input: complete a definition still being typed."""
        if self.pending is None:
            return ""
        return self.handle("")

    def _handle(self, line: str) -> str:
        if self.pending is not None:
            if line.strip():
                self.pending.append(line)
                return ""
            text, self.pending = "\n".join(self.pending), None
            return self._define(text, "<repl>")
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            return ""
        if stripped.startswith(":"):
            return self._command(stripped)
        if stripped.startswith("def ") and not _DERIVED_LINE.match(stripped):
            self.pending = [line]
            return ""
        if stripped.startswith("def "):
            return self._define(stripped, "<repl>")
        return api_format(self._evaluate(stripped))

    # -- definitions -----------------------------------------------------------------------

    def _define(self, text: str, filename: str, verb: str = "defined") -> str:
        from tensorlang.syntax import parser
        from tensorlang.check import typecheck
        new = parser.parse_module(text, filename)
        names = {d.name for d in new}
        combined = [d for d in self.defs if d.name not in names] + list(new)
        checked = typecheck.check_module(combined, filename, derive=pipeline.derived_core)
        self.defs = combined
        self.module = api.module_from_checked(checked, "<repl>")
        lines = [f"{verb} {self._describe(self.module[d.name])}" for d in new]
        lines += [_warning_text(w) for w in self.module.warnings if _in_text(w, text)]
        return "\n".join(lines)

    @staticmethod
    def _describe(fn: api.Function) -> str:
        extra = f" = {fn.describe()}" if isinstance(fn, api.DerivedFunction) else ""
        return fn.signature() + extra

    # -- expressions -----------------------------------------------------------------------

    def _expr_function(self, text: str) -> tuple[api.Function, dict[str, Any]]:
        """The expression as a function of the bound names it uses, and their values."""
        text, drawn = self._draw_rands(text)
        try:
            return self._expr_function_of(text)
        finally:
            for name in drawn:
                self.values.pop(name, None)

    def _draw_rands(self, text: str) -> tuple[str, list[str]]:
        """`rand(N, M)` in an expression: each call drawn now and bound to a fresh name."""
        drawn: list[str] = []
        while True:
            m = _RAND_CALL.search(text)
            if m is None:
                return text, drawn
            depth, end = 0, m.end() - 1
            for end in range(m.end() - 1, len(text)):
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                if depth == 0:
                    break
            if depth != 0:
                raise TLError(f"rand: unbalanced parentheses in {text[m.start():]!r}")
            name = _fresh_name("rand", set(self.values) | set(self.module) |
                               set(_NAME.findall(text)))
            self.values[name] = self._rand(text[m.end():end])
            drawn.append(name)
            text = text[:m.start()] + name + text[end + 1:]

    def _expr_function_of(self, text: str) -> tuple[api.Function, dict[str, Any]]:
        from tensorlang.syntax import parser
        from tensorlang.check import typecheck
        e = _parse_expr(parser, text, "<repl>")
        free = ast.free_names(e)
        var_names = ast.free_vars(e)
        rel_names = {n.name for n in ast.walk(e)
                     if isinstance(n, (ast.RelCall, ast.IndexRead))} & free
        size_names = set(free - var_names - rel_names)
        # A bound integer passed straight to a def (`qform(N, x, A)`) is a size argument.
        size_names |= {a.name for n in ast.walk(e) if isinstance(n, ast.DefCall)
                       for a in n.args if isinstance(a, ast.Var)
                       and a.name in self.values and self.values[a.name].type is None}
        params: dict[str, Param] = {}
        args: dict[str, Any] = {}
        for name in sorted(var_names | rel_names):
            b = self.values.get(name)
            if b is None:
                continue  # the checker reports the unbound name with its location
            if b.type is not None:
                params[name] = Param(name, b.type)
                args[name] = b.value
                size_names |= _type_sizes(b.type)
        for name in sorted(var_names - size_names):  # integers used as values are reals
            b = self.values.get(name)
            if b is not None and b.type is None:
                params[name] = Param(name, ast.REAL)
                args[name] = float(b.value)
        sizes: list[Param] = []
        for name in sorted(size_names):
            b = self.values.get(name)
            if b is not None and b.type is None:
                sizes.append(Param(name, TSize()))
                args[name] = int(b.value)
            elif name in self.values or any(name in _type_sizes(p.type)
                                            for p in params.values()):
                raise TLError(f"{name} is used as a size but is not bound to an integer "
                              f"(:set {name} = INT)")
        wrapper_name = _fresh_name("it", {d.name for d in self.defs} | free)
        # Located in the typed line: nodes are hash-consed, and a subterm also written in a
        # loaded file keeps that file's location, which the checker must not report here.
        where = Loc(e.loc.source, 1, 1) if e.loc is not None else None
        d = ast.Def(wrapper_name, tuple(sizes) + tuple(params.values()), None, e, loc=where)
        checked = typecheck.check_module(self.defs + [d], "<repl>",
                                          derive=pipeline.derived_core)
        return api.module_from_checked(checked, "<repl>")[wrapper_name], args

    def _evaluate(self, text: str) -> Any:
        fn, args = self._expr_function(text)
        return fn.interpret(**args)

    # -- commands --------------------------------------------------------------------------

    def _command(self, line: str) -> str:
        cmd, _, rest = line.partition(" ")
        rest = rest.strip()
        handlers = {":load": self._cmd_load, ":set": self._cmd_set, ":type": self._cmd_type,
                    ":show": self._cmd_show, ":cost": self._cmd_cost, ":vars": self._cmd_vars,
                    ":help": lambda _: HELP, ":quit": self._cmd_quit, ":q": self._cmd_quit}
        handler = handlers.get(cmd)
        if handler is None:
            raise TLError(f"unknown command {cmd} (:help lists the commands)")
        return handler(rest)

    def _cmd_quit(self, _: str) -> str:
        self.done = True
        return ""

    def _cmd_load(self, rest: str) -> str:
        path = _unquote(rest)
        if not path:
            raise TLError(":load needs a file name")
        text = api.read_source(path)
        return self._define(text, path, verb=f"loaded from {path}:")

    def _cmd_set(self, rest: str) -> str:
        name, sep, rhs = rest.partition("=")
        name, rhs = name.strip(), rhs.strip()
        if not sep or not _NAME.fullmatch(name) or not rhs:
            raise TLError(":set needs NAME = VALUE (a number, rand(N, M), load(\"x.npy\") or "
                          "an expression)")
        if name in ast.BUILTINS or name in KEYWORDS:
            raise TLError(f"{name} is reserved")
        binding = self._value_of(rhs)
        self._rebind(name, binding)
        return f"{name} : {_type_text(binding)}"

    def _value_of(self, rhs: str) -> Binding:
        if _INT.fullmatch(rhs):
            return Binding(int(rhs), None)
        if _NUMBER.fullmatch(rhs):
            return Binding(float(rhs), ast.REAL)
        m = _RAND.fullmatch(rhs)
        if m and "(" not in m.group(1) and ")" not in m.group(1):
            return self._rand(m.group(1))
        m = _LOAD.fullmatch(rhs)
        if m:
            return _load_binding(m.group(1)[1:-1])
        fn, args = self._expr_function(rhs)
        value = fn.interpret(**args)
        t = fn.ret_type
        if t is None or not _type_sizes(t) <= {n for n, b in self.values.items()
                                              if b.type is None}:
            t = _literal_type(value)
        return Binding(value, t)

    def _rand(self, inner: str) -> Binding:
        dims: list[Affine] = []
        shape: list[int] = []
        for arg in (a.strip() for a in inner.split(",")) if inner.strip() else ():
            if _INT.fullmatch(arg):
                dims.append(Affine.lit(int(arg)))
                shape.append(int(arg))
                continue
            b = self.values.get(arg)
            if not _NAME.fullmatch(arg) or b is None or b.type is not None:
                raise TLError(f"rand: {arg!r} is not an integer or a bound size")
            dims.append(Affine.var(arg))
            shape.append(int(b.value))
        if not shape:
            return Binding(float(self.rng.standard_normal()), ast.REAL)
        return Binding(self.rng.standard_normal(tuple(shape)), ast.tensor(dims))

    def _rebind(self, name: str, binding: Binding) -> None:
        old = self.values.get(name)
        if old is not None and old.type is None:
            # Types written in terms of the old size keep their (now literal) extents.
            lit = {name: Affine.lit(int(old.value))}
            for b in self.values.values():
                if b.type is not None and name in _type_sizes(b.type):
                    b.type = ast.subst(b.type, lit)
        self.values[name] = binding

    def _cmd_type(self, rest: str) -> str:
        if not rest:
            raise TLError(":type needs an expression or a function name")
        if rest in self.module:
            return self._describe(self.module[rest])
        fn, _ = self._expr_function(rest)
        return api.format_type(fn.ret_type)

    def _function(self, name: str) -> api.Function:
        if name not in self.module:
            known = ", ".join(self.module) or "none defined yet"
            raise TLError(f"no function named '{name}' (functions: {known})")
        return self.module[name]

    def _cmd_show(self, rest: str) -> str:
        words = rest.split()
        if not words:
            raise TLError(":show needs a function name (and optionally a stage)")
        unicode = "unicode" in words[1:]
        stages = [w for w in words[1:] if w != "unicode"]
        if len(stages) > 1:
            raise TLError(f":show takes one stage, got {' '.join(stages)}")
        return self._function(words[0]).show(stages[0] if stages else "parsed",
                                              unicode=unicode)

    def _cmd_cost(self, rest: str) -> str:
        from tensorlang.cli import format_cost

        words = rest.split()
        if not words:
            raise TLError(":cost needs a function name and sizes, e.g. :cost f N=100")
        fn = self._function(words[0])
        args: dict[str, Any] = {}
        stage: str | None = None
        for word in words[1:]:
            key, sep, val = word.partition("=")
            if not sep or not _NAME.fullmatch(key) or not val:
                raise TLError(f":cost: expected NAME=VALUE, got {word!r}")
            if key == "stage" and not (_INT.fullmatch(val) and
                                       any(p.name == "stage" for p in fn.params)):
                stage = val
            elif _INT.fullmatch(val):
                args[key] = int(val)
            elif val in self.values:
                args[key] = self.values[val].value
            else:
                raise TLError(f":cost: {val!r} is not an integer or a bound name")
        for p in fn.params:  # relations (and sizes) not given: bound values of that name
            if p.name not in args and p.name in self.values and \
                    isinstance(p.type, (TRel, TSize)):
                args[p.name] = self.values[p.name].value
        stage = stage or fn.default_stage()
        cost = fn.cost(args, stage=stage)
        given = ", ".join(f"{k}={v}" for k, v in args.items() if isinstance(v, int))
        return format_cost(cost, f"cost of {fn.name} at stage {stage}"
                                 f"{' with ' + given if given else ''}")

    def _cmd_vars(self, _: str) -> str:
        lines = [f"{n} : {_type_text(b)}" for n, b in self.values.items()]
        lines += [self._describe(f) for f in self.module.functions]
        return "\n".join(lines) if lines else "nothing bound or defined yet"

    # -- completion ------------------------------------------------------------------------

    def completions(self) -> list[str]:
        """Every word worth completing: functions, bound names, commands, builtins, keywords,
        stage names."""
        words = set(self.module) | set(self.values) | set(COMMANDS) | set(ast.BUILTINS)
        words |= set(KEYWORDS) | set(pipeline.STAGE_NAMES)
        return sorted(words)


# ---------------------------------------------------------------------------------------------
# Helpers


def api_format(value: Any) -> str:
    from tensorlang.cli import format_value

    return format_value(value)


def _parse_expr(parser: Any, text: str, filename: str) -> ast.Expr:
    try:
        return parser.parse_expr(text, filename)
    except TypeError:  # a parse_expr without a file name argument
        return parser.parse_expr(text)


def _type_sizes(t: Type) -> set[str]:
    """The size variables a type mentions."""
    return {v for n in ast.walk(t) if isinstance(n, Affine) for v in n.vars()}


def _type_text(b: Binding) -> str:
    if b.type is None:
        return f"int = {b.value}"
    text = api.format_type(b.type)
    if isinstance(b.value, float):
        return f"{text} = {b.value!r}"
    return text


def _literal_type(value: Any) -> Type:
    if isinstance(value, tuple):
        return ast.TPair(_literal_type(value[0]), _literal_type(value[1]))
    if isinstance(value, np.ndarray) and value.ndim:
        return ast.tensor(value.shape)
    return ast.REAL


def _load_binding(path: str) -> Binding:
    from tensorlang.cli import load_array

    arr = np.asarray(load_array(os.path.splitext(os.path.basename(path))[0], path))
    if arr.dtype == np.bool_:
        return Binding(arr, TRel(tuple(Affine.lit(n) for n in arr.shape)))
    if not np.issubdtype(arr.dtype, np.number):
        raise TLError(f"{path}: expected a numeric or boolean array, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.integer) and arr.ndim:  # an index array (SPEC 12): the
        # range of its entries is the extent it indexes where it is used (checked then)
        return Binding(np.ascontiguousarray(arr, dtype=np.int64),
                       ast.TIndex(tuple(Affine.lit(n) for n in arr.shape), True))
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    if arr.ndim == 0:
        return Binding(float(arr), ast.REAL)
    return Binding(arr, ast.tensor(arr.shape))


def _fresh_name(base: str, taken: set[str]) -> str:
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}{k}"
    return name


def _unquote(text: str) -> str:
    try:
        parts = shlex.split(text)
    except ValueError:
        return text.strip()
    return parts[0] if len(parts) == 1 else text.strip()


def _in_text(w: Any, text: str) -> bool:
    loc = getattr(w, "loc", None)
    src = getattr(loc, "source", None)
    return src is None or getattr(src, "text", None) == text


def _warning_text(w: Any) -> str:
    from tensorlang.cli import format_warnings

    return format_warnings([w])


# ---------------------------------------------------------------------------------------------
# Drivers


def run(path: str | None = None, stdin: TextIO | None = None,
        stdout: TextIO | None = None, seed: int | None = None) -> int:
    """Run a session: prompt_toolkit on a terminal, plain line reading otherwise.  Exit
    status 1 when input was piped and some line failed (a script must not pass silently)."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    repl = Repl(seed)
    if path:
        _emit(repl.handle(f":load {shlex.quote(path)}"), stdout)
    if stdin.isatty() and stdout.isatty():
        _prompt_loop(repl)
        return 0
    _stream_loop(repl, stdin, stdout)
    return 1 if repl.errors else 0


def _emit(text: str, out: TextIO) -> None:
    if text:
        print(text, file=out, flush=True)


def _stream_loop(repl: Repl, lines: Iterable[str], out: TextIO) -> None:
    for line in lines:
        _emit(repl.handle(line), out)
        if repl.done:
            return
    _emit(repl.finish(), out)


def history_file() -> str:
    return os.environ.get("TL_HISTORY_FILE") or os.path.join(os.path.expanduser("~"),
                                                             ".tensorlang_history")


def make_history() -> Any:
    """The prompt history: the history file, or in memory where it cannot be written."""
    from prompt_toolkit.history import FileHistory, InMemoryHistory

    class SafeFileHistory(FileHistory):
        """History that keeps working (in memory) when the file cannot be written."""

        def store_string(self, string: str) -> None:
            try:
                super().store_string(string)
            except OSError:
                pass

        def load_history_strings(self) -> Iterable[str]:
            try:
                yield from super().load_history_strings()
            except OSError:
                return

    path = history_file()
    directory = os.path.dirname(path) or "."
    writable = os.access(path, os.W_OK) if os.path.exists(path) else os.access(directory,
                                                                              os.W_OK)
    return SafeFileHistory(path) if writable else InMemoryHistory()


def make_completer(repl: Repl) -> Any:
    """A prompt_toolkit completer offering `repl.completions()` for the word at the cursor."""
    from prompt_toolkit.completion import Completer, Completion

    class NameCompleter(Completer):
        def get_completions(self, document: Any, complete_event: Any) -> Iterable[Completion]:
            word = re.split(r"[^A-Za-z0-9_:]", document.text_before_cursor)[-1]
            if not word:
                return
            for w in repl.completions():
                if w.startswith(word) and w != word:
                    yield Completion(w, start_position=-len(word))

    return NameCompleter()


def _prompt_loop(repl: Repl) -> None:
    from prompt_toolkit import PromptSession

    session: Any = PromptSession(history=make_history(), completer=make_completer(repl),
                                 complete_while_typing=False)
    print("tensorlang REPL: :help for the commands, :quit or Ctrl-D to leave")
    while not repl.done:
        try:
            line = session.prompt(repl.prompt)
        except KeyboardInterrupt:
            repl.pending = None
            continue
        except EOFError:
            _emit(repl.finish(), sys.stdout)
            break
        _emit(repl.handle(line), sys.stdout)
