#!/usr/bin/env python3
"""The desktop app as a user meets it: this build's `catena-desktop` under Xvfb, driven through
`tauri-driver` and WebKitGTK's `WebKitWebDriver`.

A real task on the default model runs in the window (the model in the app's worker process, the
code in the sandbox) and its observation and answer appear; the run is rated, found again in the
sessions view and exported to the Downloads folder; a second app refuses to start; every view is
photographed in both themes (docs/screenshots/desktop-*.png).

The W3C WebDriver protocol is spoken with the standard library, one connection per command: the
Rust client fantoccini 0.22 stalled at random commands against tauri-driver 2.1 here, while plain
requests never did.

Screenshots are taken from the X server (`xwd` of the app's window): WebKitWebDriver's own
screenshot command sometimes never answered here once a run had streamed into the page.

Needs Xvfb, xwd, WebKitWebDriver and tauri-driver (scripts/setup/packages.sh --tests) and the
release build of catena-desktop.
Usage: tests/desktop/desktop_e2e.py [--bin target/release/catena-desktop]
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import struct
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "docs" / "screenshots"
# The model the import step installs (and removes at the end).
IMPORT_NAME = "desktop-imported"
POW = "1267650600228229401496703205376"
TASK = "What is 2 to the power 100?"
PREFILL = "<plan>compute it</plan>\n<code>\n```py\nprint(2**100)\n```\n</code>"
THEME = (
    "const saved = JSON.parse(localStorage.getItem('catena.settings') ?? '{}');"
    "localStorage.setItem('catena.settings', JSON.stringify({ ...saved, theme: arguments[0] }));"
    "document.documentElement.dataset.theme = arguments[0];"
)


class Failed(Exception):
    pass


class Dropped(Failed):
    """tauri-driver closed the connection without an answer. It forwards each command over a
    pooled connection to WebKitWebDriver, which closes idle connections; when the proxy picks one
    that was just closed, the command fails before it reaches the native driver. `call` sends such
    a command again (a few times); a command that ran twice would show in the checks after it."""


def tool(name):
    found = shutil.which(name) or shutil.which(name, path=str(Path.home() / ".cargo" / "bin"))
    if not found:
        sys.exit(f"`{name}` is not installed: run scripts/setup/packages.sh --tests")
    return found


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise Failed(f"waited {seconds} s for {what}")
        time.sleep(0.1)


def listening(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class Session:
    """A WebDriver session with the app."""

    def __init__(self, base, app, display):
        self.base = base
        self.display = display
        value = self.call("POST", "/session", {"capabilities": {"alwaysMatch": {"browserName": "wry", "tauri:options": {"application": str(app)}}}}, timeout=120)
        self.id = value["sessionId"]

    def call(self, method, path, body=None, timeout=60, attempts=3):
        for attempt in range(attempts):
            try:
                return self.call_once(method, path, body, timeout)
            except Dropped:
                if attempt + 1 == attempts:
                    raise
                time.sleep(0.2)

    def call_once(self, method, path, body, timeout):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read())["value"]
        except urllib.error.HTTPError as e:
            detail = json.loads(e.read() or b"{}").get("value", {})
            raise Failed(f"{method} {path}: {detail.get('error')}: {detail.get('message')}") from None
        except (ConnectionResetError, http.client.RemoteDisconnected) as e:
            raise Dropped(f"{method} {path}: {e}") from None

    def command(self, method, path, body=None):
        return self.call(method, f"/session/{self.id}{path}", body)

    def find(self, selector, using="css selector", seconds=60):
        deadline = time.monotonic() + seconds
        while True:
            try:
                value = self.command("POST", "/element", {"using": using, "value": selector})
                return next(iter(value.values()))
            except Failed:
                if time.monotonic() > deadline:
                    raise Failed(f"no element `{selector}` within {seconds} s") from None
                time.sleep(0.25)

    def click(self, selector, using="css selector"):
        self.command("POST", f"/element/{self.find(selector, using)}/click", {})

    def type(self, selector, text):
        self.command("POST", f"/element/{self.find(selector)}/value", {"text": text})

    def text(self, selector):
        return self.command("GET", f"/element/{self.find(selector)}/text")

    def wait_text(self, selector, needle, seconds):
        deadline = time.monotonic() + seconds
        while True:
            try:
                text = self.text(selector)
                if needle in text:
                    return text
            except Failed:
                pass
            if time.monotonic() > deadline:
                raise Failed(f"`{selector}` did not show `{needle}` within {seconds} s")
            time.sleep(0.25)

    def script(self, source, *args):
        return self.command("POST", "/execute/sync", {"script": source, "args": list(args)})

    def go(self, view):
        self.click(f"//nav[@aria-label='Views']//button[normalize-space()='{view}']", "xpath")

    def shoot_themes(self, view):
        """docs/screenshots/desktop-VIEW-THEME.png in both themes."""
        for theme in ("light", "dark"):
            self.script(THEME, theme)
            self.shoot(SHOTS / f"desktop-{view}-{theme}.png")

    def shoot(self, path):
        # Let the page paint what the last command changed.
        time.sleep(0.3)
        Path(path).write_bytes(window_png(self.display))

    def close(self):
        try:
            self.call("DELETE", f"/session/{self.id}", timeout=20)
        except Exception:
            pass


def window_png(display):
    """The app's window as a PNG, read from the X server with `xwd` (32-bit TrueColor)."""
    xwd = subprocess.run(["xwd", "-display", display, "-name", "Catena", "-silent"], capture_output=True, timeout=30, check=True).stdout
    fields = struct.unpack(">25I", xwd[:100])
    header_size, width, height = fields[0], fields[4], fields[5]
    byte_order, bits_per_pixel, bytes_per_line, ncolors = fields[7], fields[11], fields[12], fields[19]
    if bits_per_pixel != 32:
        raise Failed(f"xwd gave {bits_per_pixel} bits per pixel; 32 expected")
    pixels = xwd[header_size + 12 * ncolors:]
    rows = bytearray()
    for y in range(height):
        line = pixels[y * bytes_per_line : y * bytes_per_line + 4 * width]
        rows.append(0)
        if byte_order == 0:  # LSBFirst: B, G, R, unused
            rgb = bytearray(3 * width)
            rgb[0::3], rgb[1::3], rgb[2::3] = line[2::4], line[1::4], line[0::4]
        else:  # MSBFirst: unused, R, G, B
            rgb = bytearray(3 * width)
            rgb[0::3], rgb[1::3], rgb[2::3] = line[1::4], line[2::4], line[3::4]
        rows += rgb

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(rows), 6)) + chunk(b"IEND", b"")


