"""Operator paths: one numbering of a plan's operators, read back from its text form, the
same in the pipeline, the memory estimate and the data layer's placement."""

from __future__ import annotations

import doctest

import pyarrow as pa
import pytest

import imp_core.plan.paths
from imp_core.engine.pipeline import IncrementalQuery
from imp_core.estimate.memory import estimate_plan
from imp_core.estimate.table_stats import TableStats
from imp_core.plan.paths import OperatorPath, operator_paths, parse_paths
from imp_core.query.data_layer import groups_to_probe, join_sides, placeable
from imp_core.sketch.partition import PartitionSet
from imp_core.sql import plan_sql

CATALOG = {"f": pa.schema([("id", pa.int64()), ("k", pa.int64()), ("v", pa.int64())]),
           "d": pa.schema([("dk", pa.int64()), ("w", pa.int64())])}


@pytest.mark.parametrize("text", ["0", "0.1", "0.1.0:left", "0:right", "0.2:groups"])
def test_text_form_round_trips(text):
    path = OperatorPath.parse(text)
    assert str(path) == text and OperatorPath.parse(str(path)) == path


@pytest.mark.parametrize("text", ["", "1", "0.", "0.a", "0:up", "0.-1", "x:left"])
def test_other_text_is_refused(text):
    with pytest.raises(ValueError):
        OperatorPath.parse(text)


def test_paths_name_children_and_sides():
    p = OperatorPath.ROOT.child(1).child(0)
    assert p.steps == (1, 0) and p.depth == 2 and p.side is None
    assert p.at("left").operator == p and str(p.at("groups")) == "0.1.0:groups"
    assert parse_paths(["0:left", "0.1:right"]) == {OperatorPath((), "left"),
                                                     OperatorPath((1,), "right")}


def test_one_numbering_in_pipeline_estimate_and_placement():
    plan = plan_sql("SELECT d.w, sum(f.v) AS s FROM f JOIN d ON f.k = d.dk "
                    "WHERE f.k IN (SELECT k FROM f GROUP BY k HAVING count(*) > 1) "
                    "GROUP BY d.w", CATALOG)
    paths = {str(p): node for p, node in operator_paths(plan.root)}
    pipeline = IncrementalQuery(plan, PartitionSet(()))
    assert {op.op_id for op in pipeline.operators} <= set(paths)
    stats = {"f": TableStats(100), "d": TableStats(10)}
    estimated = {o.op_id: o.node for o in estimate_plan(plan.root, stats).operators}
    assert estimated == paths
    sides = list(join_sides(plan.root)) + list(groups_to_probe(plan.root))
    assert sides and all(paths[str(s[0].operator)] is s[1] for s in sides)
    assert placeable(plan.root) == {s[0] for s in sides}


def test_doctests():
    assert doctest.testmod(imp_core.plan.paths).failed == 0
