"""Advice on how to sketch and lay out tables: the sketch attribute per table
(``attributes``) and the order each table should be laid out in (``layouts``)."""
