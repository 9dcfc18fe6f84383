"""Plain ``--help``: conventional usage lines and value names.

typer renders a required argument as ``{stream}`` in usage lines and the
Python type of every option (``<bool>``, ``<list[str]>``, ``<int range>``)
next to it. Terminal users expect what ``git`` or ``kafka-topics`` print:
``Usage: dlog tail [OPTIONS] STREAM``, ``--uri URI``, and nothing after a
flag. :func:`plain_help` rewrites a built command tree that way, once,
through click's public ``metavar`` and ``collect_usage_pieces``.
"""

from __future__ import annotations

import types
from typing import Any

#: Value names for options whose long name does not say it well; a
#: ``(command, option)`` key wins over the option alone.
METAVARS: dict[str | tuple[str, str], str] = {
    ("migrate", "--to"): "FORMAT",
    "--to": "POSITION",
    "--from": "POSITION",
    "--conf": "FILE",
    "--set": "KEY=VALUE",
    "--lines": "N",
    "--limit": "N",
    "--bookies": "N",
    "--zk-port": "PORT",
    "--dir": "DIR",
}


def _value_name(command: str, param: Any) -> str:
    longs = [o for o in param.opts if o.startswith("--")]
    for key in ((command, longs[0]), longs[0]) if longs else ():
        if key in METAVARS:
            return METAVARS[key]
    if longs:
        return longs[0].lstrip("-").replace("-", "_").upper()
    return (param.name or "VALUE").upper()


def _usage_pieces(self: Any, ctx: Any) -> list[str]:
    """``[OPTIONS] STREAM [ID] FILE...`` instead of ``{stream}``."""
    pieces = [self.options_metavar] if self.options_metavar else []
    for param in self.get_params(ctx):
        if param.param_type_name != "argument":
            continue
        name = param.metavar or (param.name or "ARG").upper()
        if param.nargs != 1:
            name += "..."
        pieces.append(name if param.required else f"[{name}]")
    return pieces


def _no_type(ctx: Any) -> None:
    return None


def _plain_param(command: str, param: Any) -> None:
    if param.param_type_name == "argument":
        param.metavar = param.metavar or (param.name or "ARG").upper()
        param.display_type_rich = _no_type  # the name column already says it
    elif getattr(param, "is_flag", False) or getattr(param, "count", False):
        param.metavar = ""  # a flag takes no value: show none
    elif param.metavar is None:
        param.metavar = _value_name(command, param)


def plain_help(command: Any) -> Any:
    """Give every parameter of ``command`` and its subcommands a plain value
    name (none for flags) and every command a conventional usage line."""
    for param in command.params:
        _plain_param(command.name or "", param)
    get_help_option = command.get_help_option

    def help_option(ctx: Any) -> Any:
        option = get_help_option(ctx)  # built per context: plain it each time
        if option is not None:
            _plain_param(command.name or "", option)
        return option

    command.get_help_option = help_option
    subcommands = getattr(command, "commands", None)
    if subcommands is None:  # a group's usage keeps its COMMAND [ARGS]...
        command.collect_usage_pieces = types.MethodType(_usage_pieces, command)
    for sub in (subcommands or {}).values():
        plain_help(sub)
    return command
