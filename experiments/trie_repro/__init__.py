"""The trie paper's latency study: peers, enum sets, vocabularies, measurements and report
(run by `experiments.studies.trie`, config `configs/trie.py`). The paper: "Trie Automata for
Constrained Decoding over Large Finite Sets", arXiv:2608.12574."""

# How generated reports name the paper (markdown).
PAPER = "*Trie Automata for Constrained Decoding over Large Finite Sets* (arXiv:2608.12574)"
