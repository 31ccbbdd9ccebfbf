"""Resolve the layered configuration: packaged preset (`configs/default.toml`) < `--config FILE` (TOML, or an
INI shaped like the tutorial's `speculative_config.ini`; a bare name picks a packaged preset) < `SPECQ_*`
environment variables (`SPECQ_ENGINE__CACHE_MAX_ENTRY_COUNT=0.6`) < flags the user actually typed.
Each layer's keys are checked against the schema before merging, so an unknown key is reported with the
layer it came from and the closest valid key."""

from __future__ import annotations

import configparser
import difflib
import json
import os
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from ..errors import ConfigError, decode_error
from .models import SpecqConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ENV_PREFIX = "SPECQ_"
# Keys users bring from the tutorial that LMDeploy 0.18 has no equivalent for.
REJECTED_KEYS = {
    "use_dynamic_draft_length": "LMDeploy 0.18 has no dynamic draft length: remove it and set "
    "num_draft_tokens (specq bench --draft-tokens 3..6 finds the best fixed value)",
}
# Keys that are not fields but are not errors either (documentation in presets).
META_KEYS = {"description"}


def preset_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("specq.configs").iterdir() if p.name.endswith(".toml"))


def read_preset(name: str) -> dict[str, Any]:
    ref = resources.files("specq.configs").joinpath(f"{name}.toml")
    if not ref.is_file():
        raise ConfigError(f"no packaged preset '{name}'; available: {', '.join(preset_names())}")
    return _parse_toml(ref.read_text(encoding="utf-8"), f"preset {name}")


def _parse_toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: not valid TOML: {e}") from None


def _coerce(value: str) -> Any:
    """An INI or environment value as the scalar it spells (bool, int, float, JSON list) or a string."""
    v = value.strip()
    low = v.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    if v.startswith("[") or v.startswith("{"):
        try:
            return json.loads(v)
        except json.JSONDecodeError:
            pass
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
        return v[1:-1]
    return v


def _looks_like_preset(path: Path) -> bool:
    return not path.exists() and "/" not in str(path) and path.suffix.lower() not in (".toml", ".ini", ".cfg")


def read_config_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        if _looks_like_preset(path):
            return read_preset(str(path))
        raise ConfigError(f"config file {path} does not exist")
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory; pass a .toml or .ini file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise decode_error(e, path) from None
    if path.suffix.lower() in (".ini", ".cfg"):
        parser = configparser.ConfigParser(inline_comment_prefixes=("#", ";"), interpolation=None)
        try:
            parser.read_string(text, source=str(path))
        except configparser.Error as e:
            raise ConfigError(f"config file {path}: not valid INI: {str(e).splitlines()[0]}") from None
        return _spelled_bools({s: {k: _coerce(v) for k, v in parser[s].items()} for s in parser.sections()})
    return _parse_toml(text, f"config file {path}")


def env_layer(environ: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        section, _, key = name[len(ENV_PREFIX) :].lower().partition("__")
        out.setdefault(section, {})[key] = _coerce(value)
    return _spelled_bools(out)


def _check_keys(layer: Mapping[str, Any], model: type[BaseModel], source: str, prefix: str = "") -> None:
    fields = model.model_fields
    names = set(fields) | {f.alias for f in fields.values() if f.alias}
    for key, value in layer.items():
        dotted = f"{prefix}{key}"
        if key in REJECTED_KEYS:
            raise ConfigError(f"{source}: '{dotted}' is not supported: {REJECTED_KEYS[key]}")
        if not prefix and key in META_KEYS:
            continue
        if key not in names:
            close = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.5)
            hint = (
                f" (did you mean '{prefix}{close[0]}'?)" if close else f"; valid: {', '.join(sorted(names))}"
            )
            raise ConfigError(f"{_named(source, dotted)}: unknown key '{dotted}'{hint}")
        field = fields.get(key)
        sub = field.annotation if field is not None else None
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{source}: '{dotted}' must be a table of settings, got {value!r}")
            _check_keys(value, sub, source, f"{dotted}.")


def _named(source: str, dotted: str) -> str:
    """The environment layer as the variable the user set; other layers as they are."""
    if source.startswith("environment") and "." in dotted:
        return f"environment variable {ENV_PREFIX}{dotted.replace('.', '__').upper()}"
    return source


def _merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _strip_meta(layer: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in layer.items() if k not in META_KEYS}


