"""The user behind a federated task (issue 35): the GM carries the submitting user's bearer
token in each Place, and this LM resolves it with its own users and applies what a local
submit applies: the gate (queue grants, `--user` for admins only, the queue's job-weight
ceiling), the queue's time-limit ceiling, and run_as (the task runs as the user's Unix
mapping here). A GM certificate alone names no user, so a secure LM refuses a Place
without a token: the certificate lets a GM place, never choose who runs."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from tcluster.domain.errors import PermissionDenied, Unauthenticated
from tcluster.domain.model import JobSpec
from tcluster.master.queues import with_queue_time_limit
from tcluster.master.service import MasterService
from tcluster.security.authz import ANONYMOUS, Caller, SubmitJob, run_as

NO_USER = ("Place: no user token; a GM certificate alone names no user on a secure LM "
           "(the GM forwards the token its caller authenticated with)")


def place_caller(service: MasterService, token: str, peer: str, cert_user: str = "") -> Caller:
    """Who a federated task runs for: the token's user on a secure LM (Unauthenticated for an
    unknown token), or the user a client certificate named at the GM (`cert_user`); ANONYMOUS,
    as every caller is, on an insecure one."""
    if not service.gate.secure:
        return ANONYMOUS
    if token:
        return service.gate.caller(token, peer, "Place")
    if cert_user:
        return user_named(service, cert_user)
    raise PermissionDenied(NO_USER)


def user_named(service: MasterService, name: str) -> Caller:
    """The LM's user `name`, vouched for by a GM that verified the caller's certificate (CN
    user:NAME, gm/certusers.py): only a GM reaches this (the LM service admits GM certificates
    and admin tokens), and only an existing user's mapping and grants apply."""
    users = service.gate.users
    found = users.store.user_named(name) if users is not None else None
    if found is None:
        raise Unauthenticated(f"user {name[:40]!r} (named by a client certificate at the GM) is not a user here")
    return found.caller()


def admitter(service: MasterService, caller: Caller) -> Callable[[JobSpec], JobSpec]:
    """The local submit's checks for `caller`, over a spec already in its LM queue."""
    def admit(spec: JobSpec) -> JobSpec:
        queues = service.queues
        spec = with_queue_time_limit(spec, queues.max_time_limit_s(spec.queue))
        service.gate.check(caller, SubmitJob(spec.queue, spec.user, spec.weight, queues.max_job_weight(spec.queue)))
        return replace(spec, user=run_as(caller, spec.user))
    return admit
