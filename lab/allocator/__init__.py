"""The lab's DRA allocator (structured parameters); see :mod:`.allocator` and README.md."""

from dmn.lab.allocator.allocator import AllocationError, Allocator
from dmn.lab.allocator.selectors import SelectorError

__all__ = ["AllocationError", "Allocator", "SelectorError"]
