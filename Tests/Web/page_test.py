"""Drives transcoderd's page in headless Chromium for one scenario and prints a JSON report of what happened (the
Swift test asserts on it). Screenshots of each step go into the artifacts folder.

    page_test.py SCENARIO BASE_URL ARTIFACTS FILE [--token T] [--settings JSON] [--database "SOCKET_DIR NAME"]

Scenarios: basic (upload through the file input, transcode, play, storyboard, downloads; the file's name is
markup), resume (reload mid-upload on a throttled connection, choose the file again, then again once complete; with
--later-hours N, N hours later by the page's clock), token (sign in first),
keyboard (upload, start, cancel, retry and delete with Tab and Enter only), settings (presets, refused settings
shown by their field, a ladder played as HLS), audio (a song with the default settings, then a video), proxy (a
proxy's 502 and 504 on the way), eta (the ETA shown against the real time left), refusals (an empty
file, a file that is not media, a PATCH held by another request, a drop beside the box, an upload deleted with its
job), streams (how many event streams a page holds, a list answer older than a stream's news), session (a lost session
cookie renewed), recovery (a refused first list and presets, a job deleted elsewhere past the first page, a refused
upload chosen again), stall (an upload whose connection stops moving without an error), watched (a streamed job
past the list's end deleted with no last state; --database names the cluster's PostgreSQL database).
"""

import http.client
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdp import Browser  # noqa: E402

# The item of the job the scenario started (set by start_job).
JOB_ITEM = "document.querySelector('#jobs li')"


def job_state(browser):
    return browser.eval(f"{JOB_ITEM} ? {JOB_ITEM}.dataset.state : null")


def new_job_item(browser, known):
    """Waits for a job item whose id is not in `known`; points JOB_ITEM at it and returns the id."""
    global JOB_ITEM
    ident = browser.wait(f"[...document.querySelectorAll('#jobs li')].map(li => li.dataset.job).find(id => !{json.dumps(known)}.includes(id)) || null",
                         timeout=20)
    JOB_ITEM = f"document.querySelector('#jobs li[data-job=\"{ident}\"]')"
    return ident


def known_jobs(browser):
    return browser.eval("[...document.querySelectorAll('#jobs li')].map(li => li.dataset.job)")


def upload_file(browser, path, timeout=60):
    browser.set_files("#file", [path])
    return browser.wait("document.querySelector('#upload').dataset.uploaded || null", timeout=timeout)


def start_job(browser):
    browser.wait("!document.querySelector('#start').disabled")
    known = known_jobs(browser)
    browser.click("#start")
    return new_job_item(browser, known)


def wait_for_end(browser, report, timeout=120):
    """Waits for the job to end, noting every progress value shown on the way."""
    seen = set()
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = job_state(browser)
        seen.add(browser.eval(f"{JOB_ITEM}.querySelector('progress').value"))
        if state in ("succeeded", "failed", "canceled"):
            break
        browser.pump(0.1)
    report["state"] = job_state(browser)
    report["progressSeen"] = sorted(value for value in seen if value is not None)
    report["streamEvents"] = sorted({e["params"].get("eventName") for e in browser.events
                                     if e.get("method") == "Network.eventSourceMessageReceived"})


def play_result(browser, report):
    browser.eval(f"{JOB_ITEM}.querySelector('[data-action=show]').click()")
    browser.wait("!document.querySelector('#result').hidden")
    # The page's own controls: mute, then play.
    browser.click("#mute")
    browser.click("#play")
    report["muted"] = browser.eval("document.querySelector('#player').muted")
    browser.wait("document.querySelector('#player').readyState >= 2", timeout=30)
    browser.wait("document.querySelector('#player').currentTime > 0.5", timeout=30)
    report["currentTime"] = browser.eval("document.querySelector('#player').currentTime")
    report["playLabel"] = browser.eval("document.querySelector('#play').textContent")
    report["clock"] = browser.eval("document.querySelector('#clock').textContent")
    report["videoWidth"] = browser.eval("document.querySelector('#player').videoWidth")
    report["videoHeight"] = browser.eval("document.querySelector('#player').videoHeight")
    report["duration"] = browser.eval("document.querySelector('#player').duration")
    report["downloads"] = browser.eval("[...document.querySelectorAll('#downloads a')].map(a => a.textContent)")
    report["outputTracks"] = browser.eval("[...document.querySelectorAll('#output-tracks li')].map(li => li.textContent)")
    report["inputTracks"] = browser.eval("[...document.querySelectorAll('#input-tracks li')].map(li => li.textContent)")


def hover_storyboard(browser, report):
    # The storyboard's tile under the pointer at 10 % and 90 % of the seek bar.
    browser.wait("document.querySelector('#scrub').max > 0", timeout=20)
    browser.eval("document.querySelector('#scrub').scrollIntoView({block: 'center'})")
    box = browser.eval("(() => { const r = document.querySelector('#scrub').getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()")
    tiles = []
    for fraction in (0.1, 0.9):
        x, y = box[0] + box[2] * fraction, box[1] + box[3] / 2
        browser.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        browser.pump(0.2)
        tiles.append(browser.eval("(() => { const p = document.querySelector('#preview'); return p.hidden ? null : [p.dataset.tile, getComputedStyle(p).backgroundImage, p.offsetWidth]; })()"))
    report["previewTiles"] = tiles
    browser.screenshot("storyboard-hover")


