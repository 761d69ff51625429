"""What the console must never do, checked in the browser: run a model's or a user's
text as HTML or script, work without its CSP, or leave the token in the address.
And the start form's variables, built from a manifest the browser reads itself."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from browser import TOKEN, PageWatch, open_console, wait_in_page
from playwright.sync_api import expect

from tests.api.serve_process import Serve, start, wait_for_status

pytestmark = pytest.mark.slow

BROKEN_MANIFEST = "schemaVersion: '1.0'\nid: broken\nsteps:\n  - id: a\n    type: nonsense\n"
HOSTILE = ('<img src=x onerror=alert(1)> <img src=x onerror="window.__xss=1"> '
           '<script>window.__xss=2;alert(2)</script> [click](javascript:alert(3)) **bold**')


def hostile_manifest() -> dict[str, Any]:
    return {"schemaVersion": "1.0", "id": "hostile", "name": "<img src=x onerror=alert(1)>",
            "variables": [{"key": "payload", "type": "string", "value": HOSTILE}],
            "steps": [{"id": "say", "type": "prompt", "prompt": "{{ payload }}",
                       "outputVariable": "answer", "includeInFinalOutput": True}]}


def assert_inert(page: Any, watch: PageWatch) -> None:
    assert page.evaluate("() => document.querySelectorAll('main img, main script').length") == 0
    assert page.evaluate("() => window.__xss") is None
    assert page.evaluate(
        "() => [...document.links].filter(a => !/^https?:/.test(a.href)).length") == 0
    assert watch.dialogs == []


def test_model_output_and_variables_show_as_text_never_as_html(
        page: Any, server: Serve, client: httpx.Client, watch: PageWatch) -> None:
    run_id = start(client, hostile_manifest())["runId"]
    finished = wait_for_status(client, run_id, "completed")
    assert "<script>window.__xss=2;alert(2)</script>" in str(finished["output"])

    open_console(page, server, f"#/runs/{run_id}")
    output = page.locator("section.result")
    expect(output).to_contain_text("<img src=x onerror=alert(1)>")
    expect(output).to_contain_text("<script>window.__xss=2;alert(2)</script>")
    expect(output).to_contain_text("[click](javascript:alert(3))")
    expect(output.locator("strong")).to_have_text("bold")  # markdown, built as elements
    assert_inert(page, watch)

    page.get_by_role("link", name="Checkpoint 1", exact=True).click()
    expect(page.locator(".variables-table")).to_contain_text(HOSTILE)
    assert_inert(page, watch)

    page.get_by_role("link", name="Runs", exact=True).click()
    expect(page.locator(f"tr[data-run-id='{run_id}']")).to_contain_text(
        "<img src=x onerror=alert(1)>")
    assert_inert(page, watch)


def test_the_console_is_served_with_a_strict_content_security_policy(
        server: Serve, page: Any, watch: PageWatch) -> None:
    for path in ("/", "/console/app.js", "/console/console.css"):
        response = httpx.get(server.base_url + path, trust_env=False, timeout=30.0)
        assert response.status_code == 200, path
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "style-src 'self'" in policy
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert "require-trusted-types-for 'script'" in policy
        assert "frame-ancestors 'none'" in policy
        assert response.headers["x-content-type-options"] == "nosniff"
    # The API's own answers stay JSON, without the console's headers.
    openapi = httpx.get(server.base_url + "/openapi.json", trust_env=False, timeout=30.0)
    assert openapi.headers["content-type"].startswith("application/json")

    open_console(page, server)
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    # Enforced in the browser: no string becomes HTML, no inline script runs.
    outcome = page.evaluate("""() => {
        try { document.body.innerHTML = '<b>x</b>'; return 'allowed'; }
        catch (error) { return error.name; } }""")
    assert outcome == "TypeError"
    wait_in_page(page, "() => true")
    watch.refusals.clear()  # the refusal just provoked


def test_the_token_leaves_the_address_and_a_bad_one_asks_again(
        page: Any, server: Serve) -> None:
    open_console(page, server)
    assert "token" not in page.url
    assert page.evaluate("() => sessionStorage.getItem('agent-runtime.token')") == TOKEN
    assert TOKEN not in page.content()

    page.get_by_role("button", name="Forget token").click()
    token = page.get_by_label("Bearer token")
    expect(token).to_be_focused()
    token.fill("not-the-token")
    page.keyboard.press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("did not accept the token")
    page.get_by_label("Bearer token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()


def test_the_variables_form_follows_the_declarations(
        page: Any, server: Serve, client: httpx.Client) -> None:
    manifest = """\
