"""One module per workflow step; each is called by a thin script in workflow/scripts/."""
