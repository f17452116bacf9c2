"""hopsearch.cli: the ``hopsearch`` command line (click)."""
