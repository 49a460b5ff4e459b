"""tcl-gm's placing: the pure GM's `decide()` turned into Place requests, one in flight per
LM at a time (GlobalManager's max_in_flight is the number of LMs), each persisted before
it is sent and its answer recorded before it is acted upon.

Every Place runs in a task of its own, so an LM slow to answer (a busy master, a long
fsync, a network that still carries pings) holds back only the placements that must go
to it, for its deadline; with one request at a time in all, it held every other LM's too,
per request. Requests whose answer did not come (`unanswered`: maybe applied, maybe not)
are sent again with the same id, in the background, each LM's in order and the LMs side
by side."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Awaitable, Callable

import grpc

from tcluster.federation.gm import Pending, Send
from tcluster.federation.messages import Answer, TaskLaunched, LMState, Refused
from tcluster.gm.certusers import place_identity
from tcluster.gm.owners import token_of
from tcluster.gm.port import GMPort, Unanswered
from tcluster.gm.refusals import PermanentRefusal, permanent
from tcluster.gm.wire import answer_from, request_pb
from tcluster.daemonkit.timeouts import wait_for
from tcluster.v1 import federation_pb2, federation_pb2_grpc

log = logging.getLogger("tcluster.gm")
PLACE_TIMEOUT_S = 10.0
RESEND_EVERY_S = 0.5     # a sweep of the unanswered requests at most this often: to an LM
                         # whose stream is down each ends at once, and must not spin


class Placer:
    def __init__(self, port: GMPort, dropped: Callable[[str], bool]) -> None:
        self.port = port
        self.dropped = dropped       # True (and the task ended) when its job is being cancelled
        self.calls: set[asyncio.Task] = set()       # Place RPCs in flight, and the resend sweep
        self.resending: asyncio.Task | None = None
        self.swept_at = -RESEND_EVERY_S             # monotonic start of the last sweep
        self.refused = 0                            # tasks FAILED by an LM's permanent refusal
        # Called after every turn of the placing loop (at least once a second): systemd's
        # WATCHDOG=1 under the tcl-gm unit, so a loop that stopped turning gets the GM restarted.
        self.after_turn: Callable[[], None] = lambda: None

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self.calls.add(task)                 # held until done, then dropped: no growth
        task.add_done_callback(self.calls.discard)
        return task

    async def stop(self) -> None:
        """Cancels the calls in flight: each request is PLACING in the store with its bytes,
        so the next start sends it again with the same id."""
        calls = list(self.calls)
        for task in calls:
            task.cancel()
        await asyncio.gather(*calls, return_exceptions=True)

    async def run(self) -> None:
        port = self.port
        while True:
            self.after_turn()
            port.age_views(time.monotonic())
            self._maybe_sweep(time.monotonic())
            decision = port.gm.decide()
            if isinstance(decision, Send):
                self._start(decision)
            if decision is not None:         # a Send or a NoRoom: the next task may go at once
                await asyncio.sleep(0)
                continue
            port.wake.clear()
            try:
                await wait_for(port.wake.wait(), 0.5 if port.unanswered else 1.0)
            except TimeoutError:
                pass

    def _maybe_sweep(self, now: float) -> None:
        port = self.port
        if port.unanswered and (self.resending is None or self.resending.done()) \
                and now - self.swept_at >= RESEND_EVERY_S:
            self.swept_at = now
            self.resending = self._spawn(self._resend_all())

    def _start(self, send: Send) -> None:
        """Persisted before it is sent (in this turn, before the call starts): after a crash
        the request is sent again, with the same id."""
        port = self.port
        p, queue, request = port.gm.in_flight[send.lm]
        if self.dropped(p.task.task_id):      # its job is being cancelled: never placed
            port.gm.forget(send.lm)
            return
        layout = port.links[send.lm].layout
        pb = request_pb(request, layout, port.vocab, port.spec_of(p.task.task_id.rpartition(".")[0]))
        pb.user_token, pb.cert_user = place_identity(token_of(port.store.db, p.task.task_id.rpartition(".")[0]))
        port.store.placing(p.task.task_id, p.attempt, send.lm, request.node, pb.SerializeToString())
        self._spawn(self._place(send.lm, pb, p, queue))

    async def _place(self, lm: int, pb: federation_pb2.PlaceRequest, p: Pending, queue: str) -> None:
        port = self.port
        try:
            msg = await self.rpc(lm, pb)
            if msg is None:       # maybe applied, maybe not: the same request id again later
                self._unanswered(lm, pb, p, queue)
                return
            self._take(lm, msg, p, queue, late=False)
        except PermanentRefusal as refusal:
            self._refused(lm, pb, p, refusal)
        except Exception:         # a bug, not an answer: logged, and the request sent again
            log.exception("Place %s at LM %s", pb.request_id, port.links[lm].name)
            self._unanswered(lm, pb, p, queue)
        finally:
            port.wake.set()          # the LM's slot is free again

    def _take(self, lm: int, msg: federation_pb2.PlaceAnswer, p: Pending, queue: str, late: bool) -> None:
        """An LM's answer: recorded in the store, then into the pure GM (late: to a request it
        had forgotten, sent again); a refusal stops placing on that LM."""
        answer, job_id = self._checked(lm, *answer_from(msg))
        ended = self._record(answer, job_id, p)
        if late:
            self.port.gm.on_late_answer(answer, p, queue, ended)
        else:
            self.port.gm.on_answer(answer, ended)
        if isinstance(answer, Refused):
            self.port.set_usable(lm, False)

    def _refused(self, lm: int, pb: federation_pb2.PlaceRequest, p: Pending, refusal: PermanentRefusal) -> None:
        """No resend can change the answer: the task ends FAILED with the LM's reason (its
        slot, when still held, is freed; the LM's next state corrects its view)."""
        flight = self.port.gm.in_flight.get(lm)
        if flight is not None and flight[2].request_id == pb.request_id:
            self.port.gm.forget(lm)
        self.port.store.ended(p.task.task_id, "FAILED", 0, refusal.reason)
        self.refused += 1
        log.warning("task %s: %s", p.task.task_id, refusal.reason)

    def _unanswered(self, lm: int, pb: federation_pb2.PlaceRequest, p: Pending, queue: str) -> None:
        """The request leaves the pure GM's slot for the LM (when still there) for the list
        sent again with the same id."""
        flight = self.port.gm.in_flight.get(lm)
        if flight is not None and flight[2].request_id == pb.request_id:
            self.port.gm.forget(lm)
            self.port.unanswered.append((lm, pb, p, queue))

    async def rpc(self, lm: int, req: federation_pb2.PlaceRequest) -> federation_pb2.PlaceAnswer | None:
        """The LM's answer; None when none came (maybe applied: the same id is sent again
        later). Only to an LM with a live stream: to one gone silent a Place would wait out
        its deadline, per request and per sweep (its view stays usable until it ages out);
        its requests wait instead."""
        link = self.port.links[lm]
        if not link.connected:
            return None
        tour = link.tour()
        for addr in tour:
            try:
                stub = federation_pb2_grpc.LocalManagerServiceStub(self.port.channel(addr))
                return await stub.Place(req, timeout=PLACE_TIMEOUT_S, metadata=self.port.metadata())
            except grpc.aio.AioRpcError as e:
                log.info("Place %s at %s: %s", req.request_id, addr, e.code().name)
                refusal = permanent(link.name, e)
                if refusal is not None:
                    raise refusal from None
                link.follow(tour, e)
        return None

    def _checked(self, lm: int, answer: Answer, job_id: str) -> tuple[Answer, str]:
        """A state of another epoch than the layout we hold must not reach the view, nor any
        state the placeholder of an LM not placed on (GMPort.set_usable): it has no nodes,
        and Alg. 2 would look for victims in the state's tasks on them."""
        link = self.port.links[lm]
        if link.layout is None or answer.state.epoch != link.layout.epoch or not link.usable:
            answer = dataclasses.replace(answer, state=LMState(lm, 0, -1, ()))
        return answer, job_id

    def _record(self, answer: Answer, job_id: str, p: Pending) -> bool:
        """True when the task was launched and has already ended: its end came on the LM's
        stream before this answer (the store keeps the end), so it is not running here."""
        if isinstance(answer, TaskLaunched):
            return not self.port.store.placed(answer.task_id, answer.lm, answer.node, job_id)
        self.port.store.back_to_pending(p.task.task_id, p.attempt + 1)
        return False

    async def _resend_all(self) -> None:
        """One sweep over the unanswered requests: each LM's in order, the LMs side by side.
        Those answered leave the list; the rest (and any added meanwhile) stay."""
        by_lm: dict[int, list[Unanswered]] = {}
        for item in list(self.port.unanswered):
            by_lm.setdefault(item[0], []).append(item)
        answered = await asyncio.gather(*(self._resend_to(lm, items) for lm, items in by_lm.items()))
        done = {request_id for ids in answered for request_id in ids}
        if done:
            self.port.unanswered = [item for item in self.port.unanswered if item[1].request_id not in done]
            self.port.wake.set()     # tasks back in their queues, LMs' views newer

    async def _resend_to(self, lm: int, items: list[Unanswered]) -> set[str]:
        """The request ids answered and applied; the others stay unanswered. Never raises, so
        one LM's trouble cannot leave another's resends running unwatched."""
        answered: set[str] = set()
        for _lm, pb, p, queue in items:
            try:
                msg = await self.rpc(lm, pb)
                if msg is not None:
                    self._take(lm, msg, p, queue, late=True)
                    answered.add(pb.request_id)
            except PermanentRefusal as refusal:
                self._refused(lm, pb, p, refusal)
                answered.add(pb.request_id)
            except Exception:      # a bug: logged; the same id is sent again next sweep
                log.exception("resending %s to LM %s", pb.request_id, self.port.links[lm].name)
        return answered
