"""Backup steps in a bucket with commit semantics an object store can keep: no rename, no
lock, only a write that creates.

Layout under the job's location (every key written once, never overwritten):

    fences/<generation>.json                    {"generation": g, "restored_step": r,
                                                 "restored_generation": h or null}
    steps/<step>/g<generation>/<part>           a process's part of a step
    steps/<step>/g<generation>/COMMITTED.json   {"step": s, "generation": g, "parts": [...]}

- **Generations.** Each start of a group is a generation: it claims its number with a
  create-only write of its fence, naming the step it restored (two starts can never claim
  the same number), before it writes any step.
- **A step exists only once committed**: the marker is written (create-only) after every
  part, by one process, and names the parts; a step without a marker, or whose parts are not
  all there, is never restored (a half-written step is ignored) and is removed by `clean`
  once its generation is gone.
- **Zombies are fenced.** A process of an older generation that lives on after the group
  moved on (a partitioned Pod, a slow exit) may still write. Its commit is refused when a
  newer fence exists, and even a commit that races the new fence is void: a marker of
  generation g for step s counts only if every newer generation restored at s or later
  (the newer one restored below s, so it did not see that step, and trains past it itself).
- **The last `keep` committed steps are kept**; `clean` removes older ones, void ones, and
  uncommitted ones of generations before the current.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

from kerasjob_trainer.shared.objectstore import Location, ObjectStore

MARKER = "COMMITTED.json"


class Fenced(Exception):
    """A generation's number was taken, or a newer generation fenced this one off."""


@dataclasses.dataclass(frozen=True, order=True)
class Committed:
    """A committed backup step: where its parts are."""

    step: int
    generation: int
    parts: tuple[str, ...] = ()


def _step_dir(step: int, generation: int) -> str:
    return f"steps/{step:012d}/g{generation:010d}"


class BucketSteps:
    """The backup steps of one job under `location` in `store` (see the module doc)."""

    def __init__(self, store: ObjectStore, location: Location, keep: int = 2) -> None:
        self.store, self.location, self.keep = store, location, max(int(keep), 1)

    # -- generations ------------------------------------------------------------------------

    def fences(self) -> dict[int, int]:
        """Every generation that started -> the step it restored."""
        found = {}
        for key in self.store.list(self.location.key("fences") + "/"):
            raw = self.store.get(key)
            if raw is None:
                continue
            fence = json.loads(raw)
            found[int(fence["generation"])] = int(fence["restored_step"])
        return found

    def next_generation(self) -> int:
        return max(self.fences(), default=0) + 1

    def newest_fence(self) -> dict[str, Any] | None:
        """The newest generation's fence as written (None before any start)."""
        keys = sorted(self.store.list(self.location.key("fences") + "/"))
        raw = self.store.get(keys[-1]) if keys else None
        return json.loads(raw) if raw is not None else None

    def fence(
        self, generation: int, restored_step: int, restored_generation: int | None = None
    ) -> None:
        """Claim `generation`, which restored `restored_step` (written by
        `restored_generation`: which of the committed copies of that step, when known);
        Fenced if it was taken."""
        body = json.dumps(
            {
                "generation": generation,
                "restored_step": restored_step,
                "restored_generation": restored_generation,
            }
        )
        key = self.location.key("fences", f"{generation:010d}.json")
        if not self.store.put(key, body.encode(), create_only=True):
            raise Fenced(f"generation {generation} of {self.location} was already claimed")

    # -- writing a step ---------------------------------------------------------------------

    def part_key(self, step: int, generation: int, name: str) -> str:
        return self.location.key(_step_dir(step, generation), name)

    def write_part(self, step: int, generation: int, name: str, data: bytes) -> None:
        if name == MARKER:
            raise ValueError(f"{MARKER} is the commit marker, not a part")
        self.store.put(self.part_key(step, generation, name), data)

    def commit(self, step: int, generation: int, parts: Iterable[str]) -> None:
        """Commit `step` of `generation` once every part is written (the marker is the last
        write). Fenced: a newer generation exists (this process is a zombie), the marker
        exists, or a part is missing."""
        parts = tuple(sorted(parts))
        newer = [g for g in self.fences() if g > generation]
        if newer:
            raise Fenced(f"generation {generation} was fenced off by generation {max(newer)}")
        there = set(self.store.list(self.location.key(_step_dir(step, generation)) + "/"))
        missing = [p for p in parts if self.part_key(step, generation, p) not in there]
        if missing:
            raise Fenced(f"step {step} of generation {generation} lacks parts {missing}")
        body = json.dumps({"step": step, "generation": generation, "parts": list(parts)})
        marker = self.part_key(step, generation, MARKER)
        if not self.store.put(marker, body.encode(), create_only=True):
            raise Fenced(f"step {step} of generation {generation} was committed already")

    # -- reading ----------------------------------------------------------------------------

    def _groups(self) -> dict[tuple[int, int], set[str]]:
        """(step, generation) -> the names under that step's directory."""
        groups: dict[tuple[int, int], set[str]] = {}
        base = self.location.key("steps") + "/"
        for key in self.store.list(base):
            parts = key[len(base) :].split("/", 2)
            if len(parts) != 3 or not parts[1].startswith("g"):
                continue
            try:
                at = (int(parts[0]), int(parts[1][1:]))
            except ValueError:
                continue
            groups.setdefault(at, set()).add(parts[2])
        return groups

    def _valid(self, at: tuple[int, int], names: set[str], fences: dict[int, int]) -> bool:
        step, generation = at
        if MARKER not in names:
            return False
        raw = self.store.get(self.part_key(step, generation, MARKER))
        if raw is None or not set(json.loads(raw)["parts"]) <= names:
            return False
        return all(step <= restored for g, restored in fences.items() if g > generation)

    def committed(self) -> list[Committed]:
        """The committed steps that count, oldest first."""
        fences, found = self.fences(), []
        for at, names in self._groups().items():
            if self._valid(at, names, fences):
                found.append(Committed(at[0], at[1], tuple(sorted(names - {MARKER}))))
        return sorted(found)

    def latest(self) -> Committed | None:
        """The newest committed step (what a restart restores), or None."""
        found = self.committed()
        return found[-1] if found else None

    def read_part(self, committed: Committed, name: str) -> bytes:
        data = self.store.get(self.part_key(committed.step, committed.generation, name))
        if data is None:
            raise FileNotFoundError(f"{name} of step {committed.step} is gone")
        return data

    # -- cleaning ---------------------------------------------------------------------------

    def clean(self, current_generation: int) -> list[tuple[int, int]]:
        """Remove what no restart may use: void and older generations' uncommitted steps,
        and committed ones past the newest `keep`. The current generation's uncommitted
        steps are being written: kept. Returns the (step, generation) removed."""
        fences, groups = self.fences(), self._groups()
        valid = sorted(at for at, names in groups.items() if self._valid(at, names, fences))
        kept = set(valid[-self.keep :])
        removed = []
        for at, names in sorted(groups.items()):
            if at in kept or (at not in valid and at[1] >= current_generation):
                continue
            for name in sorted(names, key=lambda n: n != MARKER):  # the marker first
                self.store.delete(self.part_key(at[0], at[1], name))
            removed.append(at)
        return removed
