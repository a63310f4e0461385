"""The instructor's page in chromium against a real JupyterHub (tests/support/hub.py): signing in
through the Hub's own login page, the students' kernels on the page, a kernel shut down with its
button (gone from the student's server), what the page marks of a hostile student's server, and
a student's 403."""

from __future__ import annotations

import json
import time

import pytest
from support.browser import screenshot
from support.fake_fleet import hostile_kernels_reply, hostile_telemetry_reply, kernels_reply, telemetry_reply
from support.hub import INSTRUCTOR, PASSWORD, RealHub

from jupyter_gpu.hub import replies, view

pytestmark = pytest.mark.browser

NOTEBOOKS = {"alice": "train.ipynb", "bob": "lab1/cnn.ipynb"}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    hub = RealHub(tmp_path_factory.mktemp("hub"))
    try:
        hub.start_servers(*NOTEBOOKS)
        hub.kernels = {user: hub.start_kernel(user, notebook) for user, notebook in NOTEBOOKS.items()}
        yield hub
    finally:
        hub.stop()


def sign_in_and_open_the_page(page, hub: RealHub, name: str):
    """Open the service's page; the Hub sends the browser to its login form; sign in there. The
    reply the browser ends on (after the Hub's OAuth redirects) is returned."""
    page.goto(f"{hub.url}/services/jupyter-gpu/")
    page.wait_for_url(f"{hub.url}/hub/login**")
    page.fill("#username_input", name)
    page.fill("#password_input", PASSWORD)
    with page.expect_navigation() as landed:
        page.click("#login_submit")
    return landed.value


def test_the_instructor_sees_the_students_and_shuts_down_a_kernel(page, hub):
    landed = sign_in_and_open_the_page(page, hub, INSTRUCTOR)
    assert (landed.url, landed.status) == (f"{hub.url}/services/jupyter-gpu/", 200)
    rows = page.locator("#kernels tbody tr[data-kernel]")
    rows.nth(len(NOTEBOOKS) - 1).wait_for()
    seen = {tuple(row.locator("td").all_inner_texts()[:2]) for row in rows.all()}
    assert seen == set(NOTEBOOKS.items())
    servers = page.locator("#servers tbody tr[data-user]")
    states = servers.evaluate_all("rows => rows.map(r => [r.dataset.user, r.cells[2].textContent])")
    assert dict(states) == {user: "answering" for user in NOTEBOOKS}
    assert page.locator("#gpus tbody tr").count() == 2  # the simulated node's two GPUs
    # drawn in the Hub's own template: its navbar, logo and links, styled by its stylesheet
    assert page.locator("#jupyterhub-logo img").evaluate("img => img.complete && img.naturalWidth > 0")
    assert page.get_by_role("link", name="Home").get_attribute("href") == "/hub/home"
    assert page.locator("#logout").get_attribute("href") == "/hub/logout"
    assert page.locator("nav.navbar").evaluate("nav => getComputedStyle(nav).display") == "flex"
    assert page.title() == "GPU node: who holds what"
    screenshot(page, "hub-instructor-page")

    kernel = hub.kernels["alice"]
    questions: list[str] = []

    def answer(dialog) -> None:
        questions.append(dialog.message)
        dialog.accept()

    page.once("dialog", answer)
    with page.expect_response("**/services/jupyter-gpu/api/shutdown-kernel") as shutdown:
        page.locator(f'#kernels tr[data-kernel="{kernel}"] button', has_text="Shut down kernel").click()
    assert shutdown.value.status == 200
    assert questions == ["Shut down alice's kernel of train.ipynb? Its variables are lost."]
    page.locator(f'#kernels tr[data-kernel="{kernel}"]').wait_for(state="detached")
    assert kernel not in hub.kernel_ids("alice")
    # bob's kernel is untouched, on his server and on the page
    assert hub.kernels["bob"] in hub.kernel_ids("bob")
    assert page.locator(f'#kernels tr[data-kernel="{hub.kernels["bob"]}"]').is_visible()


