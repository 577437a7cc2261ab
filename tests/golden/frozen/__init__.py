"""A FROZEN copy of marshal_py.world and the codec it uses (marshal_py.protocol's auth, codec,
messages, placement, ranges) as they were at commit 4dfb722, before the rationalizer was
rewritten for speed (issue 22). Only the imports were rewritten to point here.

Never edit these files: they are the reference the golden-corpus test replays every generated
log through, record by record, to show the rewritten rationalizer applies the same rules.
"""
