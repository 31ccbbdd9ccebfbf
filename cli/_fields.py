"""Command-line options made from the fields of the models they set, so that a flag's name, help, type,
range and default are written once, on the field: a config key's in `pipeline/config/models.py`, a stage
input that no config holds on the stage's request model (`TwinRequest`, `Fa3Request`, ...). A command
lists what it takes with `@takes(opt("bench.requests"), ...)`; the options appear in that order, followed
by the command's own parameters (`--config`, `--json`, switches of its own), and the command receives the
values typed in a `Given`.

How a field becomes an option:
- the flag is `--` + the field's name with dashes, unless the field spells it (`flag("--timeout")` in its
  `json_schema_extra`, also for short names and `--x/--no-x` pairs); the help is the field's description;
- the type is the field's when it is bool, int, float (or a path, `flag(path=True)`), else text: the
  config parses lists (`3..6`), fractions (`5%`) and choices, and names the key when one is wrong;
- a config key's option has no default of its own: one not typed leaves the layered config (preset <
  file < environment) to decide, and `--help` and docs/cli.md show the packaged preset's value. A request
  model's input takes the field's default;
- a range is checked on the command line only where the field asks for it (`flag(checked=True)`), from
  the field's own bounds; other values are checked by the config or the request model.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Annotated, Any, TypeVar

import annotated_types
import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from specq.pipeline.config.models import SpecqConfig

F = TypeVar("F", bound=Callable[..., Any])
_MISSING = inspect.Parameter.empty


def shown(value: Any) -> str:
    """A default as help and docs/cli.md show it: on/off, `a,b` for lists, `value` otherwise."""
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list | tuple):
        return f"`{','.join(map(str, value))}`"
    return f"`{value}`"


@cache
def packaged_defaults() -> SpecqConfig:
    """The configuration with no file, environment or flag: the packaged default preset over the models'
    defaults (what an option not typed falls back to on a machine with no SPECQ_* variables)."""
    from specq.pipeline.config.loader import read_preset

    preset = {k: v for k, v in read_preset("default").items() if isinstance(v, dict)}
    return SpecqConfig.model_validate(preset)


@dataclass(frozen=True)
class Flag:
    """One option (or argument) of a command and the field it sets: `section` names the config section
    the value goes to, None for an input of a request model."""

    model: type[BaseModel]
    field: str
    section: str | None
    argument: bool = False
    required: bool = False  # arguments: the command cannot run without it
    argument_help: str | None = None  # arguments: the command describes its own positional input
    dest: str | None = None
    metavar: str | None = None
    path: bool = False  # arguments: a path

    @property
    def key(self) -> str:
        return f"{self.section or self.model.__name__}.{self.field}"

    @property
    def info(self) -> FieldInfo:
        return self.model.model_fields[self.field]

    @property
    def spec(self) -> dict[str, Any]:
        """The field's `flag(...)` metadata (empty when it has none)."""
        extra = self.info.json_schema_extra
        cli = extra.get("cli") if isinstance(extra, dict) else None
        return dict(cli) if isinstance(cli, dict) else {}

    @property
    def name(self) -> str:
        return self.dest or self.field

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.spec.get("names") or (f"--{self.field.replace('_', '-')}",))

    @property
    def help(self) -> str | None:
        return self.argument_help if self.argument else self.info.description

    @property
    def default(self) -> Any:
        """What the option passes when not typed: None for a config key (the config decides), else the
        request model's default; `_MISSING` for a required input."""
        if self.section is not None:
            return None
        if self.info.is_required():
            return _MISSING
        default = self.info.get_default(call_default_factory=True)
        if isinstance(default, tuple | list):  # a repeatable option: none given means the field's default
            return list(default) or None
        return default

    @property
    def shown_default(self) -> str | None:
        """The default `--help` shows for a config key (the packaged preset's value); None: nothing."""
        if self.section is None:
            return None
        value = getattr(getattr(packaged_defaults(), self.section), self.field)
        return None if value is None or value == [] else shown(value).strip("`")

    def cli_type(self) -> Any:
        """The option's Python type as Typer reads it (see the module docstring)."""
        ann = _strip_none(self.info.annotation)
        spec = self.spec
        path = bool(spec.get("path") or (self.argument and self.path))
        if spec.get("text") or _parsed_from_text(self.model, self.field):
            return str
        if typing.get_origin(ann) in (tuple, list):  # a repeatable option, or an argument of several
            (item, *_) = typing.get_args(ann)
            item = Path if path else _choices(item) if spec.get("choices") else item
            return list[item]  # type: ignore[valid-type]
        if path:
            return Path
        if isinstance(spec.get("choices"), list):  # values the stage lists (its presets)
            return _choices(typing.Literal[tuple(spec["choices"])])
        if spec.get("choices"):
            return ann
        if typing.get_origin(ann) is typing.Literal and all(type(a) is int for a in typing.get_args(ann)):
            return int  # a choice of numbers (`bits`) is read as a number, as the config reads it
        return ann if ann in (bool, int, float) else str

    def parameter(self) -> inspect.Parameter:
        t = self.cli_type()
        if self.default is None or (self.section is not None and not self.argument):
            t = t | None
        if self.argument:
            info: Any = typer.Argument(help=self.help, metavar=self.metavar)
            default = None if not self.required else _MISSING
            t = self.cli_type() if self.required else self.cli_type() | None
        else:
            # in `Annotated`, Option's first positional is a flag name, not its default
            info = typer.Option(*self.names, help=self.help, **self._range(), **self._shown())  # type: ignore[misc]
            default = self.default
        return inspect.Parameter(
            self.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[t, info]
        )

    def annotated(self) -> Any:
        """The option as an `Annotated` type, for a signature written out by hand (default: None)."""
        return self.parameter().annotation

    def _shown(self) -> dict[str, Any]:
        value = self.shown_default
        return {"show_default": value} if value is not None else {}

    def _range(self) -> dict[str, Any]:
        """The field's bounds as Typer's min/max (closed) or a callback (open bounds), when checked here."""
        if not self.spec.get("checked"):
            return {}
        out: dict[str, Any] = {}
        open_lo = open_hi = None
        for m in self.info.metadata:
            if isinstance(m, annotated_types.Ge):
                out["min"] = m.ge
            elif isinstance(m, annotated_types.Le):
                out["max"] = m.le
            elif isinstance(m, annotated_types.Gt):
                open_lo = m.gt
            elif isinstance(m, annotated_types.Lt):
                open_hi = m.lt
        if open_lo is not None or open_hi is not None:
            out["callback"] = _open_range(open_lo, open_hi)
        return out


