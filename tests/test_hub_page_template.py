"""The instructor's page rendered in JupyterHub's own template (hub/page.py), without a Hub: the
links point at the Hub's styles and logo under its prefix, a Hub's custom templates are followed,
and a user name cannot break out of the template's script."""

from __future__ import annotations

import pytest

pytest.importorskip("jupyterhub")

from jupyter_gpu.hub.page import environment, namespace  # noqa: E402


def render(name: str = "teacher", hub_prefix: str = "/hub/", paths: tuple[str, ...] = ()) -> str:
    names = namespace({"name": name, "scopes": []}, hub_prefix=hub_prefix, base_url="/", xsrf="x1")
    return environment(paths).get_template("gpu.html").render(**names)


def test_it_links_the_hubs_styles_logo_and_pages_under_the_hubs_prefix():
    html = render(hub_prefix="/workshop/hub/")
    assert 'href="/workshop/hub/static/css/style.min.css"' in html
    assert 'src="/workshop/hub/static/js/darkmode.js"' in html
    assert 'src="/workshop/hub/logo"' in html
    assert 'href="/workshop/hub/home"' in html and 'href="/workshop/hub/logout"' in html
    assert 'id="dark-theme-toggle"' in html
    assert '<table id="kernels"' in html and 'content="x1"' in html


def test_a_hubs_custom_template_is_followed(tmp_path):
    (tmp_path / "page.html").write_text(
        '{% extends "templates/page.html" %}'
        '{% block announcement %}<div id="banner">GPU workshop: save your work by 5 pm</div>{% endblock %}'
    )
    html = render(paths=(str(tmp_path),))
    assert '<div id="banner">GPU workshop: save your work by 5 pm</div>' in html
    assert '<table id="kernels"' in html and 'id="jupyterhub-logo"' in html
    assert "banner" not in render()


def test_a_user_name_cannot_break_out_of_the_page():
    name = '</script><script>alert("owned")</script>'
    html = render(name=name)
    assert "</script><script>" not in html  # not in the navbar, nor in the script's jhdata
    assert 'user: "\\u003c/script\\u003e' in html
    assert "&lt;/script&gt;&lt;script&gt;alert(&#34;owned&#34;)" in html  # shown as text in the navbar
