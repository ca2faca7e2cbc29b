"""Enum sets of the study: synthetic tool names (paper App. C.2), ICD-10-CM, public label sets."""

from __future__ import annotations

import json
import random
from pathlib import Path

# Paper pools (Appendix C.2): 10 namespaces, 10 actions, 10 resources.
NAMESPACES = "slack github stripe aws google microsoft salesforce jira notion discord".split()
ACTIONS = "get create update delete list search send fetch upload download".split()
RESOURCES = ("user message file project issue payment invoice document channel "
             "repository").split()
# Extension so that K = 100,000 is reachable (the paper's pools reach 1,100 names): more
# real SaaS namespaces, API verbs and resource nouns in the same style.
MORE_NAMESPACES = ("zoom dropbox box asana trello linear gitlab bitbucket shopify twilio "
                   "sendgrid hubspot zendesk intercom okta auth0 datadog pagerduty sentry "
                   "figma airtable monday clickup confluence mailchimp paypal square quickbooks "
                   "xero workday").split()
MORE_ACTIONS = ("archive restore copy move rename share export import sync merge approve reject "
                "assign close open lock unlock publish schedule cancel").split()
MORE_RESOURCES = ("team member group role permission comment attachment folder event meeting "
                  "calendar task ticket order customer subscription refund transfer account "
                  "contact lead deal campaign report dashboard alert incident deployment build "
                  "release branch commit tag webhook token key secret policy workspace space "
                  "page record table view form survey note label milestone sprint board card "
                  "list_item checklist template invite session device log metric segment audience "
                  "product price coupon discount shipment warehouse vendor supplier employee "
                  "payroll expense budget forecast quote contract signature certificate domain "
                  "bucket cluster instance volume snapshot queue topic").split()

SYNTHETIC_K = (10, 50, 100, 500, 1000, 2000, 5000, 10000, 50000, 100000)


def tool_names(k: int, seed: int = 0, extended: bool | None = None) -> list[str]:
  """K distinct synthetic tool names: 70% ``<ns>.<action>_<resource>``, 30% ``<action>_<resource>``.

  Args:
    k: number of names.
    seed: sampling seed.
    extended: use the extended pools (default: only when the paper's pools cannot reach k).
  """
  if extended is None:
    extended = k > 1000
  ns, act, res = NAMESPACES, ACTIONS, RESOURCES
  if extended:
    ns, act, res = ns + MORE_NAMESPACES, act + MORE_ACTIONS, res + MORE_RESOURCES
  reachable = len(ns) * len(act) * len(res) + len(act) * len(res)
  if k > reachable:
    raise ValueError(f"{k=} exceeds the {reachable} reachable names")
  rng = random.Random(seed)
  out: set[str] = set()
  simple_cap = len(act) * len(res)
  while len(out) < k:
    if rng.random() < 0.7 or len(out) >= reachable - simple_cap:
      out.add(f"{rng.choice(ns)}.{rng.choice(act)}_{rng.choice(res)}")
    else:
      out.add(f"{rng.choice(act)}_{rng.choice(res)}")
  return sorted(out)


def icd10cm_billable() -> list[str]:
  """The billable (leaf) ICD-10-CM codes from PyPI ``simple-icd-10-cm`` (about 74,700)."""
  import simple_icd_10_cm as icd

  return sorted(c for c in icd.get_all_codes(False) if icd.is_leaf(c))


def label_sets(data_dir: Path) -> dict[str, list[str]]:
  """The classification label sets in ``shared/data/labels`` (those present)."""
  files = {"trec_fine": "trec/fine_labels.json", "massive": "massive/intents.json",
           "banking77": "banking77/categories.json", "clinc150": "clinc150/intents.json"}
  out = {}
  for name, rel in files.items():
    path = data_dir / "labels" / rel
    if path.exists():
      out[name] = list(json.loads(path.read_text()))
  return out


def prefix_sharing(values: list[str]) -> float:
  """r = distinct non-empty prefixes / total characters (paper App. H.7; bytes, UTF-8)."""
  raw = {v.encode("utf-8") for v in values}
  prefixes = {v[:i] for v in raw for i in range(1, len(v) + 1)}
  return len(prefixes) / max(1, sum(len(v) for v in raw))
