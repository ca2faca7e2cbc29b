"""The study runner: grids of cells from a config, run directories, environment, plots."""