def flow(session, app, env, home):
    step = lambda name: print(f"desktop flow: {name}", flush=True)
    # The window is there before the model: the task box first, the model picker once loaded.
    session.find("#task")
    session.find("select[aria-label='Model']:not([disabled])", seconds=120)
    title = session.command("GET", "/title")
    if title != "Catena":
        raise Failed(f"window title {title!r}")

    step("a second app refuses to start")
    second = subprocess.run([str(app)], env=env, capture_output=True, text=True, timeout=60)
    if second.returncode != 3 or "already open" not in second.stderr:
        raise Failed(f"a second instance: exit {second.returncode}, stderr {second.stderr!r}")

    step("a real run: the prefilled code runs in the sandbox, the model answers")
    session.go("Settings")
    field = session.find("//label[contains(., 'Temperature')]/input", "xpath")
    session.command("POST", f"/element/{field}/clear", {})
    session.command("POST", f"/element/{field}/value", {"text": "0\t"})
    session.go("Run")
    session.type("#task", TASK)
    session.click("//select[@aria-label='Profile']/option[@value='math']", "xpath")
    session.click("details.advanced summary")
    session.find("#prefill")
    # WebKitWebDriver drops typed newlines: set the text as a paste would, with its input event.
    session.script("const box = document.querySelector('#prefill'); box.value = arguments[0];"
                   "box.dispatchEvent(new Event('input', { bubbles: true }));", PREFILL)
    session.click("button[type='submit']")
    session.wait_text("[data-testid='observation']", POW, 300)
    session.wait_text("[data-testid='answer']", POW, 300)
    session.shoot_themes("run")

    step("rated good, found again in the sessions view")
    session.click("//*[@aria-label='Rate this run']//button[contains(., 'Good')]", "xpath")
    session.wait_text("[aria-label='Rate this run'] button[aria-pressed='true']", "Good", 20)
    session.go("Sessions")
    session.type("input[aria-label='Search sessions']", "power 100")
    session.click(f"//button[normalize-space()='{TASK}']", "xpath")
    session.wait_text(".run-card", POW, 20)
    session.shoot_themes("sessions")

    step("exported into the Downloads folder")
    session.click("//button[normalize-space()='Export SFT']", "xpath")
    note = session.wait_text("p.note", "Saved to", 20)
    saved = Path(note.removeprefix("Saved to ").strip())
    if home not in saved.parents:
        raise Failed(f"the export went to {saved}")
    first = json.loads(saved.read_text().splitlines()[0])
    if POW not in json.dumps(first):
        raise Failed(f"the exported run lacks the answer: {first}")

    step("a Hugging Face checkpoint folder imported from the Models view")
    models = Path(env["CATENA_DATA_DIR"]) / "models"
    imported = models / f"{IMPORT_NAME}-Q8_0.gguf"
    checkpoint = Path(env["CATENA_CACHE_DIR"]) / "test-checkpoints" / "qwen2.5-coder-0.5b-instruct-hf"
    if not (checkpoint / ".complete").is_file():
        raise Failed(f"{checkpoint} is missing: the Rust end-to-end tests (tests/tests/convert.rs) make it")
    for leftover in (imported, Path(f"{imported}.catena.json")):
        leftover.unlink(missing_ok=True)
    session.go("Models")
    # Filled in as a script would: typing leaves WebKit's completion popup drawn over the page,
    # and clicking an option leaves the select's.
    fields = (("Folder", "input", str(checkpoint)), ("Name", "input", IMPORT_NAME),
              ("Quantisation", "select", "Q8_0"), ("Profile", "select", "code"))
    for label, kind, value in fields:
        session.script("const field = document.evaluate(arguments[0], document, null, 9, null).singleNodeValue;"
                       "field.value = arguments[1];"
                       "field.dispatchEvent(new Event(arguments[2], { bubbles: true }));",
                       f"//label[contains(., '{label}')]/{kind}", value, "input" if kind == "input" else "change")
    session.click("//form[@aria-label='Import a checkpoint folder']//button[@type='submit']", "xpath")
    session.wait_text(f"[aria-label='Import of {IMPORT_NAME}']", "converted and installed", 300)
    session.wait_text("section[aria-label='Models'] table", f"{IMPORT_NAME}-Q8_0.gguf", 20)
    record = json.loads(Path(f"{imported}.catena.json").read_text())
    if record.get("profile") != "code" or record.get("quant") != "Q8_0":
        raise Failed(f"the imported model's record: {record}")

    step("the other views, in both themes")
    for theme in ("light", "dark"):
        session.script(THEME, theme)
        for view in ("Models", "Settings", "Training"):
            session.go(view)
            if view == "Models":
                session.wait_text("section[aria-label='Models']", "afm-code-7b-rl", 20)
                # The end of the page: the finished import under its form.
                session.script("window.scrollTo(0, document.body.scrollHeight)")
            session.shoot(SHOTS / f"desktop-{view.lower()}-{theme}.png")
    for made in (imported, Path(f"{imported}.catena.json")):
        made.unlink()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    parser.add_argument("--bin", default=str(target / "release" / "catena-desktop"))
    args = parser.parse_args()
    app = Path(args.bin).resolve()
    if not app.is_file():
        sys.exit(f"{app} is missing: build it first (cargo build --release -p catena-desktop)")
    xvfb_bin, driver_bin, native_bin = tool("Xvfb"), tool("tauri-driver"), tool("WebKitWebDriver")
    tool("xwd")
    SHOTS.mkdir(parents=True, exist_ok=True)

    number = next(n for n in range(100, 200) if not Path(f"/tmp/.X11-unix/X{n}").exists())
    children = []
    with tempfile.TemporaryDirectory(prefix="catena-desktop-e2e-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        data_home = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share"))
        cache_home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        env = dict(os.environ)
        env.update(
            DISPLAY=f":{number}",
            # The real assets (model, sandbox), a throw-away store and home (Downloads, WebKit's files).
            CATENA_DATA_DIR=os.environ.get("CATENA_DATA_DIR", str(data_home / "catena")),
            CATENA_CACHE_DIR=os.environ.get("CATENA_CACHE_DIR", str(cache_home / "catena")),
            CATENA_STORE_DIR=str(Path(tmp) / "store"),
            HOME=str(home),
            XDG_CONFIG_HOME=str(home / ".config"),
            XDG_DATA_HOME=str(home / ".local" / "share"),
            XDG_CACHE_HOME=str(home / ".cache"),
            WEBKIT_DISABLE_COMPOSITING_MODE="1",
        )
        session = None
        try:
            children.append(subprocess.Popen([xvfb_bin, f":{number}", "-screen", "0", "1280x900x24", "-nolisten", "tcp"],
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
            wait_for(lambda: Path(f"/tmp/.X11-unix/X{number}").exists(), 20, "Xvfb")
            port, native = free_port(), free_port()
            # Its own process group, so WebKitWebDriver and the app go with it at the end.
            children.append(subprocess.Popen([driver_bin, "--port", str(port), "--native-port", str(native), "--native-driver", native_bin],
                                             env=env, stdout=subprocess.DEVNULL, start_new_session=True))
            wait_for(lambda: listening(port) and listening(native), 20, "tauri-driver and WebKitWebDriver")
            session = Session(f"http://127.0.0.1:{port}", app, f":{number}")
            flow(session, app, env, home)
            print("desktop flow: passed")
        except Failed as e:
            if session:
                shot = target / "desktop-failure.png"
                try:
                    session.shoot(shot)
                    print(f"the window at the failure: {shot}", file=sys.stderr)
                    print(f"its text: {session.script('return document.body.innerText')}", file=sys.stderr)
                except Exception as e:
                    print(f"(no more detail: {e})", file=sys.stderr)
            sys.exit(f"desktop end to end: {e}")
        finally:
            if session:
                session.close()
            for child in reversed(children):
                try:
                    os.killpg(child.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                child.wait()


if __name__ == "__main__":
    main()
