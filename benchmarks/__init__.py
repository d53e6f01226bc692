"""The benchmark harness: pgbaton beside its Python peers and a raw-SQL ceiling (`make bench`)."""
