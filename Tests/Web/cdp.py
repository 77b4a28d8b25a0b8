"""A small driver for headless Chromium over the DevTools protocol (websocket-client from PyPI): launch, evaluate,
wait, click, type, press keys, set files, throttle, intercept requests, screenshot, and collect console errors and
dialogs."""

import base64
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

import websocket


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Browser:
    def __init__(self, profile, artifacts):
        self.artifacts = artifacts
        os.makedirs(artifacts, exist_ok=True)
        port = free_port()
        self.process = subprocess.Popen(
            ["/usr/bin/chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--mute-audio",
             "--disable-crash-reporter", "--disable-breakpad", "--disable-extensions", "--remote-allow-origins=*",
             "--autoplay-policy=no-user-gesture-required", f"--remote-debugging-port={port}",
             f"--user-data-dir={profile}", "--window-size=1200,1600", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 30
        targets = None
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as answer:
                    targets = [t for t in json.load(answer) if t.get("type") == "page"]
                if targets:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        if not targets:
            raise RuntimeError("chromium did not start")
        self.ws = websocket.create_connection(targets[0]["webSocketDebuggerUrl"], timeout=60)
        self.next_id = 0
        self.events = []
        self.console_errors = []
        self.dialogs = []
        # Called with each Fetch.requestPaused event's params once `intercept` has turned interception on; it
        # answers with `fulfill` or `let_through`.
        self.on_paused = None
        for domain in ["Page", "Runtime", "Log", "Network", "DOM"]:
            self.send(f"{domain}.enable")

    def close(self):
        try:
            self.ws.close()
        finally:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()

    def _note(self, message):
        method, params = message.get("method"), message.get("params", {})
        self.events.append(message)
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.console_errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.console_errors.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.console_errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
        elif method == "Fetch.requestPaused" and self.on_paused:
            self.on_paused(params)
        elif method == "Page.javascriptDialogOpening":
            self.dialogs.append(params.get("message"))
            self.send_async("Page.handleJavaScriptDialog", {"accept": False})

    def send_async(self, method, params=None):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        return self.next_id

    def send(self, method, params=None):
        ident = self.send_async(method, params)
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self._note(message)

    def pump(self, seconds=0.0):
        """Reads the events that arrived (for up to `seconds`)."""
        deadline = time.time() + seconds
        self.ws.settimeout(0.05)
        try:
            while True:
                try:
                    message = json.loads(self.ws.recv())
                    if "method" in message:
                        self._note(message)
                except websocket.WebSocketTimeoutException:
                    if time.time() >= deadline:
                        break
        finally:
            self.ws.settimeout(60)

    def eval(self, expression, await_promise=False):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": await_promise})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails'].get('exception', {}).get('description')}")
        return result.get("result", {}).get("value")

    def wait(self, expression, timeout=30, interval=0.1):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = self.eval(expression)
            if value:
                return value
            self.pump(interval)
        raise TimeoutError(f"waited {timeout} s for {expression}")

    def navigate(self, url):
        self.send("Page.navigate", {"url": url})
        self.wait("document.readyState === 'complete'")

    def intercept(self, url_pattern, on_paused):
        """Pauses requests whose URL matches `url_pattern` (DevTools' wildcards) and hands each to `on_paused`."""
        self.on_paused = on_paused
        self.send("Fetch.enable", {"patterns": [{"urlPattern": url_pattern, "requestStage": "Request"}]})

    def fulfill(self, paused, status, body):
        """Answers a paused request with `status` and a JSON `body`, without the server."""
        self.send_async("Fetch.fulfillRequest", {
            "requestId": paused["requestId"], "responseCode": status,
            "responseHeaders": [{"name": "Content-Type", "value": "application/json"}],
            "body": base64.b64encode(json.dumps(body).encode()).decode()})

    def let_through(self, paused):
        self.send_async("Fetch.continueRequest", {"requestId": paused["requestId"]})

    def reload(self):
        self.send("Page.reload", {"ignoreCache": False})
        self.pump(0.3)
        self.wait("document.readyState === 'complete'")

    def set_files(self, selector, paths):
        document = self.send("DOM.getDocument", {"depth": 0})
        node = self.send("DOM.querySelector", {"nodeId": document["root"]["nodeId"], "selector": selector})
        self.send("DOM.setFileInputFiles", {"files": paths, "nodeId": node["nodeId"]})

    def click(self, selector):
        self.eval(f"document.querySelector({json.dumps(selector)}).click()")

    def key(self, key, code=None, text=None):
        codes = {"Tab": 9, "Enter": 13, " ": 32}
        params = {"key": key, "code": code or key, "windowsVirtualKeyCode": codes.get(key, 0)}
        down = dict(params, type="keyDown")
        if text:
            down["text"] = text
        self.send("Input.dispatchKeyEvent", down)
        self.send("Input.dispatchKeyEvent", dict(params, type="keyUp"))

    def type_text(self, text):
        self.send("Input.insertText", {"text": text})

    def throttle_upload(self, bytes_per_second):
        self.send("Network.emulateNetworkConditions", {"offline": False, "latency": 0, "downloadThroughput": -1,
                                                       "uploadThroughput": bytes_per_second})

    def screenshot(self, name):
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        path = os.path.join(self.artifacts, name + ".png")
        with open(path, "wb") as file:
            file.write(base64.b64decode(data))
        return path

    def requests(self, method=None, url_part=None):
        """Requests the page made, as Network.requestWillBeSent saw them."""
        found = []
        for event in self.events:
            if event.get("method") != "Network.requestWillBeSent":
                continue
            request = event["params"]["request"]
            if (method is None or request["method"] == method) and (url_part is None or url_part in request["url"]):
                found.append(request)
        return found
