"""What users see of the shared indexes a query reads: ``QueryInfo.indexes`` through the
gRPC messages and back (ListQueries, ExplainSketch), the lines ``imp ls`` and ``imp
explain`` print, and the per-query merge of the shards' reports."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

from imp_actors.runtime_config import Lazy
from imp_actors.types import IndexUse, QueryInfo
from services import convert
from services.cli.output import describe_explanation, describe_info

USES = (IndexUse("lineitem", "l_orderkey", ("l_orderkey", "l_quantity"), "disk", 0,
                 512 << 20, 3),
        IndexUse("orders", "o_orderkey", ("o_orderkey", "o_custkey"), "memory", 48 << 20, 0,
                 1))


def _info(**kw) -> QueryInfo:
    return QueryInfo(name="q", sql="SELECT 1", tables=("lineitem", "orders"), partitions=(),
                     strategy=Lazy(), shards=1, state="live", versions={"orders": 3},
                     sketch_seq=2, sketch_fragments=3, total_fragments=16, state_bytes=10,
                     pending_tuples=0, last_used=0.0,
                     probed_join_sides=("0.0:right",), **kw)


def test_query_info_carries_its_indexes_through_the_messages():
    info = _info(indexes=USES)
    back = convert.query_info_from_proto(convert.query_info_to_proto(info))
    assert back.indexes == USES
    assert convert.query_info_from_proto(convert.query_info_to_proto(_info())).indexes == ()
    text = describe_info(back)
    assert "indexes: lineitem.l_orderkey (disk 512.0 MiB, 2 columns, shared by 3)" in text
    assert "orders.o_orderkey (memory 48.0 MiB" in text
    assert "indexes" not in describe_info(replace(info, indexes=()))


def test_explanations_name_the_probed_sides_and_their_indexes():
    doc = {"query": "q", "mode": "given", "chosen": ["lineitem.l_orderkey"], "why": "named",
           "probed_join_sides": ["0.0:right"], "indexes": [asdict(u) for u in USES]}
    back = convert.explanation_from_proto(convert.explanation_to_proto(doc))
    assert back["probed_join_sides"] == ["0.0:right"]
    assert [IndexUse.from_json(d) for d in back["indexes"]] == list(USES)
    lines = describe_explanation(back, brief=True)
    assert "  join sides probed in the data layer: 0.0:right" in lines
    assert any(line.startswith("  shared index: lineitem.l_orderkey (disk") for line in lines)


def test_a_query_reports_each_index_once_over_its_shards():
    from imp_actors.lifecycle import QueryRuntime

    small = {**asdict(USES[1]), "bytes": 1 << 20}
    runtime = QueryRuntime.__new__(QueryRuntime)
    runtime.shard_indexes = [json.dumps([asdict(USES[0]), small]),
                             json.dumps([asdict(USES[1])]), "[]"]
    assert runtime.indexes == USES  # the larger report of orders.o_orderkey kept
