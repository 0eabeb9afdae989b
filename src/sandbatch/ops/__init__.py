"""The run as a whole, outside the DAG: owners and recovery, status, stop, rerun-errors,
capacity, the Snakefile's side (workflow.py). May import every part package; never a step."""
