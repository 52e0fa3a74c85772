"""Shared test configuration. Area-specific fixtures live in each tests/<area>/conftest.py."""
