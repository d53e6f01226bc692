"""Maintenance that exactly one worker runs at a time: reaper, pruner, scheduler."""

from .leader import Leader
from .services import Pruner, Reaper, Scheduler, Service

__all__ = ["Leader", "Pruner", "Reaper", "Scheduler", "Service"]
