"""Scalar expressions over the columns of one plan node's input.

Invariants: every node is a frozen dataclass (hashable, comparable, with a
deterministic ``repr`` used for plan fingerprints); a ``ColumnRef`` names a field of
the input schema exactly; literals carry their Arrow type. AND and OR of more than two
parts are built balanced (``conjoin``, ``disjoin``, ``balance``: depth log2 n), IN lists
are one ``InList`` node: no width of a query makes a tree deep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence, TypeVar

import pyarrow as pa

ARITHMETIC = frozenset({"+", "-", "*", "/", "%"})
COMPARISON = frozenset({"=", "<>", "<", "<=", ">", ">="})
LOGICAL = frozenset({"and", "or"})
T = TypeVar("T")
FUNCTIONS = frozenset({"year", "month", "day", "abs", "upper", "lower", "coalesce", "substring",
                       "pmod", "div", "round", "concat",
                       # one_row(v, n): v, raising where n (a scalar subquery's rows) > 1
                       "one_row",
                       # try(e): e as Spark's try_ functions take it, NULL where it would raise
                       "try"})


class Expr:
    """Base of scalar expressions.

    A node keeps what is derived from its fields once computed (``_kept``): its hash (a
    frozen dataclass hashes its fields, so each hash walks the whole subtree, and the
    evaluator's memo looks up every node of a tree), a literal's Arrow scalar, whether a
    ``Strict`` node is below. What is kept (names beginning with "_") is not pickled:
    string hashes differ between processes."""

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def has_strict(self) -> bool:
        """Whether a ``Strict`` node is in this tree (evaluated with ANSI errors)."""
        return _kept(self, "_has_strict",
                     lambda: any(isinstance(x, Strict) for x in self.walk()))

    def children(self) -> tuple[Expr, ...]:
        return ()

    def walk(self) -> Iterator[Expr]:
        yield self
        for child in self.children():
            yield from child.walk()

    def columns(self) -> frozenset[str]:
        return frozenset(e.name for e in self.walk() if isinstance(e, ColumnRef))


@dataclass(frozen=True)
class ColumnRef(Expr):
    name: str

    def __str__(self) -> str:
        return f"`{self.name}`"


@dataclass(frozen=True)
class Literal(Expr):
    value: Any
    dtype: pa.DataType

    def __repr__(self) -> str:
        return f"Literal({self.value!r}, {self.dtype})"

    def scalar(self) -> pa.Scalar:
        """The value as an Arrow scalar of ``dtype``, made once per node."""
        return _kept(self, "_scalar", lambda: pa.scalar(self.value, type=self.dtype))

    def __str__(self) -> str:
        return repr(self.value) if self.value is not None else "NULL"


@dataclass(frozen=True)
class BinaryOp(Expr):
    op: str
    left: Expr
    right: Expr

    def __post_init__(self) -> None:
        if self.op not in ARITHMETIC | COMPARISON | LOGICAL:
            raise ValueError(f"unknown binary operator {self.op!r}")

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"


@dataclass(frozen=True)
class UnaryOp(Expr):
    op: str  # not | neg | is_null | is_not_null
    operand: Expr

    def __post_init__(self) -> None:
        if self.op not in {"not", "neg", "is_null", "is_not_null"}:
            raise ValueError(f"unknown unary operator {self.op!r}")

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def __str__(self) -> str:
        return f"{self.op}({self.operand})"


@dataclass(frozen=True)
class Case(Expr):
    whens: tuple[tuple[Expr, Expr], ...]
    default: Expr | None = None

    def children(self) -> tuple[Expr, ...]:
        out: list[Expr] = [e for pair in self.whens for e in pair]
        if self.default is not None:
            out.append(self.default)
        return tuple(out)

    def __str__(self) -> str:
        body = " ".join(f"WHEN {c} THEN {v}" for c, v in self.whens)
        return f"CASE {body} ELSE {self.default} END"


@dataclass(frozen=True)
class InList(Expr):
    operand: Expr
    values: tuple[Literal, ...]
    negated: bool = False

    def children(self) -> tuple[Expr, ...]:
        return (self.operand, *self.values)

    def __str__(self) -> str:
        neg = "NOT " if self.negated else ""
        return f"({self.operand} {neg}IN ({', '.join(map(str, self.values))}))"


@dataclass(frozen=True)
class Like(Expr):
    operand: Expr
    pattern: str
    negated: bool = False

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def __str__(self) -> str:
        neg = "NOT " if self.negated else ""
        return f"({self.operand} {neg}LIKE {self.pattern!r})"


@dataclass(frozen=True)
class FuncCall(Expr):
    name: str
    args: tuple[Expr, ...]

    def __post_init__(self) -> None:
        if self.name not in FUNCTIONS:
            raise ValueError(f"unknown function {self.name!r}")

    def children(self) -> tuple[Expr, ...]:
        return self.args

    def __str__(self) -> str:
        return f"{self.name}({', '.join(map(str, self.args))})"


@dataclass(frozen=True)
class Cast(Expr):
    operand: Expr
    to: pa.DataType

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def __repr__(self) -> str:
        return f"Cast({self.operand!r}, {self.to})"

    def __str__(self) -> str:
        return f"CAST({self.operand} AS {self.to})"


@dataclass(frozen=True)
class Strict(Expr):
    """``inner`` as Spark evaluates it with ANSI mode on: its value is the ANSI-off one,
    but a row whose evaluation would overflow, divide by zero or fail to parse makes the
    query raise instead (``imp_core.plan.ansi``). ``inner`` is an arithmetic
    ``BinaryOp``, a ``neg``, an ``abs`` / ``pmod`` / ``div`` call or a ``Cast``."""

    inner: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.inner,)

    def __str__(self) -> str:
        return str(self.inner)


def _kept(node: Expr, name: str, make: Callable[[], Any]) -> Any:
    """``node``'s value kept under ``name``, made by ``make`` on first use (frozen nodes
    are set through ``object.__setattr__``)."""
    found = node.__dict__.get(name)
    if found is None:
        found = make()
        object.__setattr__(node, name, found)
    return found


def _keep_hash(cls: type) -> None:
    fields_hash = cls.__hash__

    def __hash__(self: Expr) -> int:
        return _kept(self, "_hash", lambda: fields_hash(self))

    cls.__hash__ = __hash__  # type: ignore[method-assign,assignment]


for _node in Expr.__subclasses__():
    _keep_hash(_node)


def balance(parts: Sequence[T], combine: Callable[[T, T], T]) -> T:
    """``parts`` combined by ``combine`` pairwise, level by level: a tree of depth
    ``ceil(log2(len(parts)))`` whose leaves are ``parts`` in their order.

    For an associative operator (AND, OR under three-valued logic, and under ANSI mode
    too: a part is evaluated where no earlier part decided the result, however the
    chain is grouped) this is the left-deep chain's value, without its depth: every
    pass over a tree recurses, and a chain of 15,000 IN values or ORs would need 15,000
    frames (pyarrow's dataset filter crashed the process on one). Every AND or OR of
    many parts (plan expressions, Arrow filters, sqlglot trees) is built here.

    >>> balance(["a", "b", "c", "d", "e"], lambda x, y: f"({x} {y})")
    '(((a b) (c d)) e)'
    """
    level = list(parts)
    if not level:
        raise ValueError("balance needs at least one part")
    while len(level) > 1:  # iterative: the depth is that of the result, log2 n
        paired = [combine(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def _flat(expr: Expr | None, op: str) -> list[Expr]:
    """The operands of the chain of ``op`` at the top of ``expr``, left to right
    (iterative: a chain built elsewhere may be deep)."""
    if expr is None:
        return []
    out: list[Expr] = []
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, BinaryOp) and e.op == op:
            stack += [e.right, e.left]
        else:
            out.append(e)
    return out


def conjuncts(expr: Expr | None) -> list[Expr]:
    """Split a predicate on top-level AND."""
    return _flat(expr, "and")


def disjuncts(expr: Expr | None) -> list[Expr]:
    """Split a predicate on top-level OR."""
    return _flat(expr, "or")


def conjoin(parts: Sequence[Expr]) -> Expr | None:
    """AND a list of predicates together, balanced (``balance``); None for an empty
    list."""
    return balance(parts, lambda a, b: BinaryOp("and", a, b)) if parts else None


def disjoin(parts: Sequence[Expr]) -> Expr | None:
    """OR a list of predicates together, balanced (``balance``); None for an empty list."""
    return balance(parts, lambda a, b: BinaryOp("or", a, b)) if parts else None


def rename_columns(expr: Expr, mapping: dict[str, Expr]) -> Expr:
    """Replace column references by expressions (pure; returns a new tree)."""
    if isinstance(expr, ColumnRef):
        return mapping.get(expr.name, expr)
    if isinstance(expr, BinaryOp):
        return BinaryOp(expr.op, rename_columns(expr.left, mapping),
                        rename_columns(expr.right, mapping))
    if isinstance(expr, UnaryOp):
        return UnaryOp(expr.op, rename_columns(expr.operand, mapping))
    if isinstance(expr, Case):
        whens = tuple((rename_columns(c, mapping), rename_columns(v, mapping))
                      for c, v in expr.whens)
        default = None if expr.default is None else rename_columns(expr.default, mapping)
        return Case(whens, default)
    if isinstance(expr, InList):
        return InList(rename_columns(expr.operand, mapping), expr.values, expr.negated)
    if isinstance(expr, Like):
        return Like(rename_columns(expr.operand, mapping), expr.pattern, expr.negated)
    if isinstance(expr, FuncCall):
        return FuncCall(expr.name, tuple(rename_columns(a, mapping) for a in expr.args))
    if isinstance(expr, Cast):
        return Cast(rename_columns(expr.operand, mapping), expr.to)
    if isinstance(expr, Strict):
        return Strict(rename_columns(expr.inner, mapping))
    return expr
