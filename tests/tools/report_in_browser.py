#!/usr/bin/env python3
"""Opens a report.html in a real browser (headless Chromium) and checks what a reader would see:

    report_in_browser.py REPORT_HTML SCREENSHOT_PNG [--expect-images N] [--browser PATH]

  - every <img> loaded (complete, naturalWidth > 0), and at least N of them (default 1);
  - no console error: console.error/assert, an uncaught exception, or a browser log entry of level
    error (a missing file, a blocked load);
  - no network request: every request the page made is file:, data:, blob: or about:;
and keeps a screenshot of the first screen (1280 x 800) at SCREENSHOT_PNG, printing its path.

The browser is driven through the DevTools protocol over a pipe (--remote-debugging-pipe: JSON
messages separated by NUL on file descriptors 3 and 4), so no port is opened and nothing beyond the
standard library is needed. --no-sandbox, as CI runs as root.

Exit codes: 0 every check passed; 1 a check failed (each failure printed); 77 the browser is
missing or cannot start, with a line starting BROWSER_SKIP (tests/CMakeLists.txt reports the test
skipped). Used by tests/tools/report_browser_test.cpp.
"""
import argparse
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

WIDTH, HEIGHT = 1280, 800
LOAD_TIMEOUT_S = 30
LOCAL_SCHEMES = ("file", "data", "blob", "about")
SKIP = 77


class BrowserGone(Exception):
    """The browser closed its end of the pipe or did not answer in time."""


