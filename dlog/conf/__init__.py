"""Typed settings for every dlog component."""

from dlog.conf.base import Config, parse_properties, parse_set_options, setting
from dlog.conf.bookie import BookieConfig

__all__ = ["BookieConfig", "Config", "parse_properties", "parse_set_options", "setting"]
