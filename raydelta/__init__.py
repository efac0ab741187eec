"""raydelta: a Delta Lake transaction-log engine where Ray actors own each table."""