def test_the_page_follows_the_hubs_dark_mode(page, hub):
    sign_in_and_open_the_page(page, hub, INSTRUCTOR)
    page.locator("#kernels tbody tr[data-kernel]").first.wait_for()

    def theme() -> str:
        return page.evaluate("document.documentElement.dataset.bsTheme")

    def background() -> str:
        return page.evaluate("getComputedStyle(document.body).backgroundColor")

    before, shade = theme(), background()
    page.click("#dark-theme-toggle")  # the Hub's own toggle in the Hub's navbar
    after = theme()
    assert {before, after} == {"light", "dark"} and background() != shade
    screenshot(page, f"hub-instructor-page-{after}")
    # one choice for the Hub's pages and this one: it is stored for the whole origin
    page.goto(f"{hub.url}/hub/home")
    assert theme() == after
    page.click("#dark-theme-toggle")
    page.goto(f"{hub.url}/services/jupyter-gpu/")
    assert theme() == before and background() == shade


def hostile_view() -> dict:
    """The service's api/kernels reply over alice's and bob's servers and mallory's, whose own code
    answers for it (tests/support/fake_fleet.py: 15,000 kernels, 10,000 GPUs, GPU-0 with another total)."""

    def reading(user: str, kernels: dict, telemetry: dict) -> view.Reading:
        return view.Reading(
            view.UserServer(user, "", f"/user/{user}/"),
            "ok",
            kernels=replies.check_kernels(kernels),
            gpus=replies.check_telemetry(telemetry),
        )

    readings = [reading(user, kernels_reply(user), telemetry_reply(1.0)) for user in NOTEBOOKS]
    hostile = json.loads(hostile_kernels_reply()), json.loads(hostile_telemetry_reply())
    return view.build([*readings, reading("mallory", *hostile)], now=time.time(), timeout=1.5)


def test_the_page_marks_what_a_hostile_students_server_claims(page, hub):
    built = hostile_view()
    page.route(
        "**/services/jupyter-gpu/api/kernels",
        lambda route: route.fulfill(status=200, content_type="application/json", body=json.dumps(built)),
    )
    sign_in_and_open_the_page(page, hub, INSTRUCTOR)
    rows = page.locator("#kernels tbody tr[data-kernel]")
    rows.nth(len(built["kernels"]) - 1).wait_for()
    cells = rows.evaluate_all("rows => rows.map(r => [r.cells[0].textContent, r.cells[4].textContent])")
    real = 2 * len(NOTEBOOKS)
    assert {user for user, _ in cells[:real]} == set(NOTEBOOKS)  # the real students on top
    assert {user for user, _ in cells[real:]} == {"mallory"}
    assert all(memory.endswith("(unconfirmed)") for _, memory in cells[real:])
    seen_by = page.locator("#gpus tbody tr").evaluate_all(
        "rows => rows.map(r => [r.cells[3].textContent, r.cells[3].className])"
    )
    assert seen_by[:2] == [["alice, bob", ""]] * 2
    assert seen_by[2:] == [["claimed by mallory alone", "flag"]] * replies.MAX_GPUS
    mallory = page.locator('#servers tr[data-user="mallory"] td').nth(2).inner_text()
    assert "15,000 kernels: the first 256 are listed" in mallory
    assert "10,000 GPUs: the first 64 are read" in mallory
    screenshot(page, "hub-hostile-student")


def test_a_student_signing_in_gets_403(page, hub):
    reply = sign_in_and_open_the_page(page, hub, "alice")
    # the Hub refuses her at its OAuth step (she lacks access:services!service=jupyter-gpu)
    assert reply.status == 403
    assert "403" in page.locator("h1").inner_text()
    assert "permission to access JupyterHub service jupyter-gpu" in page.locator("body").inner_text()
    assert page.locator("#kernels").count() == 0
    assert NOTEBOOKS["alice"] not in page.content() and NOTEBOOKS["bob"] not in page.content()
