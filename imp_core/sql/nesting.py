"""How deep a parsed query nests: AND / OR chains made shallow, and a limit on the rest.

Every pass over a query recurses over its trees: the binder, the planner's rewrites,
plan fingerprints and hashes, the evaluator, the safety check, the Spark SQL writer,
pickling a plan to a Ray worker. Python stops a recursion at about 1,000 frames
(``RecursionError``, which the server maps to an error), but native code may not stop
at all: pyarrow crashed the process (signal 11) on a filter nested 15,000 deep. So
depth is settled here, right after parsing, before anything else walks the tree:

- ``rebalance`` rebuilds every chain of ``AND`` (or of ``OR``) operands, through
  parentheses, as a balanced tree: ``a OR b OR ... `` of n terms nests ``ceil(log2 n)``
  deep instead of n. The operands keep their order and their nodes (with the positions
  errors point at); AND and OR are associative in three-valued logic, and under ANSI
  mode too (``imp_core.plan.expr.balance``), so the query means the same.
- ``check_depth`` measures the deepest path of the rebalanced tree (iteratively) and
  refuses one deeper than ``max_expression_depth()`` with ``NestingLimitError``
  (RESOURCE_EXHAUSTED), naming the depth, where, the limit and ``IMP_MAX_EXPRESSION_DEPTH``.
  What is still deep then cannot be flattened without changing the query: a chain of
  arithmetic (``b + 1 + 1 ...``: integer overflow and decimal result types depend on
  the grouping), nested function calls, nested subqueries.

Invariants: ``rebalance`` never recurses (a chain may be 100,000 operands long) and
changes nothing but the grouping of AND / OR chains deeper than balanced;
``nesting_depth`` never recurses; every tree ``check_depth`` accepts is at most
``max_expression_depth()`` nodes deep, which every pass downstream handles within
Python's default recursion limit with room to spare (``DEFAULT_MAX_EXPRESSION_DEPTH``).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from sqlglot import exp

from imp_core.errors import NestingLimitError
from imp_core.plan.expr import balance
from imp_core.settings import int_setting
from imp_core.sql.text import SqlText

# The deepest syntax tree (sqlglot nodes, root to leaf) a query may have. Measured at
# Python's default limit of 1,000 frames (tests/unit/test_expression_depth.py holds the
# margin): the hungriest pass is the planner, about 5 frames per level of the statement
# (binding, type inference, push-down) plus ~20; then pickling a plan for a Ray worker
# (3-4 per level), evaluation and the Spark SQL writer (2-3), the safety check (1-2).
# A gRPC call reaches the planner ~20 frames deep, so at depth 128 the planner needs
# ~680 frames and every pass has 300 to spare; the planner itself fails near depth 190.
# The deepest shipped query (TPC-DS q23 with its WITH bodies inlined) is 31 deep, a sum
# of 100 columns about 105. sqlglot's own parser stops far earlier on nested parentheses
# (~45 levels, refused as malformed), so in practice the limit applies to what it parses
# iteratively: chains of binary operators (+, -, *, /, ||, comparisons).
DEFAULT_MAX_EXPRESSION_DEPTH = 128
MAX_EXPRESSION_DEPTH_ENV = "IMP_MAX_EXPRESSION_DEPTH"

_CHAINS = (exp.And, exp.Or)


def max_expression_depth(env: Mapping[str, str] | None = None) -> int:
    """``IMP_MAX_EXPRESSION_DEPTH`` (an integer >= 16), else
    ``DEFAULT_MAX_EXPRESSION_DEPTH`` (``ValueError`` for another value)."""
    # below 16, ordinary queries (a few subqueries deep) no longer plan
    return int_setting(MAX_EXPRESSION_DEPTH_ENV, DEFAULT_MAX_EXPRESSION_DEPTH, 16, env)


# -- AND / OR chains -------------------------------------------------------------------------


def rebalance(root: exp.Expression) -> exp.Expression:
    """``root`` with each AND / OR chain deeper than ``ceil(log2 n)`` rebuilt balanced,
    in place; returns the root (a new node when ``root`` itself was such a chain).

    >>> import sqlglot
    >>> tree = sqlglot.parse_one("SELECT 1 FROM t WHERE a = 1 OR a = 2 OR a = 3 OR a = 4")
    >>> rebalance(tree).sql()
    'SELECT 1 FROM t WHERE a = 1 OR a = 2 OR a = 3 OR a = 4'
    >>> nesting_depth(tree.args["where"].this)[0]  # Or(Or(=, =), Or(=, =)): 3 + 2
    5
    """
    # the tops of chains, found first: rebuilding one only moves its operands' subtrees,
    # so the other tops (inside operands, or elsewhere) stay where they were found
    tops = [n for n in root.walk() if isinstance(n, _CHAINS) and not _continues_chain(n)]
    for top in tops:
        kind = type(top)
        operands, depth = _chain(top, kind)
        if depth <= max(1, math.ceil(math.log2(len(operands)))):
            continue  # balanced already: keep the parser's nodes
        rebuilt = _balanced(kind, operands)
        if top is root:
            root = rebuilt
        else:
            top.replace(rebuilt)
    return root


def and_(parts: Sequence[exp.Expression], copy: bool = True) -> exp.Expression:
    """``exp.and_`` built balanced: the AND of ``parts`` (copied unless ``copy`` is
    False), each part that is itself an AND / OR in parentheses."""
    return _balanced(exp.And, [p.copy() if copy else p for p in parts])


def or_(parts: Sequence[exp.Expression], copy: bool = True) -> exp.Expression:
    """``exp.or_`` built balanced (as ``and_``)."""
    return _balanced(exp.Or, [p.copy() if copy else p for p in parts])


def _balanced(kind: type[exp.Connector], operands: list[exp.Expression]) -> exp.Expression:
    wrapped = [exp.Paren(this=o) if isinstance(o, exp.Connector) else o for o in operands]
    return balance(wrapped, lambda a, b: kind(this=a, expression=b))


def _continues_chain(node: exp.Expression) -> bool:
    """Whether ``node``'s parent, past parentheses, is a connector of its own kind."""
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    return type(parent) is type(node)


