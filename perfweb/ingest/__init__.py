"""Ingest: the one writer of a run's incoming data, above the two apps it writes.

A batch is stored in one short transaction that touches both apps' tables: the run's
bookkeeping (perfweb.runs: receipt, process and run counters, facts, devices) and the
batch's samples as chunks (perfweb.series: series rows and chunk rows, in the chunk format
that series' codec defines). This package owns that transaction, so "who writes a chunk" has
one answer: `batches.batch_store` for what agents send, and series' own compaction for
rewriting stored chunks. The layering is one-way: ingest imports runs and series, series
imports runs (a series belongs to a run), runs imports neither.
"""
