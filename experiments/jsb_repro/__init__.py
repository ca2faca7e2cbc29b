"""JSONSchemaBench ("Generating Structured Outputs from Language Models: Benchmark and
Studies", arXiv:2501.10868) and its MaskBench on this engine: the measurements and the
paper's published figures (run by `experiments.studies.jsonschemabench`, config
`configs/jsonschemabench.py`)."""