def _open_range(lo: Any, hi: Any) -> Callable[[Any], Any]:
    """A check for bounds Typer's min/max cannot express (x > lo, x < hi), worded as Typer words its own."""
    if lo is not None and hi is not None:
        bounds = f"{lo}<x<{hi}"
    else:
        bounds = f"x>{lo}" if lo is not None else f"x<{hi}"

    def check(value: Any) -> Any:
        if value is not None and ((lo is not None and value <= lo) or (hi is not None and value >= hi)):
            raise typer.BadParameter(f"{value} is not in the range {bounds}.")
        return value

    return check


@cache
def _choices(literal: Any) -> type[Enum]:
    """A Literal's values as a str Enum: how Typer takes a repeatable option with choices."""
    values = [str(v) for v in typing.get_args(literal)]
    return Enum("Choice", {v: v for v in values}, type=str)  # type: ignore[return-value]


def _strip_none(ann: Any) -> Any:
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        return args[0] if len(args) == 1 else ann
    return ann


def _parsed_from_text(model: type[BaseModel], field: str) -> bool:
    """Whether the model parses the field from text first (a `mode="before"` validator: `3..6`, `5%`)."""
    decorators = model.__pydantic_decorators__.field_validators.values()
    return any(d.info.mode == "before" and field in d.info.fields for d in decorators)


