"""One LM as tcl-gm knows it (LMLink): its masters, the layout and view it last sent, whether
the GM may place there, and the order in which its masters are tried (tcluster.daemonkit.leaders)."""

from __future__ import annotations

import dataclasses

import grpc

from tcluster.federation.view import LMView
from tcluster.gm.wire import Layout
from tcluster.daemonkit.leaders import MasterTour, standby_hint


@dataclasses.dataclass
class LMLink:
    name: str
    addrs: list[str]
    layout: Layout | None = None
    view: LMView | None = None         # the real view (placeholder swapped in the GM when unusable)
    last_state: float = 0.0            # monotonic time of the last state of the current epoch
    usable: bool = False
    connected: bool = False
    addr: str = ""                      # the master that answered Subscribe (the leader)

    def tour(self, leader_first: bool = True) -> MasterTour:
        """This LM's masters, each once: the one that answered Subscribe first (when
        `leader_first`), then the others in --lms order; `follow` bends it to a standby's hint."""
        return MasterTour([*([self.addr] if leader_first and self.addr else []), *self.addrs])

    def follow(self, tour: MasterTour, error: grpc.aio.AioRpcError) -> None:
        """After a refusal: a standby that names the leader sends the tour there next. Only
        to a master of this LM's --lms list: the credentials (--lm-tls, keyed by those
        addresses in gm/tls.py) and the admin token are meant for them, and an address known
        only from a hint would be dialled without TLS."""
        hint = standby_hint(error)
        tour.prefer(hint if hint in self.addrs else None)
