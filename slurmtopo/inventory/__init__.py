"""The cluster as data: the model, links, derived topology, rings and
toruses, the schema's reader and writer, compiled forms, presets,
live state, hostlists (docs/design.md).
"""