def scenario_basic(browser, base, path, report, token):
    browser.navigate(base + "/")
    browser.wait("!document.querySelector('#app').hidden")
    browser.screenshot("1-loaded")
    # The page's estimator on a made-up job: 3 s with nothing written, then 5 % a second; at 8 s, 15 s are left.
    report["etaAfterAQuietStart"] = browser.eval("""import(new URL("eta.js", document.querySelector("script[type=module]").src).href).then(({ EtaEstimator }) => {
        const eta = new EtaEstimator();
        let shown = null;
        for (let t = 0; t <= 8; t += 0.25) shown = eta.update(t < 3 ? 0 : (t - 3) / 20, t);
        return shown;
    })""", await_promise=True)
    # A job requeued with its attempt count kept (a graceful restart) runs again from 0: its progress shows, and
    # while it has none yet it is starting, not waiting for a worker.
    report["requeued"] = browser.eval("""import(new URL("jobs.js", document.querySelector("script[type=module]").src).href).then(({ JobList }) => {
        const list = new JobList({ list: document.createElement("ul"), empty: document.createElement("p"),
                                   live: document.createElement("p"), template: document.querySelector("#job-template"),
                                   onShow() {}, onRetry() {}, onError() {} });
        const job = { id: "j", state: "running", attempts: 1, startedAt: "2026-01-01T00:00:00Z", input: { filename: "a.mp4" } };
        list.upsert({ ...job, progress: { fraction: 0.6 } });
        list.progress("j", { fraction: 0.7 });
        list.upsert({ ...job, state: "queued", startedAt: null, progress: { fraction: 0 } });
        list.upsert({ ...job, startedAt: "2026-01-01T00:10:00Z" });
        const item = list.items.get("j");
        const starting = item.querySelector(".stats").textContent;
        list.progress("j", { fraction: 0.2 });
        const shown = [starting, item.querySelector("progress").value, item.querySelector(".stats").textContent];
        // Straight from one running attempt to the next (the queued state between not seen).
        const other = { ...job, id: "k" };
        list.upsert({ ...other, progress: { fraction: 0.6 } });
        list.progress("k", { fraction: 0.7 });
        list.upsert({ ...other, startedAt: "2026-01-01T00:10:00Z", progress: { fraction: 0.1 } });
        list.progress("k", { fraction: 0.2 });
        return [...shown, list.items.get("k").querySelector("progress").value];
    })""", await_promise=True)
    report["uploadID"] = upload_file(browser, path)
    browser.screenshot("2-uploaded")
    report["job"] = start_job(browser)
    browser.screenshot("3-started")
    wait_for_end(browser, report)
    report["progress"] = browser.eval(f"{JOB_ITEM}.querySelector('progress').value")
    report["shownName"] = browser.eval(f"{JOB_ITEM}.querySelector('.name').textContent")
    browser.screenshot("4-finished")
    # Shown as the list read after its end names it (the output's file count, not its files): the page reads the
    # job itself for its downloads.
    lists = len(browser.requests("GET", "/v1/jobs?limit="))
    deadline = time.time() + 15
    while len(browser.requests("GET", "/v1/jobs?limit=")) <= lists and time.time() < deadline:
        browser.pump(0.2)
    # Its answer read (a busy machine takes a while), and handed to the list.
    asked = [e["params"]["requestId"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"
             and "/v1/jobs?limit=" in e["params"]["request"]["url"]][lists:lists + 1]
    while asked and time.time() < deadline and not any(e.get("method") == "Network.loadingFinished" and e["params"]["requestId"] in asked
                                                        for e in browser.events):
        browser.pump(0.2)
    browser.pump(0.5)
    singles = lambda: [r for r in browser.requests("GET", f"/v1/jobs/{report['job']}") if r["url"].endswith(f"/v1/jobs/{report['job']}")]
    before = len(singles())
    play_result(browser, report)
    report["jobReadsOnShow"] = len(singles()) - before
    browser.screenshot("5-playing")
    hover_storyboard(browser, report)
    report["images"] = browser.eval("document.querySelectorAll('img').length")
    report["elementsNamedByFile"] = browser.eval("document.querySelectorAll('[onerror], img[src=x]').length")
    report["downloadNames"] = browser.eval("Object.fromEntries([...document.querySelectorAll('#downloads a')].map(a => [a.textContent, a.getAttribute('download')]))")
    # The job shown, deleted by another client: the result goes with it (its player and links named files now gone).
    report["jobBeforeDelete"] = browser.eval(f"fetch('/v1/jobs/{report['job']}').then(r => r.json())", await_promise=True)
    connection = http.client.HTTPConnection(base.split("//")[1], timeout=10)
    connection.request("DELETE", f"/v1/jobs/{report['job']}")
    report["deletedShownStatus"] = connection.getresponse().status
    connection.close()
    report["resultHiddenAfterDelete"] = browser.wait("document.querySelector('#result').hidden || null", timeout=20)
    report["playerSourceAfterDelete"] = browser.eval("document.querySelector('#player').getAttribute('src')")
    report["downloadsAfterDelete"] = browser.eval("document.querySelectorAll('#downloads a').length")


def upload_until(browser, base, path, fraction):
    """Opens the page and uploads `path` at 1 MB/s until more than `fraction` of it is sent."""
    browser.navigate(base + "/")
    browser.wait("!document.querySelector('#app').hidden")
    browser.throttle_upload(1_000_000)
    browser.set_files("#file", [path])
    browser.wait(f"Number(document.querySelector('#upload-progress').dataset.sent || 0) > {os.path.getsize(path)} * {fraction}", timeout=60)


def scenario_changed(browser, base, path, report, token):
    """The file changes on disk while it is uploaded (a recording still being written): the page says so at once."""
    upload_until(browser, base, path, 0.2)
    os.utime(path, (time.time() + 60, time.time() + 60))
    changed = time.time()
    report["message"] = browser.wait("document.querySelector('#start-error').textContent.includes('changed') "
                                     "? document.querySelector('#start-error').textContent : null", timeout=30)
    report["seconds"] = time.time() - changed
    report["retryNotices"] = browser.eval("document.querySelector('#upload-detail').textContent")
    browser.screenshot("1-changed")


def scenario_resume(browser, base, path, report, token):
    upload_until(browser, base, path, 0.6)
    report["sentBeforeReload"] = browser.eval("Number(document.querySelector('#upload-progress').dataset.sent)")
    report["rememberedBeforeReload"] = browser.eval("localStorage.getItem('transcoderd.uploads')")
    browser.screenshot("1-mid-upload")
    if "--later-hours" in sys.argv:
        # The file chosen again that many hours later, by the page's clock (the server's has not moved).
        hours = float(sys.argv[sys.argv.index("--later-hours") + 1])
        browser.send("Page.addScriptToEvaluateOnNewDocument", {"source": f"""(() => {{
            const now = Date.now.bind(Date);
            Date.now = () => now() + {hours * 3600 * 1000};
        }})();"""})
    browser.reload()
    browser.wait("!document.querySelector('#app').hidden")
    report["noticeAfterReload"] = browser.eval("document.querySelector('#upload-detail').textContent")
    browser.screenshot("2-reloaded")
    browser.throttle_upload(-1)
    before = len(browser.requests("PATCH"))
    heads_before = len(browser.requests("HEAD", "/v1/tus/"))
    report["uploadID"] = upload_file(browser, path)
    patches = browser.requests("PATCH")[before:]
    report["headsAfterReload"] = len(browser.requests("HEAD", "/v1/tus/")[heads_before:])
    report["firstOffsetAfterReload"] = int(patches[0]["headers"].get("Upload-Offset", "-1")) if patches else None
    report["creations"] = len([r for r in browser.requests("POST", "/v1/tus")])
    report["detail"] = browser.eval("document.querySelector('#upload-detail').textContent")
    report["rememberedAfter"] = browser.eval("localStorage.getItem('transcoderd.uploads')")
    connection = http.client.HTTPConnection(base.split("//")[1], timeout=10)
    connection.request("GET", f"/v1/uploads/{report['uploadID']}")
    report["stored"] = json.loads(connection.getresponse().read())
    connection.close()
    browser.screenshot("3-resumed")
    # Complete, no job made on it yet: reloaded and chosen again, nothing is sent again; a job made on it, the page
    # forgets it.
    browser.reload()
    browser.wait("!document.querySelector('#app').hidden")
    report["noticeAfterComplete"] = browser.eval("document.querySelector('#upload-detail').textContent")
    sent = (len(browser.requests("POST", "/v1/tus")), len(browser.requests("PATCH")))
    report["uploadIDAgain"] = upload_file(browser, path)
    report["sentAgain"] = [len(browser.requests("POST", "/v1/tus")) - sent[0], len(browser.requests("PATCH")) - sent[1]]
    # Its stored upload deleted meanwhile (by another client, or retention): chosen again, the file is sent anew.
    connection = http.client.HTTPConnection(base.split("//")[1], timeout=10)
    connection.request("DELETE", f"/v1/uploads/{report['uploadIDAgain']}")
    report["deleteStatus"] = connection.getresponse().status
    connection.close()
    browser.eval("delete document.querySelector('#upload').dataset.uploaded")
    sent = len(browser.requests("POST", "/v1/tus"))
    report["uploadIDAfterDelete"] = upload_file(browser, path)
    report["createdAfterDelete"] = len(browser.requests("POST", "/v1/tus")) - sent
    start_job(browser)
    report["rememberedAfterJob"] = browser.eval("localStorage.getItem('transcoderd.uploads')")


def scenario_token(browser, base, path, report, token):
    browser.navigate(base + "/")
    browser.wait("!document.querySelector('#login').hidden")
    report["consoleErrorsBeforeProbes"] = list(browser.console_errors)
    report["appHiddenBeforeSignIn"] = browser.eval("document.querySelector('#app').hidden")
    report["jobsWithoutToken"] = browser.eval("fetch('/v1/jobs').then(r => r.status)", await_promise=True)
    report["eventsWithoutToken"] = browser.eval("fetch('/v1/jobs/x/events').then(r => r.status)", await_promise=True)
    browser.screenshot("1-sign-in")
    browser.eval("document.querySelector('#token').focus()")
    browser.type_text("wrong-" + token)
    browser.key("Enter", text="\r")
    browser.wait("document.querySelector('#login-error').textContent !== ''")
    report["wrongTokenMessage"] = browser.eval("document.querySelector('#login-error').textContent")
    # The form submitted natively (a password manager's form.submit() skips the page's handler): nothing of the
    # field goes into the URL. Named, the field went as ?token=... in the address, the history and the server's log.
    browser.eval("document.querySelector('#token').value = 'native-submit-' + " + json.dumps(token))
    browser.eval("window.beforeSubmit = true; document.querySelector('#login-form').submit()")
    browser.pump(0.5)
    # Read in the new document (the old one's address would not show what the submit did).
    browser.wait("!window.beforeSubmit && document.readyState === 'complete' && !document.querySelector('#login').hidden")
    report["urlAfterNativeSubmit"] = browser.eval("location.href")
    browser.eval("document.querySelector('#token').value = ''")
    browser.type_text(token)
    browser.key("Enter", text="\r")
    browser.wait("!document.querySelector('#app').hidden")
    try:  # focused once the job list has loaded, a moment after the app shows
        browser.wait("document.activeElement.id === 'file'", timeout=10)
    except TimeoutError:
        pass
    report["focusAfterSignIn"] = browser.eval("document.activeElement.id")
    errors_before_sign_in = len(browser.console_errors)
    report["jobsWithSession"] = browser.eval("fetch('/v1/jobs').then(r => r.status)", await_promise=True)
    report["postWithCookieOnly"] = browser.eval(
        "fetch('/v1/jobs', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: '{}'}).then(r => r.status)",
        await_promise=True)
    report["cookieVisibleToScript"] = browser.eval("document.cookie")
    browser.screenshot("2-signed-in")
    report["uploadID"] = upload_file(browser, path)
    report["job"] = start_job(browser)
    wait_for_end(browser, report)
    play_result(browser, report)
    browser.screenshot("3-playing")
    browser.pump(0.3)
    # The page's own requests are what they should be: the one deliberate 401 above (a POST with the cookie only)
    # is the only error logged after signing in.
    report["consoleErrorsAfterSignIn"] = browser.console_errors[errors_before_sign_in:]
    report["urls"] = sorted({r["url"] for r in browser.requests()})
    # A reload renews the session cookie (its 12 hours counted again), though the old one is still good.
    sessions_before = len(browser.requests("POST", "/v1/session"))
    browser.reload()
    browser.wait("!document.querySelector('#app').hidden")
    browser.pump(0.3)
    report["sessionsPostedOnReload"] = len(browser.requests("POST", "/v1/session")) - sessions_before


def focus_by_tab(browser, test, limit=40):
    for _ in range(limit):
        browser.key("Tab")
        if browser.eval(test):
            return True
    return False


def scenario_keyboard(browser, base, path, report, token):
    browser.navigate(base + "/")
    browser.wait("!document.querySelector('#app').hidden")
    browser.send("Page.setInterceptFileChooserDialog", {"enabled": True})
    report["reachedFileInput"] = focus_by_tab(browser, "document.activeElement.id === 'file'")
    browser.key(" ", code="Space", text=" ")
    chooser = None
    deadline = time.time() + 10
    while chooser is None and time.time() < deadline:
        browser.pump(0.1)
        chooser = next((e["params"] for e in browser.events if e.get("method") == "Page.fileChooserOpened"), None)
    report["fileChooserOpened"] = chooser is not None
    if chooser:
        browser.send("DOM.setFileInputFiles", {"files": [path], "backendNodeId": chooser["backendNodeId"]})
    browser.wait("document.querySelector('#upload').dataset.uploaded || null", timeout=60)
    browser.screenshot("1-uploaded")
    report["reachedStart"] = focus_by_tab(browser, "document.activeElement.id === 'start'")
    known = known_jobs(browser)
    browser.key("Enter", text="\r")
    report["job"] = new_job_item(browser, known)
    report["stateAfterStart"] = job_state(browser)
    report["reachedCancel"] = focus_by_tab(
        browser, f"document.activeElement.dataset.action === 'cancel' && document.activeElement.closest('li') === {JOB_ITEM}")
    # Running: the cancel is answered 202 with the job still running, and it ends a moment later.
    browser.wait(f"{JOB_ITEM}.dataset.state === 'running'", timeout=30)
    browser.key("Enter", text="\r")
    browser.wait(f"{JOB_ITEM}.dataset.state === 'canceled'", timeout=20)
    browser.pump(0.2)
    report["focusAfterCancel"] = browser.eval(
        f"document.activeElement.closest('li') === {JOB_ITEM} ? document.activeElement.dataset.action : document.activeElement.tagName")
    report["state"] = job_state(browser)
    report["liveRegion"] = browser.eval("document.querySelector('#live').textContent")
    browser.screenshot("2-canceled")
    # Retry (the same input and settings, a new job, whatever the form holds now), then delete the canceled one.
    browser.click("#ladder")
    report["formSettings"] = browser.eval("JSON.parse(document.querySelector('#settings-json').value)")
    canceled = report["job"]
    canceled_item = JOB_ITEM
    report["reachedRetry"] = focus_by_tab(
        browser, f"document.activeElement.dataset.action === 'retry' && document.activeElement.closest('li') === {canceled_item}")
    known = known_jobs(browser)
    browser.key("Enter", text="\r")
    report["retried"] = new_job_item(browser, known)
    report["retriedState"] = job_state(browser)
    # Retry clicked twice at once (a double-click): one job, the second click waiting for the first's answer.
    creations = lambda: len([r for r in browser.requests("POST", "/v1/jobs") if r["url"].endswith("/v1/jobs")])
    posts = creations()
    known = known_jobs(browser)
    browser.eval(f"(() => {{ const b = {canceled_item}.querySelector('[data-action=retry]'); b.click(); b.click(); }})()")
    report["doubleClicked"] = new_job_item(browser, known)
    browser.pump(1)
    report["doubleClickCreations"] = creations() - posts
    for key, ident in (("canceledJob", canceled), ("retriedJob", report["retried"])):
        report[key] = browser.eval(f"fetch('/v1/jobs/{ident}').then(r => r.json())", await_promise=True)
    canceled_button = f"document.querySelector('#jobs li[data-job=\"{canceled}\"] [data-action=delete]')"
    report["reachedDelete"] = focus_by_tab(browser, f"document.activeElement === {canceled_button}")
    browser.key("Enter", text="\r")
    browser.wait(f"!document.querySelector('#jobs li[data-job=\"{canceled}\"]')", timeout=20)
    report["deleted"] = canceled
    browser.screenshot("3-retried-and-deleted")

    # A job with a webhook of its own, made through the API and canceled: retried from the page, the new job has it.
    upload = report["canceledJob"]["input"]["id"]

    def retried_with(hook):
        """A job made through the API with `hook` and canceled, retried from the page: its item's query and the
        new job's id."""
        connection = http.client.HTTPConnection(base.split("//")[1], timeout=10)
        connection.request("POST", "/v1/jobs", body=json.dumps({"input": upload, "webhook": hook}), headers={"Content-Type": "application/json"})
        made = json.loads(connection.getresponse().read())["id"]
        connection.request("POST", f"/v1/jobs/{made}/cancel")
        connection.getresponse().read()
        connection.close()
        item = f"document.querySelector('#jobs li[data-job=\"{made}\"]')"
        browser.wait(f"{item}?.dataset.state === 'canceled' || null", timeout=20)
        browser.eval("document.querySelector('#start-error').textContent = ''")
        known = known_jobs(browser)
        browser.eval(f"{item}.querySelector('[data-action=retry]').click()")
        return made, item, new_job_item(browser, known)
    hooked, hooked_item, retried_hooked = retried_with({"url": "https://hooks.invalid/transcoderd", "events": ["job.running", "job.canceled"]})
    report["retriedWebhook"] = browser.eval(f"fetch('/v1/jobs/{retried_hooked}').then(r => r.json()).then(j => j.webhook)", await_promise=True)
    # One whose URL holds a secret the server does not show (a Slack-style hook): retried without it, and said so.
    _, _, retried_secret = retried_with({"url": "https://hooks.invalid/services/T000/B000/aB3dE5fG7hJ9kL1mN2pQ4rS6", "events": ["job.running"]})
    report["retriedSecretWebhook"] = browser.eval(f"fetch('/v1/jobs/{retried_secret}').then(r => r.json()).then(j => j.webhook ?? null)", await_promise=True)
    report["secretRetryNote"] = browser.eval("document.querySelector('#start-error').textContent")

    # Canceled here after another client deleted it: it goes, without an error (it stayed, with a 404 shown).
    gone_item = f"document.querySelector('#jobs li[data-job=\"{retried_secret}\"]')"
    browser.eval("document.querySelector('#start-error').textContent = ''")
    browser.eval(f"""(async () => {{
        const job = '/v1/jobs/{retried_secret}';
        await fetch(job + '/cancel', {{method: 'POST'}});
        for (let i = 0; i < 200; i++) {{
            const state = (await (await fetch(job)).json()).state;
            if (['canceled', 'failed', 'succeeded'].includes(state)) break;
            await new Promise((resolve) => setTimeout(resolve, 100));
        }}
        await fetch(job, {{method: 'DELETE'}});
        {gone_item}.querySelector('[data-action=cancel]').click();
    }})()""", await_promise=True)
    report["canceledGoneJobRemoved"] = browser.wait(f"{gone_item} ? null : true", timeout=20)
    report["errorAfterCancelingAGoneJob"] = browser.eval("document.querySelector('#start-error').textContent")
    gone = [e for e in browser.console_errors if "404" in e and f"/v1/jobs/{retried_secret}/cancel" in e]
    report["goneCancelLogged"] = len(gone)
    browser.console_errors[:] = [e for e in browser.console_errors if e not in gone]

    # Deleted elsewhere a moment before its Delete is pressed here: done, not an error, and the item goes.
    browser.eval("document.querySelector('#start-error').textContent = ''")
    browser.eval(f"fetch('/v1/jobs/{hooked}', {{method: 'DELETE'}}).then(() => {hooked_item}.querySelector('[data-action=delete]').click())",
                 await_promise=True)
    report["goneAfterDelete"] = browser.wait(f"{hooked_item} ? null : true", timeout=20)
    report["errorAfterDeletingAGoneJob"] = browser.eval("document.querySelector('#start-error').textContent")
    # The browser logs the page's DELETE answered 404, as it logs any failed load: expected here, the one such line.
    gone = [e for e in browser.console_errors if "404" in e and f"/v1/jobs/{hooked}" in e]
    report["goneDeleteLogged"] = len(gone)
    browser.console_errors[:] = [e for e in browser.console_errors if e not in gone]


def scenario_audio(browser, base, path, report, token):
    """A song with the page's default settings (poster and storyboard on), then a video (`--then FILE`)."""
    browser.navigate(base + "/")
    browser.wait("!document.querySelector('#app').hidden")
    report["picturesBefore"] = browser.eval("document.querySelector('#pictures').checked")
    song = upload_file(browser, path)
    report["picturesForSong"] = browser.eval("document.querySelector('#pictures').checked")
    report["settingsForSong"] = browser.eval("JSON.parse(document.querySelector('#settings-json').value)")
    report["job"] = start_job(browser)
    wait_for_end(browser, report)
    report["jobDetail"] = browser.eval(f"{JOB_ITEM}.textContent")
    browser.screenshot("1-song-done")
    browser.set_files("#file", [sys.argv[sys.argv.index("--then") + 1]])
    browser.wait(f"(document.querySelector('#upload').dataset.uploaded || '{song}') !== '{song}'", timeout=60)
    report["picturesForVideo"] = browser.eval("document.querySelector('#pictures').checked")
    report["settingsForVideo"] = browser.eval("JSON.parse(document.querySelector('#settings-json').value)")


def scenario_proxy(browser, base, path, report, token):
    """Answers a proxy in front of a restarting or slow server gives: the first PATCH meets 502, the first ask for
    the stored upload 504."""
    browser.navigate(base + "/")
    browser.wait("!document.querySelector('#app').hidden")
    refused = []

    def on_paused(paused):
        method, url = paused["request"]["method"], paused["request"]["url"]
        if method == "PATCH" and "/v1/tus/" in url and not any(status == 502 for status, _ in refused):
            refused.append((502, method))
            browser.fulfill(paused, 502, {"message": "Bad Gateway"})
        elif method == "GET" and "/v1/uploads/" in url and not any(status == 504 for status, _ in refused):
            refused.append((504, method))
            browser.fulfill(paused, 504, {"message": "Gateway Timeout"})
        else:
            browser.let_through(paused)
    browser.intercept("*/v1/*", on_paused)
    report["uploadID"] = upload_file(browser, path)
    report["refused"] = [status for status, _ in refused]
    report["creations"] = len(browser.requests("POST", "/v1/tus"))
    report["detail"] = browser.eval("document.querySelector('#upload-detail').textContent")


def replace_settings(browser, text):
    browser.eval("document.querySelector('#advanced').open = true")
    browser.eval("(() => { const t = document.querySelector('#settings-json'); t.focus(); t.select(); })()")
    browser.type_text(text)


def scenario_settings(browser, base, path, report, token):
    browser.navigate(base + "/")
    browser.wait("!document.querySelector('#app').hidden")
    browser.wait("document.querySelector('#preset').options.length > 1")
    report["presetOptions"] = browser.eval("[...document.querySelector('#preset').options].map(o => o.value)")
    upload_file(browser, path)
    # Settings the server refuses: its message, next to the field it names.
    errors = {}
    for text, field in [('{"video": {"height": 7}}', "settings"), ('{"thumbnails": {"interval": 0}}', "pictures"),
                        ('{"video": ', "settings")]:
        replace_settings(browser, text)
        known = known_jobs(browser)
        browser.click("#start")
        browser.wait(f"document.querySelector('#{field}-error').textContent !== ''", timeout=10)
        control = "#settings-json" if field == "settings" else f"#{field}"
        errors[text] = [browser.eval(f"document.querySelector('#{field}-error').textContent"),
                        browser.eval(f"document.querySelector('{control}').getAttribute('aria-invalid')"),
                        known_jobs(browser) == known]
        browser.screenshot("1-refused-" + field)
    report["refused"] = errors
    # The ladder: the checkbox composes the settings again; the result plays as HLS in the page.
    browser.click("#ladder")
    report["ladderSettings"] = browser.eval("JSON.parse(document.querySelector('#settings-json').value)")
    report["job"] = start_job(browser)
    browser.wait(f"['succeeded', 'failed', 'canceled'].includes({JOB_ITEM}.dataset.state)", timeout=120)
    report["state"] = job_state(browser)
    play_result(browser, report)
    report["playerSource"] = browser.eval("document.querySelector('#player').currentSrc")
    browser.screenshot("2-ladder-playing")


def scenario_eta(browser, base, path, report, token, settings=None):
    browser.navigate(base + "/")
    browser.wait("!document.querySelector('#app').hidden")
    if settings:
        # Typed into the advanced editor, as a person would.
        browser.eval("document.querySelector('#advanced').open = true")
        browser.eval("(() => { const t = document.querySelector('#settings-json'); t.focus(); t.select(); })()")
        browser.type_text(settings)
    upload_file(browser, path)
    start_job(browser)
    samples = []
    started = time.time()
    while time.time() - started < 180:
        state = job_state(browser)
        fraction = browser.eval(f"{JOB_ITEM}.querySelector('progress').value")
        eta = browser.eval(f"{JOB_ITEM}.querySelector('.stats').dataset.eta || null")
        now = time.time()
        if state in ("succeeded", "failed", "canceled"):
            report["state"] = state
            report["end"] = now
            break
        if state == "running" and eta is not None:
            samples.append([now, fraction, float(eta)])
        browser.pump(0.25)
    report["samples"] = samples
    report["startedAt"] = started
    browser.screenshot("1-finished")


def held_patch(base, upload_url, offset, data, sent):
    """A PATCH of `data` at `offset` that sends `sent` bytes of its body and then holds the upload (the server keeps
    it locked) until the returned socket is closed: a client's PATCH from before its connection dropped."""
    host, port = base.split("//")[1].split(":")
    sock = socket.create_connection((host, int(port)))
    head = (f"PATCH {upload_url} HTTP/1.1\r\nHost: {host}\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: {offset}\r\n"
            f"Content-Type: application/offset+octet-stream\r\nContent-Length: {len(data)}\r\n\r\n")
    sock.sendall(head.encode() + data[:sent])
    return sock


def tus_request(base, method, path, headers, body=b""):
    connection = http.client.HTTPConnection(base.split("//")[1], timeout=10)
    connection.request(method, path, body=body, headers=dict(headers, **{"Tus-Resumable": "1.0.0"}))
    answer = connection.getresponse()
    answer.read()
    connection.close()
    return answer


def scenario_refusals(browser, base, path, report, token):
    """What the server refuses, or refuses for now, as the page shows it: an empty file, a file that is not media, a
    PATCH the server still holds from before (423, then the upload goes on), a file dropped beside the box, and an
    upload deleted with its last job."""
    folder = tempfile.mkdtemp(prefix="refusals-")
    browser.navigate(base + "/")
    browser.wait("!document.querySelector('#app').hidden")
    error_text = "document.querySelector('#start-error').textContent"

    empty = os.path.join(folder, "zero.mp4")
    open(empty, "wb").close()
    creations = len(browser.requests("POST", "/v1/tus"))
    browser.set_files("#file", [empty])
    report["emptyMessage"] = browser.wait(f"{error_text} || null", timeout=10)
    browser.pump(0.5)
    report["emptyCreations"] = len(browser.requests("POST", "/v1/tus")) - creations
    report["emptyRemembered"] = browser.eval("localStorage.getItem('transcoderd.uploads')")

    notes = os.path.join(folder, "notes.mp4")
    with open(notes, "w") as file:
        file.write("These are notes, not a film.\n" * 200)
    browser.set_files("#file", [notes])
    report["notMediaMessage"] = browser.wait(f"{error_text}.includes('notes') || {error_text}.includes('media') ? {error_text} : null", timeout=20)
    report["notMediaUploaded"] = browser.eval("document.querySelector('#upload').dataset.uploaded || null")
    report["notMediaStartDisabled"] = browser.eval("document.querySelector('#start').disabled")
    report["notMediaRemembered"] = browser.eval("localStorage.getItem('transcoderd.uploads')")
    browser.screenshot("1-not-media")

    # The clip's upload made by another client that sent half of it and then held a PATCH open, remembered by the
    # page as its own unfinished upload: choosing the file meets 423 until the held PATCH ends.
    with open(path, "rb") as file:
        data = file.read()
    half = len(data) // 2
    created = tus_request(base, "POST", "/v1/tus", {"Upload-Length": str(len(data))})
    upload_url = created.getheader("Location")
    tus_request(base, "PATCH", upload_url, {"Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"}, data[:half])
    held = held_patch(base, upload_url, half, data[half:], 1000)
    # Held once a PATCH of nothing meets 423 (the server has taken the upload's lock). That PATCH may take the lock
    # first on a busy machine (its file is opened on another of the server's threads): the held one is then answered
    # 423 itself, and is sent again, with a moment's lead (asked every 50 ms, the asks won the race again and again
    # on a loaded machine, for 20 s).
    time.sleep(0.3)
    deadline = time.time() + 30
    while tus_request(base, "PATCH", upload_url, {"Upload-Offset": str(half + 1000),
                                                  "Content-Type": "application/offset+octet-stream"}).status != 423:
        if time.time() > deadline:
            raise TimeoutError("the held PATCH never held the upload")
        if select.select([held], [], [], 0)[0]:
            report["heldRefusedFirst"] = held.recv(200).decode(errors="replace").split("\r\n")[0]
            held.close()
            held = held_patch(base, upload_url, half, data[half:], 1000)
            time.sleep(0.5)
        time.sleep(0.05)
    last_modified = os.stat(path).st_mtime_ns // 1_000_000
    key = f"{os.path.basename(path)}\u0000{len(data)}\u0000{last_modified}"
    browser.eval(f"localStorage.setItem('transcoderd.uploads', JSON.stringify({{[{json.dumps(key)}]: {{url: {json.dumps(upload_url)}, at: Date.now()}}}}))")
    creations = len(browser.requests("POST", "/v1/tus"))
    # Once the bytes are all there, the first two asks for the stored upload meet 503: the page asks again, and
    # keeps the upload remembered meanwhile.
    refused_asks = []

    def on_paused(paused):
        if paused["request"]["method"] == "GET" and len(refused_asks) < 2:
            refused_asks.append(paused["request"]["url"])
            browser.fulfill(paused, 503, {"error": {"code": "server_busy", "message": "Busy; ask again."}})
        else:
            browser.let_through(paused)
    browser.intercept("*/v1/uploads/*", on_paused)
    browser.set_files("#file", [path])
    try:
        report["retryNotice"] = browser.wait("document.querySelector('#upload-detail').textContent.includes('trying again') ? document.querySelector('#upload-detail').textContent : null", timeout=20)
    finally:
        report["messageWhileHeld"] = browser.eval(error_text)
        held.close()
    deadline = time.time() + 60
    while len(refused_asks) < 2:
        if time.time() > deadline:
            raise TimeoutError("the page did not ask for the stored upload twice")
        browser.pump(0.1)
    report["rememberedWhileAskRefused"] = browser.eval("localStorage.getItem('transcoderd.uploads')")
    report["heldUploadID"] = browser.wait("document.querySelector('#upload').dataset.uploaded || null", timeout=60)
    report["refusedAsks"] = len(refused_asks)
    report["rememberedAfterStored"] = browser.eval("localStorage.getItem('transcoderd.uploads')")
    report["heldUploadURL"] = upload_url
    report["heldCreations"] = len(browser.requests("POST", "/v1/tus")) - creations
    connection = http.client.HTTPConnection(base.split("//")[1], timeout=10)
    connection.request("GET", f"/v1/uploads/{report['heldUploadID']}")
    report["heldSha256"] = json.loads(connection.getresponse().read()).get("sha256")
    connection.close()
    browser.screenshot("2-held-then-uploaded")

    # The same file dropped at the page's corner, outside the box: the page stays and takes it.
    href = browser.eval("location.href")
    report["dropPointOutsideBox"] = browser.eval("!document.querySelector('#drop').contains(document.elementFromPoint(5, 5))")
    browser.eval("delete document.querySelector('#upload').dataset.uploaded")
    drag = {"items": [], "files": [path], "dragOperationsMask": 1}
    for kind in ("dragEnter", "dragOver", "drop"):
        browser.send("Input.dispatchDragEvent", {"type": kind, "x": 5, "y": 5, "data": drag})
    browser.pump(0.5)
    report["hrefAfterDrop"] = browser.eval("location.href")
    report["hrefBeforeDrop"] = href
    report["droppedUploadID"] = browser.wait("document.querySelector('#upload').dataset.uploaded || null", timeout=30)

    # Text dragged into the settings stays the field's: no upload starts.
    browser.eval("document.querySelector('#advanced').open = true")
    box = browser.eval("(() => { const r = document.querySelector('#settings-json').getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    creations = len(browser.requests("POST", "/v1/tus"))
    text_drag = {"items": [{"mimeType": "text/plain", "data": "DROPPED"}], "dragOperationsMask": 1}
    for kind in ("dragEnter", "dragOver", "drop"):
        browser.send("Input.dispatchDragEvent", {"type": kind, "x": box[0], "y": box[1], "data": text_drag})
    browser.pump(0.5)
    report["textDropped"] = browser.eval("document.querySelector('#settings-json').value.includes('DROPPED')")
    report["textDropCreations"] = len(browser.requests("POST", "/v1/tus")) - creations
    browser.eval("document.querySelector('#settings-json').value = '{}'")

    # Transcoded, then the job deleted: it was the upload's last, so the server deleted the upload with it.
    report["job"] = start_job(browser)
    wait_for_end(browser, report)
    browser.eval(f"{JOB_ITEM}.querySelector('[data-action=delete]').click()")
    report["detailAfterDelete"] = browser.wait("document.querySelector('#upload-detail').textContent.includes('deleted') ? document.querySelector('#upload-detail').textContent : null", timeout=10)
    report["startDisabledAfterDelete"] = browser.eval("document.querySelector('#start').disabled")
    browser.screenshot("3-deleted")


def scenario_streams(browser, base, path, report, token):
    """Jobs made elsewhere (one running, more queued): how many event streams the page holds open."""
    browser.navigate(base + "/")
    browser.wait("!document.querySelector('#app').hidden")
    browser.wait("document.querySelectorAll('#jobs li').length >= 3", timeout=20)
    browser.pump(3)
    streamed = set()
    for request in browser.requests("GET", "/events"):
        streamed.add(request["url"].split("/v1/jobs/")[1].split("/")[0])
    report["streamedJobs"] = sorted(streamed)
    states = browser.eval("Object.fromEntries([...document.querySelectorAll('#jobs li')].map(li => [li.dataset.job, li.dataset.state]))")
    report["states"] = states

    # A list asked before a streamed job starts and answered after its stream said so (a slow list): the stream's
    # news stands. The answer put the job back to "queued" until the next list.
    running = next(ident for ident, state in states.items() if state == "running")
    watched = next(ident for ident in streamed if states.get(ident) == "queued")
    other = next(ident for ident, state in states.items() if state == "queued" and ident != watched)

    def call(method, url):
        connection = http.client.HTTPConnection(base.split("//")[1], timeout=10)
        connection.request(method, url)
        answer = connection.getresponse()
        body = answer.read()
        connection.close()
        return body
    call("POST", f"/v1/jobs/{other}/cancel")  # the worker's next job is then the watched one
    stale = json.loads(call("GET", "/v1/jobs?limit=50"))
    held = []
    # Every list read is held (a later one let through would bring the fresh state back before it is looked at).
    browser.intercept("*/v1/jobs?limit=*", held.append)
    deadline = time.time() + 20
    while not held and time.time() < deadline:
        browser.pump(0.1)
    if not held:
        raise TimeoutError("the page did not read its list")
    if json.loads(call("GET", f"/v1/jobs/{running}"))["state"] != "running":
        raise RuntimeError("the running job ended before the list was held: the watched job started too soon")
    call("POST", f"/v1/jobs/{running}/cancel")
    browser.wait(f"document.querySelector('#jobs li[data-job=\"{watched}\"]')?.dataset.state === 'running' || null", timeout=30)
    browser.fulfill(held[0], 200, stale)
    browser.pump(1)
    report["staleListState"] = browser.eval(f"document.querySelector('#jobs li[data-job=\"{watched}\"]')?.dataset.state || null")
    for paused in held[1:]:
        browser.let_through(paused)
    browser.intercept("*/v1/jobs?limit=*", browser.let_through)


def scenario_recovery(browser, base, path, report, token):
    """The page's first reading of the job list refused (a server restarting), more than a page of jobs made
    elsewhere, one of them deleted elsewhere, and an upload refused once and chosen again through the file input."""
    refused = set()

    def on_first(paused):
        url = paused["request"]["url"]
        kind = "list" if "/v1/jobs?limit=" in url else "presets" if url.endswith("/v1/presets") else None
        if kind and kind not in refused:
            refused.add(kind)
            browser.fulfill(paused, 503, {"error": {"code": "server_busy", "message": "Busy; ask again."}})
        else:
            browser.let_through(paused)
    browser.intercept("*/v1/*", on_first)
    browser.navigate(base + "/")
    browser.wait("!document.querySelector('#app').hidden")
    report["startError"] = browser.wait("document.querySelector('#start-error').textContent || null", timeout=10)
    report["listedAfterRefusal"] = browser.wait("document.querySelectorAll('#jobs li').length || null", timeout=20)
    # The presets, refused at the start too, are read again: the choice held only "Default" until a reload.
    report["presetsAfterRefusal"] = browser.wait("document.querySelector('#preset').options.length > 1 ? document.querySelector('#preset').options.length : null", timeout=20)
    browser.intercept("*/v1/jobs?limit=*", lambda paused: browser.let_through(paused))

    # A queued job the page does not stream, on the list's first page, deleted by another client: the next list no
    # longer names it, and it goes (past the end, only reading it alone tells: the page's own waiting job below).
    browser.pump(1)
    streamed = {r["url"].split("/v1/jobs/")[1].split("/")[0] for r in browser.requests("GET", "/events")}
    shown = browser.eval("[...document.querySelectorAll('#jobs li')].filter(li => li.dataset.state === 'queued').map(li => li.dataset.job)")
    victim = next((ident for ident in shown if ident not in streamed), None)
    if victim is None:
        raise RuntimeError(f"no queued job the page does not stream: shown {shown}, streamed {sorted(streamed)}")
    connection = http.client.HTTPConnection(base.split("//")[1], timeout=10)
    connection.request("DELETE", f"/v1/jobs/{victim}")
    report["deleteStatus"] = connection.getresponse().status
    connection.close()
    report["deletedGone"] = browser.wait(f"document.querySelector('#jobs li[data-job=\"{victim}\"]') ? null : true", timeout=20)

    # A job on the list's first page that ended (canceled elsewhere) and is then deleted elsewhere: the list no
    # longer names it, and the page takes it off (it is not read on its own: it has ended).
    ended = next(ident for ident in shown if ident != victim and ident not in streamed)
    for method, url in (("POST", f"/v1/jobs/{ended}/cancel"), ("DELETE", None)):
        if url is None:
            browser.wait(f"document.querySelector('#jobs li[data-job=\"{ended}\"]')?.dataset.state === 'canceled' || null", timeout=20)
            url = f"/v1/jobs/{ended}"
        connection = http.client.HTTPConnection(base.split("//")[1], timeout=10)
        connection.request(method, url)
        report[f"ended{method}Status"] = connection.getresponse().status
        connection.close()
    report["endedGone"] = browser.wait(f"document.querySelector('#jobs li[data-job=\"{ended}\"]') ? null : true", timeout=20)
    # The jobs the list names are not read again one by one: over two rounds of reading, only the list is.
    singles = lambda: [r for r in browser.requests("GET", "/v1/jobs/") if "/events" not in r["url"]]
    before = len(singles())
    lists = len(browser.requests("GET", "/v1/jobs?limit="))
    browser.pump(11)
    report["singleReads"] = len(singles()) - before
    report["listReads"] = len(browser.requests("GET", "/v1/jobs?limit=")) - lists

    # The upload's creation refused once; the same file chosen again through the input starts it again.
    refused_creations = []

    def on_creation(paused):
        if paused["request"]["method"] == "POST" and not refused_creations:
            refused_creations.append(paused["request"]["url"])
            browser.fulfill(paused, 400, {"error": {"code": "invalid_request", "message": "Refused once for the test."}})
        else:
            browser.let_through(paused)
    browser.intercept("*/v1/tus", on_creation)
    creations = len(browser.requests("POST", "/v1/tus"))
    browser.set_files("#file", [path])
    report["refusedMessage"] = browser.wait("document.querySelector('#start-error').textContent.includes('Refused once') ? document.querySelector('#start-error').textContent : null", timeout=20)
    browser.set_files("#file", [path])
    report["uploadedOnSecondChoice"] = browser.wait("document.querySelector('#upload').dataset.uploaded || null", timeout=60)
    report["creations"] = len(browser.requests("POST", "/v1/tus")) - creations

    # A job made on this page, ended, then pushed past the list's end by 50 newer jobs made elsewhere: it stays on
    # this page (only jobs ended and past the end that another client made go). And one made here that waits.
    own = start_job(browser)
    waiting = start_job(browser)
    connection = http.client.HTTPConnection(base.split("//")[1], timeout=10)
    connection.request("POST", f"/v1/jobs/{own}/cancel")
    connection.getresponse().read()
    body = json.dumps({"input": report["uploadedOnSecondChoice"], "settings": {"video": {"width": 160}}})
    newest = None
    for _ in range(50):
        connection.request("POST", "/v1/jobs", body=body, headers={"Content-Type": "application/json"})
        newest = json.loads(connection.getresponse().read())["id"]
    connection.close()
    # A list read after the 50 is in (the newest shows), and one more whole round after it.
    browser.wait(f"document.querySelector('#jobs li[data-job=\"{newest}\"]') ? true : null", timeout=30)
    lists = len(browser.requests("GET", "/v1/jobs?limit="))
    deadline = time.time() + 30
    while len(browser.requests("GET", "/v1/jobs?limit=")) < lists + 1:
        if time.time() > deadline:
            raise TimeoutError("the page did not read its list again")
        browser.pump(0.2)
    browser.pump(2)
    report["ownJobKept"] = browser.eval(f"document.querySelector('#jobs li[data-job=\"{own}\"]')?.dataset.state || null")
    report["ownWaitingKept"] = browser.eval(f"document.querySelector('#jobs li[data-job=\"{waiting}\"]')?.dataset.state || null")
    report["listedAfter"] = browser.eval("document.querySelectorAll('#jobs li').length")
    # The waiting one, past the list's end and not streamed, deleted elsewhere: only reading it alone (404) tells
    # the page it is gone.
    before = len(singles())
    connection = http.client.HTTPConnection(base.split("//")[1], timeout=10)
    connection.request("DELETE", f"/v1/jobs/{waiting}")
    report["waitingDeleteStatus"] = connection.getresponse().status
    connection.close()
    report["waitingGone"] = browser.wait(f"document.querySelector('#jobs li[data-job=\"{waiting}\"]') ? null : true", timeout=20)
    report["waitingSingleReads"] = len([r for r in singles()[before:] if waiting in r["url"]])


def scenario_watched(browser, base, path, report, token, database):
    """Two jobs made elsewhere, one running and one waiting, both streamed; pushed past the list's end by 50 newer
    jobs that end at once; then the waiting one deleted elsewhere with no last state (by another node of the
    cluster: here in one transaction through psql, `database` being "SOCKET_DIR NAME", so the page's node finds the
    row gone when it hears of the change)."""
    browser.navigate(base + "/")
    browser.wait("!document.querySelector('#app').hidden")
    browser.wait("document.querySelectorAll('#jobs li').length >= 2", timeout=20)
    states = browser.eval("Object.fromEntries([...document.querySelectorAll('#jobs li')].map(li => [li.dataset.job, li.dataset.state]))")
    waiting = next(ident for ident, state in states.items() if state == "queued")
    running = next(ident for ident in states if ident != waiting)
    connection = http.client.HTTPConnection(base.split("//")[1], timeout=10)

    def call(method, url, body=None):
        connection.request(method, url, body=body, headers={"Content-Type": "application/json"} if body else {})
        answer = connection.getresponse()
        return answer.status, answer.read()
    upload = json.loads(call("GET", f"/v1/jobs/{waiting}")[1])["input"]["id"]
    newest = None
    for _ in range(50):
        newest = json.loads(call("POST", "/v1/jobs", json.dumps({"input": upload}))[1])["id"]
        call("POST", f"/v1/jobs/{newest}/cancel")
    # The page has read a list naming the newest (the two past its end), and streams the waiting job: it opened
    # its stream last, after any of the newer jobs' (one of them, waiting for a moment, may have taken its place).
    browser.wait(f"document.querySelector('#jobs li[data-job=\"{newest}\"]')?.dataset.state === 'canceled' || null", timeout=30)
    streams = lambda: len(browser.requests("GET", f"/v1/jobs/{waiting}/events"))
    deadline = time.time() + 30
    while True:
        opened = [r["url"].split("/v1/jobs/")[1].split("/")[0] for r in browser.requests("GET", "/events")]
        if [ident for ident in opened if ident != running][-1:] == [waiting]:
            break
        if time.time() > deadline:
            raise TimeoutError(f"the page did not stream the waiting job again: {opened}")
        browser.pump(0.2)
    browser.pump(1)
    report["waitingListed"] = browser.eval(f"document.querySelector('#jobs li[data-job=\"{waiting}\"]')?.dataset.state || null")
    report["runningStill"] = json.loads(call("GET", f"/v1/jobs/{running}")[1])["state"]
    connection.close()
    # Every state the waiting job's item shows from here on.
    browser.eval(f"""(() => {{ window.seenStates = []; const item = document.querySelector('#jobs li[data-job="{waiting}"]');
        new MutationObserver(() => window.seenStates.push(item.dataset.state)).observe(item, {{attributes: true}}); }})()""")
    singles = lambda: [r for r in browser.requests("GET", f"/v1/jobs/{waiting}") if "/events" not in r["url"]]
    before = len(singles())
    socket_dir, name = database.split(" ")
    ident = waiting.replace("'", "")
    deleted = subprocess.run(["psql", "-X", "-q", "-h", socket_dir, "-U", "postgres", "-d", name, "-c",
                              f"BEGIN; DELETE FROM webhook_deliveries WHERE job_id = '{ident}'; DELETE FROM jobs WHERE id = '{ident}'; "
                              f"SELECT pg_notify('transcoderd_changed', '{ident}'); COMMIT;"], capture_output=True, text=True)
    report["deleted"] = deleted.returncode == 0 and not deleted.stderr.strip()
    report["waitingGone"] = browser.wait(f"document.querySelector('#jobs li[data-job=\"{waiting}\"]') ? null : true", timeout=20)
    report["seenStates"] = browser.eval("window.seenStates")
    report["waitingSingleReads"] = len(singles()) - before
    # Once gone, its stream is not opened again.
    opened = streams()
    browser.pump(11)
    report["streamsAfterGone"] = streams() - opened


class StallingRelay:
    """A TCP relay in front of the server that, once, stops forwarding a PATCH after `after` bytes of it and holds
    both its connections open without a word (a flow a NAT dropped, a proxy that stopped reading); all else passes."""

    def __init__(self, target, after):
        self.target = target
        self.after = after
        self.stalled = threading.Event()
        self.held = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            client, _ = self.listener.accept()
            threading.Thread(target=self.serve, args=(client,), daemon=True).start()

    def serve(self, client):
        upstream = socket.create_connection(self.target)
        threading.Thread(target=self.pump, args=(upstream, client, False), daemon=True).start()
        self.pump(client, upstream, True)

    def pump(self, source, sink, watch):
        tail, counted = b"", None
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if watch and not self.stalled.is_set():
                    if counted is None and b"PATCH /v1/tus/" in tail + data:
                        counted = 0
                    elif counted is not None:
                        counted += len(data)
                    tail = data[-32:]
                    if counted is not None and counted > self.after:
                        self.stalled.set()
                        self.held += [source, sink]
                        return  # neither read nor closed: the sender's window fills and it waits for good
                sink.sendall(data)
        except OSError:
            pass
        if source not in self.held:
            for end in (source, sink):
                try:
                    end.close()
                except OSError:
                    pass


def scenario_stall(browser, base, path, report, token):
    """An upload through a relay that stops moving its first PATCH without an error: the page gives the PATCH up
    after its stall time, asks the server how far it got, and finishes the upload."""
    host, port = base.split("//")[1].split(":")
    relay = StallingRelay((host, int(port)), after=256 * 1024)
    browser.navigate(f"http://127.0.0.1:{relay.port}/")
    browser.wait("!document.querySelector('#app').hidden")
    browser.eval("document.body.insertAdjacentHTML('beforeend', '<input type=file id=stall-file>')")
    browser.set_files("#stall-file", [path])
    browser.eval("""window.stall = null;
        import(new URL("tus.js", document.querySelector("script[type=module]").src).href).then(async ({ TusUpload }) => {
            const file = document.querySelector("#stall-file").files[0];
            const retries = [];
            const started = performance.now();
            const upload = new TusUpload(file, { chunkSize: 1024 * 1024, stallSeconds: 3,
                                                 onRetry: (seconds, error) => retries.push(error.message) });
            try {
                const id = await upload.start();
                upload.forget();
                window.stall = { id, size: file.size, retries, seconds: (performance.now() - started) / 1000 };
            } catch (error) {
                window.stall = { error: String(error), retries };
            }
        })""")
    report["stall"] = browser.wait("window.stall", timeout=120)
    report["relayStalled"] = relay.stalled.is_set()


def scenario_session(browser, base, path, report, token):
    """Signed in, then the session cookie lost (as when it lapses while the computer sleeps): a job's stream fails,
    the page signs in again by itself, and the result plays."""
    browser.navigate(base + "/")
    browser.wait("!document.querySelector('#login').hidden")
    browser.eval("document.querySelector('#token').focus()")
    browser.type_text(token)
    browser.key("Enter", text="\r")
    browser.wait("!document.querySelector('#app').hidden")
    sessions_before = len(browser.requests("POST", "/v1/session"))
    browser.send("Network.clearBrowserCookies")
    report["cookieAfterClearing"] = browser.eval("fetch('/v1/session', {headers: {}}).then(r => r.json()).then(s => s.session)", await_promise=True)
    report["uploadID"] = upload_file(browser, path)
    report["job"] = start_job(browser)
    wait_for_end(browser, report)
    report["sessionsPosted"] = len(browser.requests("POST", "/v1/session")) - sessions_before
    play_result(browser, report)


def main():
    scenario, base, artifacts, path = sys.argv[1:5]
    token = sys.argv[sys.argv.index("--token") + 1] if "--token" in sys.argv else ""
    settings = sys.argv[sys.argv.index("--settings") + 1] if "--settings" in sys.argv else None
    if "--database" in sys.argv:  # the cluster's PostgreSQL database, "SOCKET_DIR NAME"
        settings = sys.argv[sys.argv.index("--database") + 1]
    report = {"scenario": scenario}
    browser = Browser(tempfile.mkdtemp(prefix="chromium-"), artifacts)
    try:
        run = globals()["scenario_" + scenario]
        if settings:
            run(browser, base, path, report, token, settings)
        else:
            run(browser, base, path, report, token)
    except Exception as error:  # the report says what failed; the Swift test fails on it
        report["error"] = f"{type(error).__name__}: {error}"
        report["trace"] = traceback.format_exc()
        try:
            browser.screenshot("failure")
        except Exception:
            pass
    finally:
        browser.pump(0.2)
        report["consoleErrors"] = browser.console_errors
        report["dialogs"] = browser.dialogs
        browser.close()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
