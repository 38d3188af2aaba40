"""The node journal: one RocksDB store per node, the only authority for cleanup (design §5)."""
