"""The size of grouping-set expansion (``imp_core.plan.expand.Expand``): each input row
once per grouping set; an expanded key has its key's values plus NULL; the set column
one value per set. Stateless (the aggregation above holds the groups of every set)."""

from __future__ import annotations

import math

from imp_core.estimate.selectivity import ColumnEstimate, RelationEstimate
from imp_core.plan.expand import Expand


def expand_estimate(node: Expand, child: RelationEstimate) -> RelationEstimate:
    sets = len(node.sets)
    cols = dict(child.cols)
    for key, name in zip(node.keys, node.names):
        c = child.cols.get(key) or ColumnEstimate(domain=child.rows)
        cols[name] = ColumnEstimate(None if c.distinct is None else c.distinct + 1,
                                    c.domain + 1 if math.isfinite(c.domain) else c.domain,
                                    c.low, c.high)
    cols[node.set_column] = ColumnEstimate(float(sets), float(sets), 0, sets - 1)
    return RelationEstimate(child.rows * sets, cols, child.ids)