def _is_bool(annotation: Any) -> bool:
    if annotation is bool:
        return True
    origin = get_origin(annotation)
    if origin is Annotated:
        return _is_bool(get_args(annotation)[0])
    if origin in (Union, UnionType):
        return any(_is_bool(a) for a in get_args(annotation) if a is not type(None))
    return False


def _as_bool(v: Any) -> Any:
    return bool(v) if type(v) is int and v in (0, 1) else v


def _spelled_bools(layer: dict[str, Any]) -> dict[str, Any]:
    """An environment variable or INI value is text, and 1 and 0 spell a boolean setting there too
    (`SPECQ_ENGINE__STEP_PATCH=1`), as true/yes/on and false/no/off do. A TOML file has booleans of its
    own: there a 1 or a "yes" stays what it is, and a boolean setting refuses it."""
    out: dict[str, Any] = {}
    for name, values in layer.items():
        field = SpecqConfig.model_fields.get(name)
        section = field.annotation if field is not None else None
        if isinstance(values, dict) and isinstance(section, type) and issubclass(section, BaseModel):
            fields = section.model_fields
            spelled = {k for k in values if k in fields and _is_bool(fields[k].annotation)}
            values = {k: _as_bool(v) if k in spelled else v for k, v in values.items()}
        out[name] = values
    return out


def resolve_config(
    config_file: str | Path | None = None,
    flags: Mapping[str, Mapping[str, Any]] | None = None,
    environ: Mapping[str, str] | None = None,
    preset: str = "default",
) -> SpecqConfig:
    """Merge the layers and validate once. `flags` holds only options the user typed, by section."""
    layers: list[tuple[str, dict[str, Any]]] = [(f"preset {preset}", read_preset(preset))]
    if config_file is not None:
        path = Path(config_file)
        source = f"preset {path}" if _looks_like_preset(path) else f"config file {path}"
        layers.append((source, read_config_file(path)))
    layers.append(("environment (SPECQ_*)", env_layer(os.environ if environ is None else environ)))
    layers.append(("command-line flags", {k: dict(v) for k, v in (flags or {}).items() if v}))
    merged: dict[str, Any] = {}
    for source, layer in layers:
        _check_keys(layer, SpecqConfig, source)
        merged = _merge(merged, _strip_meta(layer))
    try:
        return SpecqConfig.model_validate(merged)
    except ValidationError as e:
        err = e.errors()[0]
        loc = [str(p) for p in err["loc"]]
        raise ConfigError(_validation_message(loc, err["msg"], err.get("input"), layers)) from None


def _validation_message(
    loc: list[str], msg: str, value: Any, layers: list[tuple[str, dict[str, Any]]]
) -> str:
    """`section.key: what is wrong (got VALUE, from SOURCE)` in specq's words: no pydantic prefixes, the
    value once and short, and the layer that set it (an environment variable by its name)."""
    where = ".".join(loc)
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    if msg == "Input should be a valid boolean":
        msg = "must be true or false"
    got = repr(value)
    if len(got) > 60:
        got = got[:57] + "..."
    parts = [] if got in msg or value is None else [f"got {got}"]
    source = _source_of(loc, layers)
    if source:
        parts.append(f"from {source}")
    return f"{where}: {msg}" + (f" ({', '.join(parts)})" if parts else "")


def _source_of(loc: list[str], layers: list[tuple[str, dict[str, Any]]]) -> str | None:
    """The highest layer that set `loc` (section, key); None when only the packaged preset did."""
    if len(loc) < 2:
        return None
    for source, layer in reversed(layers):
        section = layer.get(loc[0])
        if isinstance(section, Mapping) and loc[1] in section:
            if source.startswith("environment"):
                return f"environment variable {ENV_PREFIX}{loc[0].upper()}__{loc[1].upper()}"
            if source.startswith("preset default"):
                return None
            return "the command line" if source == "command-line flags" else source
    return None


def config_to_toml(cfg: SpecqConfig, sections: tuple[str, ...] | None = None) -> str:
    """Render the resolved config as TOML (saved beside every artifact so a result can be reproduced)."""
    data = cfg.model_dump(mode="json", by_alias=True)
    lines: list[str] = []
    for section, values in data.items():
        if sections and section not in sections:
            continue
        lines.append(f"[{section}]")
        for key, value in values.items():
            if value is None:
                continue
            lines.append(f"{_toml_key(key)} = {json.dumps(value)}")
        lines.append("")
    return "\n".join(lines)


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").isalnum() else json.dumps(key)
