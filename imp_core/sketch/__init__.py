"""Range partitions (the paper's Φ) and provenance sketches over them."""

from imp_core.sketch.partition import PartitionSet, RangePartition
from imp_core.sketch.sketch import Sketch

__all__ = ["PartitionSet", "RangePartition", "Sketch"]
