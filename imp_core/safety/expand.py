"""The safety rule of grouping-set expansion (``imp_core.plan.expand.Expand``).

Expand copies each input row once per grouping set, keeps its columns and adds each
grouping key's expanded column (NULL outside the key's sets) and the set's position. A
phantom row of the sketch instance expands into phantom copies of the same sets, so:

- input columns keep their facts (taint, attribute, interval, label);
- a key's expanded column equals the key where it is not NULL: it inherits the key's
  taint, interval and label, but the sketch attribute only when the key is in *every*
  set (otherwise the copy for a set without it is NULL, not the attribute, and a group
  of that set spans fragments: the aggregation above must then be safe by its own rule,
  for partial groups);
- the set column is exact (a constant per copy), untainted and never NULL; a key's copy
  is never NULL only when the key is not and is in every set;
- no unique key survives (a row's copies agree on the input columns); the set column
  with an input key would be one, but none is claimed (conservative).
"""

from __future__ import annotations

from dataclasses import replace

from imp_core.plan.expand import Expand
from imp_core.safety.facts import Facts
from imp_core.safety.intervals import UNKNOWN


def expand(node: Expand, facts: Facts) -> Facts:
    tainted = dict(facts.tainted)
    labels = dict(facts.labels)
    ivals = dict(facts.ivals)
    exprs = dict(facts.exprs)
    always = {k for j, k in enumerate(node.keys) if node.in_every_set(j)}
    copies = dict(zip(node.keys, node.names))
    for key, name in copies.items():
        if key in facts.tainted:
            tainted[name] = facts.tainted[key]
        labels[name] = facts.labels.get(key, key)
        ivals[name] = facts.ivals.get(key, UNKNOWN)
        if key in facts.exprs:
            exprs[name] = facts.exprs[key]
    attr = {p: cols | frozenset(copies[c] for c in cols if c in always)
            for p, cols in facts.attr.items()}
    not_null = facts.not_null | {copies[k] for k in always if k in facts.not_null} | \
        {node.set_column}
    return replace(facts, tainted=tainted, attr=attr, keys=(), labels=labels, ivals=ivals,
                   exprs=exprs, not_null=frozenset(not_null))
