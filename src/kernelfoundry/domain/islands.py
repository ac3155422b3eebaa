"""Islands: several archives evolving side by side, with periodic ring migration of their best elites.

Work is spread round-robin (a cursor that continues across batches), so every island advances; every
`migration_interval` generations each island sends copies of its `migrants` best elites to the next island
in the ring, where they are offered like any other correct candidate (kept only where they beat the cell's
elite). With one island this is a plain MAP-Elites archive.

This module must never perform I/O or read a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernelfoundry.domain.archive import Archive, Cell, Elite, Placement


@dataclass(frozen=True)
class Migration:
    source: int
    target: int
    candidate_id: str
    cell: Cell
    placement: Placement


class IslandModel:
    def __init__(
        self, count: int = 1, migration_interval: int = 10, migrants: int = 1, history_limit: int | None = 256
    ) -> None:
        if count < 1:
            raise ValueError("an island model needs at least one island")
        self.count = count
        self.migration_interval = migration_interval
        self.migrants = migrants
        self.archives = [Archive(history_limit) for _ in range(count)]
        self._cursor = 0
        self.migrations = 0

    def next_island(self) -> int:
        island = self._cursor
        self._cursor = (self._cursor + 1) % self.count
        return island

    def assign(self, n: int) -> list[int]:
        """Islands for a batch of `n` requests, continuing the round-robin."""
        return [self.next_island() for _ in range(n)]

    def archive(self, island: int) -> Archive:
        if not 0 <= island < self.count:
            raise ValueError(f"island {island} outside 0..{self.count - 1}")
        return self.archives[island]

    def migrate(self, generation: int) -> list[Migration]:
        """Ring migration on every `migration_interval`-th generation; a no-op otherwise."""
        if self.count < 2 or self.migration_interval <= 0 or generation <= 0:
            return []
        if generation % self.migration_interval:
            return []
        outgoing = [a.top(self.migrants) for a in self.archives]  # snapshot before anyone receives
        moves: list[Migration] = []
        for source, elites in enumerate(outgoing):
            target = (source + 1) % self.count
            for elite in elites:
                placement = self.archives[target].offer_elite(elite)
                moves.append(Migration(source, target, elite.candidate_id, elite.cell, placement))
        self.migrations += 1
        return moves

    def best(self) -> Elite | None:
        elites = [e for a in self.archives if (e := a.best()) is not None]
        return max(elites, key=lambda e: (e.speedup, tuple(-v for v in e.cell))) if elites else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "migration_interval": self.migration_interval,
            "migrants": self.migrants,
            "cursor": self._cursor,
            "migrations": self.migrations,
            "archives": [a.to_dict() for a in self.archives],
        }
