"""How a run is reported."""
