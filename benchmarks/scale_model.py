"""A scale model of the service's 22 TPC-H queries (issue 52): how per-batch time, state,
index memory and disk and the machine's memory grow with the TPC-H scale factor, fitted
to ``imp bench scale`` reports at several scale factors and checked against them, and
projected to scale factors not run (``imp bench scale-model REPORT...``).

Model. A time is a power of the scale factor, ``y = a * SF**b``, fitted by least squares
on logarithms (``b`` near 1: grows with the data; near 0: does not). A size is a fixed
part plus a part per scale factor, ``y = c + a * SF`` (least squares): memory holds a
runtime that does not grow (the Spark driver's heap, the interpreter) beside the data
that does, which a power of SF would bend. Per query: the median maintenance time of a
100-row batch (``imp_ms``), the recapture time (``fm_s``), the registration time and the
query's own state. For the service: the sum of the queries' state, the shared indexes
in memory and on disk, the machine's peak memory while maintaining and in all, the
registrations together and one batch of every query.

Check. Fitted to every report but the largest scale factor's, the model predicts that
one, and the prediction is set beside the measurement (out of sample); with reports at
SF 1, 3 and 10 the check is the SF 10 run predicted from SF 1 and 3. The projection uses
the fit to every report.

Nodes. The reports are one-machine runs; the nodes a scale factor needs are the
projected peak memory over a node's memory (``node_memory_gib``, of which
``NODE_USABLE`` is given to the service), which assumes the state divides over nodes by
key hash as the design places it: a projection, not a measurement.

Invariant: a quantity is fitted only from reports where it is positive at two or more
scale factors; otherwise it is reported as not fitted (None), never extrapolated from
one point.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

NODE_USABLE = 0.75  # of a node's memory given to the service (the rest: OS, page cache)
PROJECT_AT = (100.0, 1000.0)
PER_QUERY = ("imp_ms", "fm_s", "state_mib", "bootstrap_s")
# sizes: ``c + a * SF``; every other quantity (times) ``a * SF**b``
# (the shared indexes' memory is capped by IMP_INDEX_MEMORY_MIB: a power, which stays
# positive, rather than a line)
LINEAR = frozenset({"state_mib", "state_total_mib", "indexes_disk_mib", "peak_machine_mib",
                    "maintain_machine_mib"})


def load_reports(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """The ``imp bench scale`` reports at ``paths``, by scale factor; a file that is not
    such a report raises ``ValueError`` naming it."""
    reports = []
    for path in paths:
        try:
            report = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: not a readable JSON report ({exc})") from exc
        if report.get("benchmark") != "scale" or "results" not in report:
            raise ValueError(f"{path}: not an `imp bench scale` report")
        reports.append(report)
    sfs = [r["parameters"]["sf"] for r in reports]
    if len(set(sfs)) != len(sfs):
        raise ValueError(f"two reports at the same scale factor: {sorted(sfs)}")
    return sorted(reports, key=lambda r: r["parameters"]["sf"])


def service_figures(report: dict[str, Any]) -> dict[str, float]:
    """A report's service-wide quantities (MiB, seconds)."""
    summary, memory = report["summary"], report.get("memory", {})
    return {
        "state_total_mib": float(summary["state_total_mib"]),
        "indexes_memory_mib": float(summary.get("shared_indexes_mib", 0.0)),
        "indexes_disk_mib": float(summary.get("shared_indexes_disk_mib", 0.0)),
        "peak_machine_mib": float(summary["peak_machine_used_mib"]),
        "maintain_machine_mib": float(memory.get("maintain", {}).get("machine_used", 0.0)),
        "registration_total_s": float(summary["registration_total_s"]),
        "batch_total_ms": float(sum(r["imp_ms"] for r in report["results"]
                                    if r.get("imp_ms") is not None)),
    }


def fit(sfs: Sequence[float], values: Sequence[float]) -> tuple[float, float] | None:
    """``(a, b)`` of ``a * SF**b`` through the positive points, or None with fewer than
    two of them at distinct scale factors."""
    points = [(s, v) for s, v in zip(sfs, values) if v is not None and v > 0 and s > 0]
    if len({s for s, _ in points}) < 2:
        return None
    x = np.log([s for s, _ in points])
    y = np.log([v for _, v in points])
    b, log_a = np.polyfit(x, y, 1)
    return float(math.exp(log_a)), float(b)


def fit_linear(sfs: Sequence[float], values: Sequence[float | None]
               ) -> tuple[float, float] | None:
    """``(c, a)`` of ``c + a * SF`` through the points, or None with fewer than two of
    them at distinct scale factors."""
    points = [(s, v) for s, v in zip(sfs, values) if v is not None and not math.isnan(v)]
    if len({s for s, _ in points}) < 2:
        return None
    a, c = np.polyfit([s for s, _ in points], [v for _, v in points], 1)
    return float(c), float(a)


def at(model: tuple[float, float] | None, sf: float, linear: bool = False) -> float | None:
    if model is None:
        return None
    return model[0] + model[1] * sf if linear else model[0] * sf ** model[1]


