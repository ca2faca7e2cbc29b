"""The trace page (`infernix_jax.trace_page`): its DOM from Python, then in headless Chromium."""

from __future__ import annotations

import functools
import html.parser
import json
import shutil
import subprocess

import pytest

from infernix_jax import trace_page


@functools.lru_cache(maxsize=None)
def traces() -> tuple[dict, ...]:
  """Traces of the tiny engine's runs (constrained greedy, free greedy, constrained T = 1)."""
  from tests.runtime.test_trace import engine, requests
  return tuple(r.trace for r in engine().generate(requests(traced=True)))


class Dom(html.parser.HTMLParser):
  """The elements of a page: (tag, attrs dict) in document order, and the text of scripts."""

  def __init__(self, text: str):
    super().__init__()
    self.elements: list[tuple[str, dict]] = []
    self.scripts: list[str] = []
    self._in_script = False
    self.feed(text)

  def handle_starttag(self, tag, attrs):
    self.elements.append((tag, dict(attrs)))
    self._in_script = tag == "script"

  def handle_endtag(self, tag):
    self._in_script = False

  def handle_data(self, data):
    if self._in_script:
      self.scripts.append(data)

  def tokens(self, ti: int = 0) -> list[dict]:
    return [a for t, a in self.elements if t == "span" and "tok" in a.get("class", "").split()
            and a.get("data-t") == str(ti)]


def origin_classes(attrs: dict) -> list[str]:
  return [c for c in attrs["class"].split() if c.startswith("o-")]


def test_page_has_one_element_per_token_with_its_origin_and_no_external_asset():
  t = traces()[0]
  page = trace_page.render([t])
  dom = Dom(page)
  toks = dom.tokens(0)
  assert len(toks) == len(t["tokens"])
  for attrs, tok in zip(toks, t["tokens"]):
    assert origin_classes(attrs) == [f"o-{tok['origin']}"]
  assert any(tag == "svg" and "chart" in a.get("class", "") for tag, a in dom.elements)
  assert "http://" not in page and "https://" not in page  # no network
  assert not any(tag in ("link", "img", "iframe") or (tag == "script" and "src" in a)
                 for tag, a in dom.elements)
  data = json.loads(page.split('id="data-0">', 1)[1].split("</script>", 1)[0])
  assert [x["id"] for x in data["tokens"]] == [x["id"] for x in t["tokens"]]


def test_summary_and_side_by_side_and_bad_input(tmp_path):
  a, b = traces()[:2]
  s = trace_page.summary(a)
  assert s["tokens"] == len(a["tokens"]) and s["k"] == a["meta"]["k"]
  assert s["accepted_length"] == a["result"]["accepted_length"]
  assert sum(s["origins"].values()) == len(a["tokens"])
  for j, share in enumerate(s["acceptance_by_position"]):
    tried = [r for r in a["rounds"] if r["drafted"] > j]
    assert share == (sum(r["accepted"] > j for r in tried) / len(tried) if tried else None)
  path = trace_page.write([a, b], tmp_path / "two.html", title="A vs B")
  dom = Dom(path.read_text(encoding="utf-8"))
  assert len(dom.tokens(0)) == len(a["tokens"]) and len(dom.tokens(1)) == len(b["tokens"])
  assert any(tag == "main" and a_["class"] == "traces n2" for tag, a_ in dom.elements)
  (tmp_path / "list.json").write_text(json.dumps([a, b]))
  assert len(trace_page.load(tmp_path / "list.json")) == 2
  (tmp_path / "bad.json").write_text(json.dumps({"format": "other"}))
  with pytest.raises(trace_page.TraceFormatError, match=r"bad.json: not a generation trace"):
    trace_page.load(tmp_path / "bad.json")
  with pytest.raises(trace_page.TraceFormatError, match="not JSON"):
    (tmp_path / "junk.json").write_text("{")
    trace_page.load(tmp_path / "junk.json")


def test_cli_trace_view_writes_the_page(tmp_path, capsys):
  from absl import flags

  from infernix_jax.cli import main as cli_main
  a, b = traces()[:2]
  (tmp_path / "a.json").write_text(json.dumps(a))
  (tmp_path / "b.json").write_text(json.dumps(b))
  flags.FLAGS.unparse_flags()
  out = tmp_path / "page.html"
  argv = flags.FLAGS(["infernix-jax", "trace", "view", str(tmp_path / "a.json"),
                      str(tmp_path / "b.json"), f"--out={out}"])
  assert cli_main.main(argv) == 0
  assert len(Dom(out.read_text(encoding="utf-8")).tokens(1)) == len(b["tokens"])
  flags.FLAGS.unparse_flags()
  assert cli_main.main(flags.FLAGS(["infernix-jax", "trace", "view"])) == 2
  assert "expected `trace view FILE [FILE2]`" in capsys.readouterr().err
  flags.FLAGS.unparse_flags()


def _chromium() -> str | None:
  return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="no chromium (Debian package `chromium`; "
                    "`make setup-test` installs it where apt-get is available)")
def test_page_renders_in_headless_chromium(tmp_path):
  """Real Chromium: a screenshot, then the DOM after its scripts ran: one element per token
  with its origin class, the hover panel of a token shown (`?hover=T:N` fires its
  mouseenter), and both charts drawn."""
  a, b = traces()[:2]
  page = trace_page.write([a, b], tmp_path / "page.html")
  base = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
          f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,900"]
  png = tmp_path / "shot.png"
  subprocess.run(base + [f"--screenshot={png}", page.as_uri()], capture_output=True,
                 timeout=120, check=True)
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
  i = next(n for n, x in enumerate(a["tokens"]) if x["origin"] == "correction")
  dom_text = subprocess.run(base + ["--dump-dom", f"{page.as_uri()}?hover=0:{i}"],
                            capture_output=True, text=True, timeout=120, check=True).stdout
  dom = Dom(dom_text)
  toks = dom.tokens(0)
  assert len(toks) == len(a["tokens"]) and len(dom.tokens(1)) == len(b["tokens"])
  assert [origin_classes(x) for x in toks] == [[f"o-{x['origin']}"] for x in a["tokens"]]
  assert "sel" in toks[i]["class"].split()  # the hovered token is marked
  body = next(x for tag, x in dom.elements if tag == "body")
  assert body.get("data-hovered") == f"0:{i}"
  panel = next(x for tag, x in dom.elements if tag == "aside" and x.get("id") == "panel-0")
  assert "hidden" not in panel
  shown = dom_text.split('id="panel-0"', 1)[1].split("</aside>", 1)[0]
  assert f"token {i}" in shown and "rejected here" in shown and "target top-" in shown
  assert "legal set" in shown
  charts = [x for tag, x in dom.elements if tag == "svg" and "chart" in x.get("class", "")]
  assert len(charts) == 4  # two strips per trace
  assert sum(1 for tag, x in dom.elements if tag == "rect" and x.get("class") == "accepted") == (
      len(a["rounds"]) + len(b["rounds"]))
