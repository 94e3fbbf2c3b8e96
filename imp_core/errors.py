"""Domain errors. Each names what went wrong and, for SQL, where.

Every error derives from ``ImpError`` and carries a ``code`` that the service layer
maps onto a transport status (gRPC) without knowing the error classes.
"""

from __future__ import annotations


class ImpError(Exception):
    """Base class of every error the engine raises on purpose."""

    code = "INTERNAL"


class SqlSyntaxError(ImpError):
    """The SQL text does not parse."""

    code = "INVALID_ARGUMENT"

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        where = f" (line {line}, column {column})" if line is not None else ""
        super().__init__(f"malformed SQL{where}: {message}")
        self.line = line
        self.column = column


class UnsupportedSqlError(ImpError):
    """The SQL parses but uses a construct outside the supported subset."""

    code = "UNIMPLEMENTED"

    def __init__(self, construct: str, line: int | None = None, column: int | None = None,
                 detail: str = ""):
        where = f" at line {line}, column {column}" if line is not None else ""
        extra = f": {detail}" if detail else ""
        super().__init__(f"unsupported SQL construct {construct}{where}{extra}")
        self.construct = construct
        self.line = line
        self.column = column


class UnknownTableError(ImpError):
    code = "NOT_FOUND"


class UnknownColumnError(ImpError):
    code = "INVALID_ARGUMENT"


class UnknownQueryError(ImpError):
    code = "NOT_FOUND"


class DroppedQueryError(UnknownQueryError):
    """A handle of a query that was dropped since: it answers nothing, not even from the
    state the query had (an ``UnknownQueryError``, so NOT_FOUND)."""


class SchemaMismatchError(ImpError):
    """A batch's columns or types do not match the table it is meant for."""

    code = "INVALID_ARGUMENT"


class UnsafeSketchError(ImpError):
    """A sketch on this attribute could change the query's result (section 4.4)."""

    code = "FAILED_PRECONDITION"


class PartitionError(ImpError):
    code = "INVALID_ARGUMENT"


class SnapshotError(ImpError):
    """A state snapshot is damaged, of an unknown format, or for another plan."""

    code = "DATA_LOSS"


class StateExhaustedError(ImpError):
    """A bounded buffer (min/max, top-k) ran dry and no refill source is configured."""

    code = "FAILED_PRECONDITION"


class TableExistsError(ImpError):
    """A table of that name (or a Delta table at that location) already exists."""

    code = "ALREADY_EXISTS"


class VersionError(ImpError):
    """A table version (or version range) outside what the table's log holds."""

    code = "OUT_OF_RANGE"


class UnsupportedTableError(ImpError):
    """A Delta table uses a feature the store cannot read as plain Parquet files."""

    code = "FAILED_PRECONDITION"


class QueryExistsError(ImpError):
    """A query of that name is already registered."""

    code = "ALREADY_EXISTS"


class UnshardableQueryError(ImpError):
    """A query's state cannot be split over several actors (the reason says why)."""

    code = "FAILED_PRECONDITION"


class WorkerLostError(ImpError):
    """A query actor died or became unreachable; its state must be restored."""

    code = "UNAVAILABLE"


class NotReadOnlyError(ImpError):
    """SQL from a client that is not one read-only SELECT (it writes, changes the
    session, calls into the JVM or reads files by path)."""

    code = "INVALID_ARGUMENT"

    def __init__(self, what: str, line: int | None = None, column: int | None = None):
        where = f" at line {line}, column {column}" if line is not None else ""
        super().__init__(f"only read-only SELECT statements are accepted, not {what}{where}")
        self.what = what
        self.line = line
        self.column = column


class InvalidNameError(ImpError):
    """A name (of a query, a table...) that does not follow the naming rules."""

    code = "INVALID_ARGUMENT"


class DomainViolationError(ImpError):
    """A table version holds a value outside a column's declared domain (written by a
    writer that bypassed the domain's CHECK constraint): sketches whose safety the
    domain vouched for cannot be maintained over it."""

    code = "FAILED_PRECONDITION"


class SqlRuntimeError(ImpError):
    """The query raises when run, as Spark does with ANSI mode on (a zero divisor, an
    overflow, a string that is no number): ``error_class`` is Spark's name for it
    (DIVIDE_BY_ZERO, REMAINDER_BY_ZERO, ARITHMETIC_OVERFLOW, NUMERIC_VALUE_OUT_OF_RANGE,
    CAST_INVALID_INPUT)
    and ``rows`` how many current rows raise it (0 when not known)."""

    code = "FAILED_PRECONDITION"

    def __init__(self, error_class: str, message: str, rows: int = 0):
        super().__init__(f"[{error_class}] {message}")
        self.error_class = error_class
        self.rows = rows


