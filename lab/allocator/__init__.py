"""The lab's DRA allocator (structured parameters); see :mod:`.allocator` and README.md."""

from dmn.api.device_selectors import SelectorError
from dmn.lab.allocator.allocator import AllocationError, Allocator

__all__ = ["AllocationError", "Allocator", "SelectorError"]
