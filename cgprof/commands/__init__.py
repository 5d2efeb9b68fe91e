"""One module per `cgprof` sub-command; each is a thin click skin over one library call.

`cgprof/cli.py` owns the group and the error mapping; commands live here so that each one's
options sit next to the single call they wrap (memray's `commands/` layout). None of these
modules imports torch at import time.
"""
