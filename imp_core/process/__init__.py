"""The process's standard streams and memory: JSON-only stdout (``stdout``), progress on
stderr (``progress``), giving freed memory back to the system (``memory_release``)."""
