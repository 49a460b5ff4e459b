"""The dashboards with real parts: the installed tcl-master and tcl-agent on this host's
cgroups, a real Prometheus scraping /metrics, Debian's headless Chromium (Selenium +
chromium-driver) driving the web UI, and `tcl top` in tmux. One cluster serves all four
(module fixture): a CPU burner, an OOM-killed task, a chatty task and the README's job.

Screenshots go to $TCL_TEST_ARTIFACTS (default build/test-artifacts/dashboard); with
TCL_UPDATE_DOCS=1 they are also copied to docs/ for the README."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from testkit.procs import BIN, Proc, cgroup_v1_usable, tcl
from testkit.browser import browser, chart
from testkit.cgroups import leftovers
from testkit.faultcluster import wait_for
from testkit.procs import sweep_node
from tests.system.cluster import node_name, wait_state

SKIP = cgroup_v1_usable()
pytestmark = [pytest.mark.system, pytest.mark.dashboard, pytest.mark.skipif(SKIP is not None, reason=str(SKIP))]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("TCL_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts" / "dashboard"))
GRAFANA = ROOT / "dashboards" / "grafana" / "tcluster.json"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _until(check: Any, timeout_s: float, what: str) -> Any:
    # Half a second between looks: each look is a Prometheus query or a browser script.
    return wait_for(check, timeout_s, what, interval_s=0.5)


class Live:
    def __init__(self, tmp: Path) -> None:
        self.tmp, self.node = tmp, node_name("dash")
        self.master = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", "--data-dir", str(tmp / "master"),
                            "--heartbeat-interval-s", "0.5", "--http", "127.0.0.1:0"], tmp / "master.log")
        self.address = "127.0.0.1:" + self.master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+)").group(1)
        self.http = self.master.wait_for_output(r"dashboard on (http://127\.0\.0\.1:\d+)/").group(1)
        self.agent = Proc([str(BIN / "tcl-agent"), "--master", self.address, "--node", self.node, "--runtime",
                           "cgroup1", "--cpus", "2", "--memory", "2Gi", "--state-dir", str(tmp / self.node)],
                          tmp / "agent.log")
        self.agent.wait_for_output("registered with")
        self.jobs: dict[str, str] = {}

    def submit(self, key: str, *args: str) -> str:
        self.jobs[key] = tcl(self.address, "submit", *args).stdout.strip()
        return self.jobs[key]

    def stop(self) -> list[str]:
        self.agent.stop()
        self.master.stop()
        left = leftovers(self.node)
        sweep_node(self.node, self.tmp / self.node)
        return left


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    cluster = Live(tmp_path_factory.mktemp("dashboard"))
    try:
        cluster.submit("burner", "--name", "burner", "--cpu", "1", "--mem", "128Mi", "--",
                       "python3", "-c", "while True: pass")
        cluster.submit("hog", "--name", "hog", "--cpu", "0.1", "--mem", "64Mi", "--", "python3", "-c",
                       "import time\na = []\nwhile True:\n    a.append(b'x' * 2**20); time.sleep(0.01)")
        cluster.submit("ticker", "--name", "ticker", "--cpu", "0.1", "--mem", "64Mi", "--", "sh", "-c",
                       "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.3; done")
        cluster.submit("readme", "--cpu", "0.5", "--mem", "256Mi", "--", "python3", "-c", "print(42)")
        wait_state(cluster.address, cluster.jobs["burner"], {"RUNNING"})
        wait_state(cluster.address, cluster.jobs["hog"], {"FAILED"})
        yield cluster
    finally:
        for key in ("burner", "ticker"):
            if key in cluster.jobs:
                tcl(cluster.address, "cancel", cluster.jobs[key], check=False)
        left = cluster.stop()
    assert left == [], f"the dashboard tests left cgroups behind: {left}"


# ---- Prometheus ----

def _prometheus(tmp: Path, target: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    config = tmp / "prometheus.yml"
    config.write_text(f"global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n"
                      f"  - job_name: tcluster\n    static_configs: [{{targets: ['{target}']}}]\n")
    log = open(tmp / "prometheus.log", "wb")
    proc = subprocess.Popen([shutil.which("prometheus") or "prometheus", f"--config.file={config}",
                             f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, f"http://127.0.0.1:{port}"


def _query(base: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    params = {"query": expr, **({"time": f"{at:.3f}"} if at else {})}
    reply = _get(f"{base}/api/v1/query?{urllib.parse.urlencode(params)}")
    assert reply["status"] == "success", reply
    return reply["data"]["result"]


def _grafana_exprs() -> list[str]:
    board = json.loads(GRAFANA.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    return exprs


def _substitute(expr: str) -> str:
    """Grafana's variables filled in; its label_values(query, label) becomes the query."""
    expr = re.sub(r"^label_values\((.*), *\w+\)$", r"\1", expr)
    for name in ("job_id", "queue", "node"):
        expr = expr.replace(f"${name}", ".*")
    return expr.replace("$__rate_interval", "10s")


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus is not installed (apt-get install prometheus)")
def test_prometheus_rate_matches_the_agents_cpu_rate_and_every_grafana_query_works(live: Live, tmp_path: Path) -> None:
    target = live.http.removeprefix("http://")
    proc, base = _prometheus(tmp_path, target)
    try:
        _until(lambda: _ok(f"{base}/-/ready"), 30, "prometheus ready")
        burner = live.jobs["burner"]
        series = f'tcluster_task_cpu_usage_seconds_total{{job_id="{burner}"}}'
        # More than the rate's 20 s window of scrapes: a window that starts before the first
        # scrape makes Prometheus extrapolate less, and read about 10% low.
        _until(lambda: len(_query(base, f"count_over_time({series}[30s])")) and
               float(_query(base, f"count_over_time({series}[30s])")[0]["value"][1]) >= 26, 90, "26 scrapes")
        at = time.time() - 2
        [sample] = _query(base, f"rate({series}[20s])", at)
        prom_rate = float(sample["value"][1])
        assert sample["metric"]["node"] == live.node and sample["metric"]["job_name"] == "burner"
        usage = _get(f"{live.http}/api/v1/jobs/{burner}/usage?since={at - 20}&until={at}")["tasks"][0]["series"]
        points = [(t, u + s) for t, u, s in zip(usage["t"], usage["cpu_user"], usage["cpu_system"]) if u is not None]
        # Each reported rate covers the time since the sample before it: weigh it by that time,
        # as Prometheus's counter rate does (a starved agent samples late, and unevenly).
        weights = [usage["step_s"]] + [b[0] - a[0] for a, b in zip(points, points[1:])]
        agent_rate = sum(w * r for w, (_, r) in zip(weights, points)) / sum(weights)
        print(f"CPU rate of the burner: Prometheus {prom_rate:.3f}, agent {agent_rate:.3f} cores "
              f"(ratio {prom_rate / agent_rate:.3f})")
        assert abs(prom_rate - agent_rate) <= 0.15 * agent_rate
        for expr in _grafana_exprs():
            result = _query(base, _substitute(expr))
            assert result, f"no series for the Grafana expression {expr!r}"
    finally:
        proc.terminate()
        proc.wait(15)


