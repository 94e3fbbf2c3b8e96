"""Operator paths: where an operator (or one side of it) sits in a plan, numbered once.

A path is the list of child indices from the plan's root, plus an optional side of the
operator there: ``"left"`` / ``"right"`` for a join's inputs, ``"groups"`` for a grouped
aggregation's groups. Its text form, used only where a path is stored (state tables of a
pipeline, the registry's placement) or logged, is ``"0"`` for the root, ``"0.1"`` for
the root's second child and ``"0.1:left"`` for the left input of the join there:

>>> p = OperatorPath.parse("0.1:left")
>>> p.steps, p.side, str(p), str(p.operator), str(OperatorPath.ROOT.child(1).child(0))
((1,), 'left', '0.1:left', '0.1', '0.1.0')

``operator_paths`` numbers a plan's nodes; the incremental pipeline, the memory estimate
and the data layer's placement all number through ``ROOT`` and ``child``, so the same
node has the same path everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Iterable, Iterator

from imp_core.plan.nodes import PlanNode

SIDES = ("left", "right", "groups")  # the sides a path may name


@dataclass(frozen=True)
class OperatorPath:
    """``steps``: child indices from the root (each ``>= 0``); ``side``: one of ``SIDES``
    or None (the operator itself)."""

    steps: tuple[int, ...] = ()
    side: str | None = None
    ROOT: ClassVar[OperatorPath]

    def __post_init__(self) -> None:
        if any(s < 0 for s in self.steps):
            raise ValueError(f"an operator path has no negative steps: {self.steps}")
        if self.side is not None and self.side not in SIDES:
            raise ValueError(f"an operator path's side is one of {SIDES}, not {self.side!r}")

    def child(self, index: int) -> OperatorPath:
        """The path of this operator's child ``index`` (this path names no side)."""
        assert self.side is None, "a side has no children"
        return OperatorPath(self.steps + (index,))

    def at(self, side: str) -> OperatorPath:
        """This operator's ``side``."""
        return replace(self, side=side)

    @property
    def operator(self) -> OperatorPath:
        """The operator this path names (or names a side of)."""
        return replace(self, side=None)

    @property
    def depth(self) -> int:
        return len(self.steps)

    @classmethod
    def parse(cls, text: str) -> OperatorPath:
        """The path of a text form ``"0[.i]*[:side]"``; raises ValueError on other text."""
        head, _, side = text.partition(":")
        parts = head.split(".")
        if parts[0] != "0" or not all(p.isdigit() for p in parts[1:]):
            raise ValueError(f"not an operator path: {text!r}")
        return cls(tuple(int(p) for p in parts[1:]), side or None)

    def __str__(self) -> str:
        text = ".".join(["0", *map(str, self.steps)])
        return text if self.side is None else f"{text}:{self.side}"


OperatorPath.ROOT = OperatorPath()


def parse_paths(texts: Iterable[str]) -> frozenset[OperatorPath]:
    """The paths of ``texts`` (each a text form ``OperatorPath.parse`` reads)."""
    return frozenset(OperatorPath.parse(t) for t in texts)


def operator_paths(root: PlanNode) -> Iterator[tuple[OperatorPath, PlanNode]]:
    """``(path, node)`` of every node under ``root`` (inclusive), children before their
    parent, in child order."""

    def walk(node: PlanNode, path: OperatorPath) -> Iterator[tuple[OperatorPath, PlanNode]]:
        for i, child in enumerate(node.children()):
            yield from walk(child, path.child(i))
        yield path, node

    yield from walk(root, OperatorPath.ROOT)


__all__ = ["SIDES", "OperatorPath", "operator_paths", "parse_paths"]
