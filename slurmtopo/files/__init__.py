"""The file policy: every file read or written, YAML and JSON someone else
wrote, safe and run directories, a user's caches (docs/design.md).
"""
