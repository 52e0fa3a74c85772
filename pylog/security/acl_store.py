"""Where ACLs are kept: an in-memory cache every store serves reads from, and the
standalone broker's file.

``AclStore`` answers the authorizer from memory (``applying_to``) and changes ACLs with
one write per resource pattern (``create``, ``delete``); subclasses say how one
pattern's entries are persisted (``_update``). ``FileAclStore`` keeps them in
``<log.dirs[0]>/acls.json``, rewritten whole through a temporary file and a rename::

    {"version": 1, "resources": [
      {"resourceType": "Topic", "name": "logs.", "patternType": "Prefixed",
       "acls": [{"principal": "User:alice", "permissionType": "Allow",
                 "operation": "Read", "host": "*"}]}]}

Each resource's ``acls`` are Kafka's ZooKeeper node JSON (``pylog.security.acls``). The
file may be written before the broker starts (``FileAclStore(dir).create([...])``),
which is how a first ACL gets in when no principal may yet alter ACLs.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from pathlib import Path
from typing import Callable, Iterable, Mapping

from pylog.log.checkpoint import write_text_atomically
from pylog.security.acls import (
    AccessControlEntry, AclBinding, AclBindingFilter,
    PatternType, ResourcePattern, ResourceType, binding_sort_key, entries_from_json,
    entries_to_json)

ACL_FILE = "acls.json"

Entries = frozenset[AccessControlEntry]


class AclCache:
    """ACLs by resource pattern, replaced copy-on-write so readers never lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._literal: dict[tuple[ResourceType, str], Entries] = {}
        self._prefixed: dict[ResourceType, dict[str, Entries]] = {}

    def entries(self, pattern: ResourcePattern) -> Entries:
        if pattern.pattern_type == PatternType.PREFIXED:
            return self._prefixed.get(pattern.resource_type, {}).get(pattern.name, frozenset())
        return self._literal.get((pattern.resource_type, pattern.name), frozenset())

    def replace(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Set the entries of ``pattern`` (none: forget it)."""
        entries = frozenset(entries)
        with self._lock:
            if pattern.pattern_type == PatternType.PREFIXED:
                prefixed = dict(self._prefixed)
                names = dict(prefixed.get(pattern.resource_type, {}))
                _put(names, pattern.name, entries)
                prefixed[pattern.resource_type] = names
                self._prefixed = prefixed
            else:
                literal = dict(self._literal)
                _put(literal, (pattern.resource_type, pattern.name), entries)
                self._literal = literal

    def load(self, everything: Mapping[ResourcePattern, Entries]) -> None:
        """Replace all ACLs at once."""
        literal: dict = {}
        prefixed: dict = defaultdict(dict)
        for pattern, entries in everything.items():
            if not entries:
                continue
            if pattern.pattern_type == PatternType.PREFIXED:
                prefixed[pattern.resource_type][pattern.name] = frozenset(entries)
            else:
                literal[(pattern.resource_type, pattern.name)] = frozenset(entries)
        with self._lock:
            self._literal, self._prefixed = literal, dict(prefixed)

    def applying_to(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """The bindings whose pattern covers the resource: its literal name, ``*`` and
        every prefix of it."""
        literal, prefixed = self._literal, self._prefixed.get(resource_type, {})
        found = []
        for literal_name in (name, "*") if name != "*" else ("*",):
            pattern = ResourcePattern(resource_type, literal_name)
            found += [AclBinding(pattern, e) for e in literal.get((resource_type, literal_name), ())]
        for prefix, entries in prefixed.items():
            if name.startswith(prefix):
                pattern = ResourcePattern(resource_type, prefix, PatternType.PREFIXED)
                found += [AclBinding(pattern, e) for e in entries]
        return found

    def bindings(self) -> list[AclBinding]:
        found = [AclBinding(ResourcePattern(rtype, name), e)
                 for (rtype, name), entries in self._literal.items() for e in entries]
        found += [AclBinding(ResourcePattern(rtype, name, PatternType.PREFIXED), e)
                  for rtype, names in self._prefixed.items()
                  for name, entries in names.items() for e in entries]
        return sorted(found, key=binding_sort_key)


def _put(mapping: dict, key, entries: Entries) -> None:
    if entries:
        mapping[key] = entries
    else:
        mapping.pop(key, None)


class AclStore:
    """Reads from the cache; writes one resource pattern at a time through ``_update``."""

    def __init__(self) -> None:
        self.cache = AclCache()
        self._write_lock = threading.Lock()

    def applying_to(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        return self.cache.applying_to(resource_type, name)

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return [b for b in self.cache.bindings() if acl_filter.matches(b)]

    def create(self, bindings: list[AclBinding]) -> list[Exception | None]:
        """Add ``bindings`` (already validated); one outcome per binding, in order."""
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = defaultdict(set)
        for binding in bindings:
            by_pattern[binding.pattern].add(binding.entry)
        failures: dict[ResourcePattern, Exception] = {}
        with self._write_lock:
            for pattern, entries in by_pattern.items():
                try:
                    self._update(pattern, lambda current, new=frozenset(entries): current | new)
                except Exception as error:  # noqa: BLE001 -- reported per binding
                    failures[pattern] = error
        return [failures.get(b.pattern) for b in bindings]

    def delete(self, filters: list[AclBindingFilter]
               ) -> list[tuple[list[AclBinding], Exception | None]]:
        """Remove every binding any of ``filters`` matches; per filter, the bindings it
        removed and the error that stopped it (None if it got through)."""
        results: list[tuple[list[AclBinding], Exception | None]] = [([], None) for _ in filters]
        with self._write_lock:
            patterns = {b.pattern for b in self.cache.bindings()
                        if any(f.matches(b) for f in filters)}
            for pattern in sorted(patterns, key=lambda p: (int(p.resource_type), p.name,
                                                           int(p.pattern_type))):
                removed: list[AccessControlEntry] = []

                def drop(current: Entries, pattern=pattern, removed=removed) -> Entries:
                    removed[:] = [e for e in current
                                  if any(f.matches(AclBinding(pattern, e)) for f in filters)]
                    return current - set(removed)

                try:
                    self._update(pattern, drop)
                except Exception as error:  # noqa: BLE001 -- reported per filter
                    for index, f in enumerate(filters):
                        if f.matches_pattern(pattern):
                            results[index] = (results[index][0], error)
                    continue
                for entry in removed:
                    binding = AclBinding(pattern, entry)
                    for index, f in enumerate(filters):
                        if f.matches(binding):
                            results[index][0].append(binding)
        return [(sorted(found, key=binding_sort_key), error) for found, error in results]

    def _update(self, pattern: ResourcePattern, change: Callable[[Entries], Entries]) -> None:
        """Persist ``change(current entries)`` for ``pattern`` and put it in the cache."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class FileAclStore(AclStore):
    """ACLs of a standalone broker, in ``<log_dir>/acls.json`` (see the module docstring).

    Raises ValueError naming the file if it exists and is not readable as ACLs.

    >>> store = FileAclStore(Path("/var/lib/pylog"))
    >>> store.create([AclBinding(ResourcePattern(ResourceType.TOPIC, "t"), entry)])
    """

    def __init__(self, log_dir: Path) -> None:
        super().__init__()
        self.path = Path(log_dir) / ACL_FILE
        self.cache.load(self._read())

    def _read(self) -> dict[ResourcePattern, Entries]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            document = json.loads(text)
            result = {}
            for resource in document["resources"]:
                pattern = ResourcePattern(ResourceType.parse(resource["resourceType"]),
                                          resource["name"],
                                          PatternType.parse(resource["patternType"]))
                entries = entries_from_json(resource["acls"])
                result[pattern] = result.get(pattern, frozenset()) | entries
            return result
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"{self.path} is not an ACL file: {error}") from None

    def _update(self, pattern: ResourcePattern, change: Callable[[Entries], Entries]) -> None:
        current = self._read()
        current[pattern] = frozenset(change(current.get(pattern, frozenset())))
        resources = []
        for p in sorted(current, key=lambda p: (int(p.resource_type), p.name,
                                                int(p.pattern_type))):
            if current[p]:
                resources.append({"resourceType": p.resource_type.label, "name": p.name,
                                  "patternType": p.pattern_type.label,
                                  "acls": entries_to_json(current[p])})
        write_text_atomically(self.path, json.dumps({"version": 1, "resources": resources},
                                                    indent=1) + "\n")
        self.cache.replace(pattern, current[pattern])
