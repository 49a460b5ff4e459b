"""Who is asking the dashboard, and the login routes.

A master without TLS material has no identities: everyone is ANONYMOUS, an admin, as over
gRPC. On a secure master every API call and /metrics needs a user: an
`Authorization: Bearer` token (scripts, Prometheus) or the session cookie the login form
sets (browsers). Only the page itself, its static files and the login call are served
without one, so the browser can show the form."""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

from tcluster.domain.errors import InvalidArgument, PermissionDenied, Unauthenticated
from tcluster.master.identity.gate import Gate, bearer_token
from tcluster.master.web.api import CALLER
from tcluster.master.web.session import COOKIE, IDLE_S, Sessions
from tcluster.security.authz import ANONYMOUS, Caller, sees_only_own

GATE = web.AppKey("gate", Gate)
SESSIONS = web.AppKey("sessions", Sessions)
OPEN_PATHS = ("/", "/favicon.ico", "/api/v1/login", "/api/v1/logout", "/api/v1/whoami")
HEALTH_PATHS = ("/healthz", "/readyz")     # answer without a token; they say nothing about jobs
MAX_TOKEN_CHARS = 512
LOG_IN = ("log in: this master's dashboard needs a user token (the login form, or an "
          "`Authorization: Bearer` header); an admin makes one with `tcl-master user add`")


def _token(request: web.Request) -> str:
    token = bearer_token(request.headers.items())
    return token or request.app[SESSIONS].token(request.cookies.get(COOKIE, ""))


def authorize(request: web.Request) -> Caller | None:
    """The caller, or None for an open path asked without credentials; Unauthenticated for
    anything else without a valid token (the gate writes the audit line)."""
    gate = request.app.get(GATE)
    if gate is None or not gate.secure:
        return ANONYMOUS
    token = _token(request)
    if token:
        return gate.caller(token, request.remote or "", request.path)
    if request.path in OPEN_PATHS or request.path.startswith("/static/"):
        return None
    raise Unauthenticated(LOG_IN)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in HEALTH_PATHS:      # probes (systemd, a load balancer, kubelet) carry no token
        return await handler(request)
    caller = authorize(request)
    if caller is not None:
        request[CALLER] = caller
    return await handler(request)


def check_metrics(request: web.Request) -> None:
    """Per-task series name every user's jobs: when users see only their own, admins only."""
    gate, caller = request.app.get(GATE), request.get(CALLER, ANONYMOUS)
    if gate is not None and sees_only_own(caller, gate.policy):
        raise PermissionDenied(f"user {caller.name} may not read /metrics: its series show every user's jobs "
                               "(status visibility: own); scrape with an admin's token")


async def login(request: web.Request) -> web.Response:
    gate = request.app.get(GATE)
    if gate is None or not gate.secure:
        return web.json_response({"user": ANONYMOUS.name, "role": ANONYMOUS.role, "secure": False})
    try:
        body = await request.json()
    except ValueError:
        raise InvalidArgument("body", 'send JSON: {"token": "tcu..."}') from None
    token = body.get("token") if isinstance(body, dict) else None
    if not isinstance(token, str) or not token.strip() or len(token) > MAX_TOKEN_CHARS:
        raise InvalidArgument("token", f"a user token (up to {MAX_TOKEN_CHARS} characters) is required")
    caller = gate.caller(token.strip(), request.remote or "", request.path)
    response = web.json_response({"user": caller.name, "role": caller.role, "secure": True})
    response.set_cookie(COOKIE, request.app[SESSIONS].open(token.strip()), httponly=True, samesite="Strict",
                        path="/", max_age=int(IDLE_S), secure=request.secure)
    return response


async def logout(request: web.Request) -> web.Response:
    request.app[SESSIONS].close(request.cookies.get(COOKIE, ""))
    response = web.json_response({"logged_out": True})
    response.del_cookie(COOKIE, path="/")
    return response


async def whoami(request: web.Request) -> web.Response:
    """Who the page is logged in as; 401 on a secure master without a session (the form)."""
    caller = request.get(CALLER)
    if caller is None:
        raise Unauthenticated(LOG_IN)
    gate = request.app.get(GATE)
    return web.json_response({"user": caller.name, "role": caller.role,
                              "secure": bool(gate is not None and gate.secure)})


def add_login(app: web.Application, gate: Gate | None) -> None:
    if gate is not None:
        app[GATE] = gate
    app[SESSIONS] = Sessions()
    app.add_routes([web.post("/api/v1/login", login), web.post("/api/v1/logout", logout),
                    web.get("/api/v1/whoami", whoami)])