def opt(
    key: str | type[BaseModel],
    field: str | None = None,
    *,
    dest: str | None = None,
) -> Flag:
    """The option for config key `section.field` (`opt("bench.requests")`), or for a request model's own
    field (`opt(TwinRequest, "seed")`)."""
    model, name, section = _resolve(key, field)
    return Flag(model, name, section, dest=dest)


def arg(
    key: str | type[BaseModel],
    field: str | None = None,
    *,
    dest: str,
    required: bool = False,
    help: str | None = None,
    metavar: str | None = None,
    path: bool = False,
) -> Flag:
    """A positional argument that sets a field; `help` is the command's own words for its input (the
    field's description when not given)."""
    model, name, section = _resolve(key, field)
    text = help if help is not None else model.model_fields[name].description
    return Flag(model, name, section, argument=True, required=required, argument_help=text, dest=dest,
                metavar=metavar, path=path)  # fmt: skip


def _resolve(key: str | type[BaseModel], field: str | None) -> tuple[type[BaseModel], str, str | None]:
    if isinstance(key, str):
        section, _, name = key.partition(".")
        annotation = SpecqConfig.model_fields[section].annotation
        assert isinstance(annotation, type) and issubclass(annotation, BaseModel), key
        model, section_name = annotation, section
    else:
        assert field is not None
        model, name, section_name = key, field, None
    if name not in model.model_fields:
        raise KeyError(f"{model.__name__} has no field {name!r}")
    return model, name, section_name


def _plain(value: Any) -> Any:
    """A typed value as a config or request holds it: paths as strings, choices as their values."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class Given(dict[str, Any]):
    """The values of a command's field options, by parameter name (None: not typed)."""

    def __init__(self, values: dict[str, Any], flags: tuple[Flag, ...]) -> None:
        super().__init__(values)
        self.flags = flags

    def _items(self) -> Iterator[tuple[Flag, Any]]:
        for f in self.flags:
            yield f, _plain(self[f.name])

    def sections(self, **extra: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """The config keys typed, by section: the flags layer of `resolve_config` (with `extra` keys of
        the command's own merged in)."""
        out: dict[str, dict[str, Any]] = {}
        for f, value in self._items():
            if f.section is not None and value is not None:
                out.setdefault(f.section, {})[f.field] = value
        for section, values in extra.items():
            out.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
        return out

    def inputs(self, model: type[BaseModel]) -> dict[str, Any]:
        """The values of `model`'s own fields (a request model that no config holds); one not given (None)
        is left to the model's default."""
        return {
            f.field: value
            for f, value in self._items()
            if f.section is None and f.model is model and value is not None
        }


def takes(*items: Flag | str) -> Callable[[F], F]:
    """Give a command the options of `items` (a string places one of the command's own parameters there).
    The command's first parameter receives them as a `Given`."""

    def wrap(func: F) -> F:
        sig = inspect.signature(func, eval_str=True)
        _given, *rest = sig.parameters.values()
        own = {p.name: p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in rest}
        flags = tuple(i for i in items if isinstance(i, Flag))
        params: list[inspect.Parameter] = []
        for item in items:
            params.append(own.pop(item) if isinstance(item, str) else item.parameter())
        params += own.values()
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise TypeError(f"{func.__name__}: two options share a parameter name in {names}")

        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            given = Given({f.name: kwargs.pop(f.name) for f in flags}, flags)
            return func(given, **kwargs)

        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {}
        command.__flags__ = flags  # type: ignore[attr-defined]
        return command  # type: ignore[return-value]

    return wrap


def flags_of(callback: Any) -> tuple[Flag, ...]:
    """The field options a Typer command's callback was given by `takes` (none for other commands)."""
    return tuple(getattr(callback, "__flags__", ()))
