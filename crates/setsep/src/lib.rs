//! SetSep, the Global Partition Table: a few bits per key, no keys stored, maps every flow to its handling node.
