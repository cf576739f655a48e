"""The plan folder on disk: what its tables hold (`schema`) and reading it back as an
input, every file checked (`read`)."""
