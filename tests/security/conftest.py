"""The hostile-input tests run on the integration fixtures: real worker and beat
processes on PostgreSQL + Redis and on the embedded default."""

from tests.integration.conftest import (  # noqa: F401  (fixtures, found by name)
    bare_stack,
    shared_stack,
    stack,
    stack_urls,
)
