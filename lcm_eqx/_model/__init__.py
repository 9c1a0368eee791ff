"""Model specification and build."""
