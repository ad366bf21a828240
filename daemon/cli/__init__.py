"""The `propel` command line: one module per command family."""