def _ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


# ---- Chromium ----

_browser, _chart = browser, chart


def _shot(driver: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    if os.environ.get("TCL_UPDATE_DOCS") == "1":
        (ROOT / "docs").mkdir(exist_ok=True)
        shutil.copy(ARTIFACTS / f"{name}.png", ROOT / "docs" / f"dashboard-{name}.png")


@pytest.mark.skipif(shutil.which("chromium") is None or shutil.which("chromedriver") is None,
                    reason="chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
def test_the_web_ui_shows_jobs_charts_oom_and_follows_a_log(live: Live) -> None:
    driver = _browser()
    try:
        burner, hog, ticker = live.jobs["burner"], live.jobs["hog"], live.jobs["ticker"]
        driver.get(f"{live.http}/#/jobs")
        _until(lambda: driver.execute_script(f"return !!document.querySelector('[data-job=\"{burner}\"]')"), 30,
               "the burner in the job list")
        assert driver.execute_script(f"return !!document.querySelector('[data-job=\"{live.jobs['readme']}\"]')")
        _shot(driver, "jobs")
        driver.get(f"{live.http}/#/jobs/{burner}")
        _until(lambda: _chart(driver, f"job-cpu:{burner}")[0] > 3 and _chart(driver, f"job-mem:{burner}")[0] > 3,
               30, "CPU and memory charts with points")
        time.sleep(2.5)                           # one live refresh more: the chart keeps growing in place
        _shot(driver, "job")
        driver.get(f"{live.http}/#/jobs/{hog}")
        _until(lambda: _chart(driver, f"job-mem:{hog}")[1] >= 1, 30, "an OOM marker on the memory chart")
        # One script call: the page redraws every 2 s, so a found element may be replaced
        # before its text is read.
        table, ooms = driver.execute_script("return [document.getElementById('tasks').innerText,"
                                            " document.getElementById('oom-list').innerText]")
        assert "OOMKilled" in table and "FAILED" in table
        assert "OOM kill: task 0" in ooms
        _shot(driver, "oom")
        driver.get(f"{live.http}/#/")
        _until(lambda: _chart(driver, "ov-cpu")[0] > 0, 30, "the overview's CPU chart")
        _shot(driver, "overview")
        driver.get(f"{live.http}/#/nodes/{live.node}")
        _until(lambda: _chart(driver, f"node-cpu:{live.node}")[0] > 0, 30, "the node's allocated vs used")
        _shot(driver, "node")
        driver.get(f"{live.http}/#/jobs/{ticker}/logs/0")
        first = _until(lambda: _ticks(driver), 30, "the log")
        later = _until(lambda: (n := _ticks(driver)) > first + 2 and n, 30, "new lines while following")
        assert later > first
        _shot(driver, "logs")
    finally:
        driver.quit()


def _ticks(driver: Any) -> int:
    text = driver.execute_script("const p = document.getElementById('log'); return p ? p.textContent : '';")
    found = re.findall(r"tick (\d+)", text or "")
    return int(found[-1]) if found else 0


# ---- tcl top ----

@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")
def test_tcl_top_in_tmux_puts_the_busy_task_on_top(live: Live) -> None:
    sock = f"tcl-top-{os.getpid()}"
    tmux = ["tmux", "-L", sock]
    subprocess.run([*tmux, "new-session", "-d", "-x", "180", "-y", "40",
                    f"{BIN / 'tcl'} --master {live.address} top"], check=True)
    try:
        def top_row() -> str | None:
            screen = subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True).stdout
            lines = [line for line in screen.splitlines() if line.strip()]
            header = next((i for i, line in enumerate(lines) if line.startswith("JOB")), None)
            return lines[header + 1] if header is not None and len(lines) > header + 1 else None
        seen: list[str] = []

        def burner_on_top() -> bool:      # the first screens may come before the burner's first rate
            row = top_row()
            seen.append(row or "")
            return bool(row) and row.split()[0] == live.jobs["burner"]
        try:
            _until(burner_on_top, 30, "the burner on top")
        except AssertionError:
            raise AssertionError(f"tcl top's first row was {seen[-1]!r}, not the burner {live.jobs['burner']}")
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)


