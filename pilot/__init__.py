"""Pilot: durable, event-sourced agent loops run from workflow files.

May import ``tools`` and ``brain``; nothing imports the pilot.
"""

__version__ = "0.1.0"
