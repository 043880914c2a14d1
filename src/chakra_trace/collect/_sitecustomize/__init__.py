"""Holds the bootstrap `sitecustomize.py` that `chakra collect` puts on the job's PYTHONPATH.

A package only so that installs ship the file; the folder itself is what goes on sys.path.
"""