@pytest.mark.skipif(shutil.which("chromium") is None or shutil.which("chromedriver") is None,
                    reason="chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
def test_a_secure_masters_dashboard_asks_for_a_token_and_logs_in(tmp_path: Path) -> None:
    """A master with TLS material: the page shows a login form, refuses a wrong token,
    and after the admin's token shows the jobs with the user named in the header."""
    data = tmp_path / "master"
    init = subprocess.run([str(BIN / "tcl-master"), "init", "--data-dir", str(data)], capture_output=True,
                          text=True, timeout=60, check=True)
    token = re.search(r"(tcu\.\S+)", init.stdout + init.stderr).group(1)  # type: ignore[union-attr]
    master = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", "--data-dir", str(data), "--http", "127.0.0.1:0"],
                  tmp_path / "master.log")
    driver = None
    try:
        address = "127.0.0.1:" + master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+)").group(1)
        http = master.wait_for_output(r"dashboard on (http://127\.0\.0\.1:\d+)/").group(1)
        env = {**os.environ, "TCL_TOKEN": token, "TCL_CA": str(data / "pki" / "ca.crt")}
        job = subprocess.run([str(BIN / "tcl"), "--master", address, "submit", "--name", "behind-login", "--", "true"],
                             capture_output=True, text=True, timeout=60, check=True, env=env).stdout.strip()
        driver = _browser()
        driver.get(f"{http}/#/jobs")
        _until(lambda: driver.execute_script("return !!document.getElementById('login-form')"), 30, "the login form")
        assert not driver.execute_script(f"return !!document.querySelector('[data-job=\"{job}\"]')")
        _shot(driver, "login")
        driver.execute_script("document.getElementById('login-token').value = 'tcu..wrong';"
                              "document.querySelector('#login-form button').click();")
        _until(lambda: driver.execute_script("return document.getElementById('login-error')?.textContent"), 30,
               "the refusal of a wrong token")
        driver.execute_script(f"document.getElementById('login-token').value = {json.dumps(token)};"
                              "document.querySelector('#login-form button').click();")
        _until(lambda: driver.execute_script(f"return !!document.querySelector('[data-job=\"{job}\"]')"), 30,
               "the job list after logging in")
        assert "admin (admin)" in driver.execute_script("return document.getElementById('who').textContent")
        assert not driver.execute_script("return document.cookie")        # HttpOnly: scripts never see it
        driver.delete_all_cookies()                   # a new browser: `tcl dev`'s link logs it in
        driver.get("about:blank")                     # a real load (a fragment change alone reloads nothing)
        driver.get(f"{http}/#login={urllib.parse.quote(token)}")
        _until(lambda: "admin (admin)" in driver.execute_script("return document.getElementById('who').textContent"),
               30, "the login link's session")
        assert "login=" not in driver.current_url                           # the token left the address bar
    finally:
        if driver is not None:
            driver.quit()
        master.stop()
