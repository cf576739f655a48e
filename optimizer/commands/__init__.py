"""What the commands do beyond the solve: the pipeline (scenario → plan), verify, stress,
operate, sweep, compare, report, traces, calibrate, export."""
