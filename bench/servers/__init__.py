"""PostgreSQL full-page writes and InnoDB's doublewrite against pagestore's recovery files.

``python -m bench.servers`` (``make bench-servers``) builds each server in a
temporary directory, runs one update workload on every system and setting, and
writes ``summary`` rows (``scenario="torn-page"``) into the result directory;
``section`` renders them for the report. See docs/bench.md.
"""
