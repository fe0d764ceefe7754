"""The ranked fixes on the run page and in the read API, scoped to the user's projects."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from perfweb.diagnostics.models import FixVerification
from perfweb.diagnostics.tasks import diagnose_run_task
from perfweb.jobs.models import Job
from perfweb.runs.models import Run
from tests.conftest import PASSWORD
from tests.server.agent_client import RUN_ID, T0, Agent

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
        project=diagnosed.project,
        run=diagnosed,
        host=diagnosed.host,
        created_by=owner,
        knobs={"num_workers": 4},
        finding_id="dataloader.num_workers",
    )
    FixVerification.objects.create(
        run=diagnosed,
        finding_id="dataloader.num_workers",
        job=job,
        status="verified",
        measured_gain=0.5,
        speedup=2.0,
        ci_low=1.8,
        ci_high=2.2,
    )
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
    assert set(top) >= {
        "title",
        "risk",
        "confidence",
        "estimated_gain",
        "gain_basis",
        "measured_gain",
        "score",
        "evidence",
        "fix",
        "doc",
    }
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


@pytest.fixture
def contended(agent: Agent) -> Run:
    """The input-bound run on a host whose other processes keep both cores busy."""
    input_bound_run(
        agent,
        facts={
            "dataloader.0.num_workers": 0,
            "dataloader.0.batch_size": 16,
            "host.cpu_count": 2,
            "host.usable_cores": 2,
            "threads.intra_op": 2,
            "workload.kind": "training",
        },
    )
    ends = [T0 + (i + 1) * 0.1 for i in range(60)]
    assert (
        agent.batch(
            metrics=[
                {"device": "host", "name": "host.cpu_percent", "t": ends, "v": [100.0] * 60},
                {"device": "process", "name": "process.cpu_percent", "t": ends, "v": [40.0] * 60},
            ],
            facts={},
        ).status_code
        == 200
    )
    run = Run.objects.get()
    diagnose_run_task(run.id)
    return run


def test_it_shows_host_conditions_apart_from_the_ranked_fixes(contended: Run, owner: Any) -> None:
    html = logged_in(owner).get(PAGE).content.decode()
    ranked, _, rest = html.partition('data-testid="host-conditions"')
    assert 'data-finding="dataloader.num_workers"' in ranked
    assert "cpu.host_contention" not in ranked.partition('<ol class="findings">')[2]
    assert 'data-host-condition="cpu.host_contention"' in rest
    assert "not ranked among the fixes" in rest


def test_the_api_serves_host_conditions_in_their_own_list(contended: Run, token: str) -> None:
    body = Client().get(API, HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert [f["id"] for f in body["host_conditions"]] == ["cpu.host_contention"]
    assert body["findings"][0]["id"] == "dataloader.num_workers"
    assert body["findings"][0]["rank"] == 1
    assert all(f["risk"] != "system" for f in body["findings"])


def test_a_failed_run_leads_with_its_exit_code_and_error_line(agent: Agent, owner: Any) -> None:
    assert agent.start().status_code == 200
    ends = [T0 + i for i in range(5)]
    error = "ModuleNotFoundError: No module named 'wandb'"
    assert (
        agent.batch(
            metrics=[
                {"device": "process", "name": "process.cpu_percent", "t": ends, "v": [90.0] * 5},
            ],
            facts={"torch.version": "2.13.0", "run.error": error},
        ).status_code
        == 200
    )
    assert agent.finish(exit_code=1).status_code == 200
    html = logged_in(owner).get(PAGE).content.decode()
    failed = "The run failed: exit code 1, ModuleNotFoundError: No module named &#x27;wandb&#x27;"
    assert failed in html
    panel = html.partition('id="findings-panel"')[2].partition("</section>")[0]
    assert "coverage-fix" not in panel and "perfweb_agent.step()" not in panel
    coverage = logged_in(owner).get(API).json()["coverage"]
    assert coverage["exit_code"] == 1 and coverage["fix"] == ""


def test_module_calls_before_the_first_optimizer_step_are_no_training_steps(
    agent: Agent,
) -> None:
    from perfweb.diagnostics.evidence import run_evidence

    input_bound_run(
        agent,
        facts={"steps.training_from": 4, "steps.source": "optimizer", "workload.kind": "training"},
    )
    evidence = run_evidence(run=Run.objects.get())
    assert evidence.pre_training_calls == 4
    assert len(evidence.steps) == 56 and min(s.index for s in evidence.steps) == 4


def test_the_run_page_and_the_api_count_only_the_training_steps(agent: Agent, owner: Any) -> None:
    input_bound_run(
        agent,
        facts={"steps.training_from": 4, "steps.source": "optimizer", "workload.kind": "training"},
    )
    assert Run.objects.get().step_count == 60  # stored: every call the agent counted
    browser = logged_in(owner)
    row = browser.get(f"/api/v1/runs/{RUN_ID}").json()
    assert (row["steps"], row["pre_training_calls"]) == (56, 4)
    listed = browser.get("/api/v1/runs").json()["runs"][0]
    assert (listed["steps"], listed["pre_training_calls"]) == (56, 4)
    html = browser.get(PAGE).content.decode()
    cell = html.partition('data-field="steps">')[2].partition("</dd>")[0]
    assert cell.startswith("56 ") and "4 evaluation or warm-up calls before the first" in cell


def test_a_run_without_calls_before_training_counts_every_step(agent: Agent, owner: Any) -> None:
    input_bound_run(agent)
    row = logged_in(owner).get(f"/api/v1/runs/{RUN_ID}").json()
    assert (row["steps"], row["pre_training_calls"]) == (60, 0)
