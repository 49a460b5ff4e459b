"""Headless Chromium for the dashboard's page tests (selenium), and what a chart says of
itself: each chart's container carries data-points and data-ooms (master/web/static/app.js)."""

from __future__ import annotations

import shutil
from typing import Any


def browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
                "--disable-background-networking", "--window-size=1400,1000"):
        options.add_argument(arg)
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)


def chart(driver: Any, key: str) -> tuple[int, int]:
    """(points drawn, OOM markers) of the chart `key`; (0, 0) while it is not there."""
    found = driver.execute_script(f"const c = document.querySelector('[data-chart=\"{key}\"]');"
                                  "return c ? [+c.dataset.points, +c.dataset.ooms] : null;")
    return tuple(found) if found else (0, 0)
