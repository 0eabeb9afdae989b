"""The run as a whole, outside the DAG."""
