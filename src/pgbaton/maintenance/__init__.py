"""Maintenance that exactly one worker runs at a time: reaper, pruner, scheduler, ager."""

from .leader import Leader
from .services import Ager, Pruner, Reaper, Scheduler, Service

__all__ = ["Ager", "Leader", "Pruner", "Reaper", "Scheduler", "Service"]
