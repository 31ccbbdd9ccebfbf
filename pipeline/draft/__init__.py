"""Stage: draft."""
