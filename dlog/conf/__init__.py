"""Typed settings for every dlog component."""

from dlog.conf.base import Config, parse_properties, parse_set_options, setting
from dlog.conf.bookie import BookieConfig
from dlog.conf.dlog import DLogConfig

__all__ = [
    "BookieConfig",
    "Config",
    "DLogConfig",
    "parse_properties",
    "parse_set_options",
    "setting",
]
