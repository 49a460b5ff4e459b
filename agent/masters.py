"""Which master the agent dials next (docs/ha.md, "Clients and agents").

`--master a:7071,b:7071` names every master's agent address. Each connect takes a hinted
leader first (the `tcl-leader` trailing metadata of a standby's refusal), else the next
address of the list, round robin. The daemon backs off only once as many connects as
there are masters have failed in a row: one master down, or a standby, costs no wait
while another may lead, and a hint is followed at once. With one address and no standby
this is the old behaviour: back off after every failed connect."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MasterRotation:
    masters: tuple[str, ...]
    _next: int = field(default=0, init=False)
    _hint: str = field(default="", init=False)
    _failures: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not self.masters:
            raise ValueError("no master address")

    def next(self) -> str:
        """The address for the next connect."""
        if self._hint:
            hint, self._hint = self._hint, ""
            return hint
        address = self.masters[self._next]
        self._next = (self._next + 1) % len(self.masters)
        return address

    def connected(self) -> None:
        """A session registered: a later failure starts a new round."""
        self._failures = 0

    def ended(self, hint: str | None) -> bool:
        """A session ended (`hint`: the leader a standby named, if any). True: back off now."""
        self._failures += 1
        if hint:
            self._hint = hint
        # A hint is followed at once, unless hints keep leading nowhere (stale standbys).
        if self._failures < len(self.masters) or (hint and self._failures < 2 * len(self.masters)):
            return False
        self._failures = 0
        return True
