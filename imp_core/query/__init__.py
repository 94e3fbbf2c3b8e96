"""A registered query from SQL to a running pipeline: preparation (``prepare``: plan,
partitions, safety, within ``limits``), its scan specs (``scan_spec``), the data layer
that wires its pipeline (``data_layer``) and the driver every front runs it by
(``driver``)."""
