"""Typed, validated settings loaded from Java-properties ``.conf`` files.

Settings keep BookKeeper's and DistributedLog's key names so an operator's
existing knowledge (and files) carry over. Each setting is declared once,
with its key, default, documentation and check; loading rejects unknown
keys and bad values with a message that names the key and where it was
given (the file, ``--set``, overrides). Every bad key is reported at once,
one per line of a single ConfigError, so that one run finds them all.
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


class Problems:
    """Every bad key found while loading, raised at the end as one
    ConfigError: its ``key`` is the first bad key and its message has one
    ``key: problem`` line per bad key (the CLI prints one line each)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, key: str, message: str, source: str | None = None) -> None:
        self.items.append((key, f"{message} (in {source})" if source else message))

    def add_error(self, e: ConfigError, prefix: str = "", source: str | None = None) -> None:
        """Record a single-key ConfigError (from a converter or a check)."""
        self.add(prefix + e.key, str(e)[len(e.key) + 2 :], source)

    def __len__(self) -> int:
        return len(self.items)

    def raise_if_any(self) -> None:
        if not self.items:
            return
        (key, first), *rest = self.items
        raise ConfigError(key, "\n".join([first, *(f"{k}: {m}" for k, m in rest)]))


def parse_properties(text: str, source: str = "<string>") -> dict[str, str]:
    """Parse Java-properties text: ``key=value`` lines, ``#``/``!`` comments,
    trailing-backslash continuations. A key given twice is an error (every
    such line is reported)."""
    problems = Problems()
    props = _parse_properties(text, source, problems)
    problems.raise_if_any()
    return props


