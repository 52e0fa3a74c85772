"""The ``pylog`` command line."""