def _series(reports: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Quantity -> name ("service" or a query) -> one value per report (NaN: absent)."""
    out: dict[str, dict[str, list[float]]] = {}
    for i, report in enumerate(reports):
        for key, value in service_figures(report).items():
            out.setdefault(key, {}).setdefault("service", [math.nan] * len(reports))[i] = value
        for row in report["results"]:
            for key in PER_QUERY:
                value = row.get(key)
                series = out.setdefault(key, {}).setdefault(row["query"],
                                                            [math.nan] * len(reports))
                series[i] = math.nan if value is None else float(value)
    return out


def scale_model(reports: list[dict[str, Any]], node_memory_gib: float = 24.0,
                project_at: Sequence[float] = PROJECT_AT) -> dict[str, Any]:
    """The model of the module docstring over ``reports`` (sorted by scale factor)."""
    if len(reports) < 2:
        raise ValueError("a scale model needs reports at two scale factors or more")
    sfs = [float(r["parameters"]["sf"]) for r in reports]
    series = _series(reports)
    rows = []
    for quantity, by_name in series.items():
        for name, values in by_name.items():
            clean = [None if math.isnan(v) else v for v in values]
            linear = quantity in LINEAR
            how = fit_linear if linear else fit
            whole = how(sfs, clean)
            held_out = how(sfs[:-1], clean[:-1]) if len(sfs) >= 3 else None
            predicted = at(held_out, sfs[-1], linear)
            measured = clean[-1]
            rows.append({
                "quantity": quantity, "name": name, "measured": dict(zip(sfs, clean)),
                "form": "c + a*SF" if linear else "a*SF^b",
                "a": None if whole is None else (whole[1] if linear else whole[0]),
                "b": None if whole is None or linear else whole[1],
                "c": None if whole is None or not linear else whole[0],
                "check_sf": sfs[-1], "check_predicted": predicted,
                "check_error": None if predicted is None or not measured
                else predicted / measured - 1.0,
                "projected": {sf: at(whole, sf, linear) for sf in project_at}})
    service = {r["quantity"]: r for r in rows if r["name"] == "service"}
    usable_mib = node_memory_gib * 1024 * NODE_USABLE
    nodes = {}
    for sf in project_at:
        peak = service["peak_machine_mib"]["projected"][sf]
        nodes[sf] = None if peak is None else max(1, math.ceil(peak / usable_mib))
    return {"scale_factors": sfs, "node_memory_gib": node_memory_gib,
            "node_usable_share": NODE_USABLE, "rows": rows, "nodes": nodes}


def _formula(row: dict[str, Any]) -> str:
    """A fitted row's model as text: ``2.1 SF^0.71`` or ``7,300 + 1,480 SF``."""
    if row["a"] is None:
        return "-"
    if row["form"] == "c + a*SF":
        return f"{row['c']:,.0f} + {row['a']:,.1f} SF"
    return f"{row['a']:,.3g} SF^{row['b']:.2f}"


def _error(error: float | None) -> str:
    """`` (+12%)``: a prediction's relative error (none shown without one)."""
    if error is None:
        return ""
    return f" ({0.0 if abs(error) < 0.005 else error:+.0%})"


def markdown(model: dict[str, Any]) -> str:
    """The model as two tables: the service's quantities, then each query's per-batch
    time."""
    sfs, project = model["scale_factors"], list(model["nodes"])

    def num(v: float | None, digits: int = 1) -> str:
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) \
            else f"{v:,.{digits}f}"

    head = " | ".join(f"SF {s:g}" for s in sfs)
    proj = " | ".join(f"SF {s:g} (projected)" for s in project)
    out = [f"| quantity | {head} | model | SF {sfs[-1]:g} predicted from the others "
           f"| {proj} |",
           "|---|" + "---:|" * (len(sfs) + 2 + len(project))]
    for r in (r for r in model["rows"] if r["name"] == "service"):
        out.append(f"| {r['quantity']} | " + " | ".join(num(r["measured"][s]) for s in sfs)
                   + f" | {_formula(r)} | {num(r['check_predicted'])}"
                   + _error(r["check_error"])
                   + " | " + " | ".join(num(r["projected"][s], 0) for s in project) + " |")
    out.append("")
    out.append("| nodes of " + f"{model['node_memory_gib']:g} GiB | " + " | ".join(
        str(model["nodes"][s]) for s in project) + " |")
    out.append("|---|" + "---:|" * len(project))
    out.append("")
    out.append(f"| query: IMP ms per batch | {head} | exponent b | SF {sfs[-1]:g} predicted "
               f"| {proj} |")
    out.append("|---|" + "---:|" * (len(sfs) + 2 + len(project)))
    for r in sorted((r for r in model["rows"] if r["quantity"] == "imp_ms"),
                    key=lambda r: r["name"]):
        out.append(f"| {r['name']} | " + " | ".join(num(r["measured"][s]) for s in sfs)
                   + f" | {num(r['b'], 2)} | {num(r['check_predicted'])}"
                   + _error(r["check_error"])
                   + " | " + " | ".join(num(r["projected"][s]) for s in project) + " |")
    return "\n".join(out)