def _parse_properties(text: str, source: str, problems: Problems) -> dict[str, str]:
    """As :func:`parse_properties`, recording problems instead of raising
    (the first of a key given twice is kept), so a load reports them with
    the file's bad values."""
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
            problems.add(f"{source}:{lineno}", "line has no key")
        elif key in props:
            problems.add(key, f"given twice ({source}:{lineno})")
        else:
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
    def from_mapping(
        cls,
        values: Mapping[str, Any],
        source: str = "overrides",
        *,
        sources: Mapping[str, str] | None = None,
    ) -> Self:
        """Build from ``{key: value}`` (keys as in the ``.conf`` file, or the
        Python attribute names), validating every value. Errors say where a
        key was given: ``sources[key]``, else ``source``."""
        where = sources or {}
        problems = Problems()
        obj = cls._build({k: (v, where.get(k, source)) for k, v in values.items()}, problems)
        problems.raise_if_any()
        assert obj is not None
        return obj

    @classmethod
    def _build(
        cls, values: Mapping[str, tuple[Any, str]], problems: Problems, prefix: str = ""
    ) -> Self | None:
        """The config for ``{key: (value, where it was given)}``; every bad
        key goes to ``problems`` (then None). Cross-setting checks run only
        once every value is valid: with a bad one replaced by its default
        they would report combinations nobody gave."""
        before = len(problems)
        values = cls._resolve_keys(values, problems, prefix)
        by_key: dict[str, dataclasses.Field[Any]] = {}
        nested_fields: list[dataclasses.Field[Any]] = []
        for f in cls._fields():
            if "nested" in f.metadata:
                nested_fields.append(f)
            else:
                by_key[f.metadata["key"]] = f
                by_key.setdefault(f.name, f)
        kwargs: dict[str, Any] = {}
        nested_values: dict[str, dict[str, tuple[Any, str]]] = {f.name: {} for f in nested_fields}
        for key, (raw, source) in values.items():
            known = by_key.get(key)
            if known is not None:
                try:
                    value = _convert(known.metadata["key"], cls._types()[known.name], raw)
                    _validate(known.metadata["key"], known.metadata, value)
                except ConfigError as e:
                    problems.add_error(e, prefix, source)
                    continue
                kwargs[known.name] = value
                continue
            for nf in nested_fields:
                nested_prefix = nf.metadata["prefix"]
                if key.startswith(nested_prefix):
                    nested_values[nf.name][key[len(nested_prefix) :]] = (raw, source)
                    break
            else:
                problems.add(prefix + key, "unknown setting", source)
        for nf in nested_fields:
            sub = nf.metadata["nested"]._build(
                nested_values[nf.name], problems, prefix + nf.metadata["prefix"]
            )
            if sub is not None:
                kwargs[nf.name] = sub
        if len(problems) > before:
            return None
        obj = cls(**kwargs)
        for key, message in obj._cross_checks():
            problems.add(prefix + key, message)
        return obj if len(problems) == before else None

    @classmethod
    def _resolve_keys(
        cls, values: Mapping[str, tuple[Any, str]], problems: Problems, prefix: str
    ) -> Mapping[str, tuple[Any, str]]:
        """Hook: rewrite keys before parsing (DLogConfig maps deprecated spellings)."""
        return values

    @classmethod
    def canonical_key(cls, key: str) -> str:
        """The key a setting is stored under, for ``key`` in any accepted
        spelling (an attribute name here; deprecated keys in subclasses)."""
        for f in cls._fields():
            if f.name == key and "key" in f.metadata:
                return str(f.metadata["key"])
        return key

    @classmethod
    def _layered(
        cls, layers: Iterable[tuple[Mapping[str, Any], str]]
    ) -> dict[str, tuple[Any, str]]:
        """``{key: (value, source)}`` with each layer on top of the ones
        before: a key given in a later layer, in any spelling, replaces it.
        (Within one layer two spellings of a key stay, to be reported.)"""
        out: dict[str, tuple[Any, str]] = {}
        for layer, source in layers:
            given = {cls.canonical_key(k) for k in layer}
            for k in [k for k in out if cls.canonical_key(k) in given]:
                del out[k]
            out.update((k, (v, source)) for k, v in layer.items())
        return out

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, Any] | None = None,
        *,
        overrides_source: str = "overrides",
        defaults: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> Self:
        """Load ``path`` (if given), then apply ``overrides`` and keyword
        overrides on top; ``defaults`` replace the built-in defaults of the
        keys nobody gives (the CLI's own defaults). Unknown keys and bad
        values raise one ConfigError listing every one, each saying where it
        was given: the file, ``overrides_source`` (the CLI says ``--set``)
        or "overrides"."""
        problems = Problems()
        layers: list[tuple[Mapping[str, Any], str]] = [(defaults or {}, "defaults")]
        if path is not None:
            p = Path(path)
            try:
                text = p.read_text()
            except OSError as e:
                raise ConfigError(str(p), f"cannot read configuration file: {e.strerror}") from None
            layers.append((_parse_properties(text, str(p), problems), str(p)))
        layers += [(overrides or {}, overrides_source), (kwargs, "overrides")]
        obj = cls._build(cls._layered(layers), problems)
        problems.raise_if_any()
        assert obj is not None
        return obj

    def with_overrides(self, overrides: Mapping[str, Any], source: str = "overrides") -> Self:
        """A copy with ``overrides`` applied and validated; an override given
        in another spelling of a key (an old one) replaces the setting."""
        problems = Problems()
        layers = [(self.to_properties(), "current settings"), (overrides, source)]
        obj = type(self)._build(self._layered(layers), problems)
        problems.raise_if_any()
        assert obj is not None
        return obj

    def validate(self) -> None:
        """Raise one ConfigError listing every cross-setting problem."""
        problems = Problems()
        for key, message in self._cross_checks():
            problems.add(key, message)
        problems.raise_if_any()

    def _cross_checks(self) -> Iterable[tuple[str, str]]:
        """Hook: ``(key, problem)`` for each bad combination of settings."""
        return ()

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
    """Turn CLI ``--set key=value`` items into a mapping (one ConfigError
    naming every malformed item)."""
    problems = Problems()
    out: dict[str, str] = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            problems.add(item, "expected key=value after --set")
            continue
        out[k.strip()] = v.strip()
    problems.raise_if_any()
    return out
