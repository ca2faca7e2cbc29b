"""The trie paper's latency study: peers, enum sets, vocabularies, measurements and report
(run by `experiments.studies.trie`, config `configs/trie.py`)."""
