"""A registered query from SQL to a running pipeline: the driver every front uses."""
