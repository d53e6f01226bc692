"""Maintenance that exactly one worker runs at a time: reaper, pruner, scheduler, ager,
vacuumer."""

from .leader import Leader
from .services import Ager, Pruner, Reaper, Scheduler, Service, Vacuumer

__all__ = ["Ager", "Leader", "Pruner", "Reaper", "Scheduler", "Service", "Vacuumer"]