class Cdp:
    """The DevTools protocol over --remote-debugging-pipe: requests by id, events kept in order."""

    def __init__(self, proc, to_browser, from_browser):
        self.proc, self.to_browser, self.from_browser = proc, to_browser, from_browser
        self.next_id, self.buffer, self.events = 0, b"", []

    def _read_message(self, deadline):
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserGone("no answer in time")
            ready, _, _ = select.select([self.from_browser], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.from_browser, 1 << 20)
            if not chunk:
                raise BrowserGone("the browser closed the pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None, session=None, timeout=LOAD_TIMEOUT_S):
        self.next_id += 1
        request = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            request["sessionId"] = session
        try:
            os.write(self.to_browser, json.dumps(request).encode() + b"\0")
        except OSError as e:
            raise BrowserGone(f"cannot write to the browser: {e}")
        deadline = time.monotonic() + timeout
        while True:
            message = self._read_message(deadline)
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def wait_for(self, method, timeout=LOAD_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        while not any(e["method"] == method for e in self.events):
            message = self._read_message(deadline)
            if "method" in message:
                self.events.append(message)

    def drain(self, seconds):
        """Collects the events that arrive within `seconds` (late console messages, late requests)."""
        deadline = time.monotonic() + seconds
        try:
            while True:
                message = self._read_message(deadline)
                if "method" in message:
                    self.events.append(message)
        except BrowserGone as e:
            if "in time" not in str(e):
                raise


def find_browser(given):
    if given:
        return given if os.access(given, os.X_OK) else None
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def start_browser(path, profile):
    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()
    # The child's ends moved above 9 first, so that putting them on 3 and 4 cannot overwrite one
    # with the other; 3 and 4 are then kept open through the exec (pass_fds).
    child_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
    child_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
    for fd in (to_browser_r, from_browser_w):
        os.close(fd)

    def child_fds():  # the protocol's pipe: the browser reads fd 3, writes fd 4
        os.dup2(child_r, 3)
        os.dup2(child_w, 4)

    args = [path, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
            f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--disable-sync",
            "--disable-background-networking", "--disable-component-update", "--disable-dev-shm-usage",
            "--hide-scrollbars", "--mute-audio", "about:blank"]
    log = open(os.path.join(profile, "browser.log"), "wb")
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            pass_fds=(3, 4), preexec_fn=child_fds)
    log.close()
    os.close(child_r)
    os.close(child_w)
    return proc, Cdp(proc, to_browser_w, from_browser_r)


def browser_log(profile, lines=5):
    try:
        with open(os.path.join(profile, "browser.log"), encoding="utf-8", errors="replace") as f:
            text = [l.rstrip() for l in f if l.strip()]
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def console_errors(events):
    errors = []
    for e in events:
        m, p = e["method"], e.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            errors.append(f"console.{p.get('type')}: {args}")
        elif m == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            errors.append(f"uncaught exception: {d.get('exception', {}).get('description', d.get('text', ''))}")
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            entry = p["entry"]
            errors.append(f"browser log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".strip())
    return errors


def network_requests(events):
    urls = []
    for e in events:
        if e["method"] == "Network.requestWillBeSent":
            url = e["params"]["request"]["url"]
            if urllib.parse.urlsplit(url).scheme not in LOCAL_SCHEMES:
                urls.append(url)
    return urls


IMAGES_JS = ("JSON.stringify(Array.from(document.images, i => ({src: i.getAttribute('src'), complete: i.complete, "
             "naturalWidth: i.naturalWidth})))")


def check(page, screenshot, expect_images, browser):
    profile = tempfile.mkdtemp(prefix="vtensor-browser-")
    proc = None
    try:
        try:
            proc, cdp = start_browser(browser, profile)
            target = cdp.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = cdp.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        except (BrowserGone, RuntimeError, OSError) as e:
            print(f"BROWSER_SKIP: {browser} cannot start ({e}; {browser_log(profile) or 'it printed nothing'})")
            return SKIP
        for method in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"):
            cdp.call(method, session=session)
        cdp.call("Emulation.setDeviceMetricsOverride",
                 {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False}, session=session)
        url = "file://" + urllib.parse.quote(os.path.abspath(page))
        nav = cdp.call("Page.navigate", {"url": url}, session=session)
        failures = []
        if nav.get("errorText"):
            failures.append(f"the page did not open: {nav['errorText']}")
        else:
            cdp.wait_for("Page.loadEventFired")
            cdp.drain(0.5)
        images = json.loads(cdp.call("Runtime.evaluate", {"expression": IMAGES_JS, "returnByValue": True},
                                     session=session)["result"]["value"])
        shot = cdp.call("Page.captureScreenshot", {"format": "png"}, session=session)
        os.makedirs(os.path.dirname(os.path.abspath(screenshot)), exist_ok=True)
        with open(screenshot, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        cdp.drain(0.2)

        broken = [i["src"] for i in images if not i["complete"] or i["naturalWidth"] <= 0]
        if len(images) < expect_images:
            failures.append(f"{len(images)} images on the page, expected at least {expect_images}")
        failures += [f"image did not load (naturalWidth 0): {src}" for src in broken]
        failures += console_errors(cdp.events)
        failures += [f"network request: {u}" for u in network_requests(cdp.events)]
        print(f"{len(images)} images, {len(images) - len(broken)} loaded; "
              f"{len(console_errors(cdp.events))} console errors; "
              f"{len(network_requests(cdp.events))} network requests")
        print(f"screenshot of the first screen: {os.path.abspath(screenshot)}")
        for failure in failures:
            print(f"FAIL: {failure}")
        return 1 if failures else 0
    except BrowserGone as e:
        print(f"FAIL: the browser stopped answering ({e}; {browser_log(profile)})")
        return 1
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("page")
    ap.add_argument("screenshot")
    ap.add_argument("--expect-images", type=int, default=1)
    ap.add_argument("--browser", help="the browser's path (default: chromium on PATH)")
    args = ap.parse_args(argv)
    browser = find_browser(args.browser)
    if browser is None:
        print("BROWSER_SKIP: no chromium on PATH (Debian's chromium: tools/install-deps.sh installs it)")
        return SKIP
    if not os.path.isfile(args.page):
        print(f"FAIL: {args.page}: no such file")
        return 1
    return check(args.page, args.screenshot, args.expect_images, browser)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
