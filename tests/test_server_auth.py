"""Every route demands authentication and honours the server's authorizer."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest
from support.jupyter_api import DenyGPU, with_server_app
from tornado.httpclient import HTTPClientError

from jupyter_gpu.server.handlers import route_table

# Every route of the extension without a path parameter, read from its own table: a route added
# there is tested here without anyone remembering to list it. GET routes, and POST-only ones
# (notices, whose body the tests of each route give).
TABLE = [(p.lstrip("/"), h) for p, h, _ in route_table(None) if "(?P" not in p]  # type: ignore[arg-type]
ROUTES = [route for route, handler in TABLE if "get" in vars(handler)]
POSTED = [route for route, handler in TABLE if "get" not in vars(handler)]
# Refused before the kernel is looked up: an attacker learns nothing, not even which ids exist.
GUARDED = [*ROUTES, "api/gpu/kernels/8c3f2a10-0000-4000-8000-000000000000/cells"]


@pytest.mark.parametrize("route", GUARDED)
@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_every_route_refuses_requests_without_a_valid_token(jp_fetch, route, token):
    # an empty Authorization header stops jp_fetch from adding the real token
    headers = {"Authorization": f"token {token}" if token else ""}
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*route.split("/"), headers=headers, follow_redirects=False)
    assert info.value.code == 403


@pytest.mark.parametrize("route", POSTED)
@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_every_post_route_refuses_requests_without_a_valid_token(jp_fetch, route, token):
    headers = {"Authorization": f"token {token}" if token else ""}
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*route.split("/"), method="POST", body="{}", headers=headers, follow_redirects=False)
    assert info.value.code == 403


def test_the_table_has_post_routes():
    """The control: the POST tests above are not run over an empty list."""
    assert POSTED == ["api/gpu/notices/server-stop"]


@pytest.mark.parametrize("route", ROUTES)
async def test_every_route_answers_with_the_token(jp_fetch, route):
    assert (await jp_fetch(*route.split("/"))).code == 200


class TestTokenInTheURL:
    """`?token=` as jupyter_server accepts it (links, curl, Grafana data sources): no header."""

    @pytest.fixture
    def jp_auth_header(self):
        return {}

    @pytest.fixture(params=["/", "/user/alice/"])
    def jp_base_url(self, request):
        return request.param

    @pytest.mark.parametrize("route", ROUTES)
    async def test_every_route_answers_with_the_token_in_the_url_only(self, jp_fetch, jp_serverapp, route):
        token = jp_serverapp.identity_provider.token
        response = await jp_fetch(*route.split("/"), params={"token": token}, follow_redirects=False)
        assert response.code == 200 and json.loads(response.body)["version"] == 1
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch(*route.split("/"), params={"token": "wrong-token"}, follow_redirects=False)
        assert info.value.code == 403

    async def test_the_token_goes_with_other_parameters(self, jp_fetch, jp_serverapp):
        token = jp_serverapp.identity_provider.token
        response = await jp_fetch("api", "gpu", "telemetry", params={"token": token, "since": "0"})
        assert "history" in json.loads(response.body)
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch("api", "gpu", "telemetry", params={"token": token, "sinse": "0"})
        assert info.value.code == 400
        assert json.loads(info.value.response.body)["message"] == (
            "Unknown query parameter(s): sinse. Allowed: since, token."
        )


def test_no_handler_lacks_an_auth_rule(jp_server_config):
    """What the extension template's check_auth.py does, as a test."""
    from jupyter_server.serverapp import ServerApp

    app = ServerApp(
        jpserver_extensions={"jupyter_gpu": True},
        allow_unauthenticated_access=False,
        reraise_server_extension_failures=True,
        allow_root=True,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        app.initialize(argv=[], find_extensions=False, new_httpserver=False)
    try:
        messages = [str(w.message) for w in caught if "JupyterServerAuthWarning" in type(w.message).__name__]
        assert not [m for m in messages if "gpu" in m.lower()], messages
        assert any(pattern.endswith("api/gpu/devices") for pattern in _patterns(app))
    finally:
        app.extension_manager.extension_points["jupyter_gpu"].app.sampler.stop()


def _patterns(app) -> list[str]:
    return [
        rule.matcher.regex.pattern.rstrip("$") for rule in app.web_app.default_router.rules[0].target.rules
    ]


class TestAuthorizer:
    @pytest.fixture
    def jp_server_config(self, jp_server_config):
        return with_server_app(jp_server_config, authorizer=DenyGPU)

    @pytest.mark.parametrize("route", GUARDED)
    async def test_a_user_without_the_gpu_permission_is_refused(self, jp_fetch, route):
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch(*route.split("/"))
        assert info.value.code == 403
        assert (await jp_fetch("api", "status")).code == 200

    @pytest.mark.parametrize("route", POSTED)
    async def test_a_user_without_the_gpu_permission_cannot_post(self, jp_fetch, route):
        body = '{"stop_in_seconds": 60, "reason": "", "by": "hub"}'
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch(*route.split("/"), method="POST", body=body)
        assert info.value.code == 403


def test_server_side_never_imports_torch():
    """`import torch` costs seconds: the server extension must start without it."""
    code = (
        "import sys, jupyter_gpu, jupyter_gpu.server.app, jupyter_gpu.nvml.simulated;"
        "jupyter_gpu._jupyter_server_extension_points();"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
