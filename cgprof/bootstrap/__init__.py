"""What `cgprof record` loads into the recorded program (see sitecustomize.py)."""
