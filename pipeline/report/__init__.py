"""Stage: report — the versioned benchmark report, its formatters and plots, comparison and CI gates."""

from .models import SCHEMA_VERSION, BenchReport

__all__ = ["SCHEMA_VERSION", "BenchReport"]
