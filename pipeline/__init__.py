"""specq's typed pipeline: one package per stage (calibration, quantize, convert, serve, bench, plan, toy,
draft, report). Nothing here imports Typer or writes to a console; long work reports through a progress
callback, and failures are raised as `SpecqError` subclasses that the CLI maps to exit codes."""

__version__ = "0.1.0"
