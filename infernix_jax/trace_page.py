"""One self-contained HTML page of generation traces (`runtime.trace`): no network, no assets.

  from infernix_jax import trace_page
  trace_page.write([result.trace], "page.html", title="n-gram under the schema")
  trace_page.write([a, b], "compare.html")   # two traces side by side

Each trace shows a summary header (drafter, K, constraint, accepted length, acceptance by
draft position, tokens/s), the output text with one element per token coloured by its
origin (accepted draft by position, forced, correction, bonus, plain, close), a panel that
shows on hover or click what the round did at that token (drafts, rejected drafts, q, the
target's top-k, the legal-set size and state), and a strip chart: tokens per round and the
legal-set size per output position (log scale). `?hover=N` (or `?hover=T:N`, trace T) opens
the panel of token N at load, for headless browsers.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any, Sequence

__all__ = ["TraceFormatError", "load", "render", "summary", "write"]

FORMAT = "infernix_jax.trace"  # = runtime.trace.FORMAT (kept here: no jax import for a page)
ORIGIN_LABELS = {"draft": "accepted draft", "forced": "forced (jump-forward)",
                 "correction": "correction", "bonus": "bonus", "plain": "plain (no drafts)",
                 "close": "thinking close"}
DRAFT_SHADES = 4  # draft positions 0, 1, 2 and 3+ get their own shade


class TraceFormatError(ValueError):
  """A file or object that is not a generation trace (the message names which and why)."""


def load(path: str | Path) -> list[dict]:
  """The traces in a JSON file: one trace object, or a list of them.

  Raises:
    TraceFormatError: the file is not JSON or holds something other than traces.
    FileNotFoundError: no such file.
  """
  path = Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"{path}: no such trace file")
  try:
    data = json.loads(path.read_text(encoding="utf-8"))
  except json.JSONDecodeError as e:
    raise TraceFormatError(f"{path}: not JSON ({e.msg} at line {e.lineno} column {e.colno})"
                           ) from None
  traces = data if isinstance(data, list) else [data]
  for i, t in enumerate(traces):
    _check(t, f"{path}" + (f"[{i}]" if isinstance(data, list) else ""))
  return traces


def _check(trace: Any, where: str) -> None:
  if not isinstance(trace, dict) or trace.get("format") != FORMAT:
    raise TraceFormatError(f"{where}: not a generation trace (expected an object with "
                           f"\"format\": \"{FORMAT}\"; write one with --trace FILE or "
                           f"GenerationRequest(trace=True))")
  if trace.get("version") != 1:
    raise TraceFormatError(f"{where}: trace version {trace.get('version')!r} is not supported "
                           f"(this page reads version 1)")


def write(traces: Sequence[dict], path: str | Path, *, title: str | None = None) -> Path:
  """Writes the page of `traces` (one, or two side by side) to `path`; returns the path."""
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(render(traces, title=title), encoding="utf-8")
  return path


def render(traces: Sequence[dict], *, title: str | None = None) -> str:
  """The page's HTML text.

  Args:
    traces: trace objects (`GenerationResult.trace`); one page column each (two compare
      drafters or laws on one prompt).
    title: the page heading (default: the drafters and constraints).

  Raises:
    TraceFormatError: an object is not a trace; ValueError: no traces.
  """
  traces = list(traces)
  if not traces:
    raise ValueError("render() needs at least one trace")
  for i, t in enumerate(traces):
    _check(t, f"traces[{i}]")
  if title is None:
    title = " vs ".join(_name(t) for t in traces)
  sections = "\n".join(_section(t, i) for i, t in enumerate(traces))
  return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
          f"<title>{_e(title)}</title>\n<style>{_CSS}</style></head>\n<body>\n"
          f"<h1>{_e(title)}</h1>\n{_legend()}\n"
          f"<main class=\"traces n{len(traces)}\">\n{sections}\n</main>\n"
          f"<script>{_JS}</script>\n</body></html>\n")


# --- pieces ----------------------------------------------------------------------------------
def _e(text: Any) -> str:
  return html.escape(str(text), quote=True)


def _name(t: dict) -> str:
  m = t["meta"]
  return f"{m.get('drafter')} K={m.get('k')} · {m.get('constraint') or 'free'}"


def _origin_class(tok: dict) -> str:
  o = tok["origin"]
  if o == "draft":
    return f"o-draft d{min(int(tok['offset']), DRAFT_SHADES - 1)}"
  return f"o-{o}"


def _legend() -> str:
  items = [f"<span class=\"tok o-draft d{i}\">draft {i if i < DRAFT_SHADES - 1 else f'{i}+'}"
           f"</span>" for i in range(DRAFT_SHADES)]
  items += [f"<span class=\"tok o-{o}\">{_e(label)}</span>" for o, label in ORIGIN_LABELS.items()
            if o != "draft"]
  return f"<p class=\"legend\">origin: {' '.join(items)}</p>"


def _acceptance_by_position(t: dict) -> list[float | None]:
  """For each draft position j < K: the share of rounds drafting past j that accepted j."""
  k = int(t["meta"].get("k") or 0)
  out = []
  for j in range(k):
    tried = [r for r in t["rounds"] if r["drafted"] > j]
    out.append(sum(r["accepted"] > j for r in tried) / len(tried) if tried else None)
  return out


def summary(t: dict) -> dict:
  """The header numbers of a trace (also what a study's index may show)."""
  res, m = t["result"], t["meta"]
  counts: dict[str, int] = {}
  for tok in t["tokens"]:
    counts[tok["origin"]] = counts.get(tok["origin"], 0) + 1
  return {"drafter": m.get("drafter"), "k": m.get("k"), "constraint": m.get("constraint"),
          "backend": m.get("backend"), "temperature": m.get("sampling", {}).get("temperature"),
          "tokens": len(t["tokens"]), "rounds": len(t["rounds"]),
          "accepted_length": res.get("accepted_length"),
          "acceptance_by_position": _acceptance_by_position(t),
          "tokens_per_second": res.get("tokens_per_second"),
          "finish_reason": res.get("finish_reason"), "origins": counts}


def _header(t: dict) -> str:
  s = summary(t)
  by_pos = " ".join(f"{j}: {'–' if a is None else f'{a:.0%}'}"
                    for j, a in enumerate(s["acceptance_by_position"])) or "–"
  origins = ", ".join(f"{n} {o}" for o, n in s["origins"].items())
  constraint = s["constraint"] or "none"
  if s["backend"]:
    constraint += f" ({s['backend']})"
  rows = [("drafter", f"{s['drafter']}, K = {s['k']}" + (
              ", masked q" if t["meta"].get("masked_q") else "")),
          ("constraint", constraint),
          ("sampling", f"T = {s['temperature']}, law {t['meta'].get('sampling_law', 'local')}"),
          ("accepted length", f"{s['accepted_length']:.2f} tokens/round over {s['rounds']} "
                              f"rounds"),
          ("acceptance by position", by_pos),
          ("tokens/s", f"{s['tokens_per_second']:.1f} ({s['tokens']} tokens, traced)"),
          ("finish", s["finish_reason"] + (f": {t['result']['error']}"
                                            if t["result"].get("error") else "")),
          ("origins", origins or "–")]
  body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
  return f"<table class=\"summary\">{body}</table>"


def _text(t: dict, ti: int) -> str:
  spans = []
  for i, tok in enumerate(t["tokens"]):
    text = tok["text"]
    cls = f"tok {_origin_class(tok)}" + ("" if text else " empty")
    spans.append(f"<span class=\"{cls}\" data-t=\"{ti}\" data-i=\"{i}\" tabindex=\"0\">"
                 f"{_e(text)}</span>")
  return f"<div class=\"text\" id=\"text-{ti}\">{''.join(spans)}</div>"


def _chart(t: dict, ti: int) -> str:
  """Two strips: tokens per round (accepted + 1, over drafted + 1), legal-set size per output
  position (log10; absent for unconstrained positions)."""
  rounds = t["rounds"]
  k = max([int(t["meta"].get("k") or 0)] + [r["drafted"] for r in rounds])
  n_r = max(len(rounds), 1)
  w, h = 600.0, 60.0
  bw = w / n_r
  bars = []
  for r in rounds:
    x = r["round"] * bw
    made = len(r["committed"])  # accepted drafts + the correction or bonus (EOS included)
    hd = h * (r["drafted"] + 1) / (k + 1)
    ha = h * made / (k + 1)
    bars.append(f"<rect class=\"drafted\" x=\"{x:.2f}\" y=\"{h - hd:.2f}\" width=\"{bw:.2f}\" "
                f"height=\"{hd:.2f}\"/><rect class=\"accepted\" data-round=\"{r['round']}\" "
                f"x=\"{x:.2f}\" y=\"{h - ha:.2f}\" width=\"{max(bw - 0.5, 0.5):.2f}\" "
                f"height=\"{ha:.2f}\"><title>round {r['round']}: {r['accepted']} of "
                f"{r['drafted']} drafts accepted</title></rect>")
  sizes = []
  for tok in t["tokens"]:
    size = None
    if tok["round"] is not None:
      pos = rounds[tok["round"]]["positions"]
      if tok["offset"] < len(pos):
        size = pos[tok["offset"]].get("legal")
    sizes.append(size)
  n_t = max(len(sizes), 1)
  top = max([math.log10(s) for s in sizes if s] + [1.0])
  tw = w / n_t
  dots = []
  for i, s in enumerate(sizes):
    if s is None:
      continue
    y = h - h * (math.log10(s) if s > 0 else 0.0) / top
    dots.append(f"<rect class=\"legal\" data-i=\"{i}\" x=\"{i * tw:.2f}\" y=\"{min(y, h - 1):.2f}\" "
                f"width=\"{max(tw - 0.3, 0.5):.2f}\" height=\"{max(h - y, 1):.2f}\">"
                f"<title>token {i}: {s} legal</title></rect>")
  legal_note = (f"legal-set size per output position, log scale (top: 10^{top:.1f})" if dots
                else "legal-set size: unconstrained (no mask)")
  return (f"<figure class=\"chart-box\"><figcaption>tokens per round (dark: produced, light: "
          f"drafted + 1; K = {k})</figcaption>"
          f"<svg class=\"chart\" id=\"chart-rounds-{ti}\" viewBox=\"0 0 {w:.0f} {h:.0f}\" "
          f"preserveAspectRatio=\"none\">{''.join(bars)}</svg>"
          f"<figcaption>{_e(legal_note)}</figcaption>"
          f"<svg class=\"chart\" id=\"chart-legal-{ti}\" viewBox=\"0 0 {w:.0f} {h:.0f}\" "
          f"preserveAspectRatio=\"none\">{''.join(dots)}</svg></figure>")


def _data(t: dict) -> str:
  """The parts the panel script reads, as JSON safe inside a <script> element."""
  keep = {"meta": t["meta"], "rounds": t["rounds"], "tokens": t["tokens"],
          "pieces": t.get("pieces", {})}
  text = json.dumps(keep, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
  return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def _section(t: dict, ti: int) -> str:
  prompt = t.get("prompt", {}).get("text", "")
  return (f"<section class=\"trace\" id=\"trace-{ti}\">\n<h2>{_e(_name(t))}</h2>\n"
          f"{_header(t)}\n<details class=\"prompt\"><summary>prompt "
          f"({t.get('prompt', {}).get('tokens', '?')} tokens)</summary><pre>{_e(prompt)}</pre>"
          f"</details>\n{_text(t, ti)}\n"
          f"<aside class=\"panel\" id=\"panel-{ti}\" hidden></aside>\n{_chart(t, ti)}\n"
          f"<script type=\"application/json\" id=\"data-{ti}\">{_data(t)}</script>\n</section>")


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#222;background:#fff}
h1{font-size:18px;margin:0 0 8px}h2{font-size:15px;margin:4px 0}
.traces{display:grid;gap:16px}.traces.n2{grid-template-columns:1fr 1fr}
.trace{border:1px solid #ccc;border-radius:6px;padding:8px;min-width:0}
table.summary{border-collapse:collapse;font-size:12px;margin-bottom:6px}
table.summary th{text-align:left;font-weight:600;padding:1px 8px 1px 0;color:#555}
.text{font:13px/1.9 ui-monospace,monospace;white-space:pre-wrap;word-break:break-all;
 border:1px solid #eee;padding:6px;background:#fcfcfc}
.tok{border-radius:2px;padding:0 1px;margin:0 0.5px;cursor:pointer}
.tok.empty::after{content:"\\00b7";color:#888}
.tok.sel{outline:2px solid #000}
.o-draft.d0{background:#1a9850;color:#fff}.o-draft.d1{background:#66bd63}
.o-draft.d2{background:#a6d96a}.o-draft.d3{background:#d9ef8b}
.o-forced{background:#74add1}.o-correction{background:#f46d43;color:#fff}
.o-bonus{background:#c2a5cf}.o-plain{background:#e0e0e0}
.o-close{background:#999;color:#fff}
.legend .tok{font-size:12px;margin-right:4px}
.panel{border:1px solid #888;background:#fffff4;padding:6px;margin:6px 0;font-size:12px}
.panel table{border-collapse:collapse}.panel td,.panel th{padding:0 6px 0 0;text-align:left}
.panel .bar{display:inline-block;height:8px;background:#4575b4;vertical-align:middle}
.panel .rej{text-decoration:line-through;color:#c00}.panel .acc{color:#1a7a40}
.panel .skip{color:#999}.panel code{background:#eee;padding:0 2px}
.chart-box{margin:6px 0}.chart-box figcaption{font-size:11px;color:#555}
svg.chart{width:100%;height:60px;background:#f6f6f6;display:block;margin-bottom:4px}
rect.drafted{fill:#d8d8d8}rect.accepted{fill:#1a9850}rect.legal{fill:#4575b4}
details.prompt pre{white-space:pre-wrap;font-size:11px;max-height:10em;overflow:auto}
"""

_JS = r"""
(function(){
var data=[];document.querySelectorAll('script[id^="data-"]').forEach(function(s){
 data[+s.id.slice(5)]=JSON.parse(s.textContent);});
function esc(s){return String(s).replace(/[&<>"]/g,function(c){return {'&':'&amp;','<':'&lt;',
 '>':'&gt;','"':'&quot;'}[c];});}
function piece(d,id){var p=d.pieces[String(id)];return '<code>'+esc(p===undefined?id:
 JSON.stringify(p).slice(1,-1))+'</code>';}
function show(ti,i){
 var d=data[ti],tok=d.tokens[i],panel=document.getElementById('panel-'+ti);if(!tok)return;
 document.querySelectorAll('#text-'+ti+' .tok.sel').forEach(function(e){e.classList.remove('sel');});
 var el=document.querySelector('#text-'+ti+' .tok[data-i="'+i+'"]');if(el)el.classList.add('sel');
 var h='<b>token '+i+'</b> '+piece(d,tok.id)+' id '+tok.id+' · origin <b>'+tok.origin+
  '</b>'+(tok.origin==='draft'||tok.origin==='forced'?' (draft position '+tok.offset+')':'');
 if(tok.round===null){h+='<br>appended by the engine (thinking budget), no round';}
 else{var r=d.rounds[tok.round],pos=r.positions[tok.offset]||{};
  h+='<br>round '+r.round+' · anchor '+piece(d,r.anchor)+' · drafts allowed '+r.limit+
   ' · accepted '+r.accepted+' of '+r.drafted+(r.eos?' · EOS accepted':'');
  if(r.forced.length)h+='<br>forced by the grammar: '+r.forced.map(function(x){return piece(d,x);}).join(' ');
  var dr=r.drafts.map(function(x,j){var c=j<r.accepted?'acc':(j===r.accepted?'rej':'skip');
   return '<span class="'+c+'">'+piece(d,x)+'</span>';});
  h+='<br>drafts: '+(dr.join(' ')||'none');
  if(tok.origin==='correction')h+='<br>rejected here: '+piece(d,r.drafts[tok.offset])+
   (r.drafts.length>tok.offset+1?' (and '+(r.drafts.length-tok.offset-1)+' after it, never reached)':'');
  if(r.redraw)h+='<br>masked q redrew position '+r.redraw.position+': '+piece(d,r.redraw.drafted)+
   ' (illegal) → '+piece(d,r.redraw.redrawn);
  if(r.q&&r.q[tok.offset])h+='<br>q here: '+r.q[tok.offset].map(function(c){return piece(d,c[0])+
   ' '+c[1].toFixed(3);}).join(', ');
  h+='<br>state '+(pos.state||'unconstrained')+(pos.legal!=null?' · legal set '+pos.legal+
   ' tokens · legal mass '+(pos.legal_mass==null?'?':pos.legal_mass.toFixed(3)):'');
  if(pos.top&&pos.top.length){h+='<table><tr><th>target top-'+pos.top.length+'</th><th>p</th></tr>';
   pos.top.forEach(function(c){h+='<tr><td>'+piece(d,c[0])+(c[0]===tok.id?' ◀':'')+'</td><td><span class="bar" style="width:'+
    Math.round(80*c[1])+'px"></span> '+c[1].toFixed(3)+'</td></tr>';});h+='</table>';}}
 panel.innerHTML=h;panel.hidden=false;document.body.setAttribute('data-hovered',ti+':'+i);}
document.querySelectorAll('.text .tok').forEach(function(el){
 var f=function(){show(+el.dataset.t,+el.dataset.i);};
 el.addEventListener('mouseenter',f);el.addEventListener('click',f);el.addEventListener('focus',f);});
var q=new URLSearchParams(location.search).get('hover');
if(q!==null){var p=q.split(':'),ti=p.length>1?+p[0]:0,i=+p[p.length-1];
 var el=document.querySelector('#text-'+ti+' .tok[data-i="'+i+'"]');
 if(el)el.dispatchEvent(new MouseEvent('mouseenter'));}
})();
"""
