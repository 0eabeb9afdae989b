"""Stock keeping for the warehouse."""
