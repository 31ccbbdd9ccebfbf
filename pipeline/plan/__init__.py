"""Stage: plan."""
