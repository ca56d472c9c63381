"""Expose only the Fleet API of a loopback SuperLink: the port opened to SuperNodes.

Flower 1.42's SuperLink serves its Fleet API (SuperNodes), Control API (``flwr`` CLI: register
node keys, submit and stop runs) and Runtime API (ServerApp) on one HTTP port; the
``--control-api-address`` / ``--fleet-api-address`` flags are deprecated and do not split
them, and the open-source build does not authenticate the Control API. So the SuperLink binds
``--host 127.0.0.1``, and this gateway listens on the address SuperNodes reach and forwards
only ``POST /v1/fleet/<endpoint>`` and ``GET|HEAD /health``; every other request gets 403
without reaching the SuperLink. The Control API stays reachable from the SuperLink's machine
only (use an SSH tunnel to run ``flwr`` from elsewhere).

TLS: the gateway serves the SuperLink's certificate (``--ssl-certfile`` / ``--ssl-keyfile``)
and verifies the upstream SuperLink against ``--upstream-ca``. SuperNode authentication is
unchanged: each request's signed headers pass through to the SuperLink, which checks them.

    python3 deploy/fleet_gateway.py --listen-host 0.0.0.0 --listen-port 9092
        --upstream https://127.0.0.1:9091 --upstream-ca certs/ca.crt
        --ssl-certfile certs/server.pem --ssl-keyfile certs/server.key   (one command line)
"""

from __future__ import annotations

import argparse
import contextlib
import re
import ssl
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

#: Fleet endpoints are one lowercase path segment under /v1/fleet/ (flwr.superlink.routers.fleet)
_FLEET_PATH = re.compile(r"/v1/fleet/[a-z][a-z0-9-]{0,63}")
# connection-level headers are not forwarded (RFC 9110 §7.6.1)
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                         "te", "trailer", "transfer-encoding", "upgrade", "host",
                         "content-length"})
MAX_BODY_BYTES = 64 * 1024 * 1024


def is_allowed(method: str, path: str) -> bool:
    """Whether a request may pass: Fleet API POSTs and the health probe, nothing else.

    ``path`` is the decoded request path; it must match exactly (no ``..``, no encoded
    separators, no trailing segments), so no spelling of a Control or Runtime route passes.
    """
    if path == "/health":
        return method in ("GET", "HEAD")
    return method == "POST" and _FLEET_PATH.fullmatch(path) is not None


def create_app(upstream: str, *, verify: ssl.SSLContext | bool = True, timeout: float = 120.0,
               transport: httpx.AsyncBaseTransport | None = None) -> Starlette:
    """The gateway application forwarding allowed requests to ``upstream``.

    ``transport`` replaces the network (tests).
    """
    client = httpx.AsyncClient(base_url=upstream, verify=verify, timeout=timeout,
                               transport=transport)

    async def forward(request: Request) -> Response:
        path = request.scope.get("path", "")
        # raw_path must decode to the checked path, else a proxy/server parsing mismatch
        raw = request.scope.get("raw_path", b"").decode("latin-1")
        if not is_allowed(request.method, path) or raw.split("?", 1)[0] != path:
            return JSONResponse({"error": "only the Fleet API is served on this port"},
                                status_code=403)
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return JSONResponse({"error": "request body too large"}, status_code=413)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        try:
            up = await client.request(request.method, path, content=body, headers=headers,
                                      params=request.query_params)
        except httpx.HTTPError as e:
            return JSONResponse({"error": f"SuperLink unreachable: {type(e).__name__}"},
                                status_code=502)
        out = {k: v for k, v in up.headers.items()
               if k.lower() not in _HOP_BY_HOP | {"content-encoding"}}
        return Response(up.content, status_code=up.status_code, headers=out)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await client.aclose()

    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)],
                     lifespan=lifespan)


def main(argv: list[str] | None = None) -> int:
    """Run the gateway (blocking)."""
    import uvicorn

    p = argparse.ArgumentParser(prog="deploy/fleet_gateway.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen-host", default="0.0.0.0", help="address SuperNodes connect to")
    p.add_argument("--listen-port", type=int, default=9092)
    p.add_argument("--upstream", required=True,
                   help="the SuperLink's loopback URL, e.g. https://127.0.0.1:9091")
    p.add_argument("--upstream-ca", default="", help="CA certificate of the SuperLink's TLS")
    p.add_argument("--ssl-certfile", default="")
    p.add_argument("--ssl-keyfile", default="")
    p.add_argument("--insecure", action="store_true",
                   help="LOCAL TESTING ONLY: plain HTTP on both sides")
    a = p.parse_args(argv)
    if not a.insecure and not (a.ssl_certfile and a.ssl_keyfile and a.upstream_ca):
        p.error("TLS needs --ssl-certfile, --ssl-keyfile and --upstream-ca (or --insecure)")
    verify: Any = False if a.insecure else ssl.create_default_context(cafile=a.upstream_ca)
    app = create_app(a.upstream, verify=verify)
    tls = {} if a.insecure else {"ssl_certfile": a.ssl_certfile, "ssl_keyfile": a.ssl_keyfile}
    uvicorn.run(app, host=a.listen_host, port=a.listen_port, access_log=False, **tls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
