"""A headless Chromium for the tests that look at a page (the dashboard:
test_dashboard.py; a sweep's report: test_sweep_report.py): what it needs,
how it is started, a whole-page screenshot.

Needs Debian's chromium, chromium-driver and python3-selenium (run with
/usr/bin/python3). Without them a browser test FAILS (it does not skip):
CI installs them (scripts/install-deps.sh).
"""
import os
import shutil
import tempfile
import time

import psb

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROME_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-proxy-server",
                "--window-size=1400,1000"]
PACKAGES = "chromium chromium-driver python3-selenium"
WAIT_S = 20.0  # bound on a page load


def missing_browser_deps():
    """What is missing to run a browser test (empty list: nothing)."""
    missing = []
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("python3-selenium (import selenium failed; run with /usr/bin/python3)")
    for path, pkg in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            missing.append("%s (no %s)" % (pkg, path))
    return missing


class BrowserTestCase(psb.PsbTestCase):
    """A PsbTestCase that fails at once, naming the packages, without a
    browser, and starts one on demand."""

    WHAT = "this test"  # named in the failure

    def setUp(self):
        missing = missing_browser_deps()
        if missing:
            self.fail("%s needs a browser; missing: %s. Install: apt-get install %s"
                      % (self.WHAT, "; ".join(missing), PACKAGES))
        psb.PsbTestCase.setUp(self)

    def start_browser(self):
        """A headless Chromium with its console log kept (the caller quits it)."""
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        profile = tempfile.mkdtemp(prefix="psbench-chromium-")
        self.addCleanup(shutil.rmtree, profile, True)
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for flag in CHROME_FLAGS + ["--user-data-dir=" + profile]:
            opts.add_argument(flag)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        service = Service(executable_path=CHROMEDRIVER,
                          log_path=os.path.join(self.reg.workdir, "chromedriver.log"))
        driver = webdriver.Chrome(service=service, options=opts)
        try:
            driver.set_page_load_timeout(WAIT_S)
            driver.set_script_timeout(10)
        except Exception:
            driver.quit()
            raise
        return driver

    def screenshot(self, driver, path, max_height=8000):
        """The whole page (the window is made as tall as the document)."""
        h = driver.execute_script("return Math.ceil(document.documentElement.scrollHeight)")
        driver.set_window_size(1400, max(1000, min(int(h) + 40, max_height)))
        time.sleep(0.5)  # let the charts follow the new size
        self.assertTrue(driver.save_screenshot(path), "screenshot to %s failed" % path)
