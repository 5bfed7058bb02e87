"""Market data stage: DBN ingest and validation, MBO book rebuild, synthetic market, bars."""