schemaVersion: '1.0'
id: typed
variables:
  - key: count
    type: number
    value: 2
  - key: loud
    type: boolean
    value: false
  - key: settings
    type: object
    requiresOverride: true
    description: Knobs for the run.
  - key: topic
    type: string
    value: kept default
steps:
  - id: say
    type: prompt
    prompt: "{{ topic }} {{ count }}"
"""
    open_console(page, server, "#/start")
    page.get_by_label("Agent manifest (YAML or JSON)").fill(manifest)
    settings = page.get_by_label("settings")
    expect(settings).to_have_attribute("required", "")
    expect(page.get_by_text("Knobs for the run.")).to_be_visible()
    page.get_by_label("count").fill("5")
    page.get_by_label("loud").select_option("true")
    settings.fill('{"level": 3}')
    page.get_by_label("Model override").fill("scripted/echo")
    page.get_by_label("Token budget").fill("100000")
    page.get_by_role("button", name="Start run").click()
    wait_in_page(page, "() => location.hash.startsWith('#/runs/')")
    run_id = page.evaluate("() => decodeURIComponent(location.hash.split('/')[2])")

    run = wait_for_status(client, run_id, "completed")
    assert run["usage"]["maxTotalTokens"] == 100000
    state = client.get(f"/runs/{run_id}/checkpoints/1").json()["checkpoint"]
    assert state["variables"] == {"count": 5, "loud": True, "settings": {"level": 3},
                                  "topic": "kept default"}


def test_a_manifest_the_server_refuses_is_explained_on_the_form(
        page: Any, server: Serve) -> None:
    open_console(page, server, "#/start")
    page.get_by_label("Agent manifest (YAML or JSON)").fill(BROKEN_MANIFEST)
    page.get_by_label("Model override").fill("scripted/echo")
    page.get_by_role("button", name="Start run").click()
    problem = page.locator(".form-error")
    expect(problem).to_contain_text("steps[0]")
    assert page.evaluate("() => location.hash") == "#/start"


def test_the_form_reads_no_yaml_itself_the_server_checks_the_manifest(
        page: Any, server: Serve, client: httpx.Client) -> None:
    # The browser's own YAML reader is gone: the server reads the manifest once,
    # for the form (POST /manifests/validate) as for the run (POST /runs).
    assert client.get("/console/yaml.js").status_code == 404
    open_console(page, server, "#/start")
    manifest = page.get_by_label("Agent manifest (YAML or JSON)")
    manifest.fill("schemaVersion: '1.0'\nid: anchors\nvariables:\n  - &v {key: who, "
                  "type: string, value: world}\nsteps:\n  - id: a\n    type: prompt\n"
                  "    prompt: Hello {{ who }}\n")
    expect(page.get_by_label("who")).to_have_attribute("placeholder", "world")
    manifest.fill(BROKEN_MANIFEST)
    problems = page.locator("#manifest-problems")
    expect(problems).to_contain_text("Problem: manifest: steps[0]")
    expect(page.get_by_label("Variables (a JSON object)")).to_be_visible()


UNLABELLED = """() => [...document.querySelectorAll('input, select, textarea, button')]
    .filter(control => !control.hidden && control.offsetParent !== null)
    .filter(control => control.tagName === 'BUTTON'
        ? !control.textContent.trim() && !control.getAttribute('aria-label')
        : control.labels.length === 0 && !control.getAttribute('aria-label'))
    .map(control => control.outerHTML.slice(0, 80))"""


def test_every_control_has_a_label(page: Any, server: Serve, client: httpx.Client) -> None:
    from tests.api.serve_process import approval_manifest

    run_id = start(client, approval_manifest())["runId"]
    wait_for_status(client, run_id, "suspended")
    open_console(page, server)
    expect(page.locator("table.runs tbody tr").first).to_be_visible()
    assert page.evaluate(UNLABELLED) == []
    page.get_by_role("link", name="Start a run").first.click()
    page.get_by_label("Example manifest").select_option("release-brief.agent.yaml")
    expect(page.get_by_label("audience")).to_be_visible()
    assert page.evaluate(UNLABELLED) == []
    open_console(page, server, f"#/runs/{run_id}")
    expect(page.locator("section.suspension")).to_be_visible()
    assert page.evaluate(UNLABELLED) == []
