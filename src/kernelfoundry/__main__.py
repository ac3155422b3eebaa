"""`python -m kernelfoundry` is the `kernelfoundry` command."""

from kernelfoundry.cli.main import app

app()
