"""pgbaton beside other libraries: their connections, and their migration tools."""
