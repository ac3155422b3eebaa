"""The `kernelfoundry` command line: serve, up, run, evaluate."""
