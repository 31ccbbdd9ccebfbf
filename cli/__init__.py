"""specq's command line: one Typer app (`app.py`), one module per command. Commands parse options into a
typed config and call one pipeline entry point; errors are mapped to exit codes once, in `app.py`."""
