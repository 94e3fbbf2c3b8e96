"""What an aggregate function declares: ``AggregateFunction`` and the state it is given.

Every function is maintained from per-group state of one of three shapes, which the
incremental operator (``imp_core.engine.operators.aggregate``) keeps and the reference
evaluator recomputes from scratch:
- counts only (``moments == 0``, ``extremes`` false): CNT and the non-NULL count;
- exact power sums (``moments == k``): Σx, …, Σx^k over the non-NULL values, each in the
  engine's exact integers (``imp_core.plan.aggregates.exact``: value = exact / unit(type)),
  so Σx^j is in units of unit(type)**j. These are linear in the input bag: the delta
  rule adds w·x^j of each delta row of weight w to its group, and the state after any
  sequence of batches equals the state computed from the current input;
- an ordered multiset of the non-NULL values (``extremes``), see
  ``imp_core.engine.operators.minmax``.
``finalize`` maps that state to output values, deterministically, for a batch of groups.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np
import pyarrow as pa

MAX_PRECISION = 38  # Spark's widest decimal (also imp_core.plan.evaluate.MAX_PRECISION)


class Monotonicity(enum.Enum):
    """How the value over a sub-bag of a group (a partial group in a sketch instance)
    compares with the whole group's (the safety rules' question)."""

    SMALLER = "smaller"  # never larger: count, max
    SMALLER_IF_NONNEG = "smaller_if_nonneg"  # sum: never larger when every value is >= 0
    LARGER = "larger"  # never smaller: min
    EITHER = "either"  # no order: avg, the statistics


class ValueRange(enum.Enum):
    """What bounds the value (the safety rules' intervals and the memory estimate)."""

    NONNEG = "nonneg"  # >= 0
    ARGUMENT = "argument"  # within the argument's bounds
    SUM = "sum"  # the argument's bounds times the group's rows
    ANY = "any"


@dataclass(frozen=True)
class GroupState:
    """The state of a batch of groups, position ``g`` being one group.

    ``cnt``: CNT (rows, weighted); ``nonnull``: the non-NULL count of the argument;
    ``sums``: the exact power sums Σx^1 … Σx^moments (int64 or object arrays, or lists);
    ``extremes``: the best value per group (min/max only).
    """

    cnt: np.ndarray
    nonnull: np.ndarray
    sums: Sequence[Sequence[int] | np.ndarray] = ()
    extremes: Sequence[Any] | None = None


class AggregateFunction:
    """One aggregate function. Subclasses set the class attributes and ``result_type``
    and ``finalize``; instances are listed in their module's ``FUNCTIONS``.

    ``partial`` (a ``Monotonicity``), used by the safety rules, and ``value_range`` (a
    ``ValueRange``), used by the safety rules' intervals and the estimate.
    """

    name: ClassVar[str]
    sql_keys: ClassVar[tuple[str, ...]] = ()  # sqlglot expression keys bound to it
    takes_argument: ClassVar[bool] = True
    moments: ClassVar[int] = 0
    extremes: ClassVar[bool] = False
    largest_first: ClassVar[bool] = False  # extremes: the value is the largest (max)
    numeric_only: ClassVar[bool] = False  # the argument must be a number (kind_of)
    partial: ClassVar[Monotonicity] = Monotonicity.EITHER
    value_range: ClassVar[ValueRange] = ValueRange.ANY
    never_null: ClassVar[bool] = False
    spark_name: ClassVar[str] = ""

    def result_type(self, dtype: pa.DataType | None) -> pa.DataType:
        """The output type over an argument of ``dtype`` (Spark's rules)."""
        raise NotImplementedError

    def finalize(self, state: GroupState, dtype: pa.DataType | None) -> pa.Array:
        """The output values of the groups holding ``state`` (NULL where the function is
        undefined, e.g. no non-NULL value)."""
        raise NotImplementedError

    def for_star(self) -> AggregateFunction | None:
        """The function ``f(*)`` and ``f(<non-NULL constant>)`` stand for (count(*) for
        COUNT), or None where they are not defined."""
        return None

    def spark_sql(self, arg: str | None) -> str:
        """Spark SQL computing the function over the (quoted) column ``arg``."""
        return f"{self.spark_name}({arg})"

    def exact_on_spark(self, dtype: pa.DataType | None) -> bool:
        """Whether Spark's own evaluation equals ``finalize`` bit for bit."""
        return True

    def raises(self, state: GroupState, dtype: pa.DataType | None
               ) -> tuple[str, np.ndarray] | None:
        """For a function that raises under ANSI mode: its Spark error class and the
        groups of ``state`` that raise it (None: the function never raises)."""
        return None

    def label(self) -> str:
        """The name shown to users (count(*) is shown as count)."""
        return self.name

    def __repr__(self) -> str:
        return f"<aggregate {self.name}>"
