"""What a person reads: the preview, its parts as data, plain output,
table fitting, and the escapes of strings someone else chose
(docs/design.md).
"""
