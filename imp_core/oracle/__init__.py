"""The non-incremental oracle: the reference evaluator that captures a sketch and a result
from scratch (``reference``), and how two results are compared (``results``)."""
