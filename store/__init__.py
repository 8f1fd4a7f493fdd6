"""Key-value stores: local files and PostgreSQL behind one async interface. Being built (issue 13)."""
