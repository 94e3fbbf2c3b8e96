"""Generators of the synthetic workload tables (the IMP paper's Appendix A) and ``crimes``.

Every generator is vectorized numpy, deterministic in its arguments (``seed`` feeds
``numpy.random.default_rng``) and returns a ``pa.Table`` whose schema equals
``imp_core.workloads.schemas.TABLES[name].schema`` (no NULLs anywhere).

``tNg`` (N groups):
- ``id``: 1..rows (the key); ``a``: uniform integer in [1, N];
- ``b``..``e``: ``round(k*a + 100*z)`` with k = 2, 3, 4, 3;
- ``f``..``j``: ``k*a + 100*z`` with k = 2, 5, 6, 7, 8; ``k``: ``3*a + 1000*z``;
  z ~ Normal(0, 0.3), drawn independently per cell.

``tjoinhelp``: columns ``ttid, aa, bb, ..., kk``; ``aa``..``kk`` follow ``a``..``k``.
``ttid`` (the join key) takes values from a ``selectivity`` share of 1..groups, each
value present appearing ``fanout`` times (the last one fewer when ``rows`` is not a
multiple of ``fanout``).

``crimes``: shaped like the Chicago crimes table; see ``generate_crimes``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from imp_core.workloads.schemas import GROUP_TABLES, TABLES, groups_schema

NOISE_SD = 0.3
INT_FACTORS = {"b": 2, "c": 3, "d": 4, "e": 3}
FLOAT_FACTORS = {"f": 2, "g": 5, "h": 6, "i": 7, "j": 8}
K_FACTOR, K_NOISE = 3, 1000
NOISE = 100

# crimes: beat codes DSSB-like: district (1..25) * 100 + sector (1..3) * 10 + beat (1..4).
CRIME_BEATS = np.array(
    [d * 100 + s * 10 + b for d in range(1, 26) for s in range(1, 4) for b in range(1, 5)],
    dtype=np.int64,
)
CRIME_BEAT_ZIPF = 0.7  # P(beat of rank r) ~ r ** -0.7; the most frequent gets about 6%
CRIME_HOME_SHARE = 0.85  # share of a beat's rows in its home ward / community area
CRIME_YEARS = (2001, 2025)
WARDS = 50
COMMUNITY_AREAS = 77


def _check_rows(rows: int) -> None:
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")


def _value_columns(
    rng: np.random.Generator, a: np.ndarray, doubled: bool = False
) -> dict[str, np.ndarray]:
    """Columns a..k (or aa..kk) derived from the group column ``a``."""
    rows = len(a)
    z = rng.standard_normal((len(INT_FACTORS) + len(FLOAT_FACTORS) + 1, rows))
    z *= NOISE_SD
    af = a.astype(np.float64)
    cols: dict[str, np.ndarray] = {"a": a}
    i = 0
    for name, factor in INT_FACTORS.items():
        cols[name] = np.rint(factor * af + NOISE * z[i]).astype(np.int64)
        i += 1
    for name, factor in FLOAT_FACTORS.items():
        cols[name] = factor * af + NOISE * z[i]
        i += 1
    cols["k"] = K_FACTOR * af + K_NOISE * z[i]
    if doubled:
        return {name * 2: values for name, values in cols.items()}
    return cols


def generate_groups_table(groups: int, rows: int, seed: int = 0) -> pa.Table:
    """Table ``t{groups}g`` with ``rows`` rows.

    >>> t = generate_groups_table(50, 1000)
    >>> t.num_rows, t.column_names[:3], 1 <= min(t["a"].to_pylist()) <= 50
    (1000, ['id', 'a', 'b'], True)
    """
    _check_rows(rows)
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    rng = np.random.default_rng(seed)
    a = rng.integers(1, groups + 1, size=rows, dtype=np.int64)
    cols = {"id": np.arange(1, rows + 1, dtype=np.int64), **_value_columns(rng, a)}
    name = f"t{groups}g"
    schema = TABLES[name].schema if name in TABLES else groups_schema("id")
    return pa.Table.from_arrays([cols[f] for f in schema.names], schema=schema)


def generate_joinhelp(
    rows: int,
    groups: int = 5000,
    fanout: int = 1,
    selectivity: float = 1.0,
    seed: int = 0,
) -> pa.Table:
    """Table ``tjoinhelp`` with ``rows`` rows, joined to ``tNg`` on ``a = ttid``.

    A random ``selectivity`` share of the ids 1..``groups`` (at least one) is present; the
    table holds ``ceil(rows / fanout)`` of them, each ``fanout`` times, in random row
    order. ``rows = round(selectivity * groups) * fanout`` uses every present id: then a
    ``selectivity`` share of ``tNg`` rows (N = groups) has exactly ``fanout`` partners.
    Raises ``ValueError`` when ``rows`` needs more distinct ids than are present.

    >>> t = generate_joinhelp(200, groups=1000, fanout=2, selectivity=0.1)
    >>> t.num_rows, len(set(t["ttid"].to_pylist()))
    (200, 100)
    """
    _check_rows(rows)
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    if fanout < 1:
        raise ValueError(f"fanout must be >= 1, got {fanout}")
    if not 0.0 < selectivity <= 1.0:
        raise ValueError(f"selectivity must be in (0, 1], got {selectivity}")
    rng = np.random.default_rng(seed)
    present_count = max(1, round(selectivity * groups))
    distinct = -(-rows // fanout)
    if distinct > present_count:
        raise ValueError(
            f"tjoinhelp: {rows} rows with fanout {fanout} need {distinct} distinct ttid values "
            f"but only {present_count} of {groups} are present (selectivity {selectivity}); "
            f"use rows <= {present_count * fanout}"
        )
    if present_count == groups:
        present = np.arange(1, groups + 1, dtype=np.int64)
    else:
        present = np.sort(rng.choice(groups, size=present_count, replace=False)) + 1
    if distinct < present_count:
        present = np.sort(rng.choice(present, size=distinct, replace=False))
    ttid = rng.permutation(np.repeat(present.astype(np.int64), fanout)[:rows])
    aa = rng.integers(1, groups + 1, size=rows, dtype=np.int64)
    cols = {"ttid": ttid, **_value_columns(rng, aa, doubled=True)}
    schema = TABLES["tjoinhelp"].schema
    return pa.Table.from_arrays([cols[f] for f in schema.names], schema=schema)


def generate_crimes(rows: int, seed: int = 0) -> pa.Table:
    """Table ``crimes`` with ``rows`` rows, shaped like the Chicago crimes data.

    - ``id``: 1..rows (the key);
    - ``beat``: one of 300 four-digit codes ``DDSB`` (district, sector 1..3, beat 1..4,
      e.g. 0111 .. 2534), Zipf-like: the beat of (random) rank r has weight r ** -0.7;
    - ``district``: the beat's district, ``beat // 100`` (1..25), as in the real data;
    - ``ward`` (1..50), ``community_area`` (1..77): 85% of a beat's rows lie in the beat's
      home ward / area (drawn per beat), the rest uniformly anywhere;
    - ``year``: 2001..2025, yearly counts falling linearly to half from first to last year.

    >>> t = generate_crimes(1000)
    >>> t.num_rows, t.column_names
    (1000, ['id', 'beat', 'year', 'district', 'ward', 'community_area'])
    """
    _check_rows(rows)
    rng = np.random.default_rng(seed)
    n_beats = len(CRIME_BEATS)
    ranks = rng.permutation(n_beats) + 1
    weights = ranks.astype(np.float64) ** -CRIME_BEAT_ZIPF
    beat_idx = _weighted_choice(rng, weights, rows)
    beat = CRIME_BEATS[beat_idx]

    first, last = CRIME_YEARS
    year_weights = np.linspace(1.0, 0.5, last - first + 1)
    year = _weighted_choice(rng, year_weights, rows) + first

    def homed(count: int) -> np.ndarray:
        home = rng.integers(1, count + 1, size=n_beats, dtype=np.int64)[beat_idx]
        anywhere = rng.integers(1, count + 1, size=rows, dtype=np.int64)
        return np.where(rng.random(rows) < CRIME_HOME_SHARE, home, anywhere)

    cols = {
        "id": np.arange(1, rows + 1, dtype=np.int64),
        "beat": beat,
        "year": year.astype(np.int64),
        "district": beat // 100,
        "ward": homed(WARDS),
        "community_area": homed(COMMUNITY_AREAS),
    }
    schema = TABLES["crimes"].schema
    return pa.Table.from_arrays([cols[f] for f in schema.names], schema=schema)


def _weighted_choice(rng: np.random.Generator, weights: np.ndarray, size: int) -> np.ndarray:
    """``size`` indices into ``weights``, each drawn with probability proportional to it."""
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    idx = np.searchsorted(cdf, rng.random(size), side="right")
    return np.minimum(idx, len(weights) - 1).astype(np.int64)


def generate_table(name: str, rows: int, seed: int = 0) -> pa.Table:
    """Any synthetic workload table by name: ``tNg``, ``tjoinhelp`` or ``crimes``.

    ``tjoinhelp`` gets the default 5000 groups and the smallest fanout that fits ``rows``.
    """
    if name in GROUP_TABLES:
        return generate_groups_table(GROUP_TABLES[name], rows, seed)
    if name == "tjoinhelp":  # every id 1..5000 present, fanout as rows require
        return generate_joinhelp(rows, fanout=max(1, -(-rows // 5000)), seed=seed)
    if name == "crimes":
        return generate_crimes(rows, seed)
    raise KeyError(f"no synthetic generator for table {name!r}")
