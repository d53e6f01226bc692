"""Maintenance that exactly one worker runs at a time: reaper, pruner, periodic jobs."""

from .leader import Leader
from .services import Periodics, Pruner, Reaper, Service

__all__ = ["Leader", "Periodics", "Pruner", "Reaper", "Service"]
