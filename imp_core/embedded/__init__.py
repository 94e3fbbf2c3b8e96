"""The embedded fronts: in-memory tables and their registered queries (``api.Engine``,
over ``memtable.MemTable``) and queries maintained over a versioned table store in this
process (``maintainer.Maintainer``)."""
