"""What a plan will cost before anything is built: table statistics (``table_stats``),
predicate selectivity (``selectivity``), each operator's memory (``memory``) against the
registration budget (``budget``)."""
