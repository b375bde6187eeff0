"""Mount points the agent had to create on the host, remembered so they can be removed.

A bind mount needs an existing target. A Pod's mountPath (say /kerasjob/checkpoint, or
/dev/termination-log) usually does not exist on this machine, and the container's mount
namespace shares the host's file systems, so the target is created on the host. Each path
created is recorded in a JSON file in the agent's state directory and removed (only while
still empty) when the agent stops, or by the next agent if this one crashed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


class MountPoints:
    def __init__(self, record: Path) -> None:
        self.record = record
        self.paths: set[str] = set()
        if record.exists():
            try:
                self.paths = set(json.loads(record.read_text()))
            except ValueError:
                self.paths = set()

    def ensure(self, target: str, is_file: bool) -> None:
        """Create `target` (and its missing parents) if missing, recording what was made."""
        path = Path(target)
        missing = []
        for p in [path, *path.parents]:
            if p.exists() or p.is_symlink():
                break
            missing.append(p)
        if not missing:
            return
        self.paths.update(str(p) for p in missing)
        self._save()
        path.parent.mkdir(parents=True, exist_ok=True)
        if is_file:
            path.touch()
        else:
            path.mkdir(exist_ok=True)

    def remove_all(self) -> list[str]:
        """Remove recorded paths that are still empty, deepest first; returns those removed."""
        removed, kept = [], set()
        for p in sorted(self.paths, key=len, reverse=True):
            path = Path(p)
            try:
                if path.is_dir() and not path.is_symlink():
                    os.rmdir(path)
                elif path.is_file() and path.stat().st_size == 0:
                    path.unlink()
                elif path.exists():
                    kept.add(p)
                    continue
                removed.append(p)
            except OSError:
                kept.add(p)
        self.paths = kept
        self._save()
        return removed

    def _save(self) -> None:
        self.record.parent.mkdir(parents=True, exist_ok=True)
        if self.paths:
            self.record.write_text(json.dumps(sorted(self.paths)))
        elif self.record.exists():
            self.record.unlink()
