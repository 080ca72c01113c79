"""Reports of runs: plots (one PNG per panel) and a markdown summary. See ``rlvr report --help``."""

from rlvr.report.build import make_report

__all__ = ["make_report"]
