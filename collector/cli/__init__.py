"""The ``collector`` command line: options, parser and commands."""