def _chain(top: exp.Expression, kind: type) -> tuple[list[exp.Expression], int]:
    """The operands of the chain of ``kind`` under ``top``, through parentheses, left to
    right, and the chain's depth (connector nodes on its deepest path)."""
    operands: list[exp.Expression] = []
    deepest = 0
    stack: list[tuple[exp.Expression, int]] = [(top, 0)]
    while stack:
        node, depth = stack.pop()
        inner = node
        while isinstance(inner, exp.Paren) and isinstance(inner.this, kind):
            inner = inner.this
        if isinstance(inner, kind):
            deepest = max(deepest, depth + 1)
            stack += [(inner.expression, depth + 1), (inner.this, depth + 1)]
        else:
            operands.append(node)
    return operands, deepest


# -- depth -----------------------------------------------------------------------------------


def nesting_depth(root: exp.Expression) -> tuple[int, exp.Expression]:
    """The number of nodes on the longest path from ``root`` down to a leaf, and that
    leaf (iterative)."""
    deepest, leaf = 0, root
    stack: list[tuple[exp.Expression, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest, leaf = depth, node
        stack.extend((child, depth + 1) for child in node.iter_expressions())
    return deepest, leaf


def check_depth(root: exp.Expression, text: SqlText, limit: int | None = None) -> None:
    """Refuse ``root`` (``NestingLimitError``) if it nests deeper than ``limit``
    (default ``max_expression_depth()``); the error points at the deepest node with a
    position in the text."""
    limit = max_expression_depth() if limit is None else limit
    depth, leaf = nesting_depth(root)
    if depth <= limit:
        return
    line, column = None, None
    node: exp.Expression | None = leaf
    while node is not None and line is None:  # a leaf the parser kept no position of
        line, column = text.locate(node)
        node = node.parent
    raise NestingLimitError(depth, limit, MAX_EXPRESSION_DEPTH_ENV, line, column)
