"""Stage: quantize."""
