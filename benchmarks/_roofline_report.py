"""The arithmetic and the report of `benchmarks/roofline.py`: step shapes, bytes and FLOPs of a
step (its roofline), the thunk count of compiled HLO, the goals and the markdown page.

No timing and no device work here: everything is a function of the config and the measured
numbers, so the page can be rewritten from the JSON (`markdown(json.load(...))`).

Axis letters (docs/CONTRACTS.md): B lanes, P positions per lane, M = B x P rows of a step,
S KV capacity, L layers, D width, N/G query/kv heads, H head dim, F MLP width, Vm logits width.
"""

from __future__ import annotations

import collections
import dataclasses
import re

from infernix_jax import mask_layout

BATCH_LANES = 4  # lanes of a batched verify
GOAL_STEP_RATIO = 1.3  # every step shape: time / roofline
GOAL_VERIFY5_OVER_DECODE1 = 1.2
GOAL_DECODE_OVER_FLOOR = 1.3  # decode ms/token vs the weight-streaming floor
GOAL_CAPACITY = 1.1  # decode(1) at capacity 4096 vs 512
NOT_WORK = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})


# --- step shapes and their cost ---------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Shape:
  """One step shape: B lanes x P positions (M = B x P rows through the model)."""

  kind: str  # "decode" | "verify" | "batched verify"
  lanes: int  # B
  positions: int  # P

  @property
  def m(self) -> int:
    return self.lanes * self.positions

  @property
  def name(self) -> str:
    return f"{self.kind}({self.m})" if self.kind != "batched verify" else \
        f"batched verify({self.lanes}x{self.positions})"