class RequestLimitError(ImpError):
    """A request beyond a configured limit (fragments, shards, ...): refused before any
    work starts; the message names the limit and its setting."""

    code = "RESOURCE_EXHAUSTED"


class NestingLimitError(RequestLimitError):
    """A query whose syntax tree nests deeper than the configured limit (a chain of
    arithmetic, nested function calls or subqueries; AND / OR chains and IN lists of any
    length are accepted): refused when parsed, before anything is planned, with the
    depth found, where, the limit and its setting (``setting``, an environment
    variable)."""

    def __init__(self, depth: int, limit: int, setting: str, line: int | None = None,
                 column: int | None = None, stage: str = ""):
        where = f" at line {line}, column {column}" if line is not None else ""
        if stage:  # within the limit, yet too deep for a pass (a net, not the rule)
            message = (f"the query nests {depth:,} levels deep{where}, too deep for the "
                       f"{stage} although within the limit of {limit:,} ({setting}); lower "
                       f"{setting} to refuse such queries before any work")
        else:
            message = (f"the query nests {depth:,} levels deep{where}, more than the limit "
                       f"of {limit:,} ({setting})")
        super().__init__(
            f"{message}: AND / OR chains and IN lists of any length are accepted, but not "
            "a chain of arithmetic, nested function calls or nested subqueries this deep")
        self.depth = depth
        self.limit = limit
        self.line = line
        self.column = column


class PlanTooLargeError(ImpError):
    """A plan an operator of which would need more memory (its state and the largest
    batch it materializes) than the registration memory budget allows; refused before
    anything is built.

    ``operator``: the operator's ``_describe()`` text ("Join ON ..."); ``op_id`` its id
    in the pipeline ("" when not known); ``bytes`` its estimated need; ``total`` the
    whole plan's; ``budget`` the limit; ``what`` says what the bytes hold ("materialize
    ~N joined row pairs"); ``hint`` how to fix it.
    """

    code = "RESOURCE_EXHAUSTED"

    def __init__(self, operator: str, op_id: str, bytes: float, total: float, budget: int,
                 what: str = "", hint: str = ""):
        where = f" (operator {op_id})" if op_id else ""
        what = f" would {what}:" if what else " would need"
        whole = f" (the whole plan ~{human_bytes(total)})" if total > 1.05 * bytes else ""
        super().__init__(
            f"plan too large for memory: {operator}{where}{what} ~{human_bytes(bytes)}"
            f"{whole}, over the registration memory budget of {human_bytes(budget)} "
            f"({budget} bytes)" + (f"; {hint}" if hint else ""))
        self.operator = operator
        self.op_id = op_id
        self.bytes = bytes
        self.total = total
        self.budget = budget


class BootstrapModeError(ImpError):
    """An unknown way to bootstrap a query's state."""

    code = "INVALID_ARGUMENT"


class ProbedSideError(ImpError):
    """A probed join side was asked for something only an in-memory side has."""


class SparkCompileError(ImpError):
    """A plan or value that has no Spark SQL translation."""

    code = "UNIMPLEMENTED"


class SparkUnavailableError(ImpError):
    """Spark cannot start (no Java, or the session failed to come up)."""

    code = "UNAVAILABLE"


class LifecycleError(ImpError):
    """A query was asked to move between two states its lifecycle does not connect."""


class RuntimeUnavailableError(ImpError):
    """The actor runtime (Ray) is lost or unreachable; the call did nothing."""

    code = "UNAVAILABLE"


class StoreBusyError(ImpError):
    """The store is owned by another live coordinator (or this one lost its lease)."""

    code = "FAILED_PRECONDITION"


class IdempotencyKeyError(ImpError):
    """An idempotency key that is malformed, or that was sent before with another
    request (a key names one logical call: its retries must send the same request)."""

    code = "INVALID_ARGUMENT"


class QuarantinedRequestError(ImpError):
    """A request that ended a server process before (a crash in native code while it
    ran): it is not run again, on this server or another of the same store."""

    code = "FAILED_PRECONDITION"


def human_bytes(n: float) -> str:
    """``n`` bytes as a short text with a binary unit (``1.5 GiB``)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB" if abs(n) < 1024 else f"{n:.2e} PiB"
