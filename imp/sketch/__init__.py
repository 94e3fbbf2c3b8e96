"""Range partitions (the paper's Φ) and provenance sketches over them."""

from imp.sketch.partition import PartitionSet, RangePartition
from imp.sketch.sketch import Sketch

__all__ = ["PartitionSet", "RangePartition", "Sketch"]