def step_shapes(ms) -> list[Shape]:
  """decode(M) for every M; verify(M) for M > 1 (verify(1) is decode(1)); a batched verify of
  BATCH_LANES lanes where BATCH_LANES divides M into at least 2 positions."""
  shapes = [Shape("decode", m, 1) for m in ms]
  shapes += [Shape("verify", 1, m) for m in ms if m > 1]
  shapes += [Shape("batched verify", BATCH_LANES, m // BATCH_LANES) for m in ms
             if m % BATCH_LANES == 0 and m // BATCH_LANES >= 2]
  return shapes


def roofline_ms(nbytes: float, flops: float, den: dict) -> tuple[float, str]:
  """(max(bytes / bandwidth, FLOPs / dense rate) in ms, "memory" | "compute")."""
  mem = nbytes / den["bandwidth"]
  comp = flops / den["dense_rate"]
  return 1e3 * max(mem, comp), "memory" if mem >= comp else "compute"


def layer_matrices(cfg) -> dict[str, int]:
  """Parameters of one layer's products in the unrolled layout: qkv [D, (N + 2G)H], o [NH, D],
  gate_up [D, 2F], down [F, D]."""
  d, n, g, h, f = cfg.dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.ffn_dim
  return {"qkv": d * (n + 2 * g) * h, "o": n * h * d, "gate_up": d * 2 * f, "down": f * d}


def attention_flops(cfg, lanes: int, positions: int, keys: int) -> float:
  """QK^T and PV of every layer: 4 x B x P x keys x N x H x L."""
  return 4.0 * lanes * positions * keys * cfg.num_heads * cfg.head_dim * cfg.num_layers


def step_cost(cfg, costs: dict, shape: Shape, kv_span: int, masked: bool) -> tuple[float, float]:
  """(bytes, FLOPs) of verify + finish at `shape`, attention over `kv_span` cache positions."""
  b, p = shape.lanes, shape.positions
  kv_row = cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 2 * costs["kv_itemsize"]
  nbytes = (costs["weight_bytes"] + b * kv_span * kv_row + b * p * kv_row
            + 2 * b * p * cfg.vocab_size * 4)
  if masked:
    nbytes += b * p * mask_layout.mask_words(cfg.vocab_size) * 4
  flops = 2.0 * shape.m * costs["matmul_params"] + attention_flops(cfg, b, p, kv_span)
  return nbytes, flops



# --- thunks ------------------------------------------------------------------------------------
_INSTRUCTION = re.compile(r"\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*")


def _opcode(rest: str) -> str:
  """The opcode of an HLO instruction's right-hand side "<shape> <opcode>(<operands>)...";
  a tuple shape "(...)" may nest."""
  if rest.startswith("("):
    depth = 0
    for i, ch in enumerate(rest):
      depth += (ch == "(") - (ch == ")")
      if depth == 0:
        break
    rest = rest[i + 1:]
  else:
    rest = rest.split(" ", 1)[1] if " " in rest else ""
  return rest.strip().split("(", 1)[0]


def entry_instructions(hlo: str) -> list[tuple[str, str]]:
  """(opcode, right-hand side) of every instruction of the ENTRY computation of optimized HLO
  text (`compiled.as_text()`)."""
  lines = hlo.splitlines()
  starts = [i for i, line in enumerate(lines) if line.startswith("ENTRY")]
  if not starts:
    raise ValueError("no ENTRY computation in the HLO text (expected compiled.as_text())")
  out = []
  for line in lines[starts[0] + 1:]:
    if line.startswith("}"):
      break
    match = _INSTRUCTION.match(line)
    if match:
      rest = line[match.end():]
      out.append((_opcode(rest), rest))
  return out


def entry_ops(hlo: str) -> collections.Counter:
  """Opcode counts of the ENTRY computation."""
  return collections.Counter(op for op, _ in entry_instructions(hlo))


def sized_ops(hlo: str, dim: int) -> dict[str, int]:
  """Opcode counts of the ENTRY thunks whose result shape has an axis of length `dim` (e.g.
  the KV capacity S: work that grows with the capacity)."""
  out = collections.Counter()
  for op, rest in entry_instructions(hlo):
    shape = rest.split(f" {op}(", 1)[0]
    if op not in NOT_WORK and any(str(dim) in dims.split(",")
                                  for dims in re.findall(r"\[([\d,]*)\]", shape)):
      out[op] += 1
  return dict(out)


def entry_thunks(hlo: str) -> int:
  """Instructions of the ENTRY computation that become runtime work (thunks): every one but
  parameter, constant, tuple, get-tuple-element and bitcast. A fusion counts once however
  many ops it fuses; a while loop or a call counts once however many times its body runs."""
  return sum(n for op, n in entry_ops(hlo).items() if op not in NOT_WORK)


# --- goals -------------------------------------------------------------------------------------
def _nearest_pieces(result: dict, m: int) -> list[dict]:
  """The aggregate pieces (the parts a step is made of) measured at the piece M nearest m."""
  rows = [r for r in result["pieces"] if r["aggregate"]]
  if not rows:
    return []
  near = min({r["m"] for r in rows}, key=lambda x: (abs(x - m), x))
  return [r for r in rows if r["m"] == near]


def largest_gap(result: dict, m: int) -> str:
  """The measured reason for a goal at M rows: the step part with the largest time / roofline
  at the nearest piece M, and the one with the most ms above its roofline."""
  rows = _nearest_pieces(result, m)
  if not rows:
    return "pieces not measured"
  worst = max(rows, key=lambda r: r["ratio"])
  most = max(rows, key=lambda r: r["ms"] - r["roofline_ms"])
  text = (f"{worst['name']} at M={worst['m']}: {worst['ms']:.3f} ms vs roofline "
          f"{worst['roofline_ms']:.4f} ms (x{worst['ratio']:.1f})")
  if most is not worst:
    text += (f"; most ms above its roofline: {most['name']} "
             f"(+{most['ms'] - most['roofline_ms']:.3f} ms)")
  return text


def _step(result: dict, name: str) -> dict | None:
  return next((r for r in result["steps"] if r["name"] == name), None)


def goals(result: dict) -> list[dict]:
  """Each goal: {"goal", "value" (None: not measured), "limit", "met" (None: not measured),
  "reason" (for a missed goal: the measured reason)}."""
  out = []

  def add(goal, value, limit, reason_if_missed):
    met = None if value is None else value <= limit
    out.append({"goal": goal, "value": value, "limit": limit, "met": met,
                "reason": reason_if_missed() if met is False else ""})

  worst = max(result["steps"], key=lambda r: max(r["ratio"], r["ratio_masked"]), default=None)
  add("every step shape: time / roofline (worst of unmasked and masked)",
      None if worst is None else max(worst["ratio"], worst["ratio_masked"]), GOAL_STEP_RATIO,
      lambda: f"worst {worst['name']}; {largest_gap(result, worst['m'])}")
  decode, verify = _step(result, "decode(1)"), _step(result, "verify(5)")
  add("verify(5) / decode(1), unmasked steps",
      verify["ms"] / decode["ms"] if decode and verify else None, GOAL_VERIFY5_OVER_DECODE1,
      lambda: largest_gap(result, 5))
  add("decode(1) ms/token / weight-streaming floor, unmasked",
      decode["ms"] / result["weights"]["floor_ms"] if decode else None, GOAL_DECODE_OVER_FLOOR,
      lambda: largest_gap(result, 1))
  caps = {r["capacity"]: r for r in result["capacities"]}
  if decode:
    caps.setdefault(result["capacity"], decode)
  add("decode(1) at KV capacity 4096 / 512, same sequence",
      caps[4096]["ms"] / caps[512]["ms"] if 512 in caps and 4096 in caps else None,
      GOAL_CAPACITY, lambda: _capacity_reason(result))
  return out


def _capacity_reason(result: dict) -> str:
  """What grows with the capacity: the verify's thunks on capacity-sized buffers at 4096, and
  the in-place KV write piece at 4096 vs 512 (M = 1)."""
  big = next((r for r in result["capacities"] if r["capacity"] == 4096), None)
  ops = ", ".join(f"{op} x{n}" for op, n in sorted((big or {}).get("sized_ops", {}).items()))
  text = f"verify thunks on [.., 4096, ..] buffers: {ops or 'none'}"
  rows = {r["name"]: r for r in result["pieces"] if r["m"] == 1 and r["name"].startswith("KV")}
  pick = [next((r for n, r in rows.items() if f"capacity {c})" in n), None) for c in (4096, 512)]
  if all(pick):
    text += (f"; in-place KV write piece {pick[0]['ms']:.3f} ms at 4096 vs "
             f"{pick[1]['ms']:.3f} ms at 512")
  return text


def _sum_of_parts(result: dict) -> list[str]:
  """Lines comparing, per piece M, the sum of the step parts with the step of 1 lane x M
  positions (decode(1), verify(M)): how much of the step the pieces account for."""
  lines = []
  for m in sorted({r["m"] for r in result["pieces"]}):
    parts = [r for r in result["pieces"] if r["m"] == m and r["aggregate"]]
    step = _step(result, "decode(1)" if m == 1 else f"verify({m})")
    if parts and step:
      total = sum(r["ms"] for r in parts)
      lines.append(f"- M={m}: the step parts sum to {total:.3f} ms (each jitted alone) vs "
                   f"{step['name']} {step['ms_masked']:.3f} ms masked (x"
                   f"{step['ms_masked'] / total:.2f}).")
  return ["", *lines] if lines else []


# --- the page ----------------------------------------------------------------------------------
def _fmt(x, digits=3) -> str:
  return "-" if x is None else f"{x:.{digits}f}"


def _met(goal: dict) -> str:
  return {True: "met", False: "**missed**", None: "not measured"}[goal["met"]]


def lanes_section(lanes: dict) -> list[str]:
  """The page's lanes section (lines) from `_roofline_lanes.measure`'s entry."""
  b0, den = lanes["lanes"][0], lanes["denominators"]
  base = {(r["layout"], r["ops"]): r["ms"] for r in lanes["rows"] if r["lanes"] == b0}
  by = {(r["layout"], r["ops"], r["lanes"]): r for r in lanes["rows"]}
  head = " | ".join(f"decode({b}) ms (/ decode({b0}))" for b in lanes["lanes"])
  lines = ["", "## Lanes: decode(B) / decode(1)", "",
           f"Measured by `{lanes['command'].strip()}` from {lanes['started']}: "
           f"{lanes['machine']}; device {lanes['device']}; jax {lanes['jax']}; load average "
           f"(1 / 5 / 15 min) {lanes['load_before']} before, {lanes['load_after']} "
           f"after (other work shared the cores: compare the ratios, not the milliseconds, "
           f"with other sections). Random weights; KV capacity {lanes['capacity']} with "
           f"{lanes['context']} committed positions per lane; steps: {lanes['steps_source']} "
           f"(unmasked), B lanes x 1 position; medians of {lanes['repeats']} interleaved calls. "
           "Stacked: one `lax.scan` over [L, ...] weights (XLA's dots for the products, the span "
           "attention kernel where the CPU kernels run); unrolled: the engine's default "
           "(per-layer fused weights, panel-packed products with the CPU kernels). XLA ops: the "
           "same steps traced with the CPU kernels off, the program a GPU runs. Kernel calls: "
           "custom calls in the compiled verify step's HLO at the first B (a loop body's "
           f"once). Roofline: as the step shapes' above, with this run's denominators "
           f"({den['bandwidth'] / 1e9:.1f} GB/s, {den['dense_rate'] / 1e12:.3f} TFLOP/s, "
           f"measured beside it): weights once per step, the K/V span and FLOPs per lane.", "",
           f"| layout | products and attention | kernel calls | span | {head} |",
           "|---|---|---:|---:|" + "---:|" * len(lanes["lanes"])]
  for (layout, ops), t0 in base.items():
    cells = []
    for b in lanes["lanes"]:
      r = by.get((layout, ops, b))
      cells.append("-" if r is None else f"{r['ms']:.2f} ({r['ms'] / t0:.2f})")
    first = by[(layout, ops, b0)]
    lines.append(f"| {layout} | {ops} | {first['kernel_calls']} | {first['span']} | "
                 f"{' | '.join(cells)} |")
  roof = {r["lanes"]: r for r in lanes["rows"] if (r["layout"], r["ops"]) == next(iter(base))}
  if b0 in roof:
    cells = [f"{roof[b]['roofline_ms']:.2f} ({roof[b]['roofline_ms'] / roof[b0]['roofline_ms']:.2f}"
             f", {roof[b]['bound']})" if b in roof else "-" for b in lanes["lanes"]]
    lines.append(f"| roofline | | | {roof[b0]['span']} | {' | '.join(cells)} |")
  if lanes["skipped"]:
    lines += ["", f"Cut short by --budget: {'; '.join(lanes['skipped'])}."]
  return lines


def markdown(result: dict) -> str:
  """The report page (docs/results/roofline.md) from `run`'s result."""
  den, w = result["denominators"], result["weights"]
  lines = [
      f"# Roofline of the engine's steps: {result['model']}, {result['dtype']}",
      "",
      f"Written by `{result['command'].strip()}` on {result['date']}: {result['machine']}; "
      f"device {result['device']}; jax {result['jax']}. Random weights of the model's shapes in "
      f"the engine's default (unrolled) layout; KV capacity {result['capacity']} with "
      f"{result['context']} committed positions; medians of {result['repeats']} interleaved "
      f"calls. Steps timed: {result['steps_source']}; acceptance: pallas {result['pallas_impl']}"
      f", temperature {result['temperature']}; products and attention: "
      f"{result.get('kernels', 'XLA ops')}.",
      "",
      "## Denominators (measured in this run)",
      "",
      f"- memory bandwidth: **{den['bandwidth'] / 1e9:.1f} GB/s** ({den['bandwidth_how']})",
      f"- dense rate: **{den['dense_rate'] / 1e12:.3f} TFLOP/s** ({den['dense_how']})",
      f"- weights a step streams: {w['weight_bytes'] / 1e6:.1f} MB (layers, final norm, LM "
      f"head); weight-streaming floor **{w['floor_ms']:.3f} ms/token**",
      "",
      "Roofline of a step or piece = max(bytes / bandwidth, FLOPs / dense rate). A step (verify "
      "then finish) streams every weight, reads the K/V of its attention span, writes the new "
      "K/V, writes the f32 logits and reads them back in finish, and (masked) reads the mask "
      "words; its FLOPs are 2 x matmul params x M plus attention, 4 x B x P x span x N x H per "
      "layer (the span holds the new positions too).",
      "",
      "## Goals",
      "",
      "| goal | measured | limit | status | measured reason (largest gap: time / roofline) |",
      "|---|---:|---:|---|---|",
  ]
  for g in result.get("goals") or goals(result):
    lines.append(f"| {g['goal']} | {_fmt(g['value'], 2)} | {g['limit']} | {_met(g)} | "
                 f"{g['reason'] or '-'} |")
  lines += ["", "Goals on unmasked steps compare plain decoding; the mask's cost shows in the "
            "masked columns and in the mask unpack + acceptance piece.", "",
            "The reason names, among the parts a step is made of (the pieces marked * "
            "below) at the piece M nearest the goal's, the one furthest above its roofline, "
            "and the one with the most milliseconds above it.", "",
            "## Step shapes", "",
            "decode(M) = M lanes x 1 position, verify(M) = 1 lane x M positions, batched "
            "verify = 4 lanes x M/4 positions. Thunks: verify + finish (masked) executables.",
            "",
            "| step | B | P | M | span | ms | ms masked | roofline ms | bound | time / roofline "
            "| masked / roofline | thunks |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
  kinds = ("decode", "verify", "batched verify")
  for r in sorted(result["steps"], key=lambda r: (kinds.index(r["kind"]), r["m"])):
    t = r["thunks"]
    lines.append(f"| {r['name']} | {r['lanes']} | {r['positions']} | {r['m']} | {r['span']} | "
                 f"{r['ms']:.3f} | {r['ms_masked']:.3f} | {r['roofline_ms']:.3f} | {r['bound']} "
                 f"| {r['ratio']:.2f} | {r['ratio_masked']:.2f} | "
                 f"{t['verify']} + {t['finish_masked']} |")
  decode, verify = _step(result, "decode(1)"), _step(result, "verify(5)")
  if decode and verify:
    lines += ["", f"verify(5) / decode(1): **{verify['ms'] / decode['ms']:.2f}** unmasked, "
              f"{verify['ms_masked'] / decode['ms_masked']:.2f} masked (roofline "
              f"{verify['roofline_ms'] / decode['roofline_ms']:.2f})."]
  peer = {r["name"]: r["ms"] for r in result.get("xla_steps", [])}
  if peer:
    ours = {r["name"]: r["ms"] for r in result["steps"]}
    cells = [f"{name} {ms:.3f} ms (the kernels x{ms / ours[name]:.2f} faster)"
             for name, ms in peer.items() if name in ours]
    lines += ["", "The same steps with XLA's own ops (unpacked weights, XLA's attention; "
              f"the CPU kernels' peer), timed interleaved with the rows above: "
              f"{'; '.join(cells)}."]
    if "decode(1)" in peer and "verify(5)" in peer:
      lines[-1] += (f" verify(5) / decode(1) with XLA's ops: "
                    f"{peer['verify(5)'] / peer['decode(1)']:.2f}.")
  if result["capacities"]:
    lines += ["", "## KV capacity: decode(1), same sequence, unmasked", "",
              "| capacity | span | ms | roofline ms | time / roofline |",
              "|---:|---:|---:|---:|---:|"]
    rows = list(result["capacities"])
    if decode:
      rows.append({**decode, "capacity": result["capacity"]})
    for r in sorted(rows, key=lambda r: r["capacity"]):
      lines.append(f"| {r['capacity']} | {r['span']} | {r['ms']:.3f} | {r['roofline_ms']:.3f} | "
                   f"{r['ratio']:.2f} |")
  if result["pieces"]:
    lines += ["", "## Pieces: 1 lane x M positions (and batched attention at M = 1)", "",
              "Each piece on its own, jitted alone (its dispatch included). * = a part of a step "
              "(the rest: one layer's product, for reference). Elementwise and KV-write "
              "rooflines count each input read once and each output written once; finish's, "
              "the logits and mask words read once.", "",
              "| piece | M | ms | roofline ms | bound | time / roofline | ms above roofline |",
              "|---|---:|---:|---:|---|---:|---:|"]
    for r in result["pieces"]:
      star = " *" if r["aggregate"] else ""
      lines.append(f"| {r['name']}{star} | {r['m']} | {r['ms']:.3f} | {r['roofline_ms']:.4f} | "
                   f"{r['bound']} | {r['ratio']:.1f} | {r['ms'] - r['roofline_ms']:.3f} |")
    lines += _sum_of_parts(result)
  if result["skipped"]:
    lines += ["", f"Cut short by --budget: {'; '.join(result['skipped'])}."]
  if result.get("lanes"):
    lines += lanes_section(result["lanes"])
  lines += ["", "## How thunks are counted", "",
            "From each step's compiled executable (`jax.jit(f).lower(...).compile().as_text()`, "
            "the optimized HLO): the instructions of the ENTRY computation, less parameter, "
            "constant, tuple, get-tuple-element and bitcast (no runtime work). A fusion counts "
            "once however many ops it fuses; a while loop or call counts once however often its "
            "body runs. Each thunk is one kernel launch or runtime call: a cost per step that no "
            "roofline sees."]
  return "\n".join(lines) + "\n"
