"""Typed, validated settings loaded from Java-properties ``.conf`` files.

Settings keep BookKeeper's and DistributedLog's key names so an operator's
existing knowledge (and files) carry over. Each setting is declared once,
with its key, default, documentation and check; loading rejects unknown
keys and bad values with a message that names the key.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

from dlog.errors import ConfigError

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def setting(
    key: str,
    default: Any,
    doc: str,
    *,
    min: float | None = None,
    max: float | None = None,
    choices: Iterable[Any] | None = None,
    check: Callable[[Any], str | None] | None = None,
    unit: str = "",
) -> Any:
    """Declare one setting of a :class:`Config` dataclass."""
    meta = {
        "key": key,
        "doc": doc,
        "min": min,
        "max": max,
        "choices": tuple(choices) if choices is not None else None,
        "check": check,
        "unit": unit,
    }
    if isinstance(default, list):
        value = list(default)
        return dataclasses.field(default_factory=lambda: list(value), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def nested(prefix: str, cls: type[Config], doc: str) -> Any:
    """Embed another config whose keys appear under ``prefix`` (e.g. ``bkc.``)."""
    return dataclasses.field(
        default_factory=cls, metadata={"prefix": prefix, "nested": cls, "doc": doc}
    )


def parse_properties(text: str, source: str = "<string>") -> dict[str, str]:
    """Parse Java-properties text: ``key=value`` lines, ``#``/``!`` comments,
    trailing-backslash continuations. A key given twice is an error."""
    props: dict[str, str] = {}
    logical: list[tuple[int, str]] = []
    pending = ""
    pending_line = 0
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if not pending:
            pending_line = lineno
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1]
            continue
        logical.append((pending_line, pending + line))
        pending = ""
    if pending:
        logical.append((pending_line, pending))
    for lineno, line in logical:
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            parts = line.split(None, 1)
            key, value = parts[0], (parts[1] if len(parts) > 1 else "")
        else:
            key, value = line[:sep], line[sep + 1 :]
        key, value = key.strip(), value.strip()
        if not key:
            raise ConfigError(f"{source}:{lineno}", "line has no key")
        if key in props:
            raise ConfigError(key, f"given twice ({source}:{lineno})")
        props[key] = value
    return props


def _base_type(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _base_type(args[0])
    return tp


def _convert(key: str, tp: Any, raw: Any) -> Any:
    base = _base_type(tp)
    origin = typing.get_origin(base)
    if origin is list:
        (item_tp,) = typing.get_args(base) or (str,)
        if isinstance(raw, str):
            items = [p.strip() for p in raw.split(",") if p.strip()]
        elif isinstance(raw, list | tuple):
            items = list(raw)
        else:
            raise ConfigError(key, f"expected a comma-separated list, got {raw!r}")
        return [_convert(key, item_tp, item) for item in items]
    if base is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ConfigError(key, f"expected true or false, got {raw!r}")
    if base is int:
        if isinstance(raw, bool):
            raise ConfigError(key, f"expected an integer, got {raw!r}")
        if isinstance(raw, int):
            return raw
        try:
            return int(str(raw).strip().replace("_", ""), 0)
        except ValueError:
            raise ConfigError(key, f"expected an integer, got {raw!r}") from None
    if base is float:
        if isinstance(raw, bool):
            raise ConfigError(key, f"expected a number, got {raw!r}")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ConfigError(key, f"expected a number, got {raw!r}") from None
        if not math.isfinite(value):  # NaN would slip past every min/max check
            raise ConfigError(key, f"expected a finite number, got {raw!r}")
        return value
    if base is str:
        if not isinstance(raw, str):
            raise ConfigError(key, f"expected a string, got {raw!r}")
        return raw
    raise ConfigError(key, f"unsupported setting type {tp!r}")


def _validate(key: str, meta: Mapping[str, Any], value: Any) -> None:
    values = value if isinstance(value, list) else [value]
    for v in values:
        lo, hi = meta.get("min"), meta.get("max")
        if lo is not None and v < lo:
            raise ConfigError(key, f"must be at least {lo}, got {v!r}")
        if hi is not None and v > hi:
            raise ConfigError(key, f"must be at most {hi}, got {v!r}")
        choices = meta.get("choices")
        if choices is not None and v not in choices:
            allowed = ", ".join(str(c) for c in choices)
            raise ConfigError(key, f"must be one of {allowed}, got {v!r}")
    check = meta.get("check")
    if check is not None:
        problem = check(value)
        if problem:
            raise ConfigError(key, problem)


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


@dataclasses.dataclass(frozen=True)
class Config:
    """Base of every settings dataclass."""

    #: Human title used when rendering the documented ``.conf`` file.
    title: ClassVar[str] = "settings"

    # -- introspection --------------------------------------------------
    @classmethod
    def _fields(cls) -> list[dataclasses.Field[Any]]:
        return [f for f in dataclasses.fields(cls) if f.metadata]

    @classmethod
    def _types(cls) -> dict[str, Any]:
        cached = cls.__dict__.get("_resolved_types")
        if cached is None:
            cached = typing.get_type_hints(cls)
            cls._resolved_types = cached  # type: ignore[attr-defined]
        return cached

    @classmethod
    def setting_keys(cls) -> list[str]:
        """Every key this config accepts, nested ones with their prefix."""
        out: list[str] = []
        for f in cls._fields():
            if "nested" in f.metadata:
                nested_keys = f.metadata["nested"].setting_keys()
                out.extend(f.metadata["prefix"] + k for k in nested_keys)
            else:
                out.append(f.metadata["key"])
        return out

    @classmethod
    def describe(cls) -> list[tuple[str, Any, str, str]]:
        """(key, default, doc, unit) for every setting, for docs and tests."""
        out: list[tuple[str, Any, str, str]] = []
        defaults = cls()
        for f in cls._fields():
            if "nested" in f.metadata:
                for key, default, doc, unit in f.metadata["nested"].describe():
                    out.append((f.metadata["prefix"] + key, default, doc, unit))
            else:
                m = f.metadata
                out.append((m["key"], getattr(defaults, f.name), m["doc"], m["unit"]))
        return out

    # -- loading ---------------------------------------------------------
    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], source: str = "<overrides>") -> Self:
        """Build from ``{key: value}`` (keys as in the ``.conf`` file, or the
        Python attribute names), validating every value."""
        by_key: dict[str, dataclasses.Field[Any]] = {}
        nested_fields: list[dataclasses.Field[Any]] = []
        for f in cls._fields():
            if "nested" in f.metadata:
                nested_fields.append(f)
            else:
                by_key[f.metadata["key"]] = f
                by_key.setdefault(f.name, f)
        kwargs: dict[str, Any] = {}
        nested_values: dict[str, dict[str, Any]] = {f.name: {} for f in nested_fields}
        for key, raw in values.items():
            known = by_key.get(key)
            if known is not None:
                value = _convert(known.metadata["key"], cls._types()[known.name], raw)
                _validate(known.metadata["key"], known.metadata, value)
                kwargs[known.name] = value
                continue
            for nf in nested_fields:
                prefix = nf.metadata["prefix"]
                if key.startswith(prefix):
                    nested_values[nf.name][key[len(prefix) :]] = raw
                    break
            else:
                raise ConfigError(key, f"unknown setting (in {source})")
        for nf in nested_fields:
            sub = nested_values[nf.name]
            try:
                kwargs[nf.name] = nf.metadata["nested"].from_mapping(sub, source)
            except ConfigError as e:
                raise ConfigError(nf.metadata["prefix"] + e.key, str(e).split(": ", 1)[1]) from None
        obj = cls(**kwargs)
        obj.validate()
        return obj

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> Self:
        """Load ``path`` (if given), then apply ``overrides`` and keyword
        overrides on top. Unknown keys and bad values raise ConfigError."""
        values: dict[str, Any] = {}
        source = "<defaults>"
        if path is not None:
            p = Path(path)
            try:
                text = p.read_text()
            except OSError as e:
                raise ConfigError(str(p), f"cannot read configuration file: {e.strerror}") from None
            values.update(parse_properties(text, str(p)))
            source = str(p)
        for extra in (overrides or {}), kwargs:
            values.update(extra)
        return cls.from_mapping(values, source)

    def with_overrides(self, overrides: Mapping[str, Any]) -> Self:
        """A copy with ``overrides`` applied and validated."""
        current = self.to_properties()
        current.update(overrides)
        return type(self).from_mapping(current)

    def validate(self) -> None:
        """Cross-setting checks; subclasses raise ConfigError naming a key."""

    # -- output ----------------------------------------------------------
    def to_properties(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in self._fields():
            value = getattr(self, f.name)
            if "nested" in f.metadata:
                for k, v in value.to_properties().items():
                    out[f.metadata["prefix"] + k] = v
            else:
                out[f.metadata["key"]] = value
        return out

    def dumps(self) -> str:
        """Properties text that :meth:`load` reads back to an equal config."""
        return "".join(f"{k}={_format_value(v)}\n" for k, v in self.to_properties().items())

    @classmethod
    def render_documented(cls) -> str:
        """The documented ``.conf`` file: each key with its doc and default."""
        lines = [
            f"# {cls.title}",
            "#",
            "# Every key, with its default. Uncomment a line to change it.",
            "",
        ]
        for key, default, doc, unit in cls.describe():
            for chunk in _wrap(doc + (f" Unit: {unit}." if unit else "")):
                lines.append(f"# {chunk}")
            lines.append(f"#{key}={_format_value(default)}")
            lines.append("")
        return "\n".join(lines)


def _wrap(text: str, width: int = 76) -> list[str]:
    words = text.split()
    out: list[str] = []
    line = ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            out.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    if line:
        out.append(line)
    return out


def parse_set_options(items: Iterable[str]) -> dict[str, str]:
    """Turn CLI ``--set key=value`` items into a mapping."""
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(item, "expected key=value after --set")
        k, v = item.split("=", 1)
        k = k.strip()
        if not k:
            raise ConfigError(item, "expected key=value after --set")
        out[k] = v.strip()
    return out
