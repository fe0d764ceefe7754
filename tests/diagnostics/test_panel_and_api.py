"""The ranked fixes on the run page and in the read API, scoped to the user's projects."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from perfweb.diagnostics.tasks import diagnose_run_task
from perfweb.jobs.models import FixVerification, Job
from perfweb.runs.models import Run
from tests.conftest import PASSWORD
from tests.server.agent_client import RUN_ID, Agent

from .conftest import input_bound_run

pytestmark = pytest.mark.django_db
PAGE = f"/runs/{RUN_ID}/"
API = f"/api/v1/runs/{RUN_ID}/findings"


@pytest.fixture
def diagnosed(agent: Agent) -> Run:
    input_bound_run(agent)
    run = Run.objects.get()
    diagnose_run_task(run.id)
    return run


def logged_in(user: Any) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def test_it_shows_the_ranked_fixes_to_the_owner(diagnosed: Run, owner: Any) -> None:
    page = logged_in(owner).get(PAGE)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-testid="findings"' in html
    assert 'data-finding="dataloader.num_workers"' in html
    assert "of each step waits for the DataLoader" in html
    assert "54.0 %" in html  # estimated gain: 0.9 x the 60 % wait, as a share of step time
    assert "Basis: Amdahl on the measured wait share" in html
    assert "60.0 %" in html  # the evidence, as a percentage
    assert "data path" in html  # risk class badge
    assert '<pre class="snippet"><code>' in html
    assert "About this rule (What / Why / Fix)" in html and "What: the training loop" in html
    assert "<code>num_workers=0</code>" in html and "`num_workers" not in html  # backticks
    assert f'action="/runs/{RUN_ID}/jobs/"' in html  # "Try this fix" (num_workers has a knob)
    assert 'name="finding_id" value="dataloader.num_workers"' in html


def test_the_try_this_fix_button_its_snippet_and_its_job_carry_one_value(
    diagnosed: Run, owner: Any
) -> None:
    browser = logged_in(owner)
    html = browser.get(PAGE).content.decode()
    card = html[html.index('data-finding="dataloader.num_workers"') :]
    card = card[: card.index("</form>")]
    shown = re.search(r'name="knob" value="num_workers=(\d+)"', card)
    assert shown is not None, card
    workers = int(shown.group(1))
    assert f"num_workers={workers}," in card  # the snippet says the number the button posts
    stored = diagnosed.findings.get(rule_id="dataloader.num_workers").fix
    assert stored["knobs"] == {"num_workers": workers}
    form = {"finding_id": "dataloader.num_workers", "knob": f"num_workers={workers}"}
    assert browser.post(f"/runs/{RUN_ID}/jobs/", form).status_code == 302
    assert Job.objects.get().knobs == {"num_workers": workers}


def test_it_shows_them_to_a_teammate(diagnosed: Run, teammate: Any) -> None:
    assert 'data-finding="dataloader.num_workers"' in logged_in(teammate).get(PAGE).content.decode()


def test_it_hides_the_run_from_an_outsider(diagnosed: Run, outsider: Any) -> None:
    assert logged_in(outsider).get(PAGE).status_code == 404
    assert logged_in(outsider).get(API).status_code == 404


def test_it_says_when_a_run_has_not_been_diagnosed_yet(agent: Agent, owner: Any) -> None:
    input_bound_run(agent)
    html = logged_in(owner).get(PAGE).content.decode()
    assert "not diagnosed yet" in html and "Findings appear here once" in html


def test_it_shows_a_verified_fix_with_its_measured_gain(diagnosed: Run, owner: Any) -> None:
    job = Job.objects.create(
        project=diagnosed.project, run=diagnosed, host=diagnosed.host, created_by=owner,
        knobs={"num_workers": 4}, finding_id="dataloader.num_workers",
    )  # fmt: skip
    FixVerification.objects.create(
        run=diagnosed, finding_id="dataloader.num_workers", job=job, status="verified",
        measured_gain=0.5, speedup=2.0, ci_low=1.8, ci_high=2.2,
    )  # fmt: skip
    html = logged_in(owner).get(PAGE).content.decode()
    assert "badge-verified" in html and "verified · 50.0 % saved" in html
    assert "speed-up 2.00× (95% CI 1.80–2.20×), 50.0 % of step time" in html
    assert f'href="/jobs/{job.id}/"' in html


def test_it_serves_the_findings_to_a_token_of_the_project(diagnosed: Run, token: str) -> None:
    reply = Client().get(API, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert reply.status_code == 200
    body = reply.json()
    assert body["run"] == RUN_ID and body["diagnosed_at"] is not None
    top = body["findings"][0]
    assert top["id"] == "dataloader.num_workers" and top["rank"] == 1
    assert set(top) >= {"title", "risk", "confidence", "estimated_gain", "gain_basis",
                        "measured_gain", "score", "evidence", "fix", "doc"}  # fmt: skip
    assert top["fix"]["knob"].startswith("num_workers=")
    assert [f["rank"] for f in body["findings"]] == list(range(1, len(body["findings"]) + 1))


def test_it_serves_the_findings_to_a_member_session(diagnosed: Run, teammate: Any) -> None:
    assert logged_in(teammate).get(API).json()["findings"][0]["id"] == "dataloader.num_workers"


def test_it_answers_404_to_another_projects_token(diagnosed: Run, other_token: str) -> None:
    reply = Client().get(API, HTTP_AUTHORIZATION=f"Bearer {other_token}")
    assert reply.status_code == 404
    assert reply.json() == {"error": "no such run"}


def test_it_answers_401_to_nobody(diagnosed: Run) -> None:
    assert Client().get(API).status_code == 401
