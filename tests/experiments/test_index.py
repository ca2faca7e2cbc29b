"""The results index: every publishing config variant, with its question, headline, plots,
command, date and revision; variants not published yet listed apart."""

from __future__ import annotations

import io
import re
import shutil

from experiments import run as runner
from experiments.runner import index
from tests.experiments import _configs


def test_every_config_variant_loads_and_publishes_to_its_own_folder():
  seen = {}
  for path, variant, config in index._config_variants(_configs.ROOT / "configs"):
    folder = config.get("publish_dir", "")
    if folder:
      assert folder not in seen, (path, variant, seen[folder])
      seen[folder] = (path.name, variant)
      assert config.get("question", "").endswith("?"), (path.name, variant)
  assert len(seen) >= 9


def test_index_lists_a_published_study_with_its_plots_and_command(tmp_path):
  (tmp_path / "configs").mkdir()
  text = (_configs.ROOT / "configs" / "exactness.py").read_text()
  (tmp_path / "configs" / "exactness.py").write_text(text)
  (tmp_path / "configs" / "faithful.py").write_text(
      (_configs.ROOT / "configs" / "faithful.py").read_text())  # publishes, but not here
  c = _configs.load("exactness")
  c.counter_samples, c.samples = 2000, 400
  c.grid.drafter = ("counterexample/dense",)
  c.grid.rule = ("exact", "drop-illegal")
  c.publish_dir = str(tmp_path / "docs/results/exactness")
  d = runner.run(c, results_dir=str(tmp_path / "results"), publish=True, stream=io.StringIO())
  shutil.copytree(d, tmp_path / "docs/results/exactness/run")
  (tmp_path / "docs/results/kernels.md").write_text("# Kernel benchmark\n\nnumbers\n")
  traces = tmp_path / "docs/results/exactness/traces"  # a study's trace pages, by cell
  traces.mkdir()
  for name in ("000-ngram-K-4.html", "001-ngram-K-4.html", "002-jump-K-4.html"):
    (traces / name).write_text("<html></html>")
  out = index.build(root=tmp_path)
  page = out.read_text()
  assert out == tmp_path / "docs/results/README.md"
  assert "## Exactness: the acceptance rule vs the naive drop-illegal rule" in page
  assert f"**Question.** {c.question}" in page
  assert "`python -m experiments.run --config=configs/exactness.py --publish`" in page
  assert "[exactness/summary.md](exactness/summary.md)" in page
  assert "published uncommitted at git" in page  # not a git checkout: no commit date
  pngs = sorted(p.name for p in (tmp_path / "docs/results/exactness").glob("*.png"))
  assert pngs and all(f"(exactness/{name})" in page for name in pngs)
  assert "## Not published yet" in page and "`configs/faithful.py`" in page
  assert "- [Kernel benchmark](kernels.md)" in page
  assert ("Per-token trace pages, by cell: ngram K 4: [1](exactness/traces/000-ngram-K-4.html) "
          "· [2](exactness/traces/001-ngram-K-4.html); jump K 4: "
          "[1](exactness/traces/002-jump-K-4.html)") in page
  # A sharded sweep commits one directory per shard under run/: the index merges them.
  run = tmp_path / "docs/results/exactness/run"
  shutil.move(run, tmp_path / "shard0")
  run.mkdir()
  shutil.move(tmp_path / "shard0", run / "shard0of2")
  shutil.copytree(run / "shard0of2", run / "shard1of2")
  sharded = index.build(root=tmp_path).read_text()
  assert "2 run directories merged" in sharded and "run directory not committed" not in sharded
  headline = lambda text: re.search(r"\*\*Headline[^*]*\*\* (.*)", text).group(1)  # noqa
  assert headline(page) == headline(sharded)
  # The run's grid (one drafter) is not the config file's: its headline says it is of an
  # earlier design of the config.
  assert "**Headline of its earlier design.**" in page
  assert "the committed run is of an earlier design of the config" in page


def test_every_published_study_has_a_headline_from_its_run(tmp_path):
  """The committed run directories give each published study its headline figure."""
  page = index.build(out=tmp_path / "README.md").read_text()
  entries = page.split("\n## ")[1:]
  published = [e for e in entries if e.startswith(("Not published", "Benchmark")) is False]
  assert len(published) >= 9
  for entry in published:
    assert re.search(r"\*\*Headline( of its earlier design)?\.\*\* ", entry), entry.splitlines()[0]
  assert "[" in page.split("**Headline.** ")[1].split("\n")[0]  # an interval, 'x [lo, hi]'


def test_featured_study_comes_first_with_its_sharded_command_and_one_design(tmp_path):
  """A featured config's entry leads the index and shows its planned shards' command; run
  directories of two designs of a config merge only those of its current design (else of the
  newest directory's)."""
  (tmp_path / "configs").mkdir()
  for name, extra in (("alpha", ""), ("beta", "  c.featured = True\n  c.shards = 3\n")):
    (tmp_path / "configs" / f"{name}.py").write_text(
        "import ml_collections\n\n\ndef get_config():\n"
        "  c = ml_collections.ConfigDict()\n  c.study = 'exactness'\n"
        f"  c.title = '{name.title()}'\n  c.question = 'What does {name} show?'\n"
        f"  c.publish_dir = 'docs/results/{name}'\n  c.samples = 1\n{extra}  return c\n")
    (tmp_path / f"docs/results/{name}").mkdir(parents=True)
    (tmp_path / f"docs/results/{name}/summary.md").write_text(f"# {name}\n")
  page = index.build(root=tmp_path).read_text()
  assert page.index("## Beta") < page.index("## Alpha")
  assert ("`python -m experiments.run --config=configs/beta.py --shard=i/3` for i = 0..2, then "
          "`python -m experiments.report results/exactness/*-shard*of3 --publish`") in page
  assert "`python -m experiments.run --config=configs/alpha.py --publish`" in page
  import json

  import ml_collections

  current = ml_collections.ConfigDict({"study": "exactness", "samples": 1})
  dirs = []
  for i, samples in enumerate((2, 1, 1, 3)):
    d = tmp_path / "run" / f"d{i}"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"study": "exactness", "samples": samples}))
    dirs.append(d)
  assert index._one_design(dirs, current) == ([dirs[1], dirs[2]], 2)
  assert index._one_design(dirs[1:3], current) == (dirs[1:3], 0)
  other = ml_collections.ConfigDict({"study": "exactness", "samples": 9})
  assert index._one_design(dirs, other) == ([dirs[3]], 3)  # none current: the newest's
